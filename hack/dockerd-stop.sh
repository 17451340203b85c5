#!/usr/bin/env bash
# Stop a Docker engine started by hack/dockerd-start.sh, by the pid in its pidfile:
#   hack/dockerd-stop.sh [RUN_DIR]      (default: $KSCHEDULER_DOCKERD_RUN)
# Containers it still runs are killed first; then SIGTERM, and SIGKILL after 30s. The run
# dir is removed; the data root (images, build cache) is kept.
set -euo pipefail
run=${1:-${KSCHEDULER_DOCKERD_RUN:-}}
[ -n "$run" ] && [ -d "$run" ] || { echo "usage: $0 RUN_DIR (from hack/dockerd-start.sh)" >&2; exit 2; }
pidfile=$run/dockerd.pid
if [ -s "$pidfile" ]; then
  pid=$(cat "$pidfile")
  sock=unix://$run/docker.sock
  ids=$(docker -H "$sock" ps -q 2>/dev/null || true)
  [ -z "$ids" ] || docker -H "$sock" kill $ids >/dev/null 2>&1 || true
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd ($pid) still running after 30s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
fi
# the exec root may hold mounts (netns, overlay) if dockerd died hard
grep -o " $run/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
rm -rf "$run"
