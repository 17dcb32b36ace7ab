#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a while: each Fuzz* function
# that `go test -list` finds in a package, one at a time (a fuzz run takes
# one target), with -fuzztime FUZZTIME. `make test` runs them briefly
# (3s each), `make fuzz` long (FUZZTIME, default 60s). Their seed corpora
# (testdata/fuzz/<Name>/) also run as ordinary tests in every `go test`.
#
#   fuzz.sh [FUZZTIME]     e.g. fuzz.sh 3s; default 3s
#
# Prints the executions each target did; exits 1 when any target failed
# (its output, with the failing input Go saved under testdata/fuzz, is
# shown).
set -u
fuzztime=${1:-3s}
go=${GO:-go}
cd "$(dirname "$0")/.."

# Packages whose tests declare a fuzz target; go test -list then names them
# exactly (a grep alone would also match comments and build-tagged files).
mapfile -t pkgs < <(grep -rlE '^func Fuzz[A-Z0-9_a-z]*\(f \*testing\.F\)' --include='*_test.go' . |
  xargs -r -n1 dirname | sort -u)

failed=()
total=0
printf '%-40s %-22s %12s\n' package target execs
for dir in "${pkgs[@]}"; do
  list=$("$go" test -list '^Fuzz' "$dir" 2>&1) || { echo "$list"; failed+=("$dir (list)"); continue; }
  for name in $(grep -E '^Fuzz' <<<"$list"); do
    out=$("$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" 2>&1)
    rc=$?
    execs=$(grep -oE 'execs: [0-9]+' <<<"$out" | tail -1 | grep -oE '[0-9]+')
    # A large cached corpus can take the whole run to replay (each entry is
    # run once, as "baseline coverage"); say how far it got.
    base=$(grep -oE 'baseline coverage: [0-9]+/[0-9]+' <<<"$out" | tail -1 | cut -d' ' -f3)
    shown=${execs:-${base:+baseline $base}}
    printf '%-40s %-22s %12s\n' "${dir#./}" "$name" "${shown:--}"
    total=$((total + ${execs:-0}))
    if [ $rc -ne 0 ]; then
      grep -v ' level=' <<<"$out" | tail -40
      failed+=("${dir#./} $name")
    fi
  done
done
printf '%-40s %-22s %12s\n' total "" "$total"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
