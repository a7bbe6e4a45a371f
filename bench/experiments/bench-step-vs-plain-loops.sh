#!/usr/bin/env bash
# Where a 1-GPU `bench ddp` step of a user's model differs from a plain torch loop: for
# torchvision resnet50 (batch 64) and the 200.8M LLaMA from its config (batch 8 x 1024), ROUNDS
# interleaved rounds of `ddpcheck bench ddp --gpus 1 --variants base`, plain-loop.py (no DDP)
# and plain-loop.py --ddp (the same loop with the model in DDP on one rank, as bench ddp runs it),
# each its own launch, the same steps. Writes OUTDIR/NAME-rR-{bench,plain,ddp}.json and summary.txt.
#
#   bench/experiments/bench-step-vs-plain-loops.sh OUTDIR      (about 7 minutes with ROUNDS=2)
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
ROUNDS=${ROUNDS:-2}
LLAMA="hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=2304,num_attention_heads=16,num_key_value_heads=16"
date -u +%FT%TZ > "$OUT/summary.txt"
for r in $(seq 1 "$ROUNDS"); do
    for m in "resnet50 torchvision:resnet50 64 64" "llama $LLAMA 8 40"; do
        read -r name model mb steps <<< "$m"
        "$DDPCHECK" --json bench ddp --gpus 1 --variants base --model "$model" --micro-batch "$mb" \
            --warmup-steps 10 --steps "$steps" --deadline 300 > "$OUT/$name-r$r-bench.json" 2> "$OUT/$name-r$r-bench.err"
        "$PYTHON" "$EXPERIMENTS/plain-loop.py" --model "$model" --micro-batch "$mb" --steps "$steps" \
            --warmup 10 > "$OUT/$name-r$r-plain.json" 2> "$OUT/$name-r$r-plain.err"
        "$PYTHON" "$EXPERIMENTS/plain-loop.py" --model "$model" --micro-batch "$mb" --steps "$steps" \
            --warmup 10 --ddp > "$OUT/$name-r$r-ddp.json" 2> "$OUT/$name-r$r-ddp.err"
        "$PYTHON" - "$OUT" "$name" "$r" >> "$OUT/summary.txt" 2>&1 <<'PYEOF'
import json, sys
out, name, r = sys.argv[1:]
f = lambda k: json.load(open("%s/%s-r%s-%s.json" % (out, name, r, k)))
b, p, d = f("bench")["results"][0]["step_time_median_s"], f("plain")["step_time_median_s"], f("ddp")["step_time_median_s"]
print("%s round %s: bench ddp %.5f s, plain %.5f s, plain+DDP %.5f s; bench/plain %.4f, bench/(plain+DDP) %.4f, DDP's own %.4f"
      % (name, r, b, p, d, b / p, b / d, d / p))
PYEOF
    done
done
cat "$OUT/summary.txt"
