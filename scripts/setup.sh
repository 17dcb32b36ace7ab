#!/usr/bin/env bash
# Prepares a Debian 12 host for SPACE: installs the host packages the worker,
# the template builder and the tests use, and caches Debian's cloud kernel
# (vmlinuz + modules) for the guest boot chain.
#
# Idempotent: when every package is installed and a kernel is cached it does
# nothing but check. Run as root. Environment:
#   SPACE_KERNEL_DIR   kernel cache root (default /var/lib/space/kernel);
#                      each kernel lands in $SPACE_KERNEL_DIR/<version>/
#   SPACE_SETUP_FORCE  1 = always run apt-get update and re-check the kernel
set -euo pipefail

KERNEL_DIR="${SPACE_KERNEL_DIR:-/var/lib/space/kernel}"
KERNEL_META=linux-image-cloud-amd64

# Everything SPACE needs on the host. qemu-system-x86 pulls seabios (which
# ships bios-microvm.bin) as a hard dependency, so --no-install-recommends
# still gives a working `-M microvm`; qemu-utils brings qemu-img.
PACKAGES=(
  qemu-system-x86 qemu-utils
  busybox-static bash-static
  btrfs-progs e2fsprogs
  cpio kmod
  nftables iproute2
  ca-certificates
  python3
  mmdebstrap
  util-linux procps
  postgresql
  etcd-server
)

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (sudo make setup)"

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi

missing_packages() {
  local p status
  for p in "${PACKAGES[@]}"; do
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
apt_update() {
  if [[ $apt_updated -eq 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
}

install_packages() {
  local missing
  mapfile -t missing < <(missing_packages)
  if [[ ${#missing[@]} -eq 0 && ${SPACE_SETUP_FORCE:-0} != 1 ]]; then
    log "packages: all installed"
    return
  fi
  apt_update
  log "installing: ${PACKAGES[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
  mapfile -t missing < <(missing_packages)
  [[ ${#missing[@]} -eq 0 ]] || die "still missing after install: ${missing[*]}"
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
  trap 'rm -rf "$work"' EXIT
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

check_host() {
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found after install"
  qemu-system-x86_64 -machine help | grep -q '^microvm' || die "qemu-system-x86_64 lacks the microvm machine"
  [[ -f /usr/share/seabios/bios-microvm.bin || -f /usr/share/qemu/bios-microvm.bin ]] ||
    die "bios-microvm.bin missing (package seabios)"
  [[ -x /bin/busybox ]] || die "/bin/busybox missing (package busybox-static)"
  [[ -x /bin/bash-static ]] || die "/bin/bash-static missing (package bash-static)"
  command -v go >/dev/null || die "go not found (expected /usr/local/go/bin/go)"
  if [[ ! -e /dev/kvm ]]; then
    log "note: /dev/kvm absent; VMs run under TCG (slower, still works)"
  fi
}

# --- Client SDK tests (issue 14): the Python SDK's pip install check and the
# MCP TypeScript client. Kept apart from PACKAGES above on purpose.
# python3-pip brings Debian's setuptools and wheel, so `pip install
# --no-build-isolation ./sdk/python` works offline; e2e/mcp-client holds the
# official MCP TypeScript SDK, pinned by its package-lock.json and installed
# with `npm ci --ignore-scripts`, only when the lockfile changed. mypy
# checks the SDK's types (it ships py.typed).
CLIENT_PACKAGES=(python3-pip mypy)
setup_client_sdks() {
  local p status missing=()
  for p in "${CLIENT_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ $status == installed ]] || missing+=("$p")
  done
  if ! command -v npm >/dev/null 2>&1; then
    missing+=(nodejs npm)
  fi
  if [[ ${#missing[@]} -gt 0 ]]; then
    apt_update
    log "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  local dir stamp want
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/e2e/mcp-client"
  stamp="$dir/node_modules/.space-lock-sha256"
  want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" && ${SPACE_SETUP_FORCE:-0} != 1 ]]; then
    log "mcp-client: node modules installed"
    return
  fi
  log "mcp-client: npm ci"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  printf '%s\n' "$want" >"$stamp"
}
# --- end of the client SDK block

# --- E2B SDK test (issue 13): e2e/e2b-sdk holds the official `e2b` npm
# package at 2.51.0 and 2.50.0 (aliases e2b-new and e2b-old), pinned by its
# package-lock.json and installed with `npm ci --ignore-scripts`, only when
# the lockfile changed. The SDK needs node >= 20.18.1 (setup_client_sdks
# installs node and npm when absent).
setup_e2b_sdk() {
  local dir stamp want
  command -v node >/dev/null 2>&1 || die "e2b-sdk: node not found (needs node >= 20.18.1 and npm)"
  if ! node -e 'const [a,b,c]=process.versions.node.split(".").map(Number);process.exit(a>20||(a===20&&(b>18||(b===18&&c>=1)))?0:1)'; then
    die "e2b-sdk: node $(node --version) is too old: the e2b SDK needs node >= 20.18.1"
  fi
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/e2e/e2b-sdk"
  stamp="$dir/node_modules/.space-lock-sha256"
  want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" && ${SPACE_SETUP_FORCE:-0} != 1 ]]; then
    log "e2b-sdk: node modules installed"
    return
  fi
  log "e2b-sdk: npm ci"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  printf '%s\n' "$want" >"$stamp"
}
# --- end of the E2B SDK block

# --- Kubernetes rig (issue 11): etcd-server is in PACKAGES above; kubectl
# comes from Debian's kubernetes-client only when the host has no kubectl
# (some images ship one from another package that owns /usr/bin/kubectl, and
# dpkg refuses to overwrite it). scripts/kube-build.sh builds the servers.
setup_kubectl() {
  command -v kubectl >/dev/null 2>&1 && return
  apt_update
  log "installing: kubernetes-client"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null
  command -v kubectl >/dev/null 2>&1 || die "kubectl missing after installing kubernetes-client"
}
# --- end of the Kubernetes rig block

install_packages
fetch_kernel
check_host
setup_client_sdks
setup_e2b_sdk
setup_kubectl
log "ready (kernel cache: $KERNEL_DIR)"
