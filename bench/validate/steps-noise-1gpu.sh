#!/usr/bin/env bash
# Does timing more steps steady a one-GPU launch of a short-step model? On one GPU: ROUNDS
# rounds, each a launch of 20 timed steps and a launch of LONG_STEPS timed steps (about 2-4 s
# of steps for these MLPs), interleaved so drift hits both alike; then each configuration's
# launch-to-launch spread. These are the 1-GPU inputs a fresh node's `recommend` measures (its
# quick runs time 15-20 steps). Everything under $OUT; logs tarred to $OUT/steps-noise.tgz after
# every round, so a run cut at a time limit keeps what it measured.
#
#   OUT=/tmp/out ROUNDS=6 bash bench/validate/steps-noise-1gpu.sh
#
# Binaries come from .device/ (release builds copied there; not committed), or DDPCHECK_BIN_DIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ddpcheck-steps-noise}
X=$OUT/steps-noise
mkdir -p "$X"
DDPCHECK=${DDPCHECK_BIN_DIR:-$PWD/.device}/ddpcheck
ROUNDS=${ROUNDS:-6}
LONG_STEPS=${LONG_STEPS:-1000}
SWEEP=${SWEEP:-mlp:1024,4352}
VARIANTS=${VARIANTS:-base,fp16}
# NVLink multicast must stay off on shared machines: in every program we start.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
say() { echo "$*" | tee -a "$X/summary.txt"; }
launch() {
    local name=$1 steps=$2 t0 t1 rc
    t0=$(date +%s.%N)
    timeout -k 5 240 "$DDPCHECK" bench ddp --sweep "$SWEEP" --variants "$VARIANTS" --gpus 1 \
        --warmup-steps 5 --steps "$steps" --json > "$X/$name.json" 2> "$X/$name.err"
    rc=$?
    t1=$(date +%s.%N)
    say "$name steps=$steps rc=$rc wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
}
say "steps-noise-1gpu $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) rounds=$ROUNDS long=$LONG_STEPS sweep=$SWEEP variants=$VARIANTS"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >> "$X/summary.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.max.sm --format=csv,noheader >> "$X/summary.txt" 2>&1
"$DDPCHECK" --version >> "$X/summary.txt" 2>&1
for r in $(seq 1 "$ROUNDS"); do
    # Alternate which goes first, so neither always follows the other.
    if [ $((r % 2)) -eq 1 ]; then
        launch "short-$r" 20
        launch "long-$r" "$LONG_STEPS"
    else
        launch "long-$r" "$LONG_STEPS"
        launch "short-$r" 20
    fi
    tar -C "$OUT" -czf "$OUT/steps-noise.tgz" steps-noise
done
python3 - "$X" <<'PY' | tee -a "$X/summary.txt"
import glob, json, os, statistics, sys
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*-*.json"))):
    arm = os.path.basename(path).split("-")[0]
    try:
        results = json.load(open(path))["results"]
    except Exception as e:
        print("unreadable", path, e)
        continue
    for r in results:
        rows.setdefault((r["model"], r["variant"], arm), []).append(r["step_time_median_s"] * 1e3)
print("model        variant arm    n  median ms  spread   sd/median  launch medians ms")
for (model, variant, arm), xs in sorted(rows.items()):
    med = statistics.median(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else float("nan")
    print("%-12s %-7s %-5s %2d  %8.3f  %6.1f%%  %8.1f%%   %s" % (
        model, variant, arm, len(xs), med, 100 * (max(xs) - min(xs)) / med, 100 * sd / med,
        " ".join("%.3f" % x for x in xs)))
PY
tar -C "$OUT" -czf "$OUT/steps-noise.tgz" steps-noise
say "done"
