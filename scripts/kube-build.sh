#!/usr/bin/env bash
# Builds test/kube (one multi-call binary: kube-apiserver, kube-scheduler and
# kube-controller-manager from k8s.io/kubernetes) into a cache directory and
# prints the binary's path. Does nothing but print the path when the binary
# for this Kubernetes version and this test/kube/go.sum is already there, so
# `make test` pays the cold build (several minutes, ~2-3 GB of memory) once
# per machine.
#
# Environment:
#   SPACE_KUBE_CACHE  cache root (default /var/cache/space/kube); the binary
#                     lands in $SPACE_KUBE_CACHE/<k8s version>/<go.sum hash>/kube
#   GO                the go command (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="$root/test/kube"
cache="${SPACE_KUBE_CACHE:-/var/cache/space/kube}"
GO="${GO:-$(command -v go 2>/dev/null || echo /usr/local/go/bin/go)}"

log() { printf 'kube-build: %s\n' "$*" >&2; }
die() { printf 'kube-build: error: %s\n' "$*" >&2; exit 1; }

[[ -x $GO ]] || command -v "$GO" >/dev/null 2>&1 || die "go not found (expected /usr/local/go/bin/go)"
[[ -f $mod/go.mod && -f $mod/go.sum ]] || die "$mod/go.mod or go.sum missing"

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$mod/go.mod")
[[ -n $version ]] || die "no k8s.io/kubernetes requirement in $mod/go.mod"
sum=$(cat "$mod/go.mod" "$mod/go.sum" "$mod"/*.go | sha256sum | cut -c1-16)
dir="$cache/$version/$sum"
bin="$dir/kube"

if [[ -x $bin ]]; then
  printf '%s\n' "$bin"
  exit 0
fi

mkdir -p "$dir"
# Build beside the final name and rename last, so a half-written binary is
# never found; a lock keeps two builds on one machine from racing.
exec 9>"$dir/.lock"
flock 9
if [[ -x $bin ]]; then
  printf '%s\n' "$bin"
  exit 0
fi
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
log "building Kubernetes $version control plane into $bin (cold build: several minutes)"
start=$(date +%s)
tmp="$dir/.kube.$$"
(cd "$mod" && CGO_ENABLED=0 "$GO" build -mod=readonly -trimpath -ldflags="$ldflags" -o "$tmp" .) || { rm -f "$tmp"; die "go build failed"; }
mv "$tmp" "$bin"
for c in apiserver scheduler controller-manager; do
  ln -sf kube "$dir/kube-$c"
done
log "built in $(( $(date +%s) - start ))s"
printf '%s\n' "$bin"
