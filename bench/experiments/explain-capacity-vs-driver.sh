#!/usr/bin/env bash
# The physical capacity `ddpcheck explain` sets each pair against, beside what the driver itself
# reports on the same machine: PCIe generation and width (nvidia-smi, sysfs, under load and at
# rest) and NVLink per-link speed (`nvidia-smi nvlink -s`), so a person can check the rates of
# docs/explain.md ("Physical capacity") against the hardware. Works on any GPU count: with one
# GPU there is no pair (explain's node and GPU causes only), with two or more each pair carries
# `capacity`, and with three or more `node` too.
#
#   bench/experiments/explain-capacity-vs-driver.sh OUTDIR     # about 1-2 minutes on 2xH200
#
#   DDPCHECK_SIM=a6000x4-phb bench/experiments/explain-capacity-vs-driver.sh /tmp/cap   # without GPUs
#
# Writes OUTDIR/summary.txt (rc of every step and the extracted capacities), OUTDIR/logs/*.
# Binaries come from DDPCHECK_BIN_DIR (bench/lib.sh). Every step has a timeout: it never hangs.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
make_logs
new_summary
run() { logged "$LOGS" txt "$@"; }
fact() { raw_fact "$LOGS" "$1" 15 "${*:2}"; }

say "explain-capacity-vs-driver $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)"
fact smi-pcie 'nvidia-smi --query-gpu=index,name,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv'
fact smi-nvlink 'nvidia-smi nvlink -s'
fact smi-topo 'nvidia-smi topo -m'
# shellcheck disable=SC2016  # the text is a command for fact's bash -c, which expands it
fact sysfs-links 'for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor 2>/dev/null)" = 0x10de ] && [ "$(cat $d/class 2>/dev/null | cut -c1-4)" = 0x03 ] && echo "$d $(cat $d/current_link_speed) x$(cat $d/current_link_width) max $(cat $d/max_link_speed) x$(cat $d/max_link_width)"; done'
if [ ! -x "$DDPCHECK" ]; then
    say "no ddpcheck binary at $DDPCHECK"
    exit 0
fi
SIM=()
[ -n "${DDPCHECK_SIM:-}" ] && SIM=(--sim "$DDPCHECK_SIM")
run version 10 "$DDPCHECK" --version
run explain-ab-json 240 "$DDPCHECK" "${SIM[@]}" explain --ab --json
run explain-ab-text 240 "$DDPCHECK" "${SIM[@]}" explain --ab
# The capacities and fractions explain reported, one line each, for the summary.
if command -v "$PYTHON" > /dev/null; then
    timeout 10 "$PYTHON" - "$LOGS/explain-ab-json.txt" >> "$SUMMARY" 2>&1 <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:  # a failed run leaves no JSON: say so, do not fail
    print(f"no explain JSON: {e}")
    sys.exit(0)
print("reason:", r.get("reason"))
for g in r.get("platform", {}).get("gpus", []):
    print("link", g.get("pci_bus_id"), "at rest", g.get("link"), "under load", g.get("link_under_load"))
for p in r.get("pairs", []):
    c = p.get("capacity") or {}
    print(f"pair {p['a']['index']}-{p['b']['index']} {p['link']}: busbw {p.get('busbw_gbps')} "
          f"capacity {c.get('path')} {c.get('gbps')} GB/s fraction {c.get('fraction')} ({c.get('reading')})")
n = r.get("node")
if n:
    c = n.get("capacity") or {}
    print(f"node busbw {n.get('busbw_gbps')} capacity {c.get('path')} {c.get('gbps')} fraction {c.get('fraction')}")
PY
fi
say "done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
