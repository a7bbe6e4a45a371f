#!/usr/bin/env bash
# Eager against compiled training on one GPU: `ddpcheck bench ddp --gpus 1 --plain-reference` on
# torchvision resnet50, timm vit_base_patch16_224 and a LLaMA-style decoder from its Hugging Face
# config (the models of own-models-plain-reference.sh), each eager and with `--compile`
# (torch.compile after DDP, DDPOptimizer); resnet50 compiled a second time to show the compile
# cache kept across launches. Per model: the step in DDP and without DDP (DDP's own work), the
# compile time (outside every timed step) and the warm-up steps until steady.
#
#   bench/experiments/eager-vs-compiled-one-gpu.sh OUTDIR      (about 8 minutes on one H200)
#   MODELS="resnet50 llama" MODE=max-autotune ...               (some models; another mode)
#
# The compile cache starts empty in a folder of its own (XDG_CACHE_HOME, under /tmp, not OUTDIR:
# it is large), so the first compiled launch of each model is a cold compile.
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch >= 2.0, torchvision, timm, transformers for PYTHON
# (bench/lib.sh); no network. Writes OUTDIR/NAME-eager.json, NAME-compiled.json (bench ddp's
# reports), resnet50-compiled-again.json, their stderr, and summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
MODE=${MODE:-default}
CACHE=$(mktemp -d /tmp/ddpcheck-compile-cache.XXXXXX) || die "cannot make a cache folder"
trap 'rm -rf "$CACHE"' EXIT
export XDG_CACHE_HOME=$CACHE
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR CUDA_CACHE_PATH
LLAMA="hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=2304,num_attention_heads=16,num_key_value_heads=16"
SUMMARY=$OUT/summary.txt
{ date -u +%FT%TZ; "$DDPCHECK" --version; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  "$PYTHON" -c 'import torch, torchvision, timm, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", transformers.__version__, "optimize_ddp", torch._dynamo.config.optimize_ddp)'; } > "$SUMMARY" 2>&1

one() { # TAG MODEL MICRO_BATCH [--compile ...]
    local tag=$1 model=$2 mb=$3 t0=$SECONDS
    shift 3
    "$DDPCHECK" --json bench ddp --gpus 1 --variants base --model "$model" --micro-batch "$mb" \
        --warmup-steps 5 --steps 20 --min-timed-seconds 2 --plain-reference --deadline 240 "$@" \
        > "$OUT/$tag.json" 2> "$OUT/$tag.stderr"
    local rc=$?
    "$PYTHON" - "$OUT/$tag.json" "$tag" "$rc" $((SECONDS - t0)) >> "$SUMMARY" 2>&1 <<'PYEOF'
import json, sys
path, tag, rc, secs = sys.argv[1:5]
try:
    r = json.load(open(path))["results"][0]
except Exception as e:
    print("%s: bench rc %s, %s s: no figures (%s)" % (tag, rc, secs, e)); sys.exit()
pl = r.get("plain_reference") or {}
plain = pl.get("step_time_median_s")
ratios = sorted(d / p for d, p in pl.get("rounds", []))
own = ratios[len(ratios) // 2] - 1 if ratios else float("nan")
c = r.get("compile") or {}
comp = ("compile %s s (without DDP %s s), %s warm-up steps, steady %s, DDPOptimizer %s, error %s"
        % (c.get("compile_s"), c.get("plain_compile_s"), c.get("warmup_steps"), c.get("steady"),
           c.get("ddp_optimizer"), c.get("error")) if c else "eager")
print("%s: rc %s, %s s wall; step in DDP %.2f ms, without DDP %s ms, DDP's own work %+.1f%% (median of %d rounds); %s"
      % (tag, rc, secs, r["step_time_median_s"] * 1e3, "%.2f" % (plain * 1e3) if plain else "-",
         own * 100, len(ratios), comp))
PYEOF
}

MODELS=${MODELS:-resnet50 vit_base llama}
for m in $MODELS; do
    case $m in
        resnet50) args=(torchvision:resnet50 64) ;;
        vit_base) args=(timm:vit_base_patch16_224 64) ;;
        llama) args=("$LLAMA" 8) ;;
        *) die "unknown model $m (resnet50, vit_base, llama)" ;;
    esac
    one "$m-eager" "${args[@]}"
    one "$m-compiled" "${args[@]}" --compile-mode "$MODE"
    # The same compile again, from the cache the first one left (its compile time, not its step,
    # is the question).
    if [ "$m" = resnet50 ]; then one "$m-compiled-again" "${args[@]}" --compile-mode "$MODE"; fi
done
echo "compile cache after the runs: $(du -sh "$CACHE" 2>/dev/null | cut -f1)" >> "$SUMMARY"
for f in "$OUT"/*-compiled*.json; do
    "$DDPCHECK" bench ddp --from "$f" 2>&1 | grep -E "compiled \(torch.compile|torch.compile .*failed" >> "$SUMMARY"
done
date -u +%FT%TZ >> "$SUMMARY"
cat "$SUMMARY"
