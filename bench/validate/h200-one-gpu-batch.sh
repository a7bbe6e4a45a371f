#!/usr/bin/env bash
# One device call on the lent one-GPU H200: the host-copy bandwidth against a plain CUDA loop
# (copy-bandwidth-h200.sh), then the user-model runs against plain torch loops
# (own-models-h200.sh, with the issue's 200.83M LLaMA: FFN=2304), then the daemon's idle
# footprint where its script is present (daemon-footprint.sh), and NCCL Inspector under a torch
# job (nccl-inspector-h200.sh; NCCL's source in .fetched/nccl, carried; inspector2: two ranks on
# the one GPU), and the user models' DDP step against the same model without DDP in one launch
# (own-models-plain-h200.sh). Each part under its own time
# limit; each part's folder tarred into OUTDIR (at most 8 files come back).
#
#   bench/validate/h200-one-gpu-batch.sh OUTDIR [PART...]   (parts: copies models footprint inspector
#                                                            inspector2 plain;
#                                                            all three: about 10 minutes)
set -uo pipefail
OUT=${1:?usage: h200-one-gpu-batch.sh OUTDIR [copies] [models] [footprint] [inspector] [inspector2] [plain]}
shift
PARTS=${*:-copies models footprint}
HERE=$(cd "$(dirname "$0")" && pwd)
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
        copies) part copies 150 copy-bandwidth-h200.sh ;;
        models) part models 400 own-models-h200.sh FFN=2304 ;;
        footprint) part footprint 200 daemon-footprint.sh ;;
        inspector) part inspector 170 nccl-inspector-h200.sh ;;
        inspector2) part inspector2 150 nccl-inspector-h200.sh RANKS=2 ;;
        plain) part plain 400 own-models-plain-h200.sh ;;
        *) echo "unknown part $p" >> "$OUT/parts.txt" ;;
    esac
done
cat "$WORK"/*/summary.txt 2>/dev/null
cat "$OUT/parts.txt"
