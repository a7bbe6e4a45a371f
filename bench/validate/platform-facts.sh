#!/usr/bin/env bash
# Copies what the bandwidth explainer reads from a GPU machine into a fixture tree, so its
# readers can be tested on the real layout: sysfs PCI devices (attributes, the binary config space,
# the device hierarchy as links), IOMMU groups and their type, /proc/cpuinfo and /proc/cmdline,
# plus nvidia-smi's view. Nothing is changed on the machine.
#   bench/validate/platform-facts.sh OUTDIR      (or OUT=OUTDIR)   -> OUTDIR/platform-facts.tgz
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
T=$(mktemp -d)/tree
mkdir -p "$T/proc" "$T/logs"
"$PYTHON" - "$T" <<'PY'
import os, shutil, sys
root = sys.argv[1]
ATTRS = ["class", "vendor", "device", "subsystem_vendor", "subsystem_device", "numa_node",
         "current_link_speed", "current_link_width", "max_link_speed", "max_link_width",
         "local_cpulist", "driver_override", "revision"]
def copy_file(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        with open(src, "rb") as f:
            data = f.read()
        with open(dst, "wb") as f:
            f.write(data)
    except OSError as e:
        print(f"skip {src}: {e}")
bus = "/sys/bus/pci/devices"
for bdf in sorted(os.listdir(bus)):
    real = os.path.realpath(os.path.join(bus, bdf))          # /sys/devices/pci0000:00/...
    mirror = root + real
    for a in ATTRS + ["config"]:
        p = os.path.join(real, a)
        if os.path.exists(p):
            copy_file(p, os.path.join(mirror, a))
    grp = os.path.join(real, "iommu_group")
    if os.path.islink(grp):
        os.symlink(os.readlink(grp), os.path.join(mirror, "iommu_group"))
    link = os.path.join(root + bus, bdf)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.relpath(mirror, os.path.dirname(link)), link)
groups = "/sys/kernel/iommu_groups"
if os.path.isdir(groups):
    for g in os.listdir(groups):
        t = os.path.join(groups, g, "type")
        if os.path.exists(t):
            copy_file(t, root + t)
        devs = os.path.join(groups, g, "devices")
        if os.path.isdir(devs):
            os.makedirs(root + devs, exist_ok=True)
            for d in os.listdir(devs):
                open(os.path.join(root + devs, d), "w").close()
for d in ["/sys/class/iommu"]:
    if os.path.isdir(d):
        os.makedirs(root + d, exist_ok=True)
        for e in os.listdir(d):
            open(os.path.join(root + d, e), "w").close()
for n in os.listdir("/sys/devices/system/node") if os.path.isdir("/sys/devices/system/node") else []:
    if n.startswith("node"):
        os.makedirs(root + "/sys/devices/system/node/" + n, exist_ok=True)
PY
awk 'BEGIN{RS=""} NR==1' /proc/cpuinfo >"$T/proc/cpuinfo"
cp /proc/cmdline "$T/proc/cmdline" 2>/dev/null
L=$T/logs
t() { timeout 30 "$@"; }
{ uname -a; head -3 /etc/os-release 2>/dev/null; } >"$L/os.txt" 2>&1
t nvidia-smi >"$L/nvidia-smi.txt" 2>&1
t nvidia-smi topo -m >"$L/topo-m.txt" 2>&1
t nvidia-smi -q >"$L/nvidia-smi-q.txt" 2>&1
t nvidia-smi nvlink -s >"$L/nvlink-s.txt" 2>&1
{ command -v lspci || echo "no lspci"; command -v setpci || echo "no setpci"; } >"$L/tools.txt" 2>&1
{ pgrep -af nv-fabricmanager || echo "no nv-fabricmanager process"; ls /usr/bin/nv-fabricmanager 2>&1; } >"$L/fabricmanager.txt" 2>&1
{ ls -la /sys/bus/pci/devices/; ls /sys/kernel/iommu_groups/ 2>&1; for g in /sys/kernel/iommu_groups/*/type; do echo "$g: $(cat "$g")"; done; ls -la /sys/class/iommu 2>&1; } >"$L/sysfs-listing.txt" 2>&1
for d in /sys/bus/pci/devices/*; do echo "== $d -> $(readlink -f "$d") class=$(cat "$d/class")"; od -A x -t x1 -N 64 "$d/config"; echo "config size: $(stat -c %s "$d/config")"; done >"$L/config-heads.txt" 2>&1
{ "$PYTHON" -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'; } >"$L/versions.txt" 2>&1
tar -C "$(dirname "$T")" -czf "$OUT/platform-facts.tgz" tree
echo "wrote $OUT/platform-facts.tgz"; ls -la "$L"; cat "$L/tools.txt" "$L/fabricmanager.txt"; head -5 "$L/config-heads.txt"
