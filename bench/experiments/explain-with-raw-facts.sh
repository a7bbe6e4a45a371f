#!/usr/bin/env bash
# `ddpcheck explain` on a GPU machine (the lent one-GPU H200 VM, or any node), with the raw
# platform facts it judges, for a person to compare: everything goes under $OUT, logs tarred to
# $OUT/logs.tgz. Every step has a timeout, so the script never hangs; it needs no lspci (it reads
# sysfs and procfs) and works with one GPU (no pairs: node and GPU causes only).
#
#   bench/experiments/explain-with-raw-facts.sh OUTDIR      (or OUT=OUTDIR; default /tmp/ddpcheck-explain)
#   DDPCHECK_SIM=h200x2-nvlink+vm bench/experiments/explain-with-raw-facts.sh   # try it without GPUs
#
# Binaries come from DDPCHECK_BIN_DIR (bench/lib.sh).
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}" /tmp/ddpcheck-explain
make_logs
new_summary
# run NAME SECONDS CMD...: output to logs/NAME.txt, stderr to logs/NAME.err, rc in the summary.
run() { logged "$LOGS" txt "$@"; }
# fact NAME CMD...: a raw fact, never more than 10 s.
fact() { raw_fact "$LOGS" "$1" 10 "${*:2}"; }

say "explain-with-raw-facts $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) sim=${DDPCHECK_SIM:-none}"
if [ ! -x "$DDPCHECK" ]; then
    say "no ddpcheck binary at $DDPCHECK"
else
    run version 10 "$DDPCHECK" --version
    run explain-json 300 "$DDPCHECK" explain --json
    run explain-text 300 "$DDPCHECK" explain
    run explain-ab 300 "$DDPCHECK" explain --ab --json
    run check-json 120 "$DDPCHECK" check --json
    run topo 60 "$DDPCHECK" topo
fi

# The raw facts the explainer reads, to compare with what it says.
fact hypervisor 'grep -m1 -o -w hypervisor /proc/cpuinfo; grep -m1 "^flags" /proc/cpuinfo'
fact cmdline 'cat /proc/cmdline'
# shellcheck disable=SC2016  # the text is a command for fact's bash -c, which expands it
fact iommu-groups 'ls /sys/kernel/iommu_groups 2>&1 | head -50; for t in /sys/kernel/iommu_groups/*/type; do [ -e "$t" ] && echo "$t: $(cat "$t")"; done; ls /sys/class/iommu 2>&1'
fact dmesg-iommu 'dmesg 2>/dev/null | grep -i -E "iommu|dmar|amd-vi" | head -40'
fact dmi 'cat /sys/class/dmi/id/sys_vendor /sys/class/dmi/id/product_name 2>&1; cat /sys/hypervisor/type 2>&1'
fact nvswitch 'ls /proc/driver/nvidia-nvswitch/devices /dev/nvidia-nvswitch* 2>&1; grep -l -x nv-fabricmanager /proc/[0-9]*/comm 2>/dev/null | head'
fact nvidia-smi 'nvidia-smi -q 2>&1 | grep -i -E -A3 "Bus Id|PCIe Generation|Link Width|Fabric|MIG Mode|NUMA" | head -120'
fact nvidia-smi-topo 'nvidia-smi topo -m 2>&1'
fact nvidia-smi-nvlink 'nvidia-smi nvlink -s 2>&1 | head -60'
# Each GPU's sysfs: its real path up to the host bridge, NUMA node, link, IOMMU group, and the
# head of every bridge's config space (xxd or od: no lspci there).
# EXPLAIN_BUS_IDS names other devices (to try the walk where nvidia-smi is absent).
BUSES=${EXPLAIN_BUS_IDS:-$(timeout 20 nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null)}
for bus in $BUSES; do
    bdf=$(echo "$bus" | tr 'A-F' 'a-f' | sed -E 's/^0*([0-9a-f]{4}:)/\1/')
    dev=/sys/bus/pci/devices/$bdf
    fact "gpu-$bdf" "readlink -f $dev; for f in numa_node local_cpulist current_link_speed max_link_speed current_link_width max_link_width; do echo \"\$f: \$(cat $dev/\$f 2>&1)\"; done; readlink -f $dev/iommu_group 2>&1; cat $dev/iommu_group/type 2>&1"
    path=$(readlink -f "$dev" 2>/dev/null)
    while [ -n "$path" ] && [ "$path" != "/sys/devices" ] && [ "${path#/sys/devices/pci}" != "$path" ]; do
        name=$(basename "$path")
        case $name in
            ????:??:??.?)
                if command -v xxd > /dev/null; then
                    fact "config-$name" "wc -c < $path/config; xxd -l 4096 $path/config | grep -v ': 0000 0000 0000 0000 0000 0000 0000 0000'"
                else
                    fact "config-$name" "wc -c < $path/config; od -A x -t x1 -v $path/config | grep -v -E '^[0-9a-f]+ (00 ){16}'"
                fi
                ;;
        esac
        path=$(dirname "$path")
    done
done

tar -C "$OUT" -czf "$OUT/logs.tgz" logs summary.txt 2>/dev/null
say "done; logs in $OUT/logs.tgz"
