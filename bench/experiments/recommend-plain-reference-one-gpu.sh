#!/usr/bin/env bash
# `recommend --plain-reference` on a one-GPU node: a committed two-H200 report for the curve,
# the compute measured here by recommend's own 1-GPU launch, which also times the model without
# DDP (the ddp_own_work warning). torchvision resnet50 and the frozen LLaMA (frozen_llama.py).
#
#   bench/experiments/recommend-plain-reference-one-gpu.sh OUTDIR      (about 2 minutes)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch, torchvision, transformers for PYTHON (bench/lib.sh).
# Writes OUTDIR/NAME.json (recommend --json), NAME.txt (the same recommendation as text, from
# the runs the first saved), NAME.stderr, runs-NAME/ (--save-runs) and summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
CURVE=$ROOT/bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json
export DDPCHECK_VALIDATE_FFN=2304 DDPCHECK_VALIDATE_SEQ=1024
{ date -u +%FT%TZ; "$DDPCHECK" --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/summary.txt" 2>&1
one() { # NAME MODEL MICRO_BATCH
    local t0=$SECONDS
    "$DDPCHECK" --json recommend --from "$CURVE" --model "$2" --micro-batch "$3" --gpus 2 --plain-reference \
        --save-runs "$OUT/runs-$1" > "$OUT/$1.json" 2> "$OUT/$1.stderr"
    echo "$1: recommend rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
    local from=()
    for f in "$OUT/runs-$1"/*.json; do from+=(--from "$f"); done
    "$DDPCHECK" recommend --from "$CURVE" "${from[@]}" --model "$2" --micro-batch "$3" --gpus 2 > "$OUT/$1.txt" 2>> "$OUT/$1.stderr"
    echo "$1: from the saved runs rc $?" >> "$OUT/summary.txt"
    grep -A1 "ddp_own_work" "$OUT/$1.txt" >> "$OUT/summary.txt"
}
one resnet50 torchvision:resnet50 64
one llama_frozen "py:$EXPERIMENTS/frozen_llama.py:make" 8
date -u +%FT%TZ >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
