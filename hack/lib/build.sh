# Shared by the build scripts under hack/: a content-keyed cache of binaries built from
# the pinned tools modules, outside the checkout so a fresh clone reuses them.
# Source it; it expects $root (the checkout) to be set.

tools="$root/hack/tools"
cache_root="${TRUSTSYNC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trustsync}"

log() { printf '[%s] %s\n' "${log_prefix:-build}" "$*" >&2; }

# key <module dir>: a short content hash of what decides the build's output.
key() {
  { cat "$1/go.mod" "$1/go.sum"; go version; } | sha256sum | cut -c1-16
}

# build <module dir> <out dir> <binary> <package> [ldflags] [tags] [cgo]
# Builds into a temporary name and renames, so an interrupted build never leaves a
# truncated binary that a later run would take as cached.
build() {
  local mod=$1 out=$2 bin=$3 pkg=$4 ldflags=${5:-} tags=${6:-} cgo=${7:-0}
  if [[ -x "$out/$bin" ]]; then
    return 0
  fi
  mkdir -p "$out"
  log "building $bin from $pkg (cached in $out)"
  local start=$SECONDS
  (cd "$mod" && CGO_ENABLED=$cgo go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out/.$bin.tmp" "$pkg")
  mv "$out/.$bin.tmp" "$out/$bin"
  log "built $bin in $((SECONDS - start))s"
}

# need_debs <package>...: installs the Debian packages that are missing. The build and
# test machines are root with only Go, git and gcc to start with.
need_debs() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing Debian packages: ${missing[*]}"
  if [[ $(id -u) != 0 ]]; then
    echo "need root to install ${missing[*]}: run as root or install them first" >&2
    return 1
  fi
  # A stale or missing package list finds nothing; refresh it once per run.
  if [[ -z "${_apt_updated:-}" ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    _apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# kube_ldflags: stamp versions the way Kubernetes' own build does, so --version and
# /version report the release instead of v0.0.0-master.
kube_version=v1.37.1
kube_ldflags=""
for _pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $_pkg.gitVersion=$kube_version -X $_pkg.gitMajor=1 -X $_pkg.gitMinor=37"
  kube_ldflags+=" -X $_pkg.gitTreeState=clean -X $_pkg.buildDate=1970-01-01T00:00:00Z"
done
unset _pkg
kube_dir="$cache_root/kube-$kube_version-$(key "$tools/kube")"

# source_key: what a release is made from, the commit and every change to it in the
# working tree (tracked or not), as a hash: make push reuses a dist/ of the same key.
source_key() {
  {
    git rev-parse HEAD 2>/dev/null || echo none
    git diff HEAD 2>/dev/null
    git ls-files --others --exclude-standard -z 2>/dev/null |
      while IFS= read -r -d '' f; do [[ -f $f && ! -L $f ]] && sha256sum "$f"; done || true
  } | sha256sum | cut -c1-32
}
