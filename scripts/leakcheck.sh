#!/usr/bin/env bash
# Leak check after the test suite: nothing the tests made may outlive them.
# Tests keep everything under the temp dir ($TMPDIR or /tmp) and name network
# namespaces space-* (mounted in /run/space/netns); a server started by `make run` (data in /var/lib/space)
# is not looked at.
#
#   leakcheck.sh --baseline FILE   record what exists before the tests
#   leakcheck.sh [FILE]            report what exists now and is not in FILE;
#                                  exit 1 when anything is
set -u
baseline_out=""
baseline_in=/dev/null
case ${1:-} in
  --baseline) baseline_out=$2 ;;
  "") ;;
  *) baseline_in=$1 ;;
esac
tmp=${TMPDIR:-/tmp}
leaks=()

for p in /proc/[0-9]*; do
  cmd=$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
  # A jailed VMM's argv[0] is <its state dir>/qemu-system-x86_64.
  case $cmd in
    *qemu-system*"$tmp"/* | "$tmp"/*qemu-system*) leaks+=("VMM process ${p#/proc/}: ${cmd:0:160}") ;;
  esac
done
# Servers the tests start (PostgreSQL, etcd, the Kubernetes binary, the S3
# server) keep their data in the temp dir.
for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case ${exe##*/} in
    postgres | etcd | kube | weed) ;;
    *) continue ;;
  esac
  cmd=$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
  case $cmd in
    *"$tmp"/*) leaks+=("server process ${p#/proc/} (${exe##*/}): ${cmd:0:160}") ;;
  esac
done
# VMM jails (internal/jail): a cgroup per VMM under a space-vmm parent
# (/sys/fs/cgroup/space-vmm on cgroup v2; beside the worker's own cgroup in
# each v1 hierarchy), and the reserved ids in /run/space-jail/ids. Those of
# a `make run` server are in the baseline.
while read -r d; do
  leaks+=("VMM cgroup: $d")
done < <(find /sys/fs/cgroup -mindepth 2 -maxdepth 12 -type d -path '*/space-vmm/*' 2>/dev/null | sort)
for f in /run/space-jail/ids/*; do
  [ -e "$f" ] && leaks+=("VMM jail id: ${f##*/}")
done
while read -r _ mnt _; do
  case $mnt in "$tmp"/*) leaks+=("mount: $mnt") ;; esac
done </proc/mounts
for f in /sys/block/loop*/loop/backing_file; do
  [ -r "$f" ] || continue
  b=$(cat "$f")
  case $b in "$tmp"/*) leaks+=("loop device $(basename "$(dirname "$(dirname "$f")")"): $b") ;; esac
done
# Sandbox namespaces are files in /run/space/netns; /run/netns (iproute2's)
# is where earlier versions put them, and where `ip netns list` looks.
for f in /run/space/netns/space-* /run/netns/space-*; do
  [ -e "$f" ] && leaks+=("network namespace: $f")
done
while read -r _ _ _ _ mnt _; do
  case $mnt in */netns/space-*) leaks+=("network namespace mount: $mnt") ;; esac
done </proc/self/mountinfo

if [ -n "$baseline_out" ]; then
  printf '%s\n' "${leaks[@]}" >"$baseline_out"
  exit 0
fi
new=()
for l in "${leaks[@]}"; do
  grep -qxF -- "$l" "$baseline_in" || new+=("$l")
done
leaks=("${new[@]}")
if [ ${#leaks[@]} -gt 0 ]; then
  echo "leak check: FAILED — left behind by the tests:"
  printf '  %s\n' "${leaks[@]}"
  exit 1
fi
echo "leak check: nothing left behind (VMM processes, test servers, VMM cgroups and ids, mounts, loop devices, network namespaces)"
