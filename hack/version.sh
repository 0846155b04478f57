#!/usr/bin/env bash
# The version a build carries, in binaries, the image's tag and the chart's default:
#
#   VERSION                                  a release: HEAD tagged vVERSION, the tree clean
#   VERSION-dev.N.gSHA                       between releases: N commits in HEAD's history,
#                                            SHA HEAD's (as git describe counts and names)
#   VERSION-dev.N.gSHA.dirty-HASH            a working tree that differs from HEAD: HASH of
#                                            the difference, so every tree builds apart
#
# Outside a git checkout (a source archive): VERSION. Semantic Versioning pre-releases
# all, so Helm orders them before the release they lead to.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/hack/lib/build.sh"
cd "$root"
version=$(cat VERSION)
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
  echo "$version"
  exit 0
fi
dirty=$(git status --porcelain --untracked-files=normal)
if [[ -z $dirty ]] && git tag --points-at HEAD | grep -qx "v$version"; then
  echo "$version"
  exit 0
fi
out="$version-dev.$(git rev-list --count HEAD).g$(git rev-parse --short=7 HEAD)"
if [[ -n $dirty ]]; then
  out+=".dirty-$(source_key | cut -c1-8)"
fi
echo "$out"
