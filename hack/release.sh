#!/usr/bin/env bash
# make release: a release of the working tree in dist/ (or $DIST):
#
#   trustsync-VERSION.tgz                   the chart, as helm package lays it out
#   trustsync-image-vVERSION.oci.tar        the image, linux/amd64 and linux/arm64 under
#                                           one index, as an OCI image layout tarball
#   trustsync-image-vVERSION-fips.oci.tar   the same, every binary built with Go's FIPS
#                                           140-3 module, tagged vVERSION-fips
#   trustsync-signer-pkcs11-image-vVERSION.oci.tar, ...-vVERSION-fips.oci.tar
#                                           the signer with cgo, for PKCS#11, on a glibc
#                                           base from Debian's packages (both platforms;
#                                           the image's io.trustsync.base.packages label
#                                           names their versions)
#   trustsync-crds.yaml                     every CRD, for `kubectl apply` before an upgrade
#   kubectl-trustsync_VERSION_OS_ARCH.tar.gz
#                                           the plugin and LICENSE, for linux and darwin
#                                           (amd64, arm64) and windows (amd64)
#   krew-trustsync.yaml                     a krew plugin manifest naming each archive by
#                                           its sha256, at $PLUGIN_URL (default: the
#                                           project's GitHub release download URL)
#   sbom/<binary>.cdx.json                  a CycloneDX SBOM of each Go binary in the images
#   SHA256SUMS                              of every file above
#   *.sig                                   with COSIGN_KEY=cosign.key (password in
#                                           COSIGN_PASSWORD): cosign's signatures of
#                                           SHA256SUMS, the chart and the image archive
#
# Reproducible: the same commit gives the same bytes (binaries built with -trimpath and
# the version stamped from VERSION; tarballs with fixed times and owners; SBOMs without
# serial number or timestamp; the glibc base from the same Debian package versions).
# No container engine is needed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log_prefix=release
source "$root/hack/lib/build.sh"
source "$root/hack/lib/pkcs11.sh"
cd "$root"

version=$(cat VERSION)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
image_ref=${IMAGE:-ghcr.io/trustsync/trustsync:v$version}
dist=${DIST:-$root/dist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sbom_dir="$cache_root/cyclonedx-gomod-$(key "$tools/sbom")"
build "$tools/sbom" "$sbom_dir" cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

# What this release is made from, read before building: make push reuses it if the
# tree is still the same.
source=$(source_key)
rm -rf "$dist"
mkdir -p "$dist/sbom"
ldflags="-s -w -X github.com/trustsync/trustsync/buildinfo.Version=$version"
# Each image twice: as is, and with Go's FIPS 140-3 module (GOFIPS140), tagged -fips.
for arch in amd64 arm64; do
  for fips in "" -fips; do
    out="$work/bin$fips/linux_$arch"
    for b in trustsync-webhook trustsync-sidecar trustsync-signer trustsync-controller trustsync-agent kubectl-trustsync; do
      CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFIPS140=${fips:+v1.0.0} go build -trimpath -ldflags "$ldflags" -o "$out/$b" "./cmd/${b#trustsync-}"
    done
    GOFIPS140=${fips:+v1.0.0} build_signer_pkcs11 "$arch" "$out/trustsync-signer-pkcs11" "$ldflags"
  done
  mkdir -p "$work/base"
  ln -s "$(glibc_base "$arch")" "$work/base/linux_$arch"
  log "built linux/$arch"
done

# The plugin, one archive per platform: the binary and LICENSE at the archive's root,
# with fixed times and owners, gzip without a name or time, so the bytes repeat.
plugin_platforms="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64"
for platform in $plugin_platforms; do
  os=${platform%/*} arch=${platform#*/}
  exe=kubectl-trustsync
  [[ $os == windows ]] && exe+=.exe
  dir="$work/plugin_${os}_$arch"
  mkdir -p "$dir"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$dir/$exe" ./cmd/kubectl-trustsync
  cp LICENSE "$dir/LICENSE"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=go-w -C "$dir" -cf - "$exe" LICENSE |
    gzip -9 -n > "$dist/kubectl-trustsync_${version}_${os}_$arch.tar.gz"
done
log "built the plugin for $plugin_platforms"

# Every CRD in one file, in the order of their names.
for crd in charts/trustsync/files/crds/*.yaml; do
  echo "---"
  cat "$crd"
done > "$dist/trustsync-crds.yaml"

# krew's manifest: where each archive will be published, and its sha256.
plugin_url=${PLUGIN_URL:-https://github.com/trustsync/trustsync/releases/download/v$version}
{
  cat <<MANIFEST
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: trustsync
spec:
  version: v$version
  homepage: https://github.com/trustsync/trustsync
  shortDescription: Which pods trust which CA, and whether a rotation may proceed
  description: |
    Asks trustsync, the trust distribution and workload certificate system, what the
    cluster's pods and objects hold: whether each pod holds what its trust sources
    select now (status), who trusts an anchor (who-trusts), which pods a CA rotation
    waits for (rotation), federated trust domains, what a namespace is granted
    (grants), and converts trust-manager Bundles to trustsync.
  platforms:
MANIFEST
  for platform in $plugin_platforms; do
    os=${platform%/*} arch=${platform#*/}
    exe=kubectl-trustsync
    [[ $os == windows ]] && exe+=.exe
    archive="kubectl-trustsync_${version}_${os}_$arch.tar.gz"
    cat <<PLATFORM
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $plugin_url/$archive
    sha256: $(sha256sum "$dist/$archive" | cut -d' ' -f1)
    bin: $exe
    files:
    - from: $exe
      to: .
    - from: LICENSE
      to: .
PLATFORM
  done
} > "$dist/krew-trustsync.yaml"

for fips in "" -fips; do
  (cd hack/tools/image && go run . layout --bin "$work/bin$fips" --version "$version$fips" --revision "$revision" \
    --ref "$image_ref$fips" --out "$dist/trustsync-image-v$version$fips.oci.tar") >&2
  (cd hack/tools/image && go run . layout --image signer-pkcs11 --bin "$work/bin$fips" --base "$work/base" \
    --version "$version$fips" --revision "$revision" --ref "$(pkcs11_ref "$image_ref")$fips" \
    --out "$dist/trustsync-signer-pkcs11-image-v$version$fips.oci.tar") >&2
done
(cd hack/tools/image && go run . chart --chart "$root/charts/trustsync" --out "$dist") >&2

# The binaries of both platforms come from the same modules; the amd64 ones are read.
# The FIPS builds differ only in GOFIPS140, which their SBOMs cannot show.
for b in trustsync-webhook trustsync-sidecar trustsync-signer trustsync-controller trustsync-agent kubectl-trustsync trustsync-signer-pkcs11; do
  "$sbom_dir/cyclonedx-gomod" bin -json -noserial -notimestamp -version "v$version" \
    -output "$dist/sbom/$b.cdx.json" "$work/bin/linux_amd64/$b" 2>/dev/null
done

(cd "$dist" && find . -type f ! -name SHA256SUMS ! -name .source -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
if [[ -n "${COSIGN_KEY:-}" ]]; then
  # Signatures are not reproducible (ECDSA draws a nonce), so SHA256SUMS leaves them out.
  (cd hack/tools/image && go run . sign-blob --key "$COSIGN_KEY" "$dist/SHA256SUMS" \
    "$dist/trustsync-$version.tgz" "$dist"/*.oci.tar)
  log "signed with $COSIGN_KEY"
fi
echo "$source" > "$dist/.source"
log "release v$version of $revision in $dist:"
cat "$dist/SHA256SUMS" >&2
