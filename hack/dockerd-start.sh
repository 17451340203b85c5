#!/usr/bin/env bash
# Start a private Docker engine that touches nothing of any other one on the machine:
# its own --data-root, --exec-root, --pidfile and unix socket, no TCP listener, and no
# bridge or iptables rules of its own (containers and builds use --network host).
#
#   eval "$(hack/dockerd-start.sh)"      # exports DOCKER_HOST and KSCHEDULER_DOCKERD_RUN
#   ...docker build / docker run...
#   hack/dockerd-stop.sh                 # stops it by its pid (reads KSCHEDULER_DOCKERD_RUN)
#
# The data root (images, build cache) persists between runs so that a second image build
# is cached: KSCHEDULER_DOCKER_DATA, default ~/.cache/kscheduler/docker. One engine at a
# time may use a data root: a second start on the same one fails (flock). Everything else
# (sockets, pidfile, log, containerd's state) lives in a new temp dir, printed as
# KSCHEDULER_DOCKERD_RUN. Needs root and Debian's docker.io (dockerd, containerd, runc).
set -euo pipefail

data_root=${KSCHEDULER_DOCKER_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/kscheduler/docker}
mkdir -p "$data_root"
# short: containerd's socket paths under the exec root must fit in sun_path (108 bytes)
run=$(mktemp -d /tmp/ksd.XXXXXX)
sock=$run/docker.sock

command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install docker.io" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "dockerd needs root" >&2; exit 1; }

# flock holds the data root's lock for as long as dockerd (its child) runs
setsid flock --nonblock --conflict-exit-code 75 "$data_root/.lock" \
  dockerd \
    --data-root "$data_root" \
    --exec-root "$run/exec" \
    --pidfile "$run/dockerd.pid" \
    --host "unix://$sock" \
    --storage-driver overlay2 \
    --bridge none --iptables=false --ip-masq=false --ip-forward=false \
    >"$run/dockerd.log" 2>&1 </dev/null &
launcher=$!

for _ in $(seq 1 300); do
  if [ -S "$sock" ] && docker -H "unix://$sock" version >/dev/null 2>&1; then
    echo "export DOCKER_HOST=unix://$sock KSCHEDULER_DOCKERD_RUN=$run"
    exit 0
  fi
  if ! kill -0 "$launcher" 2>/dev/null; then
    wait "$launcher" && rc=0 || rc=$?
    [ "$rc" = 75 ] && echo "another dockerd uses $data_root (lock held)" >&2
    echo "dockerd exited ($rc); its log ($run/dockerd.log):" >&2
    tail -n 30 "$run/dockerd.log" >&2
    exit 1
  fi
  sleep 0.2
done
echo "dockerd did not answer on $sock within 60s; log: $run/dockerd.log" >&2
kill "$launcher" 2>/dev/null || true
exit 1
