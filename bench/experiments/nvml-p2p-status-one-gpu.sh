#!/usr/bin/env bash
# On a node of one GPU: which P2P statuses does NVML give ddpcheck on a real GPU? `topo --json`,
# `check --json` and `explain --json` each carry topology.p2p (the read status) and
# topology.p2p_status (read, write, atomics and NVLink, each with NVML's reason); with one GPU
# the matrix is the GPU with itself (X: all ok) and no pair. `nvidia-smi topo -p2p` for each
# capability goes beside them, the driver's own words for the same calls. A pair needs two GPUs.
#   bench/experiments/nvml-p2p-status-one-gpu.sh OUTDIR    (or OUT=OUTDIR; default /tmp/ddpcheck-p2p)
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}" /tmp/ddpcheck-p2p
need_bin ddpcheck
new_summary
run() { logged "$OUT" json "$@"; }
say "nvml-p2p-status-one-gpu $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader >> "$SUMMARY" 2>&1
for cap in r w a n; do
    nvidia-smi topo -p2p "$cap" > "$OUT/nvidia-smi-topo-p2p-$cap.txt" 2>&1
    say "nvidia-smi topo -p2p $cap rc=$?"
done
run topo 60 "$DDPCHECK" topo --json
run check 120 "$DDPCHECK" check --json
run explain 180 "$DDPCHECK" explain --json
# The statuses each report carries, one line per report.
for name in topo check explain; do
    "$PYTHON" - "$OUT/$name.json" "$name" >> "$SUMMARY" 2>&1 <<'PY'
import json, sys
path, name = sys.argv[1], sys.argv[2]
try:
    t = json.load(open(path)).get("topology") or {}
except (OSError, ValueError) as e:
    print(f"{name}: unreadable: {e}")
    sys.exit(0)
print(f"{name}: p2p={t.get('p2p')} p2p_status={t.get('p2p_status')}")
PY
done
say "done"
