#!/usr/bin/env bash
# build-nccl-tests.sh: builds NVIDIA nccl-tests (the reference for collective bandwidth) from a
# source folder, against the NCCL of the pip package, on a GPU machine with nvcc.
#
#   bench/validate/build-nccl-tests.sh SRC_DIR
#
# SRC_DIR is a checkout of github.com/NVIDIA/nccl-tests, kept in an ignored folder (never
# committed). Prints the path of all_reduce_perf on stdout (the only stdout line); everything
# else goes to stderr.
#
# Settings (environment, all optional):
#   NCCL_HOME     a folder with include/nccl.h and lib/libnccl.so.2 (default: the pip package
#                 nvidia-nccl-cu* found through PYTHON, then in common virtualenv places)
#   CUDA_HOME     default: dirname $(dirname $(which nvcc)), then /usr/local/cuda
#   NVCC_GENCODE  default: sm_90 only (H100/H200), which builds much faster than nccl-tests' list
#   BUILDDIR      default: SRC_DIR/build
#   PYTHON        the interpreter (bench/lib.sh)
#
# The pip package has lib/libnccl.so.2 but no unversioned libnccl.so for the linker, and its
# folder may be read-only, so the build links against a private layout in a temp folder:
#   $tmp/include -> <pkg>/include, $tmp/lib/libnccl.so.2 -> <pkg>/lib/libnccl.so.2,
#   $tmp/lib/libnccl.so -> libnccl.so.2
# The binaries then need the package's lib folder at run time (LD_LIBRARY_PATH, printed below).
set -euo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"

log() { printf 'build-nccl-tests: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ $# -eq 1 ] || die "usage: $0 NCCL_TESTS_SOURCE_DIR"
src=$(cd "$1" 2>/dev/null && pwd) || die "source folder $1 does not exist"
if [ ! -f "$src/Makefile" ] || [ ! -f "$src/src/common.cu" ]; then
  die "$src does not look like nccl-tests (no Makefile or src/common.cu)"
fi

# --- CUDA -------------------------------------------------------------------------------------
if [ -z "${CUDA_HOME:-}" ]; then
  if nvcc_path=$(command -v nvcc 2>/dev/null); then
    CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")
  elif [ -x /usr/local/cuda/bin/nvcc ]; then
    CUDA_HOME=/usr/local/cuda
  else
    die "nvcc not found on PATH and no /usr/local/cuda/bin/nvcc; set CUDA_HOME"
  fi
fi
[ -x "$CUDA_HOME/bin/nvcc" ] || die "no nvcc at $CUDA_HOME/bin/nvcc"
log "CUDA_HOME=$CUDA_HOME ($("$CUDA_HOME/bin/nvcc" --version | grep -o 'release [0-9.]*' || echo '?'))"

# --- NCCL from the pip package ------------------------------------------------------------------
find_pkg() {
  local py=$PYTHON d
  if command -v "$py" >/dev/null 2>&1; then
    # nvidia is a namespace package: take the first path of nvidia.nccl.
    d=$("$py" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    if [ -n "$d" ] && [ -f "$d/lib/libnccl.so.2" ]; then echo "$d"; return 0; fi
  fi
  local g
  for g in "${VIRTUAL_ENV:-/nonexistent}"/lib/python3*/site-packages \
           /opt/*/.venv/lib/python3*/site-packages /opt/*/lib/python3*/site-packages \
           /usr/local/lib/python3*/dist-packages /usr/local/lib/python3*/site-packages \
           /usr/lib/python3*/dist-packages "$HOME"/.local/lib/python3*/site-packages; do
    if [ -f "$g/nvidia/nccl/lib/libnccl.so.2" ]; then echo "$g/nvidia/nccl"; return 0; fi
  done
  return 1
}

if [ -n "${NCCL_HOME:-}" ]; then
  pkg=$NCCL_HOME
else
  pkg=$(find_pkg) || die "no NCCL found: install nvidia-nccl-cu12/cu13 in the Python environment or set NCCL_HOME"
fi
[ -f "$pkg/include/nccl.h" ] || die "$pkg/include/nccl.h missing"
libso=""
for cand in "$pkg/lib/libnccl.so.2" "$pkg/lib/libnccl.so"; do
  if [ -e "$cand" ]; then libso=$cand; break; fi
done
[ -n "$libso" ] || die "no libnccl.so.2 under $pkg/lib"
ver=$(awk '/#define NCCL_MAJOR/{a=$3} /#define NCCL_MINOR/{b=$3} /#define NCCL_PATCH/{c=$3} END{print a"."b"."c}' "$pkg/include/nccl.h")
log "NCCL $ver (header) from $pkg"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nccl-home.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib"
ln -s "$pkg/include" "$tmp/include"
ln -s "$(readlink -f "$libso")" "$tmp/lib/libnccl.so.2"
ln -s libnccl.so.2 "$tmp/lib/libnccl.so"

# --- build -----------------------------------------------------------------------------------
builddir=${BUILDDIR:-$src/build}
gencode=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
jobs=$(nproc 2>/dev/null || echo 8)
log "building in $builddir with MPI=0 -j$jobs, NVCC_GENCODE=$gencode"
make -C "$src" MPI=0 -j"$jobs" \
  CUDA_HOME="$CUDA_HOME" NCCL_HOME="$tmp" NVCC_GENCODE="$gencode" BUILDDIR="$builddir" >&2 \
  || die "make failed (see above)"

bin="$builddir/all_reduce_perf"
[ -x "$bin" ] || die "build finished but $bin is missing"
libdir=$(dirname "$(readlink -f "$libso")")
if command -v ldd >/dev/null 2>&1; then
  if LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$bin" | grep -q 'libnccl.so.2 => not found'; then
    die "$bin does not find libnccl.so.2 even with $libdir"
  fi
fi
perfs=("$builddir"/*_perf)
log "built: ${#perfs[@]} *_perf binaries"
log "run them with: NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$libdir $bin -b 8M -e 1G -f 2 -g <GPUs>"
echo "$bin"
