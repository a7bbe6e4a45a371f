#!/usr/bin/env bash
# Is the 1-GPU plain step of `bench ddp` (the reference every speedup rests on: the model
# without DDP, timed in the 1-GPU launch interleaved with its DDP step) within 3% of a plain
# torch loop timed independently in the same call? For torchvision resnet50 (batch 64), timm
# vit_base_patch16_224 (batch 64) and the 200.8M LLaMA from its config (batch 8 x 1024), ROUNDS
# rounds of `ddpcheck bench ddp --gpus 1 --variants base` (the plain reference is the default)
# and plain-loop.py (no DDP) in its own launch, the same steps; with DDP_LOOP=1 also
# plain-loop.py --ddp (the loop with the model in DDP on one rank).
#
# Per model and round, summary.txt gives the reference step (the DDP step over ddp_over_plain,
# the median of the rounds' ratios: what the speedups rest on), the plain blocks' median, the
# loop's step, the ratio bench-plain/plain-loop and whether it is within 3%; its last lines, per
# model, the medians of the call's rounds and their ratio.
#
#   bench/experiments/bench-step-vs-plain-loops.sh OUTDIR   (ROUNDS=1: about 4 minutes on one H200)
#   MODELS="resnet50 llama" ROUNDS=2 DDP_LOOP=1 ...          (some models; more rounds; the DDP loop)
#   LOOP_OMP1=1 ...                                          (the loop again with OMP_NUM_THREADS=1)
#   SAMPLE_CLOCKS=1 ...                                      (the GPU's SM clock, power, temperature
#                                                             and clock-event reasons every 100 ms
#                                                             into OUTDIR/gpu-clocks.csv, to line
#                                                             up with the loop's step times)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch, torchvision, timm, transformers for PYTHON
# (bench/lib.sh); no network. Writes OUTDIR/NAME-rR-{bench,plain[,ddp]}.json, their stderr, and
# summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
ROUNDS=${ROUNDS:-1}
MODELS=${MODELS:-resnet50 vit_base llama}
DDP_LOOP=${DDP_LOOP:-0}
LOOP_OMP1=${LOOP_OMP1:-0}
SAMPLE_CLOCKS=${SAMPLE_CLOCKS:-0}
LLAMA="hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=2304,num_attention_heads=16,num_key_value_heads=16"
SUMMARY=$OUT/summary.txt
{ date -u +%FT%TZ; "$DDPCHECK" --version; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  "$PYTHON" -c 'import torch, torchvision, timm, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", transformers.__version__)'; } > "$SUMMARY" 2>&1

if [ "$SAMPLE_CLOCKS" = 1 ]; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv,nounits -lms 100 > "$OUT/gpu-clocks.csv" 2> "$OUT/gpu-clocks.err" &
    sampler=$!
    trap 'kill "$sampler" 2>/dev/null' EXIT
fi

for r in $(seq 1 "$ROUNDS"); do
    for m in $MODELS; do
        case $m in
            resnet50) model=torchvision:resnet50 mb=64 steps=64 ;;
            vit_base) model=timm:vit_base_patch16_224 mb=64 steps=64 ;;
            llama) model=$LLAMA mb=8 steps=40 ;;
            *) die "unknown model $m (resnet50, vit_base, llama)" ;;
        esac
        t0=$SECONDS
        bench() {
            "$DDPCHECK" --json bench ddp --gpus 1 --variants base --model "$model" --micro-batch "$mb" \
                --warmup-steps 10 --steps "$steps" --reference plain --deadline 240 \
                > "$OUT/$m-r$r-bench.json" 2> "$OUT/$m-r$r-bench.err"
        }
        loop() { # KIND [ENV...]: plain-loop.py in its own launch, under the environment given
            local kind=$1
            shift
            env "$@" "$PYTHON" "$EXPERIMENTS/plain-loop.py" --model "$model" --micro-batch "$mb" \
                --steps "$steps" --warmup 10 > "$OUT/$m-r$r-$kind.json" 2> "$OUT/$m-r$r-$kind.err"
        }
        # Even rounds run the loop first, so neither side always follows the other.
        if [ $((r % 2)) = 1 ]; then bench; loop plain; else loop plain; bench; fi
        # LOOP_OMP1=1: the loop again with one OpenMP thread, as the benchmark's launch sets it.
        if [ "$LOOP_OMP1" = 1 ]; then loop plain-omp1 OMP_NUM_THREADS=1; fi
        if [ "$DDP_LOOP" = 1 ]; then
            "$PYTHON" "$EXPERIMENTS/plain-loop.py" --model "$model" --micro-batch "$mb" --steps "$steps" \
                --warmup 10 --ddp > "$OUT/$m-r$r-ddp.json" 2> "$OUT/$m-r$r-ddp.err"
        fi
        "$PYTHON" "$EXPERIMENTS/summarise-plain-vs-loop.py" round "$OUT" "$m" "$r" $((SECONDS - t0)) >> "$SUMMARY" 2>&1
    done
done
# Over the call: per model, the medians of the rounds' references and loops.
# shellcheck disable=SC2086  # MODELS is a list of names
"$PYTHON" "$EXPERIMENTS/summarise-plain-vs-loop.py" call "$OUT" $MODELS >> "$SUMMARY" 2>&1
date -u +%FT%TZ >> "$SUMMARY"
cat "$SUMMARY"
