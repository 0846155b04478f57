#!/usr/bin/env bash
# Installs SoftHSM2 (Debian's softhsm2: the PKCS#11 module and softhsm2-util) when it
# is missing: the tests of the signer's PKCS#11 keeper run against a real token.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log_prefix=softhsm
source "$root/hack/lib/build.sh"
need_debs softhsm2
