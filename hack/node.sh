#!/usr/bin/env bash
# Builds the pinned node binaries from the Go module proxy and links them into bin/:
# kubelet and kube-scheduler (from the same k8s.io/kubernetes module as kube-apiserver),
# containerd, ctr and its runc shim, runc (static, with seccomp), and the CNI plugins
# (bridge, loopback, host-local) into bin/cni/.
#
# Cached outside the checkout like hack/controlplane.sh, keyed by each tools module's
# go.mod and go.sum and the Go version. Installs the Debian build and run inputs it
# needs (libseccomp-dev, pkg-config, busybox-static, iptables, iproute2) when missing.
#
#   hack/node.sh            build what is missing, link into bin/
#   hack/node.sh --print    print the cache directories and exit
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log_prefix=node
source "$root/hack/lib/build.sh"

containerd_version=v2.3.7
runc_version=v1.5.2
cni_version=v1.9.1
containerd_dir="$cache_root/containerd-$containerd_version-$(key "$tools/containerd")"
runc_dir="$cache_root/runc-$runc_version-$(key "$tools/runc")"
cni_dir="$cache_root/cni-$cni_version-$(key "$tools/cni")"

if [[ "${1:-}" == "--print" ]]; then
  printf '%s\n' "$kube_dir" "$containerd_dir" "$runc_dir" "$cni_dir"
  exit 0
fi

# libseccomp-dev and pkg-config build runc; busybox-static is the test shell image;
# iptables and iproute2 set up the node's network; kmod is how the kubelet checks modules;
# default-jdk-headless is the Java runtime (keytool, and the source launcher that runs a
# TLS client) that checks the truststores the sidecar writes.
need_debs libseccomp-dev pkg-config busybox-static iptables iproute2 kmod default-jdk-headless

build "$tools/kube" "$kube_dir" kubelet k8s.io/kubernetes/cmd/kubelet "$kube_ldflags"
build "$tools/kube" "$kube_dir" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"

# containerd's release builds leave out the snapshotters that need cgo or kernel
# features these machines lack; the overlayfs and native snapshotters remain.
ctrd_tags="no_btrfs no_devmapper no_zfs"
ctrd_ldflags="-X github.com/containerd/containerd/v2/version.Version=$containerd_version"
for b in containerd ctr containerd-shim-runc-v2; do
  build "$tools/containerd" "$containerd_dir" "$b" "github.com/containerd/containerd/v2/cmd/$b" "$ctrd_ldflags" "$ctrd_tags"
done

# runc needs cgo for libseccomp; linked statically so it runs in any mount namespace.
build "$tools/runc" "$runc_dir" runc github.com/opencontainers/runc \
  "-X main.version=${runc_version#v} -extldflags -static" "seccomp netgo osusergo" 1

for p in main/bridge main/loopback ipam/host-local; do
  build "$tools/cni" "$cni_dir" "${p#*/}" "github.com/containernetworking/plugins/plugins/$p"
done

mkdir -p "$root/bin/cni"
for f in "$kube_dir/kubelet" "$kube_dir/kube-scheduler" "$containerd_dir/containerd" "$containerd_dir/ctr" \
  "$containerd_dir/containerd-shim-runc-v2" "$runc_dir/runc"; do
  ln -sfn "$f" "$root/bin/$(basename "$f")"
done
for p in bridge loopback host-local; do
  ln -sfn "$cni_dir/$p" "$root/bin/cni/$p"
done
log "node binaries ready in ./bin"
