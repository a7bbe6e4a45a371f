#!/usr/bin/env bash
# Your own model on one H200: each of torchvision resnet50, timm vit_base_patch16_224, a LLaMA
# from its Hugging Face config and that LLaMA with all but its embeddings and q_proj frozen (a
# factory, frozen_llama.py) through `ddpcheck bench ddp --gpus 1`, then the same model in a plain
# torch loop (plain-loop.py: no DDP, same batches, bf16, same optimizer, as many steps), the
# layouts straight from torch (model-layouts.py), and a micro-batch that cannot fit (the one-line
# verdict and its exit code).
#
#   bench/experiments/own-models-vs-plain-loop.sh OUTDIR
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch, torchvision, timm, transformers for PYTHON
# (bench/lib.sh); no network. About 4 minutes. Writes into OUTDIR: NAME.json / NAME.stderr
# (bench ddp's report), NAME-plain.json (the plain loop), layouts/*.json, oom-*.{stderr,code},
# summary.txt. FFN=2304 gives the 200.83M-parameter LLaMA; the default 2816 gives 219.70M.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
mkdir -p "$OUT/layouts"
export DDPCHECK_VALIDATE_FFN=${FFN:-2816} DDPCHECK_VALIDATE_SEQ=1024
LLAMA="hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=$DDPCHECK_VALIDATE_FFN,num_attention_heads=16,num_key_value_heads=16"
FROZEN="py:$EXPERIMENTS/frozen_llama.py:make"
WARMUP=10
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$PYTHON" -c 'import torch, torchvision, timm, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", transformers.__version__)'; } > "$OUT/summary.txt" 2>&1

one() { # NAME MODEL MICRO_BATCH
    local name=$1 model=$2 mb=$3 t0=$SECONDS
    "$DDPCHECK" --json bench ddp --gpus 1 --variants base --model "$model" --micro-batch "$mb" \
        --warmup-steps $WARMUP --min-timed-seconds 2 --deadline 300 > "$OUT/$name.json" 2> "$OUT/$name.stderr"
    local rc=$? steps
    steps=$("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(r.get("timed_steps") or 40)' "$OUT/$name.json" 2>/dev/null || echo 40)
    "$PYTHON" "$EXPERIMENTS/plain-loop.py" --model "$model" --micro-batch "$mb" --steps "$steps" \
        --warmup $WARMUP > "$OUT/$name-plain.json" 2> "$OUT/$name-plain.stderr"
    local prc=$?
    "$PYTHON" - "$OUT/$name.json" "$OUT/$name-plain.json" "$name" "$rc" "$prc" $((SECONDS - t0)) >> "$OUT/summary.txt" 2>&1 <<'PYEOF'
import json, math, sys
name, rc, prc, secs = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
try:
    r = json.load(open(sys.argv[1]))["results"][0]
    p = json.load(open(sys.argv[2]))
except Exception as e:
    print("%s: bench rc %s, plain rc %s, %s s: no figures (%s)" % (name, rc, prc, secs, e)); sys.exit()
lay = r.get("param_layout") or {"tensors": []}
train = sum(math.prod(t["shape"]) for t in lay["tensors"] if t.get("trainable", True))
print("%s: %d tensors, %d params (%d trainable; plain loop %d / %d), %d buckets (%s); step %.5f s "
      "(%s steps) vs plain %.5f s: ratio %.4f; %s s"
      % (name, len(lay["tensors"]), r["params"], train, p["params"], p["trainable_params"],
         len((r.get("torch_buckets") or {}).get("buckets", [])), (r.get("torch_buckets") or {}).get("source"),
         r["step_time_median_s"], r.get("timed_steps"), p["step_time_median_s"],
         r["step_time_median_s"] / p["step_time_median_s"], secs))
PYEOF
}

one resnet50 torchvision:resnet50 64
one vit_base timm:vit_base_patch16_224 64
one llama "$LLAMA" 8
one llama_frozen "$FROZEN" 8

# Layouts straight from torch (CPU is enough), for the core's fixtures.
"$PYTHON" "$VALIDATE/model-layouts.py" "$OUT/layouts" torchvision:resnet50 timm:vit_base_patch16_224 \
    "$LLAMA" "$FROZEN" >> "$OUT/summary.txt" 2> "$OUT/layouts.stderr"

# A micro-batch that cannot fit: one line naming it and the memory, exit 64, no traceback.
oom() { # NAME MODEL MICRO_BATCH
    "$DDPCHECK" bench ddp --gpus 1 --variants base --model "$2" --micro-batch "$3" --steps 3 --warmup-steps 1 \
        --deadline 120 > /dev/null 2> "$OUT/oom-$1.stderr"
    echo $? > "$OUT/oom-$1.code"
    echo "oom $1: exit $(cat "$OUT/oom-$1.code"): $(grep '^ddpcheck: ' "$OUT/oom-$1.stderr" | tail -1)" >> "$OUT/summary.txt"
}
oom resnet50 torchvision:resnet50 4096
oom llama "$LLAMA" 1024
cat "$OUT/summary.txt"
