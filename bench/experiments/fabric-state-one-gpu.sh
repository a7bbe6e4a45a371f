#!/usr/bin/env bash
# What does ddpcheck read live of the GPUs' NVLink fabric registration, beside the driver's own
# words? `explain --json`'s platform.fabric.gpu_state (NVML's nvmlDeviceGetGpuFabricInfoV, else
# nvmlDeviceGetGpuFabricInfo; absent where NVML answers NOT_SUPPORTED) and its causes of kind
# fabric_manager_down, beside `nvidia-smi -q`'s Fabric section (State, Status, CliqueId,
# ClusterUUID, and Health where the driver prints it). On an H100/H200 of an NVSwitch system the
# state should read Completed with status Success; on a PCIe card or a VM slice without the
# fabric, no gpu_state and `N/A` from nvidia-smi. One GPU is enough.
#   bench/experiments/fabric-state-one-gpu.sh OUTDIR    (or OUT=OUTDIR; default /tmp/ddpcheck-fabric)
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}" /tmp/ddpcheck-fabric
need_bin ddpcheck
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say "fabric-state-one-gpu $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader >> "$SUMMARY" 2>&1
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
say "nvidia-smi -q rc=$?"
{
    echo "--- nvidia-smi -q | grep -A3 -i fabric"
    grep -A3 -i fabric "$OUT/nvidia-smi-q.txt"
    echo "--- nvidia-smi -q: the Fabric section whole (Health included where printed)"
    awk '/^ +Fabric$/ {on=1; ind=match($0, /[^ ]/); print; next}
         on && match($0, /[^ ]/) <= ind {on=0}
         on {print}' "$OUT/nvidia-smi-q.txt"
} >> "$SUMMARY" 2>&1
timeout -k 5 300 "$DDPCHECK" explain --json > "$OUT/explain.json" 2> "$OUT/explain.err"
say "ddpcheck explain rc=$?"
"$PYTHON" - "$OUT/explain.json" >> "$SUMMARY" 2>&1 <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"explain: unreadable: {e}")
    sys.exit(0)
fabric = (r.get("platform") or {}).get("fabric") or {}
print("--- ddpcheck explain: platform.fabric")
print(json.dumps(fabric, indent=2))
causes = [c for c in r.get("causes") or [] if c.get("kind") == "fabric_manager_down"]
print(f"--- ddpcheck explain: fabric_manager_down causes: {len(causes)}")
for c in causes:
    print(f"{c.get('severity')} {c.get('action')}: {c.get('message')}")
print(f"verdict {r.get('verdict')}")
PY
cat "$SUMMARY"
