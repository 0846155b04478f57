#!/usr/bin/env bash
# Builds pinned binaries from the Go module proxy and links them into bin/:
#
#   hack/controlplane.sh            the control plane the demo and the tests run:
#                                   etcd, kube-apiserver, kube-controller-manager,
#                                   kubectl, helm
#   hack/controlplane.sh helm       helm alone (what `make push` needs)
#   hack/controlplane.sh test-tools what only the tests use: promtool (the alert rules'
#                                   tests), cosign (release signatures), spire-server
#                                   (federation's interoperability with SPIRE), krew
#                                   (the release's plugin manifest), local-kms (the
#                                   AWS KMS API, for the signer's awskms keeper)
#   hack/controlplane.sh --print    print the cache directories and exit
#
# The binaries are cached outside the checkout, keyed by the tools modules' go.mod and
# go.sum and the Go version, so a fresh clone reuses them and only a pin change rebuilds.
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
krew_dir="$cache_root/krew-$(key "$tools/krew")"
localkms_dir="$cache_root/localkms-$(key "$tools/localkms")"

# link <file>...: into bin/ (or $TRUSTSYNC_BIN), where the tests and the docs' commands
# find them.
link() {
  local bin=${TRUSTSYNC_BIN:-$root/bin}
  mkdir -p "$bin"
  for f in "$@"; do
    ln -sfn "$f" "$bin/$(basename "$f")"
  done
}

build_helm() {
  build "$tools/helm" "$helm_dir" helm helm.sh/helm/v3/cmd/helm "$helm_ldflags"
  link "$helm_dir/helm"
}

case "${1:-}" in
  --print)
    printf '%s\n' "$kube_dir" "$etcd_dir" "$helm_dir" "$promtool_dir" "$cosign_dir" "$spire_dir" "$krew_dir" "$localkms_dir"
    ;;
  helm)
    build_helm
    log "helm ready"
    ;;
  test-tools)
    build "$tools/promtool" "$promtool_dir" promtool github.com/prometheus/prometheus/cmd/promtool
    build "$tools/cosign" "$cosign_dir" cosign github.com/sigstore/cosign/v2/cmd/cosign
    # SPIRE's SQLite datastore is cgo (mattn/go-sqlite3); gcc is on every build machine.
    build "$tools/spire" "$spire_dir" spire-server github.com/spiffe/spire/cmd/spire-server "" "" 1
    build "$tools/krew" "$krew_dir" kubectl-krew sigs.k8s.io/krew/cmd/krew
    # A local implementation of the AWS KMS API: the signer's awskms keeper is tested
    # against it.
    build "$tools/localkms" "$localkms_dir" local-kms github.com/nsmithuk/local-kms
    link "$promtool_dir/promtool" "$cosign_dir/cosign" "$spire_dir/spire-server" "$krew_dir/kubectl-krew" "$localkms_dir/local-kms"
    log "test tools ready"
    ;;
  "")
    build "$tools/etcd" "$etcd_dir" etcd go.etcd.io/etcd/server/v3
    build "$tools/kube" "$kube_dir" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
    build "$tools/kube" "$kube_dir" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
    build "$tools/kube" "$kube_dir" kubectl k8s.io/kubernetes/cmd/kubectl "$kube_ldflags"
    build_helm
    link "$etcd_dir/etcd" "$kube_dir/kube-apiserver" "$kube_dir/kube-controller-manager" "$kube_dir/kubectl"
    log "control plane ready"
    ;;
  *)
    sed -n '2,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    exit 2
    ;;
esac
