#!/usr/bin/env python3
"""Writes the hand-made sysfs/procfs fixture tree the platform readers are tested on.

baremetal-switch/: a bare-metal PCIe box. GPU0 and GPU1 sit below one PCIe switch (Broadcom
PLX upstream port 01:00.0, downstream ports 02:08.0 and 02:10.0) under root port 00:01.0; the
switch's downstream ports have ACS on (SrcValid ReqRedir CmpltRedir UpstreamFwd, as the kernel
sets them when the IOMMU is on); GPU2 hangs off root port 80:01.0 of the second socket (NUMA 1)
and trained at x8 of x16. IOMMU groups of type DMA-FQ (translated), intel_iommu=on.

Config files are 4 KiB binary blobs with a valid extended capability chain from 0x100.
Run from this folder: python3 make_fixtures.py (it replaces that tree).

vm-h200/ is not made here: it is a real guest's tree, captured by
bench/validate/platform-facts.sh (see vm-h200/PROVENANCE.md).
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ACS, AER, DSN = 0x000D, 0x0001, 0x0003


def config(vendor, device, caps=(), acs_ctl=0):
    b = bytearray(4096)
    struct.pack_into("<HH", b, 0, vendor, device)
    for i, (cap, off) in enumerate(caps):
        nxt = caps[i + 1][1] if i + 1 < len(caps) else 0
        struct.pack_into("<I", b, off, cap | (1 << 16) | (nxt << 20))
        if cap == ACS:
            struct.pack_into("<HH", b, off + 4, 0x005F, acs_ctl)  # capability, control
    return bytes(b)


def write(root, rel, data):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def device(root, host, chain, cfg, attrs=None, group=None):
    """A device at sys/devices/HOST/CHAIN..., its config and attributes, and its links."""
    rel = os.path.join("sys/devices", host, *chain)
    write(root, os.path.join(rel, "config"), cfg)
    for k, v in (attrs or {}).items():
        write(root, os.path.join(rel, k), v + "\n")
    bus = os.path.join(root, "sys/bus/pci/devices")
    os.makedirs(bus, exist_ok=True)
    os.symlink(os.path.relpath(os.path.join(root, rel), bus), os.path.join(bus, chain[-1]))
    if group is not None:
        gdir = os.path.join(root, "sys/kernel/iommu_groups", str(group))
        write(root, os.path.join("sys/kernel/iommu_groups", str(group), "type"), "DMA-FQ\n")
        os.symlink(os.path.relpath(gdir, os.path.join(root, rel)), os.path.join(root, rel, "iommu_group"))


def link(speed, width, max_speed=None, max_width=None):
    return {
        "current_link_speed": f"{speed} GT/s PCIe",
        "max_link_speed": f"{max_speed or speed} GT/s PCIe",
        "current_link_width": str(width),
        "max_link_width": str(max_width or width),
    }


def baremetal():
    root = os.path.join(HERE, "baremetal-switch")
    shutil.rmtree(root, ignore_errors=True)
    acs_on = 0x001D
    rp0 = ["0000:00:01.0"]
    up = rp0 + ["0000:01:00.0"]
    device(root, "pci0000:00", rp0, config(0x8086, 0x352A, [(AER, 0x100), (ACS, 0x148)], acs_on), {"numa_node": "0"}, 0)
    device(root, "pci0000:00", up, config(0x10B5, 0x8747, [(AER, 0x100), (DSN, 0x138)]), {"numa_node": "0"}, 1)
    for i, (port, gpu) in enumerate([("0000:02:08.0", "0000:03:00.0"), ("0000:02:10.0", "0000:04:00.0")]):
        device(root, "pci0000:00", up + [port], config(0x10B5, 0x8747, [(AER, 0x100), (ACS, 0x148)], acs_on), {"numa_node": "0"}, 1)
        device(root, "pci0000:00", up + [port, gpu], config(0x10DE, 0x2230, [(AER, 0x100)]),
               dict(numa_node="0", **link("16.0", 16)), 2 + i)
    rp1 = ["0000:80:01.0"]
    device(root, "pci0000:80", rp1, config(0x8086, 0x352A, [(AER, 0x100), (ACS, 0x148)], 0), {"numa_node": "1"}, 4)
    device(root, "pci0000:80", rp1 + ["0000:81:00.0"], config(0x10DE, 0x2230, [(AER, 0x100)]),
           dict(numa_node="1", **link("16.0", 8, max_width=16)), 5)
    write(root, "sys/class/iommu/dmar0/name", "dmar0\n")
    write(root, "sys/class/dmi/id/sys_vendor", "Supermicro\n")
    write(root, "proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr pae mce sse sse2 ht vmx\n\n")
    write(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=on\n")


if __name__ == "__main__":
    baremetal()
