# The PKCS#11 signer's build: a cgo binary (a vendor's module is a C library the signer
# loads) on a glibc base assembled from Debian's own packages, since there is no
# container engine or base image to start from. Source it after build.sh.

# The base: glibc, and the C and C++ runtimes a vendor's module links against (as
# distroless/cc holds them). Nothing else: the module, and any library of its own, is
# the user's to mount.
glibc_base_debs=(libc6 libgcc-s1 libstdc++6)

host_arch=$(dpkg --print-architecture 2>/dev/null || go env GOARCH)

# apt_arch <arch>: makes Debian's packages for <arch> installable and downloadable here.
apt_arch() {
  local arch=$1
  if [[ $arch != "$host_arch" ]] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
    [[ $(id -u) == 0 ]] || { echo "need root to add Debian's $arch packages (dpkg --add-architecture $arch)" >&2; return 1; }
    log "adding Debian's $arch architecture"
    dpkg --add-architecture "$arch"
    _apt_updated=
  fi
  if [[ -z "$(apt-cache policy "libc6:$arch" | awk '/Candidate:/ && $2 != "(none)" {print $2}')" ]]; then
    _apt_updated=
  fi
  if [[ -z "${_apt_updated:-}" ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    _apt_updated=1
  fi
}

# glibc_base <arch>: prints a directory holding base/ (glibc_base_debs for linux/<arch>,
# unpacked as Debian lays them out) and packages (each package=version). It is keyed by
# those versions: the same versions give the same files, so the image repeats; a Debian
# security update makes a new base, and packages says which.
glibc_base() {
  local arch=$1 list="" p v
  apt_arch "$arch"
  # libgcc-s1's and libstdc++6's copyright is their gcc-N-base's.
  local debs=("${glibc_base_debs[@]}" "$(apt-cache depends "libgcc-s1:$arch" | awk '/Depends: gcc-[0-9]+-base/ {sub(/:.*/, "", $2); print $2; exit}')")
  for p in "${debs[@]}"; do
    v=$(apt-cache policy "$p:$arch" | awk '/Candidate:/ {print $2}')
    [[ -n $v && $v != "(none)" ]] || { echo "Debian has no $p for $arch here" >&2; return 1; }
    list+="$p=$v"$'\n'
  done
  local dir="$cache_root/glibc-base-$arch-$(printf '%s' "$list" | sha256sum | cut -c1-16)"
  if [[ ! -f $dir/packages ]]; then
    local tmp; tmp=$(mktemp -d "$cache_root/.glibc-base.XXXXXX")
    log "downloading ${debs[*]} for $arch"
    local want=()
    while IFS== read -r p v; do want+=("$p:$arch=$v"); done <<< "${list%$'\n'}"
    (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "${want[@]}" >/dev/null)
    for deb in "$tmp"/*.deb; do
      dpkg-deb -x "$deb" "$tmp/base"
    done
    printf '%s' "$list" > "$tmp/packages"
    rm -f "$tmp"/*.deb
    rm -rf "$dir"
    mv "$tmp" "$dir"
  fi
  echo "$dir"
}

# cross_cc <arch>: the C compiler that builds for linux/<arch> here, installed if missing.
cross_cc() {
  local arch=$1
  if [[ $arch == "$host_arch" ]]; then
    echo gcc
    return
  fi
  case $arch in
    arm64) need_debs gcc-aarch64-linux-gnu libc6-dev-arm64-cross && echo aarch64-linux-gnu-gcc ;;
    amd64) need_debs gcc-x86-64-linux-gnu libc6-dev-amd64-cross && echo x86_64-linux-gnu-gcc ;;
    *) echo "no cross compiler known for $arch" >&2; return 1 ;;
  esac
}

# build_signer_pkcs11 <arch> <out> <ldflags>: the signer with cgo, for PKCS#11, for linux/<arch>.
build_signer_pkcs11() {
  local arch=$1 out=$2 ldflags=$3 cc
  cc=$(cross_cc "$arch")
  CGO_ENABLED=1 CC=$cc GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/signer
}

# pkcs11_ref <ref>: the PKCS#11 signer's image beside the image <ref> names:
# REPOSITORY-signer-pkcs11:TAG (the chart's signer.pkcs11 derives it the same way).
pkcs11_ref() {
  local ref=$1
  if [[ ${ref##*/} == *:* ]]; then
    echo "${ref%:*}-signer-pkcs11:${ref##*:}"
  else
    echo "$ref-signer-pkcs11"
  fi
}
