package main

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// nonRoot is the control plane's user and group: distroless' "nonroot".
const nonRoot = 65532

// kernelDir is where the worker image keeps the guest kernel. It is not
// under /var/lib/space, which the worker's hostPath data dir covers.
const kernelDir = "/usr/lib/space/kernel"

const searchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// binary is one of our commands, built static and put at dest.
type binary struct {
	pkg  string // import path
	dest string // path in the image
}

var (
	spaced     = binary{pkg: "github.com/space-sandbox/space/cmd/spaced", dest: "/usr/bin/spaced"}
	spaceCLI   = binary{pkg: "github.com/space-sandbox/space/cmd/space", dest: "/usr/bin/space"}
	spaceAgent = binary{pkg: "github.com/space-sandbox/space/cmd/space-agent", dest: "/usr/bin/space-agent"}
)

// imageSpec is one image: a Debian root, then (optionally) the guest
// kernel, then our binaries — least to most often changed, so a rebuild
// after a code change ships one small layer.
type imageSpec struct {
	name     string // short name: control, worker
	repo     string // repository without registry, e.g. space-control
	root     recipe
	kernel   bool
	binaries []binary
	config   v1.Config
}

// specs are the two images of a deployment. The control plane needs
// nothing but CA certificates (it talks TLS to PostgreSQL, the object store
// and the Kubernetes API) and runs as nonroot; the worker needs what the
// local worker runs on a host — QEMU and qemu-img, btrfs-progs and
// e2fsprogs for the data volume and template disks, mount/losetup,
// nftables and iproute2 for sandbox networks, mmdebstrap (and unshare) for
// Debian templates, busybox-static and bash-static for the base template —
// and runs as root in a privileged Pod.
func specs(suite, mirror string) []imageSpec {
	return []imageSpec{
		{
			name: "control",
			repo: "space-control",
			root: recipe{
				Format: rootFormat, Suite: suite, Variant: "essential", Mirror: mirror,
				Packages: []string{"ca-certificates", "netbase", "tzdata"},
				Hooks: []string{
					`echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin' >> "$1"/etc/passwd`,
					`echo 'nonroot:x:65532:' >> "$1"/etc/group`,
					`install -d -m 0750 -o 65532 -g 65532 "$1"/home/nonroot`,
				},
			},
			binaries: []binary{spaced, spaceCLI},
			config: v1.Config{
				Entrypoint: []string{spaced.dest},
				Cmd:        []string{"control"},
				User:       "65532:65532",
				WorkingDir: "/home/nonroot",
				Env:        []string{"PATH=" + searchPath},
			},
		},
		{
			name: "worker",
			repo: "space-worker",
			root: recipe{
				Format: rootFormat, Suite: suite, Variant: "apt", Mirror: mirror,
				Packages: []string{
					"ca-certificates", "qemu-system-x86", "qemu-utils", "btrfs-progs", "e2fsprogs",
					"mount", "util-linux", "nftables", "iproute2", "mmdebstrap", "busybox-static",
					"bash-static", "kmod", "procps",
				},
			},
			kernel:   true,
			binaries: []binary{spaced, spaceAgent},
			config: v1.Config{
				Entrypoint: []string{spaced.dest},
				Cmd:        []string{"worker"},
				User:       "0:0",
				WorkingDir: "/",
				Env:        []string{"PATH=" + searchPath, "SPACE_KERNEL_DIR=" + kernelDir},
			},
		},
	}
}
