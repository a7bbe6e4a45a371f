# shellcheck shell=bash
# bench/lib.sh: what every script under bench/ shares. A script sources it first:
#
#   # shellcheck source=../lib.sh
#   . "$(dirname "$0")/../lib.sh"
#
# It sets, for the script and for every program the script starts:
#   ROOT                 the repository root (absolute); VALIDATE and EXPERIMENTS: bench/validate
#                        and bench/experiments under it
#   DDPCHECK_BIN_DIR     the folder of the release binaries (default $ROOT/.device, not committed);
#                        DDPCHECK and DDPCHECKD: the two binaries in it
#   PYTHON               the one interpreter, for the helpers and (as DDPCHECK_PYTHON) for the DDP
#                        script: /opt/torch/.venv/bin/python3 where it exists, else python3
#   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
#                        NVLink multicast off in NCCL, PyTorch and NVSHMEM: the shared GPU machines
#                        require all three in every program (a program that uses multicast can
#                        put the host's GPUs out of service), so they cannot be overridden
#   HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
#                        models are built from configs and random weights, never downloaded
# and the helpers die, need_bin, out_dir and say (below).

# The variables above are for the scripts that source this file.
# shellcheck disable=SC2034

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VALIDATE=$ROOT/bench/validate
EXPERIMENTS=$ROOT/bench/experiments

# Names the scripts read before there was one of each; say so instead of ignoring them silently.
if [ -n "${PY:-}" ]; then echo "$(basename "$0"): PY is not read; set PYTHON" >&2; fi
if [ -n "${BIN:-}" ]; then echo "$(basename "$0"): BIN is not read; set DDPCHECK_BIN_DIR (a folder)" >&2; fi

DDPCHECK_BIN_DIR=${DDPCHECK_BIN_DIR:-$ROOT/.device}
DDPCHECK=$DDPCHECK_BIN_DIR/ddpcheck
DDPCHECKD=$DDPCHECK_BIN_DIR/ddpcheckd

if [ -z "${PYTHON:-}" ]; then
    if [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3; else PYTHON=python3; fi
fi
export DDPCHECK_BIN_DIR PYTHON DDPCHECK_PYTHON=$PYTHON
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# die MESSAGE: one line on stderr, naming the script, and exit 1.
die() {
    echo "$(basename "$0"): $*" >&2
    exit 1
}

# need_bin NAME...: each binary is in DDPCHECK_BIN_DIR, or the script stops with one line.
need_bin() {
    local name
    for name in "$@"; do
        [ -x "$DDPCHECK_BIN_DIR/$name" ] ||
            die "no $name in $DDPCHECK_BIN_DIR: copy release binaries there or set DDPCHECK_BIN_DIR"
    done
}

# out_dir [DIR [DEFAULT]]: the script's output folder is DIR, else $OUT, else DEFAULT; it is
# made, and OUT is set to its absolute path and exported (helpers the script starts write there).
out_dir() {
    local dir=${1:-${OUT:-${2:-}}}
    [ -n "$dir" ] || die "no output folder: give it as the first argument or in OUT"
    mkdir -p "$dir" || die "cannot make the output folder $dir"
    OUT=$(cd "$dir" && pwd)
    export OUT
}

# make_logs: LOGS is $OUT/logs, made.
make_logs() {
    LOGS=$OUT/logs
    mkdir -p "$LOGS"
}

# new_summary: SUMMARY is $OUT/summary.txt, emptied: each run of a script starts its own.
new_summary() {
    SUMMARY=$OUT/summary.txt
    : > "$SUMMARY"
}

# say TEXT...: a line on stdout and appended to $SUMMARY.
say() {
    echo "$*" | tee -a "${SUMMARY:?set SUMMARY before say}"
}

# logged DIR EXT NAME SECONDS CMD...: CMD under a timeout (killed 5 s past it), its stdout in
# DIR/NAME.EXT and its stderr in DIR/NAME.err, `NAME rc=N` in the summary (say). A step that
# fails is a fact to read, not the script's end.
logged() {
    local dir=$1 ext=$2 name=$3 secs=$4
    shift 4
    timeout -k 5 "$secs" "$@" > "$dir/$name.$ext" 2> "$dir/$name.err"
    say "$name rc=$?"
}

# raw_fact DIR NAME SECONDS COMMAND: the output of `bash -c COMMAND` under a timeout, and its rc,
# in DIR/fact-NAME.txt.
raw_fact() {
    local dir=$1 name=$2 secs=$3
    timeout -k 2 "$secs" bash -c "$4" > "$dir/fact-$name.txt" 2>&1
    echo "rc=$?" >> "$dir/fact-$name.txt"
}
