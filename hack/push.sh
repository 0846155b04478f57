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
(cd hack/tools/image && go run . push --layout "$dist/trustsync-image-v$version.oci.tar" --ref "$registry/trustsync:v$version")
"$root/bin/helm" push "$dist/trustsync-$version.tgz" "oci://$registry/charts" ${HELM_PUSH_FLAGS:-}
