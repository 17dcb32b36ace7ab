#!/usr/bin/env bash
# Shows that `make run` works on a plain Debian 12 host: builds a minimal
# bookworm root with mmdebstrap (no Node, no Go, no QEMU: only `make`, the
# one thing README asks for before `make run`), copies this checkout into
# it, runs `make setup` and `make build` in a chroot, then starts spaced in
# the chroot (in its own network, PID and mount namespaces) and waits for
# GET /readyz to answer ready, then walks examples/first_sandbox.py.
#
#   scripts/fresh-host-check.sh [--test] [--keep] [DIR]
#
#   --test  also run `make setup-test` (the test tools) and check that no
#           PostgreSQL or etcd runs afterwards and the e2e node is >= 20.18.1
#   --keep  leave DIR (default /var/tmp/space-fresh-host) for a look after
#
# Slow (a Debian root, the apt installs, a Go build with an empty module
# cache, a base template built under TCG): minutes, not a CI test. Run as
# root on a host with mmdebstrap; it reaches Debian's mirror, the Go module
# proxy and, with --test, the npm registry. Every mount and process it makes
# lives in namespaces that end with it.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MIRROR=http://deb.debian.org/debian
SECURITY=http://deb.debian.org/debian-security
PORT=18480
test_tools=0
keep=0
DIR=/var/tmp/space-fresh-host
while [[ $# -gt 0 ]]; do
  case $1 in
    --test) test_tools=1 ;;
    --keep) keep=1 ;;
    -*) echo "usage: $0 [--test] [--keep] [DIR]" >&2; exit 2 ;;
    *) DIR=$1 ;;
  esac
  shift
done

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
die() { printf 'fresh-host-check: error: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root"
command -v mmdebstrap >/dev/null || die "needs mmdebstrap (apt-get install mmdebstrap)"
[[ ! -e $DIR ]] || die "$DIR exists: remove it or name another directory"
[[ $keep -eq 1 ]] || trap 'rm -rf --one-file-system "$DIR"' EXIT

step "mmdebstrap a minimal Debian 12 root in $DIR"
mmdebstrap --quiet --variant=minbase --include=make bookworm "$DIR" \
  "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" "deb $SECURITY bookworm-security main"
cp /etc/resolv.conf "$DIR/etc/resolv.conf"
# A network that intercepts TLS needs its CA on every host: the host's local
# CAs go where ca-certificates (which make setup installs) picks them up.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  mkdir -p "$DIR/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$DIR/usr/local/share/ca-certificates/"
  echo "copied the host's local CAs: $(cd /usr/local/share/ca-certificates && echo *.crt)"
fi

step "copy the checkout (tracked and untracked, not ignored files) to /root/space"
mkdir -p "$DIR/root/space"
git -C "$REPO" ls-files -z --cached --others --exclude-standard |
  (cd "$REPO" && tar --null -T - -cf - --ignore-failed-read) | tar -C "$DIR/root/space" -xf -

# in_root runs a bash script in the chroot, inside fresh mount and PID
# namespaces (with --net, a fresh network namespace too) whose /proc, /sys
# and /dev mounts, and processes, end when the script does.
in_root() {
  local flags=(--mount --pid --fork --propagation private)
  if [[ $1 == --net ]]; then
    flags+=(--net)
    shift
  fi
  unshare "${flags[@]}" /bin/bash -euo pipefail -c '
    root=$1; shift
    # The root a mount of its own, as on a real host: the VM jail makes
    # mounts private, which fails (EINVAL) on a chroot directory that is no
    # mount point.
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    mount --rbind /dev "$root/dev"
    if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"; fi
    exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      /bin/bash -euo pipefail -c "$1"
  ' in_root "$DIR" "$1"
}

step "the fresh root has no node, go, qemu"
in_root '
  cat /etc/debian_version
  for c in node nodejs npm go qemu-system-x86_64; do
    if command -v $c; then echo "unexpected: $c is installed"; exit 1; fi
  done
  echo "no node, npm, go or qemu-system-x86_64"'

step "make setup (what make run runs first)"
in_root 'cd /root/space && time make setup'

step "make build"
in_root 'cd /root/space && time make build && ls -l bin'

step "what make setup left out"
in_root '
  for c in node npm psql etcd kubectl mypy pip3; do
    command -v $c >/dev/null && { echo "unexpected: make setup installed $c"; exit 1; }
  done
  ls /usr/lib/postgresql 2>/dev/null && { echo "unexpected: postgresql"; exit 1; }
  echo "no node, npm, postgresql, etcd, kubectl, mypy or pip"
  /usr/local/go/bin/go version'

step "start spaced (own network namespace: loopback only) and wait for /readyz"
in_root --net "
  ip link set lo up
  cd /root/space
  ./bin/spaced --listen 127.0.0.1:$PORT --data-dir /var/lib/space >/root/spaced.log 2>&1 &
  pid=\$!
  python3 - $PORT <<'PY'
import sys, time, urllib.request, urllib.error
url = 'http://127.0.0.1:%s/readyz' % sys.argv[1]
deadline = time.time() + 1800
last = None
while time.time() < deadline:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            print('GET /readyz:', r.status, r.read().decode().strip())
            sys.exit(0)
    except urllib.error.HTTPError as e:
        body = e.read().decode().strip()
        if body != last:
            print('GET /readyz:', e.code, body, flush=True)
            last = body
    except OSError:
        pass
    time.sleep(2)
sys.exit('spaced not ready in 30 minutes')
PY
  SPACE_URL=http://127.0.0.1:$PORT SPACE_API_KEY=\$(cat /var/lib/space/admin.key) timeout 900 python3 examples/first_sandbox.py ||
    { echo 'first_sandbox.py failed; spaced log:'; tail -n 40 /root/spaced.log; exit 1; }
  kill -TERM \$pid
  wait \$pid || true
  echo '-- spaced log (first and last lines)'
  head -n 15 /root/spaced.log
  echo ...
  tail -n 5 /root/spaced.log"

if [[ $test_tools -eq 1 ]]; then
  # One namespace for the install and the checks: a service the install
  # started would die with the namespace and be missed by a later look.
  step "make setup-test (what make test runs first), then the test tools"
  in_root '
    cd /root/space && time make setup-test
    ls /usr/lib/postgresql/*/bin/postgres; command -v etcd kubectl mypy pip3
    if ps -eo comm= | grep -qE "^(postgres|etcd)$"; then echo "unexpected: a postgres or etcd runs"; ps -ef; exit 1; fi
    echo "no postgres or etcd process after the install"
    [[ ! -e /usr/sbin/policy-rc.d ]] && echo "no policy-rc.d left behind"
    ls /etc/rc2.d | grep -E "postgresql|etcd" || true
    echo "system node: $(node --version) (Debian'"'"'s, left in place)"
    echo "e2e node: $(readlink e2e/node-runtime/bin/node) $(e2e/node-runtime/bin/node --version)"
    cd e2e/e2b-sdk && ../node-runtime/bin/node -e "Promise.all([import(\"e2b-new\"), import(\"e2b-old\")]).then(() => console.log(\"e2b SDKs load under\", process.version))"'
fi

step "done: make run's set-up works on a fresh Debian 12 root"
