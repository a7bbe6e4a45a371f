#!/usr/bin/env bash
# Host↔device copy bandwidth on the lent H200 (docs/results/2026-12-01-h200-copy-bandwidth.md):
# `ddpcheck check --json` five times with its host_copies step and five times without it
# (--no-host-copies: the check as it was before the step; also .device/ddpcheck-before, the
# previous release in DDPCHECK_BIN_DIR, where present), interleaved with a plain CUDA copy loop built here
# (copy-bandwidth-h200.cu: pinned memory, the same sizes and counts, cudaEvent timing), then the
# summary: copy bandwidth against the gen x width link the guest reports and against the loop
# (ddpcheck >= 0.97x of it), and check's wall time with and without the step (<= 2 s).
#
#   bench/experiments/does-host-copy-reach-the-link.sh OUTDIR      (about 60 s; needs nvcc, one GPU or more)
#
# Writes OUTDIR/: summary.txt and summary.json (the figures for the page), check-on-N.json,
# check-off-N.json [check-before-N.json], copy-loop-N.jsonl, wall.tsv, env.txt, nvcc.log and the
# stderr of every run (*.err).
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
BEFORE=$DDPCHECK_BIN_DIR/ddpcheck-before
RUNS=${RUNS:-5}

{
    echo "does-host-copy-reach-the-link $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)"
    "$DDPCHECK" --version 2>&1
    nvidia-smi --query-gpu=name,pci.bus_id,driver_version,persistence_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv 2>&1
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
        [ -r "$d/max_link_speed" ] || continue
        echo "$(basename "$d"): current $(cat "$d/current_link_speed") x$(cat "$d/current_link_width"), max $(cat "$d/max_link_speed") x$(cat "$d/max_link_width")"
    done
    grep -c ^processor /proc/cpuinfo | sed 's/^/cpus: /'
    grep -m1 -o hypervisor /proc/cpuinfo || echo "no hypervisor flag"
} > "$OUT/env.txt" 2>&1

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -o "$OUT/copy-loop" "$EXPERIMENTS/copy-bandwidth-h200.cu" > "$OUT/nvcc.log" 2>&1
echo "nvcc rc=$?" >> "$OUT/nvcc.log"

# wall.tsv: run name, exit code, wall seconds of the whole process.
printf 'run\trc\twall_s\n' > "$OUT/wall.tsv"
timed() {
    local name=$1 ext=$2
    shift 2
    local t0 t1 rc
    t0=$(date +%s.%N)
    timeout -k 5 60 "$@" > "$OUT/$name.$ext" 2> "$OUT/$name.err"
    rc=$?
    t1=$(date +%s.%N)
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" >> "$OUT/wall.tsv"
}

# One check first, not counted: the driver's first context after boot is slower than any later.
timed check-warm json "$DDPCHECK" check --json
for i in $(seq 1 "$RUNS"); do
    timed "check-on-$i" json "$DDPCHECK" check --json
    timed "copy-loop-$i" jsonl "$OUT/copy-loop" 1 1 5 1,16,256
    timed "check-off-$i" json "$DDPCHECK" check --json --no-host-copies
    if [ -x "$BEFORE" ]; then
        timed "check-before-$i" json "$BEFORE" check --json
    fi
done

"$PYTHON" "$EXPERIMENTS/summarise-copy-bandwidth.py" "$OUT" > "$OUT/summary.txt" 2> "$OUT/summary.err"
echo "summarise rc=$?" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
