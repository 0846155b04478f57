#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, for trustsync's tests and demo.
#
#   hack/cluster.sh up DIR     build what is missing, start etcd, kube-apiserver,
#                              kube-controller-manager, kube-scheduler, containerd and
#                              kubelet; import the images; write DIR/kubeconfig
#                              (cluster-admin); exit 0 once the node is Ready
#   hack/cluster.sh down DIR   stop all that `up DIR` started, also after a crash of any
#                              part, and leave the host as `up` found it
#
# Images in the node after `up`, never pulled: trustsync's, built from the working tree
# under the reference the chart renders by default; trustsync.test/shell:1 (static
# busybox, any uid), also as busybox:1.37 (the image README's first pod names, as a
# node with a registry would pull it); trustsync.test/pause:1 (the sandbox image).
# Needs root.
# docs/development.md explains the node and how to read its logs.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[cluster] %s\n' "$*" >&2; }

usage() { sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
verb=$1 dir=$2

# The cluster command is tiny and built from the working tree each time.
cluster_bin() {
  mkdir -p "$root/bin"
  (cd "$root" && CGO_ENABLED=0 go build -o bin/.cluster.tmp ./hack/cluster && mv bin/.cluster.tmp bin/trustsync-cluster)
}

case "$verb" in
  up)
    "$root/hack/controlplane.sh"
    "$root/hack/node.sh"
    make -s -C "$root" build
    cluster_bin
    mkdir -p "$dir/images"
    ref=$("$root/bin/helm" template trustsync "$root/charts/trustsync" --kube-version 1.37.1 | sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' | head -1)
    [[ -n "$ref" ]] || { echo "could not find the image the chart renders by default" >&2; exit 1; }
    log "building images ($ref, trustsync.test/shell:1 and busybox:1.37, trustsync.test/pause:1)"
    (
      cd "$root/hack/tools/image"
      CGO_ENABLED=0 go build -o "$root/bin/.pause" ./pause
      go run . trustsync --bin "$root/bin" --ref "$ref" --out "$dir/images/trustsync.tar"
      go run . shell --busybox /bin/busybox --ref trustsync.test/shell:1 --out "$dir/images/shell.tar"
      go run . shell --busybox /bin/busybox --ref docker.io/library/busybox:1.37 --out "$dir/images/busybox.tar"
      go run . pause --pause "$root/bin/.pause" --ref trustsync.test/pause:1 --out "$dir/images/pause.tar"
    )
    exec "$root/bin/trustsync-cluster" up "$dir" --bin "$root/bin" \
      --image "$dir/images/pause.tar" --image "$dir/images/shell.tar" --image "$dir/images/busybox.tar" --image "$dir/images/trustsync.tar"
    ;;
  down)
    [[ -x "$root/bin/trustsync-cluster" ]] || cluster_bin
    exec "$root/bin/trustsync-cluster" down "$dir"
    ;;
  *) usage ;;
esac
