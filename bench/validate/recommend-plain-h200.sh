#!/usr/bin/env bash
# `recommend --plain-reference` on a one-GPU node: a committed two-H200 report for the curve,
# the compute measured here by recommend's own 1-GPU launch, which also times the model without
# DDP (the ddp_own_work warning). torchvision resnet50 and the frozen LLaMA (frozen_llama.py).
#
#   bench/validate/recommend-plain-h200.sh OUTDIR      (about 2 minutes)
#
# Needs .device/ddpcheck and /opt/torch/.venv/bin/python3 (torch, torchvision, transformers).
# Writes OUTDIR/NAME.json (recommend --json), NAME.txt (the same recommendation as text, from
# the runs the first saved), NAME.stderr, runs-NAME/ (--save-runs) and summary.txt.
set -uo pipefail
OUT=${1:?usage: recommend-plain-h200.sh OUTDIR}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-/opt/torch/.venv/bin/python3}
BIN=${BIN:-$ROOT/.device/ddpcheck}
CURVE=$ROOT/bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json
export DDPCHECK_PYTHON=$PY NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DDPCHECK_VALIDATE_FFN=2304 DDPCHECK_VALIDATE_SEQ=1024
{ date -u +%FT%TZ; "$BIN" --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/summary.txt" 2>&1
one() { # NAME MODEL MICRO_BATCH
    local t0=$SECONDS
    "$BIN" --json recommend --from "$CURVE" --model "$2" --micro-batch "$3" --gpus 2 --plain-reference \
        --save-runs "$OUT/runs-$1" > "$OUT/$1.json" 2> "$OUT/$1.stderr"
    echo "$1: recommend rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
    local from=()
    for f in "$OUT/runs-$1"/*.json; do from+=(--from "$f"); done
    "$BIN" recommend --from "$CURVE" "${from[@]}" --model "$2" --micro-batch "$3" --gpus 2 > "$OUT/$1.txt" 2>> "$OUT/$1.stderr"
    echo "$1: from the saved runs rc $?" >> "$OUT/summary.txt"
    grep -A1 "ddp_own_work" "$OUT/$1.txt" >> "$OUT/summary.txt"
}
one resnet50 torchvision:resnet50 64
one llama_frozen "py:$ROOT/bench/validate/frozen_llama.py:make" 8
date -u +%FT%TZ >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
