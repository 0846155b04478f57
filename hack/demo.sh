#!/usr/bin/env bash
# The README's first command: trustsync's whole loop on a local control plane,
# narrated. Builds what it needs (the pinned control plane, from the cache when it can),
# then runs the demo (hack/demo), which cleans up after itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/controlplane.sh
TRUSTSYNC_DEMO=1 go test -count=1 -v -timeout 15m -run '^TestDemo$' ./hack/demo/ 2>&1 |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok  )'
