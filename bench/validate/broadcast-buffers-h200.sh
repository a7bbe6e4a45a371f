#!/usr/bin/env bash
# `--no-broadcast-buffers` on one GPU: torchvision resnet50 (159 BatchNorm buffers) at batch 64
# through `bench ddp --gpus 1 --plain-reference`, with DDP's buffer broadcast (torch's default)
# and without, four launches in the order A B B A; then `recommend --no-broadcast-buffers
# --plain-reference` from a committed two-H200 report, whose snippet passes the option.
#
#   bench/validate/broadcast-buffers-h200.sh OUTDIR      (about 4 minutes)
#
# Needs .device/ddpcheck and /opt/torch/.venv/bin/python3 (torch, torchvision). Writes
# OUTDIR/bench-N-{default,off}.json, recommend.json, recommend.txt, their stderr, summary.txt.
set -uo pipefail
OUT=${1:?usage: broadcast-buffers-h200.sh OUTDIR}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-/opt/torch/.venv/bin/python3}
BIN=${BIN:-$ROOT/.device/ddpcheck}
CURVE=$ROOT/bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json
export DDPCHECK_PYTHON=$PY NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u +%FT%TZ; "$BIN" --version; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
  "$PY" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'; } > "$OUT/summary.txt" 2>&1

bench() { # N default|off
    local t0=$SECONDS tag=bench-$1-$2 flag=()
    [ "$2" = off ] && flag=(--no-broadcast-buffers)
    "$BIN" --json bench ddp --gpus 1 --variants base --model torchvision:resnet50 --micro-batch 64 \
        --warmup-steps 10 --min-timed-seconds 3 --plain-reference "${flag[@]}" --deadline 300 \
        > "$OUT/$tag.json" 2> "$OUT/$tag.stderr"
    echo "$tag: rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
    "$PY" "$ROOT/bench/validate/summarise-plain-ratio.py" "$OUT/$tag.json" "$tag" >> "$OUT/summary.txt" 2>&1
}
bench 1 default; bench 2 off; bench 3 off; bench 4 default

t0=$SECONDS
"$BIN" --json recommend --from "$CURVE" --model torchvision:resnet50 --micro-batch 64 --gpus 2 \
    --plain-reference --no-broadcast-buffers --save-runs "$OUT/runs" > "$OUT/recommend.json" 2> "$OUT/recommend.stderr"
echo "recommend: rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
from=(); for f in "$OUT/runs"/*.json; do from+=(--from "$f"); done
"$BIN" recommend --from "$CURVE" "${from[@]}" --model torchvision:resnet50 --micro-batch 64 --gpus 2 \
    --no-broadcast-buffers > "$OUT/recommend.txt" 2>> "$OUT/recommend.stderr"
echo "recommend from the saved runs: rc $?" >> "$OUT/summary.txt"
grep -E "ddp = DDP|ddp_own_work" -A1 "$OUT/recommend.txt" >> "$OUT/summary.txt"
date -u +%FT%TZ >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
