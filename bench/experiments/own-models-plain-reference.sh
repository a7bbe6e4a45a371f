#!/usr/bin/env bash
# The 1-GPU step of users' own models against the same model without DDP, both in one launch:
# `ddpcheck bench ddp --gpus 1 --plain-reference` on torchvision resnet50, timm
# vit_base_patch16_224, a LLaMA from its Hugging Face config and that LLaMA with all but its
# embeddings and q_proj frozen (frozen_llama.py), each ROUNDS times; after each, the same model
# in plain-loop.py (its own launch, as many steps) for the launch-to-launch comparison.
#
#   bench/experiments/own-models-plain-reference.sh OUTDIR        (ROUNDS=2: about 8 minutes)
#   MODELS="llama llama_frozen" FIRST_ROUND=2 ROUNDS=2 ...   (some models, rounds 2..2 only)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch, torchvision, timm, transformers for PYTHON
# (bench/lib.sh); no network. Writes OUTDIR/NAME-rR.json (bench ddp's report), NAME-rR-loop.json
# (plain-loop.py), their stderr, and summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
ROUNDS=${ROUNDS:-2}
MIN_TIMED=${MIN_TIMED:-3}
export DDPCHECK_VALIDATE_FFN=${FFN:-2304} DDPCHECK_VALIDATE_SEQ=1024
LLAMA="hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=$DDPCHECK_VALIDATE_FFN,num_attention_heads=16,num_key_value_heads=16"
FROZEN="py:$EXPERIMENTS/frozen_llama.py:make"
WARMUP=10
{ date -u +%FT%TZ; "$DDPCHECK" --version; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  "$PYTHON" -c 'import torch, torchvision, timm, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", transformers.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'; } > "$OUT/summary.txt" 2>&1

one() { # NAME MODEL MICRO_BATCH ROUND
    local name=$1 model=$2 mb=$3 tag=$1-r$4 t0=$SECONDS
    "$DDPCHECK" --json bench ddp --gpus 1 --variants base --model "$model" --micro-batch "$mb" \
        --warmup-steps $WARMUP --min-timed-seconds "$MIN_TIMED" --plain-reference --deadline 300 \
        > "$OUT/$tag.json" 2> "$OUT/$tag.stderr"
    local rc=$? steps
    steps=$("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(r.get("timed_steps") or 40)' "$OUT/$tag.json" 2>/dev/null || echo 40)
    "$PYTHON" "$EXPERIMENTS/plain-loop.py" --model "$model" --micro-batch "$mb" --steps "$steps" \
        --warmup $WARMUP > "$OUT/$tag-loop.json" 2> "$OUT/$tag-loop.stderr"
    local prc=$?
    "$PYTHON" - "$OUT/$tag.json" "$OUT/$tag-loop.json" "$tag" "$rc" "$prc" $((SECONDS - t0)) >> "$OUT/summary.txt" 2>&1 <<'PYEOF'
import json, statistics, sys
tag, rc, prc, secs = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
try:
    r = json.load(open(sys.argv[1]))["results"][0]
    pl = r["plain_reference"]
except Exception as e:
    print("%s: bench rc %s, %s s: no figures (%s)" % (tag, rc, secs, e)); sys.exit()
ratios = [d / p for d, p in pl["rounds"]]
try:
    loop = json.load(open(sys.argv[2]))["step_time_median_s"]
except Exception:
    loop = float("nan")
print("%s: ddp %.5f s, plain same launch %.5f s, rounds %d, ddp/plain median of rounds %.4f "
      "(rounds %s); plain-loop.py own launch %.5f s (ddp/loop %.4f, plain/loop %.4f); %s steps; %s s"
      % (tag, r["step_time_median_s"], pl["step_time_median_s"], len(ratios), statistics.median(ratios),
         " ".join("%.3f" % x for x in ratios), loop, r["step_time_median_s"] / loop,
         pl["step_time_median_s"] / loop, r.get("timed_steps"), secs))
PYEOF
}

MODELS=${MODELS:-resnet50 vit_base llama llama_frozen}
for round in $(seq "${FIRST_ROUND:-1}" "$ROUNDS"); do
    for m in $MODELS; do
        case $m in
            resnet50) one resnet50 torchvision:resnet50 64 "$round" ;;
            vit_base) one vit_base timm:vit_base_patch16_224 64 "$round" ;;
            llama) one llama "$LLAMA" 8 "$round" ;;
            llama_frozen) one llama_frozen "$FROZEN" 8 "$round" ;;
        esac
    done
done
for f in "$OUT"/*-r*.json; do
    case $f in *-loop.json) ;; *) "$DDPCHECK" bench ddp --from "$f" 2>&1 | grep "without DDP" >> "$OUT/summary.txt" ;; esac
done
date -u +%FT%TZ >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
