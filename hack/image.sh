#!/usr/bin/env bash
# make image: the container images as tarballs in _output/, without a daemon, for
# linux/$GOARCH, tagged $IMAGE:
#
#   _output/trustsync-image.tar                 the five static binaries and the plugin (the
#                                               Dockerfile's image; helm test runs the plugin)
#   _output/trustsync-signer-pkcs11-image.tar   the signer with cgo, for PKCS#11, on a glibc
#                                               base from Debian's packages, tagged
#                                               REPOSITORY-signer-pkcs11:TAG
#
# `ctr images import`, `docker load` and `kind load image-archive` take both. With
# GOFIPS140 set (make image FIPS=1) every binary is built with Go's FIPS 140-3 module.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log_prefix=image
source "$root/hack/lib/build.sh"
source "$root/hack/lib/pkcs11.sh"
cd "$root"

arch=${GOARCH:-$(go env GOARCH)}
: "${IMAGE:?IMAGE names the image}" "${LDFLAGS:?LDFLAGS stamps the version}"
bins=_output/linux_$arch
mkdir -p "$bins"
for b in trustsync-webhook trustsync-sidecar trustsync-signer trustsync-controller trustsync-agent kubectl-trustsync; do
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="$LDFLAGS" -o "$bins/$b" "./cmd/${b#trustsync-}"
done
build_signer_pkcs11 "$arch" "$bins/trustsync-signer-pkcs11" "$LDFLAGS"
base=$(glibc_base "$arch")

cd hack/tools/image
GOOS= GOARCH= go run . trustsync --bin "$root/$bins" --ref "$IMAGE" --out "$root/_output/trustsync-image.tar"
GOOS= GOARCH= go run . signer-pkcs11 --bin "$root/$bins" --base "$base" --ref "$(pkcs11_ref "$IMAGE")" \
  --out "$root/_output/trustsync-signer-pkcs11-image.tar"
