#!/usr/bin/env bash
# FSDP2's step-time model against launches between CPU ranks over gloo (no GPU): what the model
# reads and what it is checked against, measured on one quiet machine in one run:
#   curves    `bench collectives --device cpu --ranks 2`: all_reduce, all_gather and
#             reduce_scatter between two CPU ranks, as FSDP2 calls them (JSON and text);
#   steps     `bench ddp --device cpu --gpus 1,2 --amp none --repeats 2` of fsdp-noreshard, fsdp,
#             replicate and nocomm on two LLaMA-style decoders: each wrapper's step at one rank
#             against the plain step of its launch (its own work), and at two ranks;
#   sidebyside `bench ddp --device cpu --gpus 2 --variants nocomm --repeats 4` on both decoders:
#             two ranks side by side against one alone inside the same launches, launched
#             often enough for its noise bound to tell a slowdown of a few percent;
#   ddp       `bench ddp --device cpu --gpus 1,2 --variants base --repeats 2` on the larger
#             decoder: plain DDP beside the wrappers, so that `recommend --device cpu --from`
#             these reports weighs them without a launch (cli/tests/which_wrapper_cpu.rs).
# core/src/step_time/fsdp_cpu_tests.rs predicts each wrapper's step at two ranks from the plain
# step, its own work at one rank and the curves, against the measured step; commit the reports
# to docs/results/DATE-cpu2-fsdp2-step-model/ and cite them there.
#
#   bench/experiments/fsdp2-step-model-cpu-ranks.sh OUTDIR   (about 20 minutes on 2 cores)
#   PARTS="curves steps sidebyside ddp" ...                  (some parts)
#   MODELS=small ...                                         (the smaller decoder only)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and, for PYTHON (bench/lib.sh), a torch with FSDP2's
# fully_shard and replicate() (torch 2.11 has both) and gloo's all_gather_into_tensor and
# reduce_scatter_tensor; Debian's torch 1.13 has neither. Nothing else may run on the machine.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
new_summary
PARTS=${PARTS:-curves steps sidebyside ddp}
MODELS=${MODELS:-small large}
SMALL="decoder:4,256,4,128,1000,llama"
LARGE="decoder:6,512,8,128,4000,llama"
has() { case " $MODELS " in *" $1 "*) return 0 ;; esac; return 1; }
VARIANTS=fsdp-noreshard,fsdp,replicate,nocomm
{ date -u +%FT%TZ; "$DDPCHECK" --version; nproc; grep -m1 'model name' /proc/cpuinfo
  grep -m1 'flags' /proc/cpuinfo | grep -o -w 'hypervisor\|avx512_bf16\|amx_bf16' | tr '\n' ' '; echo
  "$PYTHON" -c 'import torch; print("torch", torch.__version__)'; } >> "$SUMMARY" 2>&1

curves() {
    logged "$OUT" json curves-cpu2 300 "$DDPCHECK" --json bench collectives --device cpu \
        --ranks 2 --ops all_reduce,all_gather,reduce_scatter -b 64K -e 256M -n 10 -w 3 \
        --deadline 280
    logged "$OUT" txt curves-cpu2 300 "$DDPCHECK" bench collectives --device cpu \
        --ranks 2 --ops all_reduce,all_gather,reduce_scatter -b 64K -e 256M -n 10 -w 3 \
        --deadline 280
}

steps() { # TAG MODEL MICRO_BATCH
    logged "$OUT" json "$1" 900 "$DDPCHECK" --json bench ddp --device cpu --gpus 1,2 --amp none \
        --variants "$VARIANTS" --model "$2" --micro-batch "$3" --warmup-steps 3 --steps 12 \
        --repeats 2 --deadline 400
    "$PYTHON" - "$OUT/$1.json" >> "$SUMMARY" 2>&1 <<'PYEOF'
import json, sys
try:
    results = json.load(open(sys.argv[1]))["results"]
except Exception as e:
    print("  no report (%s)" % e); sys.exit()
for r in results:
    plain = (r.get("plain_reference") or {}).get("step_time_median_s")
    print("  %-15s %d rank(s): step %8.2f ms%s, launches %s"
          % (r["variant"], r["world_size"], r["step_time_median_s"] * 1e3,
             ", plain %8.2f ms" % (plain * 1e3) if plain else "",
             ["%.2f" % (t * 1e3) for t in r.get("launch_step_medians_s", [])]))
PYEOF
}

sidebyside() { # TAG MODEL MICRO_BATCH
    logged "$OUT" json "$1-nocomm" 900 "$DDPCHECK" --json bench ddp --device cpu --gpus 2 \
        --amp none --variants nocomm --model "$2" --micro-batch "$3" --warmup-steps 3 \
        --steps 12 --repeats 4 --deadline 400
}

ddp() { # TAG MODEL MICRO_BATCH
    logged "$OUT" json "$1-ddp" 900 "$DDPCHECK" --json bench ddp --device cpu --gpus 1,2 \
        --amp none --variants base --model "$2" --micro-batch "$3" --warmup-steps 3 --steps 12 \
        --repeats 2 --deadline 400
}

for part in $PARTS; do
    case $part in
        curves) curves ;;
        steps)
            has small && steps decoder-4x256 "$SMALL" 4
            has large && steps decoder-6x512 "$LARGE" 2 ;;
        sidebyside)
            has small && sidebyside decoder-4x256 "$SMALL" 4
            has large && sidebyside decoder-6x512 "$LARGE" 2 ;;
        ddp) has large && ddp decoder-6x512 "$LARGE" 2 ;;
        *) die "unknown part $part (curves steps sidebyside ddp)" ;;
    esac
done
date -u +%FT%TZ >> "$SUMMARY"
cat "$SUMMARY"
