#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (the S3-compatible object store the objstore tests
# and `make cluster` run) from the Go module proxy, through the module in
# test/s3 (it pins the version and carries SeaweedFS's replace directive, which
# `go install …@version` refuses). Prints the binary's path; does nothing but
# print it when the binary is there already.
#
#   bash scripts/s3-build.sh          build if missing, print the path
#   bash scripts/s3-build.sh --path   print the path only
#
# S3_CACHE_DIR overrides the cache root (default /var/cache/space/s3); the
# binary goes to $S3_CACHE_DIR/<version>/weed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/test/s3"
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
version=$(sed -nE 's/^[[:space:]]*(require[[:space:]]+)?github\.com\/seaweedfs\/seaweedfs[[:space:]]+(v[^[:space:]]+).*/\2/p' "$mod/go.mod" | head -n1)
if [ -z "$version" ]; then
	echo "s3-build: test/s3/go.mod requires no github.com/seaweedfs/seaweedfs version" >&2
	exit 1
fi
cache=${S3_CACHE_DIR:-/var/cache/space/s3}
out="$cache/$version/weed"

if [ "${1:-}" = --path ]; then
	echo "$out"
	exit 0
fi
if [ -x "$out" ]; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache/$version"
# One build at a time: concurrent callers wait, then find the binary.
exec 9>"$cache/$version/.lock"
flock 9
if [ -x "$out" ]; then
	echo "$out"
	exit 0
fi
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
echo "s3-build: building SeaweedFS $version (a cold build takes minutes)" >&2
start=$(date +%s)
(cd "$mod" && "$GO" build -trimpath -ldflags='-s -w' -o "$tmp" github.com/seaweedfs/seaweedfs/weed) >&2
"$tmp" version >/dev/null
mv "$tmp" "$out"
echo "s3-build: built $out in $(( $(date +%s) - start ))s" >&2
echo "$out"
