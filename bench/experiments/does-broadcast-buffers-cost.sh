#!/usr/bin/env bash
# `--no-broadcast-buffers` on one GPU: torchvision resnet50 (159 BatchNorm buffers) at batch 64
# through `bench ddp --gpus 1 --plain-reference`, with DDP's buffer broadcast (torch's default)
# and without, four launches in the order A B B A; then `recommend --no-broadcast-buffers
# --plain-reference` from a committed two-H200 report, whose snippet passes the option.
#
#   bench/experiments/does-broadcast-buffers-cost.sh OUTDIR      (about 4 minutes)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch, torchvision for PYTHON (bench/lib.sh). Writes
# OUTDIR/bench-N-{default,off}.json, recommend.json, recommend.txt, their stderr, summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
CURVE=$ROOT/bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json
{ date -u +%FT%TZ; "$DDPCHECK" --version; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
  "$PYTHON" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'; } > "$OUT/summary.txt" 2>&1

bench() { # N default|off
    local t0=$SECONDS tag=bench-$1-$2 flag=()
    [ "$2" = off ] && flag=(--no-broadcast-buffers)
    "$DDPCHECK" --json bench ddp --gpus 1 --variants base --model torchvision:resnet50 --micro-batch 64 \
        --warmup-steps 10 --min-timed-seconds 3 --plain-reference "${flag[@]}" --deadline 300 \
        > "$OUT/$tag.json" 2> "$OUT/$tag.stderr"
    echo "$tag: rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
    "$PYTHON" "$EXPERIMENTS/summarise-plain-ratio.py" "$OUT/$tag.json" "$tag" >> "$OUT/summary.txt" 2>&1
}
bench 1 default; bench 2 off; bench 3 off; bench 4 default

t0=$SECONDS
"$DDPCHECK" --json recommend --from "$CURVE" --model torchvision:resnet50 --micro-batch 64 --gpus 2 \
    --plain-reference --no-broadcast-buffers --save-runs "$OUT/runs" > "$OUT/recommend.json" 2> "$OUT/recommend.stderr"
echo "recommend: rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
from=(); for f in "$OUT/runs"/*.json; do from+=(--from "$f"); done
"$DDPCHECK" recommend --from "$CURVE" "${from[@]}" --model torchvision:resnet50 --micro-batch 64 --gpus 2 \
    --no-broadcast-buffers > "$OUT/recommend.txt" 2>> "$OUT/recommend.stderr"
{ echo "recommend from the saved runs: rc $?"
  grep -E "ddp = DDP|ddp_own_work" -A1 "$OUT/recommend.txt"
  date -u +%FT%TZ; } >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
