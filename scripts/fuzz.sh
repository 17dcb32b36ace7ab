#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a while: each Fuzz* function
# that `go test -list` finds in a package, one at a time (a fuzz run takes
# one target), as `go test -run '^$' -fuzz '^Name$' -fuzztime FUZZTIME`
# would. `make test` runs them briefly (3s each), `make fuzz` long
# (FUZZTIME, default 60s). Their seed corpora (testdata/fuzz/<Name>/) also
# run as ordinary tests in every `go test`.
#
#   fuzz.sh [FUZZTIME]     e.g. fuzz.sh 3s; default 3s
#
# Prints the executions each target did; exits 1 when any target failed
# (its output is shown; Go saves the failing input under testdata/fuzz).
set -u
fuzztime=${1:-3s}
go=${GO:-go}
cd "$(dirname "$0")/.."
module=$("$go" list -m)
cache=$("$go" env GOCACHE)/fuzz
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

# Packages whose tests declare a fuzz target; go test -list then names them
# exactly (a grep alone would also match comments and build-tagged files).
mapfile -t dirs < <(grep -rlE '^func Fuzz[A-Z0-9_a-z]*\(f \*testing\.F\)' --include='*_test.go' . |
  xargs -r -n1 dirname | sort -u)
[ ${#dirs[@]} -gt 0 ] || { echo "fuzz: no fuzz targets found"; exit 0; }
# One go test -list for all of them (built in parallel): each package's
# target names, then its "ok  <import path>" line.
list=$("$go" test -list '^Fuzz' "${dirs[@]}" 2>&1) || { echo "$list"; echo "fuzz: FAILED: go test -list"; exit 1; }

# bare_deadline: the output is Go's spurious end of a timed fuzz run: a
# "context deadline exceeded" failure with no failing input, panic or
# test error.
bare_deadline() {
  grep -q 'context deadline exceeded' <<<"$1" &&
    ! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' <<<"$1"
}

failed=()
total=0
printf '%-40s %-22s %12s\n' package target execs
names=()
while read -r first pkg _; do
  case $first in
    Fuzz*) names+=("$first"); continue ;;
    ok) ;;
    *) continue ;;
  esac
  short=${pkg#"$module"/}
  # One fuzz-instrumented test binary per package, run once per target
  # with the flags go test would pass (a go test -fuzz per target would
  # link the same binary again each time).
  exe=$bin/${short//\//_}.test
  if ! out=$("$go" test -c -fuzz . -o "$exe" "$pkg" 2>&1); then
    echo "$out"
    failed+=("$short (build)")
    names=()
    continue
  fi
  for name in "${names[@]}"; do
    # Go 1.26's fuzz coordinator can end a run whose -fuzztime expired
    # with a bare "context deadline exceeded" and no failing input
    # (golang/go#75804, fixed in Go 1.27). Such a run is tried once more;
    # a run that wrote a failing input, panicked or failed otherwise fails.
    for attempt in 1 2; do
      out=$(cd "$short" && "$exe" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$fuzztime" \
        -test.fuzzcachedir "$cache/$pkg" -test.timeout 30m -test.paniconexit0 2>&1)
      rc=$?
      [ $rc -ne 0 ] && bare_deadline "$out" && [ $attempt -eq 1 ] || break
      echo "fuzz: $short $name ended with the fuzz coordinator's deadline race (golang/go#75804); running it again"
    done
    execs=$(grep -oE 'execs: [0-9]+' <<<"$out" | tail -1 | grep -oE '[0-9]+')
    # A large cached corpus can take the whole run to replay (each entry
    # is run once, as "baseline coverage"); say how far it got.
    base=$(grep -oE 'baseline coverage: [0-9]+/[0-9]+' <<<"$out" | tail -1 | cut -d' ' -f3)
    shown=${execs:-${base:+baseline $base}}
    printf '%-40s %-22s %12s\n' "$short" "$name" "${shown:--}"
    total=$((total + ${execs:-0}))
    if [ $rc -ne 0 ]; then
      grep -v ' level=' <<<"$out" | tail -40
      failed+=("$short $name")
    fi
  done
  names=()
done <<<"$list"
printf '%-40s %-22s %12s\n' total "" "$total"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
