#!/usr/bin/env bash
# On a node of one GPU: `ddpcheck explain` with its raw facts (explain-with-raw-facts.sh), then what one GPU
# shows of recommend's measure-first path and of the model specs: the 1-GPU launch recommend
# runs first (gpt2-124m: base, accum4, bf16, 15 steps) timed whole against the budget's estimate,
# a LLaMA-style decoder from a Hugging Face config.json and an MLP with input and output widths
# through `bench ddp`, and recommend's answer on one GPU. Everything under $OUT; logs tarred to
# $OUT/extras.tgz (explain-with-raw-facts.sh writes $OUT/logs.tgz).
#   bench/experiments/one-gpu-explain-and-recommend.sh OUTDIR    (or OUT=OUTDIR; default /tmp/ddpcheck-extras)
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}" /tmp/ddpcheck-extras
need_bin ddpcheck
bash "$EXPERIMENTS/explain-with-raw-facts.sh" "$OUT"
X=$OUT/extras
mkdir -p "$X"
SUMMARY=$X/summary.txt
timed() {
    local name=$1 secs=$2
    shift 2
    local t0 t1
    t0=$(date +%s.%N)
    timeout -k 5 "$secs" "$@" > "$X/$name.json" 2> "$X/$name.err"
    local rc=$?
    t1=$(date +%s.%N)
    say "$name rc=$rc wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
}
say "one-gpu-explain-and-recommend $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)"
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' >> "$X/summary.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader >> "$X/summary.txt" 2>&1
# recommend's first launch on a fresh node, as the measure-first path asks for it.
timed quick-1gpu 300 "$DDPCHECK" bench ddp --model gpt2-124m --variants base,accum4,bf16 --gpus 1 --steps 15 --json
# A LLaMA-style decoder from its config.json (a small one: 8 layers of 1024).
cat > "$X/llama-hf-config.json" <<'JSON'
{"model_type": "llama", "num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
 "num_key_value_heads": 4, "intermediate_size": 2816, "vocab_size": 32000,
 "max_position_embeddings": 1024, "tie_word_embeddings": false, "hidden_act": "silu"}
JSON
timed llama-config 200 "$DDPCHECK" bench ddp --model-config "$X/llama-hf-config.json" --variants base,bf16 --gpus 1 --steps 15 --json
timed mlp-in-out 200 "$DDPCHECK" bench ddp --model 'mlp:784->2048x4->10' --micro-batch 256 --variants base,fp16 --gpus 1 --steps 15 --json
timed recommend-one-gpu 60 "$DDPCHECK" recommend --model gpt2-124m --json
tar -C "$OUT" -czf "$OUT/extras.tgz" extras
say "done"
