#!/usr/bin/env bash
# make push REGISTRY=host[:port]/path: the release in dist/ (made by make release) to a
# registry: the image, every platform under one index, as REGISTRY/trustsync:vVERSION,
# and the chart as oci://REGISTRY/charts/trustsync, version VERSION. With
# REGISTRY=ghcr.io/trustsync the chart's default image.repository is what was pushed;
# elsewhere install with --set image.repository=REGISTRY/trustsync.
#
# Credentials: the image is pushed with those of ~/.docker/config.json (docker login or
# crane auth login write it), the chart with helm's (helm registry login). A registry
# whose certificate a private CA signed: SSL_CERT_FILE=ca.pem make push ...
# With COSIGN_KEY=cosign.key (password in COSIGN_PASSWORD), the image's index and the
# chart are signed in cosign's format: cosign verify --key cosign.pub checks them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
registry=${1:?usage: hack/push.sh host[:port]/path}
registry=${registry%/}
version=$(cat VERSION)
dist=${DIST:-$root/dist}
for f in "$dist/trustsync-image-v$version.oci.tar" "$dist/trustsync-$version.tgz"; do
  [[ -f $f ]] || { echo "$f is missing: run make release first" >&2; exit 1; }
done
image=$(cd hack/tools/image && go run . push --layout "$dist/trustsync-image-v$version.oci.tar" --ref "$registry/trustsync:v$version")
echo "pushed $image"
chart=$("$root/bin/helm" push "$dist/trustsync-$version.tgz" "oci://$registry/charts" ${HELM_PUSH_FLAGS:-} 2>&1) || { echo "$chart" >&2; exit 1; }
chart_digest=$(sed -n 's/^Digest: *//p' <<<"$chart")
echo "pushed $registry/charts/trustsync:$version@$chart_digest"
if [[ -n "${COSIGN_KEY:-}" ]]; then
  (cd hack/tools/image && go run . sign --key "$COSIGN_KEY" --ref "$registry/trustsync@${image##*@}" &&
    go run . sign --key "$COSIGN_KEY" --ref "$registry/charts/trustsync@$chart_digest")
fi
