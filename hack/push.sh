#!/usr/bin/env bash
# make push REGISTRY=host[:port]/path: the release in dist/ to a registry, made first
# (make release) unless dist/ is already a release of this tree: the image, every platform under one index, as REGISTRY/trustsync:vVERSION
# (its FIPS build as vVERSION-fips, the PKCS#11 signer's as
# REGISTRY/trustsync-signer-pkcs11:vVERSION and vVERSION-fips), and the chart as oci://REGISTRY/charts/trustsync, version VERSION. With
# REGISTRY=ghcr.io/trustsync the chart's default image.repository is what was pushed;
# elsewhere install with --set image.repository=REGISTRY/trustsync.
#
# Credentials: the image is pushed with those of ~/.docker/config.json (docker login or
# crane auth login write it), the chart with helm's (helm registry login). A registry
# whose certificate a private CA signed: SSL_CERT_FILE=ca.pem make push ...
# With COSIGN_KEY=cosign.key (password in COSIGN_PASSWORD), each image's index and the
# chart are signed in cosign's format: cosign verify --key cosign.pub checks them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log_prefix=push
source "$root/hack/lib/build.sh"
cd "$root"
registry=${1:?usage: hack/push.sh host[:port]/path}
registry=${registry%/}
version=$(cat VERSION)
dist=${DIST:-$root/dist}
# A release of this very tree is reused; anything else is made again first.
if [[ -f $dist/.source && $(cat "$dist/.source") == "$(source_key)" ]]; then
  log "$dist is a release of this tree: pushing it as it is"
else
  log "$dist is missing or of another tree: making the release first"
  DIST=$dist "$root/hack/release.sh"
fi
images=()
for name in trustsync trustsync-signer-pkcs11; do
  for fips in "" -fips; do
    images+=("$name:v$version$fips")
  done
done
# archive NAME:TAG: the release's layout tarball of that image.
archive() { echo "$dist/${1%%:*}-image-${1##*:}.oci.tar"; }
for f in "$dist/trustsync-$version.tgz" $(for ref in "${images[@]}"; do archive "$ref"; done); do
  [[ -f $f ]] || { echo "$f is missing from the release in $dist" >&2; exit 1; }
done
pushed=()
for ref in "${images[@]}"; do
  image=$(cd hack/tools/image && go run . push --layout "$(archive "$ref")" --ref "$registry/$ref")
  echo "pushed $image"
  repo=${image%@*}
  pushed+=("${repo%:*}@${image##*@}")
done
chart=$("$root/bin/helm" push "$dist/trustsync-$version.tgz" "oci://$registry/charts" ${HELM_PUSH_FLAGS:-} 2>&1) || { echo "$chart" >&2; exit 1; }
chart_digest=$(sed -n 's/^Digest: *//p' <<<"$chart")
echo "pushed $registry/charts/trustsync:$version@$chart_digest"
if [[ -n "${COSIGN_KEY:-}" ]]; then
  for ref in "${pushed[@]}" "$registry/charts/trustsync@$chart_digest"; do
    (cd hack/tools/image && go run . sign --key "$COSIGN_KEY" --ref "$ref")
  done
fi
