#!/usr/bin/env bash
# make release: a release of the working tree in dist/ (or $DIST):
#
#   trustsync-VERSION.tgz                   the chart, as helm package lays it out
#   trustsync-image-vVERSION.oci.tar        the image, linux/amd64 and linux/arm64 under
#                                           one index, as an OCI image layout tarball
#   kubectl-trustsync-linux-{amd64,arm64}   the plugin
#   sbom/<binary>.cdx.json                  a CycloneDX SBOM of each Go binary in the image
#   SHA256SUMS                              of every file above
#   *.sig                                   with COSIGN_KEY=cosign.key (password in
#                                           COSIGN_PASSWORD): cosign's signatures of
#                                           SHA256SUMS, the chart and the image archive
#
# Reproducible: the same commit gives the same bytes (binaries built with -trimpath and
# the version stamped from VERSION; tarballs with fixed times and owners; SBOMs without
# serial number or timestamp). No container engine is needed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log_prefix=release
source "$root/hack/lib/build.sh"
cd "$root"

version=$(cat VERSION)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
image_ref=${IMAGE:-ghcr.io/trustsync/trustsync:v$version}
dist=${DIST:-$root/dist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sbom_dir="$cache_root/cyclonedx-gomod-$(key "$tools/sbom")"
build "$tools/sbom" "$sbom_dir" cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

rm -rf "$dist"
mkdir -p "$dist/sbom"
ldflags="-s -w -X github.com/trustsync/trustsync/cmd/internal/version.Version=$version"
for arch in amd64 arm64; do
  for b in trustsync-webhook trustsync-sidecar trustsync-signer trustsync-controller trustsync-agent kubectl-trustsync; do
    CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$work/linux_$arch/$b" "./cmd/${b#trustsync-}"
  done
  log "built linux/$arch"
  cp "$work/linux_$arch/kubectl-trustsync" "$dist/kubectl-trustsync-linux-$arch"
done

(cd hack/tools/image && go run . layout --bin "$work" --version "$version" --revision "$revision" \
  --ref "$image_ref" --out "$dist/trustsync-image-v$version.oci.tar") >&2
(cd hack/tools/image && go run . chart --chart "$root/charts/trustsync" --out "$dist") >&2

# The binaries of both platforms come from the same modules; the amd64 ones are read.
for b in trustsync-webhook trustsync-sidecar trustsync-signer trustsync-controller trustsync-agent; do
  "$sbom_dir/cyclonedx-gomod" bin -json -noserial -notimestamp -version "v$version" \
    -output "$dist/sbom/$b.cdx.json" "$work/linux_amd64/$b" 2>/dev/null
done

(cd "$dist" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
if [[ -n "${COSIGN_KEY:-}" ]]; then
  # Signatures are not reproducible (ECDSA draws a nonce), so SHA256SUMS leaves them out.
  (cd hack/tools/image && go run . sign-blob --key "$COSIGN_KEY" "$dist/SHA256SUMS" \
    "$dist/trustsync-$version.tgz" "$dist/trustsync-image-v$version.oci.tar")
  log "signed with $COSIGN_KEY"
fi
log "release v$version of $revision in $dist:"
cat "$dist/SHA256SUMS" >&2
