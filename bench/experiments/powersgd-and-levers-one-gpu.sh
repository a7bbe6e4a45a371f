#!/usr/bin/env bash
# What does one GPU measure of PowerSGD and of the host-side levers, and what does `recommend`
# make of it? Per model (torchvision resnet50, timm vit_base_patch16_224, a LLaMA-style decoder
# from its Hugging Face config): `recommend --gpus 2` from a committed two-H200 curve over the host
# network (mlprep8), whose own 1-GPU launch times plain DDP, accumulation, bf16, PowerSGD at rank 4
# (the hook at world size one: its compression compute with no bytes to save) and the model
# without DDP; then, for resnet50, `bench ddp --gpus 1` at PowerSGD ranks 1 and 4 beside base, and
# `recommend` again from those runs (no launch) to show the offer with both ranks measured.
#
#   bench/experiments/powersgd-and-levers-one-gpu.sh OUTDIR      (about 8 minutes on one H200)
#   MODELS="resnet50 llama" ...                                   (some models)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch, torchvision, timm, transformers for PYTHON
# (bench/lib.sh). Writes OUTDIR/NAME-recommend.{json,txt,stderr}, runs-NAME/ (--save-runs),
# resnet50-ranks.json (bench ddp), resnet50-ranks-recommend.txt and summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
CURVE=$ROOT/bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json
LLAMA="hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=2304,num_attention_heads=16,num_key_value_heads=16"
SUMMARY=$OUT/summary.txt
{ date -u +%FT%TZ; "$DDPCHECK" --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PYTHON" -c 'import torch, torchvision, timm, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", transformers.__version__)'; } > "$SUMMARY" 2>&1

recommend() { # NAME MODEL MICRO_BATCH
    local t0=$SECONDS
    "$DDPCHECK" --json recommend --from "$CURVE" --model "$2" --micro-batch "$3" --gpus 2 \
        --plain-reference --budget 150 --save-runs "$OUT/runs-$1" > "$OUT/$1-recommend.json" 2> "$OUT/$1-recommend.stderr"
    echo "$1: recommend rc $? in $((SECONDS - t0)) s" >> "$SUMMARY"
    local from=()
    for f in "$OUT/runs-$1"/*.json; do from+=(--from "$f"); done
    "$DDPCHECK" recommend --from "$CURVE" "${from[@]}" --model "$2" --micro-batch "$3" --gpus 2 \
        > "$OUT/$1-recommend.txt" 2>> "$OUT/$1-recommend.stderr"
    grep -iE "powersgd|broadcast_buffers|static_graph|unused|own work" "$OUT/$1-recommend.txt" | head -20 >> "$SUMMARY"
}

MODELS=${MODELS:-resnet50 vit_base llama}
for m in $MODELS; do
    case $m in
        resnet50) recommend resnet50 torchvision:resnet50 64 ;;
        vit_base) recommend vit_base timm:vit_base_patch16_224 64 ;;
        llama) recommend llama "$LLAMA" 8 ;;
        *) die "unknown model $m (resnet50, vit_base, llama)" ;;
    esac
done

# PowerSGD's rank against its compression compute, one launch, then the offer from those runs.
t0=$SECONDS
"$DDPCHECK" --json bench ddp --gpus 1 --model torchvision:resnet50 --micro-batch 64 \
    --variants base,powersgd1,powersgd4 --plain-reference --deadline 150 \
    > "$OUT/resnet50-ranks.json" 2> "$OUT/resnet50-ranks.stderr"
echo "resnet50 ranks: bench rc $? in $((SECONDS - t0)) s" >> "$SUMMARY"
"$DDPCHECK" bench ddp --from "$OUT/resnet50-ranks.json" >> "$SUMMARY" 2>&1
from=()
for f in "$OUT/runs-resnet50"/*.json; do from+=(--from "$f"); done
"$DDPCHECK" recommend --from "$CURVE" "${from[@]}" --from "$OUT/resnet50-ranks.json" \
    --model torchvision:resnet50 --micro-batch 64 --gpus 2 > "$OUT/resnet50-ranks-recommend.txt" 2>&1
grep -iE -A3 "powersgd" "$OUT/resnet50-ranks-recommend.txt" | head -20 >> "$SUMMARY"
date -u +%FT%TZ >> "$SUMMARY"
cat "$SUMMARY"
