#!/usr/bin/env bash
# The README's first command: trustsync's whole loop on a real one-node cluster,
# narrated. Builds what it needs first (the pinned control plane and node from the
# cache when it can: about 15 minutes on 2 cores the first time, seconds after), then
# runs the demo (hack/demo), which stops the cluster whatever happens. Needs root: the
# kubelet and containerd run on this machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "make demo runs a kubelet and containerd on this machine and needs root; run it as root (or with sudo)" >&2
  exit 1
fi
hack/controlplane.sh
hack/node.sh
make -s build
TRUSTSYNC_DEMO=1 go test -count=1 -v -timeout 15m -run '^TestDemo$' ./hack/demo/ 2>&1 |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok  )'
