#!/usr/bin/env bash
# Builds the pinned control-plane binaries (kube-apiserver, kube-controller-manager,
# kubectl, etcd, helm, promtool for the alert rules' tests, cosign to verify release
# signatures, spire-server for the federation tests' interoperability with SPIRE) from
# the Go module proxy and links them into bin/.
#
# The binaries are cached outside the checkout, keyed by the tools modules' go.mod and
# go.sum and the Go version, so a fresh clone reuses them and only a pin change rebuilds.
#
#   hack/controlplane.sh            build what is missing, link into bin/
#   hack/controlplane.sh --print    print the cache directory and exit
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log_prefix=controlplane
source "$root/hack/lib/build.sh"

helm_version=v3.22.0
# Stamped as helm's own release build does (its Makefile: client-go v0.37 is Kubernetes
# 1.37), so that `helm template` and `helm lint` assume the Kubernetes its client
# knows, not 1.20, which the chart's kubeVersion refuses.
helm_k8s_minor=37
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=$helm_version"
for _pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ldflags+=" -X $_pkg.k8sVersionMajor=1 -X $_pkg.k8sVersionMinor=$helm_k8s_minor"
done
etcd_dir="$cache_root/etcd-$(key "$tools/etcd")"
helm_dir="$cache_root/helm-$helm_version-k8s1.$helm_k8s_minor-$(key "$tools/helm")"
promtool_dir="$cache_root/promtool-$(key "$tools/promtool")"
cosign_dir="$cache_root/cosign-$(key "$tools/cosign")"
spire_dir="$cache_root/spire-$(key "$tools/spire")"

if [[ "${1:-}" == "--print" ]]; then
  printf '%s\n' "$kube_dir" "$etcd_dir" "$helm_dir" "$promtool_dir" "$cosign_dir" "$spire_dir"
  exit 0
fi

build "$tools/etcd" "$etcd_dir" etcd go.etcd.io/etcd/server/v3
build "$tools/kube" "$kube_dir" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build "$tools/kube" "$kube_dir" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build "$tools/kube" "$kube_dir" kubectl k8s.io/kubernetes/cmd/kubectl "$kube_ldflags"
build "$tools/helm" "$helm_dir" helm helm.sh/helm/v3/cmd/helm "$helm_ldflags"
build "$tools/promtool" "$promtool_dir" promtool github.com/prometheus/prometheus/cmd/promtool
build "$tools/cosign" "$cosign_dir" cosign github.com/sigstore/cosign/v2/cmd/cosign
# SPIRE's SQLite datastore is cgo (mattn/go-sqlite3); gcc is on every build machine.
build "$tools/spire" "$spire_dir" spire-server github.com/spiffe/spire/cmd/spire-server "" "" 1

mkdir -p "$root/bin"
for f in "$etcd_dir/etcd" "$kube_dir/kube-apiserver" "$kube_dir/kube-controller-manager" "$kube_dir/kubectl" "$helm_dir/helm" "$promtool_dir/promtool" "$cosign_dir/cosign" "$spire_dir/spire-server"; do
  ln -sfn "$f" "$root/bin/$(basename "$f")"
done
log "control plane ready in ./bin"
