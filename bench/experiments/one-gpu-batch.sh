#!/usr/bin/env bash
# One device call on the lent one-GPU H200: the host-copy bandwidth against a plain CUDA loop
# (does-host-copy-reach-the-link.sh), then the user-model runs against plain torch loops
# (own-models-vs-plain-loop.sh, with the issue's 200.83M LLaMA: FFN=2304), then the daemon's
# idle footprint where its script is present (idle-daemon-footprint.sh), and NCCL Inspector under
# a torch job (nccl-inspector-under-torch.sh; NCCL's source in .fetched/nccl, carried;
# inspector2: two ranks on the one GPU), and the user models' DDP step against the same model
# without DDP in one launch (own-models-plain-reference.sh). Each part under its own time limit;
# each part's folder tarred into OUTDIR (at most 8 files come back).
#
#   bench/experiments/one-gpu-batch.sh OUTDIR [PART...]   (parts: copies models footprint
#                                                          inspector inspector2 plain
#                                                          plainstep plainstep8
#                                                          plainstep6omp1 plainclocks powersgd
#                                                          fabric fsdp2 fsdp2step fsdp2curves
#                                                          resnet50mb curves1 cpuranks;
#                                                          the default three: about 10 minutes)
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
[ $# -ge 1 ] || die "usage: one-gpu-batch.sh OUTDIR [copies] [models] [footprint] [inspector] [inspector2] [plain] [plainstep] [plainstep8] [plainstep6omp1] [plainclocks] [powersgd] [fabric] [fsdp2] [fsdp2step] [fsdp2curves] [resnet50mb] [curves1] [cpuranks]"
out_dir "$1"
shift
PARTS=${*:-copies models footprint}
HERE=$EXPERIMENTS
WORK=$(mktemp -d)
part() { # NAME SECONDS SCRIPT [ENV...]
    local name=$1 limit=$2 script=$3 t0=$SECONDS
    shift 3
    mkdir -p "$WORK/$name"
    if [ -x "$HERE/$script" ] || [ -f "$HERE/$script" ]; then
        env "$@" timeout "$limit" bash "$HERE/$script" "$WORK/$name" > "$WORK/$name/run.log" 2>&1
        echo "$name: rc $? in $((SECONDS - t0)) s" >> "$OUT/parts.txt"
    else
        echo "$name: $script not present" >> "$OUT/parts.txt"
    fi
    tar -C "$WORK" -czf "$OUT/$name.tar.gz" "$name"
}
date -u +%FT%TZ > "$OUT/parts.txt"
for p in $PARTS; do
    case $p in
        copies) part copies 150 does-host-copy-reach-the-link.sh ;;
        models) part models 400 own-models-vs-plain-loop.sh FFN=2304 ;;
        footprint) part footprint 200 idle-daemon-footprint.sh ;;
        inspector) part inspector 170 nccl-inspector-under-torch.sh ;;
        inspector2) part inspector2 150 nccl-inspector-under-torch.sh RANKS=2 ;;
        plain) part plain 400 own-models-plain-reference.sh ;;
        plainstep) part plainstep 330 bench-step-vs-plain-loops.sh MODELS=llama ROUNDS=3 LOOP_OMP1=1 ;;
        plainstep8) part plainstep8 570 bench-step-vs-plain-loops.sh MODELS=llama ROUNDS=8 ;;
        plainstep6omp1) part plainstep6omp1 570 bench-step-vs-plain-loops.sh MODELS=llama ROUNDS=6 LOOP_OMP1=1 ;;
        plainclocks) part plainclocks 330 bench-step-vs-plain-loops.sh MODELS=llama ROUNDS=4 SAMPLE_CLOCKS=1 ;;
        powersgd) part powersgd 250 powersgd-and-levers-one-gpu.sh MODELS="resnet50 llama" ;;
        fabric) part fabric 120 fabric-state-one-gpu.sh ;;
        fsdp2) part fsdp2 480 fsdp2-variants-one-gpu.sh ;;
        fsdp2step) part fsdp2step 400 fsdp2-step-time-one-gpu.sh ;;
        fsdp2curves) part fsdp2curves 150 fsdp2-step-time-one-gpu.sh PARTS=curves ;;
        resnet50mb) part resnet50mb 330 resnet50-micro-batches-one-gpu.sh ;;
        curves1) part curves1 240 one-gpu-collectives-against-nccl-tests.sh ;;
        cpuranks) part cpuranks 560 fsdp2-step-model-cpu-ranks.sh MODELS=small PARTS="curves steps sidebyside" ;;
        *) echo "unknown part $p" >> "$OUT/parts.txt" ;;
    esac
done
cat "$WORK"/*/summary.txt 2>/dev/null
cat "$OUT/parts.txt"
