#!/usr/bin/env bash
# What FSDP2's step-time model reads and is checked against on one GPU:
#   curves    `bench collectives --ops all_gather,reduce_scatter` on the one GPU (at one rank the
#             out-of-place all-gather is a copy on the GPU: the copies FSDP2 makes at world size
#             one), in nccl-tests' text and as JSON;
#   steps     `bench ddp --gpus 1 --plain-reference --variants fsdp-noreshard,fsdp,replicate` on a
#             LLaMA-style decoder preset and on 2 and 4 layers of an 8.7B LLaMA config: each
#             wrapper's step and own work against the plain step of its launch, and fsdp less
#             fsdp-noreshard (the second gather in backward, measured);
#   gloo      `bench ddp --backend gloo` on the GPU (its step times gathered on the CPU).
# The model's prediction against these: commit the reports beside the H100's
# (docs/results/2026-12-06-h100-fsdp2-variants/) and add them to REPORTS in
# core/src/step_time/fsdp_tests.rs, with the machine's one-GPU all_gather_perf.txt of
# capture-field-artifacts.sh (nccl-tests' form, which the test reads; curves-all_gather.json is
# the same curve as ddpcheck measures it, for `recommend --from`); then
# `cargo test -p ddpcheck-core fsdp_tests -- --nocapture` prints predicted against measured.
#
#   bench/experiments/fsdp2-step-time-one-gpu.sh OUTDIR    (about 5 minutes on one H100 or H200)
#   PARTS="curves steps gloo" ...                          (some parts)
#   BUDGET_S=360                                           (no launch starts after it)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch >= 2.6 with fully_shard for PYTHON (bench/lib.sh);
# no network. Writes OUTDIR/curves-OP.{json,txt}, OUTDIR/NAME.json and .stderr (bench ddp's
# reports), backend-gloo.{json,stderr}, summary.txt, and all of it in
# OUTDIR/fsdp2-step-time.tar.gz.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
PARTS=${PARTS:-curves steps gloo}
VARIANTS=fsdp-noreshard,fsdp,replicate
SMALL_LLAMA="decoder:12,1024,16,1024,32000,llama"
big() { echo "decoder:$1,4096,32,2048,32000,llama"; }  # layers of the 8.7B config
BUDGET_S=${BUDGET_S:-360}
SUMMARY=$OUT/summary.txt
{ date -u +%FT%TZ; "$DDPCHECK" --version
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$SUMMARY" 2>&1

late() { # WHAT: true (and said) once the script's budget is spent
    if [ "$SECONDS" -gt "$BUDGET_S" ]; then
        echo "== $1: not run, $SECONDS s of the script's $BUDGET_S s gone" >> "$SUMMARY"
        return 0
    fi
    return 1
}

curves() {
    local op t0
    for op in all_gather reduce_scatter; do
        late "curves $op" && return
        t0=$SECONDS
        timeout 100 "$DDPCHECK" bench collectives --ops "$op" -b 64K -e 1G --deadline 80 \
            > "$OUT/curves-$op.txt" 2> "$OUT/curves-$op.stderr"
        timeout 100 "$DDPCHECK" --json bench collectives --ops "$op" -b 64K -e 1G --deadline 80 \
            > "$OUT/curves-$op.json" 2>> "$OUT/curves-$op.stderr"
        { echo "== curves $op: $((SECONDS - t0)) s"; sed 's/^/  /' "$OUT/curves-$op.txt"
          tail -3 "$OUT/curves-$op.stderr" | sed 's/^/  stderr: /'; } >> "$SUMMARY"
    done
}

steps() { # TAG MODEL MICRO_BATCH DEADLINE
    local tag=$1 model=$2 mb=$3 deadline=$4 t0=$SECONDS
    late "$tag" && return
    timeout $((deadline + 30)) "$DDPCHECK" --json bench ddp --gpus 1 --variants "$VARIANTS" \
        --model "$model" --micro-batch "$mb" --warmup-steps 3 --steps 10 --min-timed-seconds 1 \
        --plain-reference --deadline "$deadline" > "$OUT/$tag.json" 2> "$OUT/$tag.stderr"
    echo "== $tag ($model, micro-batch $mb): rc $?, $((SECONDS - t0)) s" >> "$SUMMARY"
    "$PYTHON" - "$OUT/$tag.json" >> "$SUMMARY" 2>&1 <<'PYEOF'
import json, sys
try:
    runs = {r["variant"]: r for r in json.load(open(sys.argv[1]))["results"]}
except Exception as e:
    print("  no report (%s)" % e); sys.exit()
for v, r in runs.items():
    plain = r["plain_reference"]["step_time_median_s"]
    print("  %-15s step %7.2f ms, plain %7.2f ms, own work %+.2f ms"
          % (v, r["step_time_median_s"] * 1e3, plain * 1e3,
             (r["step_time_median_s"] - plain) * 1e3))
if "fsdp" in runs and "fsdp-noreshard" in runs:
    own = {v: runs[v]["step_time_median_s"] - runs[v]["plain_reference"]["step_time_median_s"]
           for v in ("fsdp", "fsdp-noreshard")}
    print("  the second gather, measured (fsdp's own work less fsdp-noreshard's): %.2f ms"
          % ((own["fsdp"] - own["fsdp-noreshard"]) * 1e3))
PYEOF
}

gloo() {
    late "--backend gloo" && return
    local t0=$SECONDS
    timeout 150 "$DDPCHECK" --json bench ddp --gpus 1 --variants base --backend gloo \
        --model "$SMALL_LLAMA" --micro-batch 8 --warmup-steps 3 --steps 10 --deadline 120 \
        > "$OUT/backend-gloo.json" 2> "$OUT/backend-gloo.stderr"
    { echo "== --backend gloo: rc $?, $((SECONDS - t0)) s"
      tail -2 "$OUT/backend-gloo.stderr" | sed 's/^/  stderr: /'
      "$PYTHON" -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print("  step %.2f ms, recipe %s" % (r["step_time_median_s"] * 1e3, r.get("recipe")))' \
          "$OUT/backend-gloo.json" 2>&1; } >> "$SUMMARY"
}

for part in $PARTS; do
    case $part in
        curves) curves ;;
        steps)
            steps llama-small "$SMALL_LLAMA" 8 150
            steps llama8b-2layers "$(big 2)" 1 120
            steps llama8b-4layers "$(big 4)" 1 120 ;;
        gloo) gloo ;;
        *) die "unknown part $part (curves steps gloo)" ;;
    esac
done
date -u +%FT%TZ >> "$SUMMARY"
tar -czf "$OUT/fsdp2-step-time.tar.gz" -C "$OUT" --exclude fsdp2-step-time.tar.gz . 2>/dev/null
cat "$SUMMARY"
