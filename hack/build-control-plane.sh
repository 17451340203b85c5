#!/usr/bin/env bash
# Build the pinned kube-apiserver, kube-scheduler and etcd from their Go modules
# into a cache directory outside the clone, keyed by version. Reused when present.
# Binaries on PATH or in KUBEBUILDER_ASSETS are used by the harness before these.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/controlplane"
k8s_version="$(awk '/^require k8s.io\/kubernetes /{print $3}' "$mod/go.mod")"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$mod/go.mod")"
cache_root="${KSCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kscheduler}"
out="$cache_root/controlplane/k8s-${k8s_version}_etcd-${etcd_version}"

if [[ -x "$out/kube-apiserver" && -x "$out/kube-scheduler" && -x "$out/etcd" ]]; then
  echo "control plane: cached in $out"
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { echo "go toolchain not found on PATH" >&2; exit 1; }
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"

tmp="$(mktemp -d "$cache_root/.build.XXXXXX" 2>/dev/null || { mkdir -p "$cache_root"; mktemp -d "$cache_root/.build.XXXXXX"; })"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "control plane: building kube-apiserver/kube-scheduler ${k8s_version}, etcd ${etcd_version} (cold builds take several minutes)"
cd "$mod"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
mkdir -p "$(dirname "$out")"
rm -rf "$out"
chmod 755 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "control plane: built in $((SECONDS - start))s"
ls -l "$out" >&2
echo "$out"
