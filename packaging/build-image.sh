#!/usr/bin/env bash
# Builds the container image ddpcheck/ddpcheck:VERSION (packaging/Containerfile) with buildah,
# from Debian's archive only: no registry is needed.
#
#   packaging/build-image.sh [--deb FILE] [--nccl none|REQUIREMENT]
#
#   --deb FILE    the package to install (default: build one with packaging/build-deb.sh)
#   --nccl none   no NCCL in the image (the all-reduce test then answers UNKNOWN, naming it)
#   --nccl REQ    a pip requirement for NCCL's wheel instead of packaging/nccl-requirements.txt
#                 (CUDA 13), e.g. --nccl nvidia-nccl-cu12==2.30.7 for drivers before 580
#   --fetch-only  only fetch what the image is made from (the Debian base, NCCL's wheel) into
#                 target/image/ and stop: CI starts this first, so the downloads run beside the
#                 builds instead of after them
#
# Storage and isolation are buildah's STORAGE_DRIVER and BUILDAH_ISOLATION, vfs and chroot unless
# set (they work where overlay and user namespaces do not, as on CI). Prints the image's name.
set -euo pipefail
cd "$(dirname "$0")/.."

image_name=ddpcheck/ddpcheck
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
deb=""
nccl=""
fetch_only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --deb) deb=$2; shift 2 ;;
        --nccl) nccl=$2; shift 2 ;;
        --fetch-only) fetch_only=1; shift ;;
        *) echo "build-image: unknown argument $1 (see the header of $0)" >&2; exit 64 ;;
    esac
done
# Downloads NCCL's wheel (cached in target/image/wheels) and sets $wheel to its path.
fetch_nccl_wheel() {
    local wheels=target/image/wheels want pkg ver
    mkdir -p "$wheels"
    if [ -z "$nccl" ]; then
        python3 -m pip download --quiet --no-deps --require-hashes \
            -r packaging/nccl-requirements.txt -d "$wheels" >&2
        want=$(sed -n 's/^\(nvidia-nccl-[a-z0-9]*\)==\([^ ]*\).*/\1 \2/p' packaging/nccl-requirements.txt)
    else
        python3 -m pip download --quiet --no-deps "$nccl" -d "$wheels" >&2
        want=$(printf '%s\n' "$nccl" | sed -n 's/^\(nvidia-nccl-[a-z0-9]*\)==\(.*\)$/\1 \2/p')
    fi
    read -r pkg ver <<<"$want"
    wheel=$(find "$wheels" -maxdepth 1 -name "${pkg//-/_}-${ver:-}*.whl" | sort | head -n 1)
    [ -n "$wheel" ] || { echo "build-image: no wheel for ${nccl:-packaging/nccl-requirements.txt} in $wheels (give NAME==VERSION)" >&2; exit 1; }
}

if [ -n "$fetch_only" ]; then
    packaging/rootfs.sh >/dev/null
    [ "$nccl" = none ] || fetch_nccl_wheel
    exit 0
fi
command -v buildah >/dev/null || { echo "build-image: needs buildah (apt-get install buildah)" >&2; exit 2; }
if [ -z "$deb" ]; then
    deb=$(packaging/build-deb.sh | tail -n 1)
fi
version=$(dpkg-deb --field "$deb" Version)
version=${version%-*}
rootfs=$(packaging/rootfs.sh)

ctx=target/image/context
rm -rf "$ctx"
mkdir -p "$ctx/nccl"
ln "$rootfs" "$ctx/rootfs.tar" 2>/dev/null || cp "$rootfs" "$ctx/rootfs.tar"
cp "$deb" "$ctx/ddpcheck.deb"
if [ "$nccl" != none ]; then
    fetch_nccl_wheel
    # Only the library: the wheel's headers and bitcode are not needed at run time.
    python3 - "$wheel" "$ctx/nccl" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("nvidia/nccl/lib/libnccl.so.2") as src, \
        open(sys.argv[2] + "/libnccl.so.2", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
fi

buildah bud --quiet --layers=false --build-arg VERSION="$version" \
    -f packaging/Containerfile -t "$image_name:$version" "$ctx" >&2
rm -rf "$ctx"
echo "$image_name:$version"
