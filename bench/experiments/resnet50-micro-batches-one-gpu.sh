#!/usr/bin/env bash
# resnet50 on one GPU at three micro-batches under DDP and FSDP2's wrappers, each run reading one
# step at its phases (`memory_phases`): does a wrapper's activations measured at one micro-batch,
# scaled linearly, predict its peak at another within 10%? Each `memory` call takes the first
# --from report's phases for every wrapper (the other micro-batch) and checks every run at the
# micro-batch it ran ("from measured" in memory-FROM-to-TO.txt).
#
#   bench/experiments/resnet50-micro-batches-one-gpu.sh OUTDIR   (about 4 minutes on one H100)
#   MICRO_BATCHES="32 64 128" VARIANTS=base,replicate,fsdp,fsdp-noreshard   (the defaults)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR, torch >= 2.6 with fully_shard and torchvision for PYTHON
# (bench/lib.sh); no network. Writes OUTDIR/resnet50-mbN.{json,stderr}, memory-mbA-to-mbB.txt
# and summary.txt. Read the "from measured" column of each memory-*.txt: the runs of the second
# report predicted from the first report's phases, scaled.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
MICRO_BATCHES=${MICRO_BATCHES:-32 64 128}
VARIANTS=${VARIANTS:-base,replicate,fsdp,fsdp-noreshard}
new_summary
say "$(date -u +%FT%TZ) $("$DDPCHECK" --version)"
for mb in $MICRO_BATCHES; do
    logged "$OUT" json "resnet50-mb$mb" 240 "$DDPCHECK" --json bench ddp --gpus 1 \
        --model torchvision:resnet50 --variants "$VARIANTS" --micro-batch "$mb" \
        --warmup-steps 3 --steps 10 --min-timed-seconds 1 --deadline 200
done
for from in $MICRO_BATCHES; do
    for to in $MICRO_BATCHES; do
        [ "$from" = "$to" ] && continue
        a=$OUT/resnet50-mb$from.json b=$OUT/resnet50-mb$to.json
        if ! [ -s "$a" ] || ! [ -s "$b" ]; then continue; fi
        logged "$OUT" txt "memory-mb$from-to-mb$to" 60 "$DDPCHECK" memory \
            --model torchvision:resnet50 --micro-batch "$to" --gpu-memory-gib 80 \
            --from "$a" --from "$b"
        sed -n '/Against/,/holds within/p' "$OUT/memory-mb$from-to-mb$to.txt" >> "$SUMMARY"
    done
done
