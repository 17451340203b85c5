#!/usr/bin/env bash
# Build a Python 3.11 base image from Debian's packages alone, for machines that reach
# Debian's archive but no image registry (`make image-base`, then
# `make image PYTHON_IMAGE=kscheduler-base:bookworm`).
#
#   hack/image-base.sh [IMAGE]            default kscheduler-base:bookworm
#
# debootstrap --variant=minbase with python3, python3-venv and python3-pip, then
# `docker import`. /usr/local/bin/python is linked to /usr/bin/python3, where the
# Dockerfile (written for the python:*-slim images) expects the interpreter.
# Needs root, debootstrap and a Docker engine (DOCKER_HOST is honoured).
# DEBIAN_MIRROR overrides the archive (default http://deb.debian.org/debian).
set -euo pipefail
image=${1:-kscheduler-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { echo "debootstrap not found: apt-get install debootstrap" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; exit 1; }

root=$(mktemp -d /tmp/kscheduler-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip \
  bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -n 30 "$root.log" >&2; exit 1; }
rm -f "$root.log"

ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
# what an image needs of none of: package caches and lists, docs, man pages, locales
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/* "$root"/var/log/* "$root"/tmp/*
# the host's apt sources were used to build it; the image gets Debian's own
printf 'deb %s bookworm main\n' "$mirror" >"$root/etc/apt/sources.list"

tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$image" >/dev/null
echo "$image: $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"
