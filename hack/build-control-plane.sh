#!/usr/bin/env bash
# Build the pinned kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd
# and kwok from their Go modules, and the benchmark's trivial binder
# (hack/controlplane/cmd/bench-binder, on the same client-go), into a cache
# directory outside the clone, keyed by version. Reused when present.
# Binaries on PATH or in KUBEBUILDER_ASSETS are used by the harness before these.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/controlplane"
k8s_version="$(awk '/^require k8s.io\/kubernetes /{print $3}' "$mod/go.mod")"
etcd_version="$(awk '{for(i=1;i<NF;i++) if($i=="go.etcd.io/etcd/server/v3"){print $(i+1); exit}}' "$mod/go.mod")"
kwok_version="v0.8.0"
cache_root="${KSCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kscheduler}"
out="$cache_root/controlplane/k8s-${k8s_version}_etcd-${etcd_version}_kwok-${kwok_version}"

binaries=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd kwok bench-binder)
cached=1
for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || cached=0; done
if [[ $cached == 1 && -d "$out/kwok-stages" ]]; then
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
echo "control plane: building kube-apiserver/kube-scheduler/kube-controller-manager ${k8s_version}, etcd ${etcd_version}, kwok ${kwok_version} (cold builds take several minutes)"
cd "$mod"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
# kubectl, for dev-cluster users (the tests do not need it)
go build -trimpath -ldflags "$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
# bench.run's ceiling: binds and events only, over protobuf as kube-scheduler's client
go build -trimpath -ldflags "-s -w" -o "$tmp/bench-binder" ./cmd/bench-binder
echo "control plane: kube components built in $((SECONDS - start))s"
# kwok is built from its own module, outside ours (it has its own pinned client-go).
(cd "$tmp" && GOFLAGS= GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${kwok_version}")
kwok_src="$(GOFLAGS= go env GOMODCACHE)/sigs.k8s.io/kwok@${kwok_version}"
mkdir -p "$tmp/kwok-stages"
# the stages a kwok cluster runs with by default: nodes Ready with Lease heartbeats,
# bound pods Running, deleted pods removed
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
  cp "$kwok_src/kustomize/stage/$f" "$tmp/kwok-stages/$(basename "$f")"
done
mkdir -p "$(dirname "$out")"
rm -rf "$out"
chmod 755 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "control plane: built in $((SECONDS - start))s"
ls -l "$out" >&2
echo "$out"
