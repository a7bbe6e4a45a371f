#!/usr/bin/env bash
# Calibration left one model out (bench/accuracy/loo-calibration.py) over every repeated MLP dataset of
# bench/accuracy/fixtures (sessions 3-8 and 10): the table of docs/results/h200x2-session10.md §5.
#
#   scripts/loo-calibration-all.sh [DDPCHECK] [--plain]     (default: target/release/ddpcheck)
set -euo pipefail
cd "$(dirname "$0")/../.."
P=${1:-target/release/ddpcheck}
O=${2:-}
R=bench/accuracy/fixtures
# The folder of a call by its old label.
host() { case $1 in s3) echo 2026-11-30-h200x2-0847;; s4) echo 2026-11-30-h200x2-1031;; s7) echo 2026-11-30-h200x2-1616;; s8) echo 2026-11-30-h200x2-1817;; s10) echo 2026-11-30-h200x2-2243;; esac; }
# REGIME:CURVE:DDP of one call's MLP runs: arg LABEL DIR PREFIX REGIME
arg() { echo "$1:$2/$3-curve-$4.json:$2/$3-mlp-$4.json"; }
run() {
    echo "== $1"
    shift
    python3 bench/accuracy/loo-calibration.py $O "$P" "$@" | grep -E " cases: |^ranking: "
}
run s3 "$(arg s3-nvlink $R/2026-11-30-h200x2-0847/mlprep mlprep nvlink)" "$(arg s3-shm $R/2026-11-30-h200x2-0847/mlprep mlprep shm)"
run s4 "$(arg s4-nvlink $R/2026-11-30-h200x2-1031/mlprep mlprep nvlink)" "$(arg s4-shm $R/2026-11-30-h200x2-1031/mlprep mlprep shm)"
run s5 "$(arg s5-nvlink $R/2026-11-30-h200x2-1213/mlprep5 mlprep5 nvlink)" "$(arg s5-shm $R/2026-11-30-h200x2-1213/mlprep5 mlprep5 shm)"
run s6 "$(arg s6-nvlink $R/2026-11-30-h200x2-1404/mlprep10 mlprep10 nvlink)" "$(arg s6-shm $R/2026-11-30-h200x2-1404/mlprep10 mlprep10 shm)" \
    "$(arg s6-hostnet $R/2026-11-30-h200x2-1404/mlprep8-hostnet mlprep8 hostnet)"
for s in s7 s8 s10; do
    d=$R/$(host $s)/mlprep8
    run "$s" "$(arg "$s-nvlink" "$d" mlprep8 nvlink)" "$(arg "$s-shm" "$d" mlprep8 shm)" "$(arg "$s-hostnet" "$d" mlprep8 hostnet)"
done
