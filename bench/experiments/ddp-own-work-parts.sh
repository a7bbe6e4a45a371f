#!/usr/bin/env bash
# Where DDP's own work at one GPU goes (ddp-own-work.py) for the four users' models of
# own-models-plain-reference.sh: resnet50 and vit_base_patch16_224 at batch 64, the LLaMA from its
# Hugging Face config and its frozen variant at 8 x 1024 tokens; one process per model. With
# BENCH=1, each model also goes through `ddpcheck bench ddp --gpus 1 --plain-reference` first,
# in the same call, for ddpcheck's own figure of the same ratio.
#
#   bench/experiments/ddp-own-work-parts.sh OUTDIR        (about 3 minutes; BENCH=1 about 6)
#   MODELS="resnet50 vit_base" SETTLE="1 0" BENCH=1 ...   (some models; each settle count)
#
# Needs torch, torchvision, timm, transformers for PYTHON, and for BENCH=1 ddpcheck in
# DDPCHECK_BIN_DIR (bench/lib.sh); no network. Writes OUTDIR/NAME[-sN].json, NAME-bench.json, their stderr and
# summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
[ "${BENCH:-0}" = 1 ] && need_bin ddpcheck
export DDPCHECK_VALIDATE_FFN=2304 DDPCHECK_VALIDATE_SEQ=1024
LLAMA="hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=2304,num_attention_heads=16,num_key_value_heads=16"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  [ "${BENCH:-0}" = 1 ] && "$DDPCHECK" --version
  "$PYTHON" -c 'import torch, torchvision, timm, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", transformers.__version__)'; } > "$OUT/summary.txt" 2>&1

bench() { # NAME MODEL MICRO_BATCH: ddpcheck's own DDP / plain figure
    local t0=$SECONDS
    "$DDPCHECK" --json bench ddp --gpus 1 --variants base --model "$2" --micro-batch "$3" \
        --warmup-steps 10 --min-timed-seconds 3 --plain-reference --deadline 300 \
        > "$OUT/$1-bench.json" 2> "$OUT/$1-bench.stderr"
    echo "$1 bench ddp --plain-reference: rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
    "$PYTHON" "$EXPERIMENTS/summarise-plain-ratio.py" "$OUT/$1-bench.json" ddpcheck >> "$OUT/summary.txt" 2>&1
}

one() { # NAME MODEL MICRO_BATCH SETTLE
    local t0=$SECONDS tag=$1-s$4
    timeout 240 "$PYTHON" "$EXPERIMENTS/ddp-own-work.py" --model "$2" --micro-batch "$3" \
        --settle "$4" > "$OUT/$tag.json" 2> "$OUT/$tag.stderr"
    echo "$tag: rc $? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
    "$PYTHON" - "$OUT/$tag.json" >> "$OUT/summary.txt" 2>&1 <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
for n, x in r["over_plain_median_of_rounds"].items():
    rs = r["over_plain_rounds"][n]
    print("  %-24s x%.4f of plain (rounds %.3f-%.3f)" % (n, x, min(rs), max(rs)))
for n, p in r["profile"].items():
    print("  profile %-6s wall %.2f ms/step, kernels %.2f ms/step" %
          (n, 1e3 * p["wall_per_step_s"], 1e3 * p["device_time_per_step_s"]))
PYEOF
}

for m in ${MODELS:-resnet50 vit_base llama llama_frozen}; do
    case $m in
        resnet50) args=(resnet50 torchvision:resnet50 64) ;;
        vit_base) args=(vit_base timm:vit_base_patch16_224 64) ;;
        llama) args=(llama "$LLAMA" 8) ;;
        llama_frozen) args=(llama_frozen "py:$EXPERIMENTS/frozen_llama.py:make" 8) ;;
    esac
    [ "${BENCH:-0}" = 1 ] && bench "${args[@]}"
    for s in ${SETTLE:-1}; do one "${args[@]}" "$s"; done
done
date -u +%FT%TZ >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
