#!/usr/bin/env python3
"""Summarises does-host-copy-reach-the-link.sh's OUTDIR: per GPU and direction, ddpcheck's best-size copy
bandwidth (median of its checks) against the link's capacity (the gen x width NVML reports at
its maximum, after line encoding) and against the plain CUDA copy loop (median of its repeats,
the same sizes and counts); check's wall time with the step, without it (--no-host-copies) and
of the previous release where present. Prints a text summary; writes OUTDIR/summary.json.

    python3 bench/experiments/summarise-copy-bandwidth.py OUTDIR
"""
import json
import statistics
import sys
from pathlib import Path

GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}
RATIO_MIN = 0.97
WALL_MAX_S = 2.0
DIRS = ("host_to_device", "device_to_host")


def capacity_gbps(gen, width):
    if gen not in GTS or not width:
        return None
    enc = 0.8 if gen <= 2 else 128 / 130
    return GTS[gen] * enc * width / 8


def bdf(bus_id):
    """`00000000:00:06.0` and `0000:00:06.0` both to `00:06.0`."""
    return bus_id.strip().lower()[-7:]


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def median(xs):
    return statistics.median(xs) if xs else None


def main(out):
    walls = {}
    for line in (out / "wall.tsv").read_text().splitlines()[1:]:
        name, rc, secs = line.split("\t")
        walls[name] = (int(rc), float(secs))

    def runs(prefix):
        names = sorted((n for n in walls if n.startswith(prefix + "-") and n[len(prefix) + 1:].isdigit()),
                       key=lambda n: int(n.rsplit("-", 1)[1]))
        return names

    summary = {"gpus": [], "wall": {}, "checks": {}}
    on = [(n, load(out / f"{n}.json")) for n in runs("check-on")]
    gpus = {}
    for _name, r in on:
        if not r:
            continue
        for g in r.get("gpus", []):
            p = g.get("pcie") or {}
            gpus.setdefault(bdf(g["pci_bus_id"]), {
                "pci_bus_id": g["pci_bus_id"], "name": g.get("name"),
                "link_max": f"gen{p.get('gen_max')} x{p.get('width_max')}",
                "capacity_gbps": capacity_gbps(p.get("gen_max"), p.get("width_max")),
                "ddpcheck": {d: [] for d in DIRS}, "loop": {d: [] for d in DIRS},
            })
        for c in (r.get("host_copies") or {}).get("gpus", []):
            g = gpus.get(bdf(c["gpu"]["pci_bus_id"]))
            for d in DIRS:
                best = max((s["gbps"] for s in c["samples"] if s["direction"] == d), default=None)
                if g is not None and best is not None:
                    g["ddpcheck"][d].append(best)
    for name in runs("copy-loop"):
        rows = []
        for line in (out / f"{name}.jsonl").read_text(errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
        for key in {(x.get("pci_bus_id"), x.get("repeat")) for x in rows if "gbps" in x}:
            g = gpus.get(bdf(key[0]))
            for d in DIRS:
                best = max((x["gbps"] for x in rows if (x.get("pci_bus_id"), x.get("repeat")) == key
                            and x["direction"] == d), default=None)
                if g is not None and best is not None:
                    g["loop"][d].append(best)

    ratios = []
    for g in gpus.values():
        row = {k: g[k] for k in ("pci_bus_id", "name", "link_max", "capacity_gbps")}
        for d in DIRS:
            ours, loop = median(g["ddpcheck"][d]), median(g["loop"][d])
            ratio = ours / loop if ours and loop else None
            if ratio is not None:
                ratios.append(ratio)
            row[d] = {
                "ddpcheck_gbps": g["ddpcheck"][d], "ddpcheck_median_gbps": ours,
                "loop_gbps": g["loop"][d], "loop_median_gbps": loop,
                "ddpcheck_over_loop": ratio,
                "ddpcheck_share_of_capacity": ours / g["capacity_gbps"] if ours and g["capacity_gbps"] else None,
                "loop_share_of_capacity": loop / g["capacity_gbps"] if loop and g["capacity_gbps"] else None,
            }
        summary["gpus"].append(row)

    for kind in ("on", "off", "before", "warm"):
        names = runs(f"check-{kind}") if kind != "warm" else [n for n in walls if n == "check-warm"]
        if not names:
            continue
        reports = [load(out / f"{n}.json") for n in names]
        summary["wall"][kind] = {
            "process_s": [walls[n][1] for n in names],
            "exit_codes": [walls[n][0] for n in names],
            "report_wall_s": [r.get("wall_seconds") if r else None for r in reports],
            "verdicts": [r.get("verdict") if r else None for r in reports],
            "reasons": [r.get("reason") if r else None for r in reports],
            "host_copies_step_s": [
                next((s["seconds"] for s in r.get("steps", []) if s["name"] == "host_copies"), None) if r else None
                for r in reports],
        }
        w = summary["wall"][kind]
        w["process_median_s"] = median(w["process_s"])
        w["process_max_s"] = max(w["process_s"])
    on_w = summary["wall"].get("on", {})
    summary["checks"] = {
        "ddpcheck_over_loop_min": min(ratios) if ratios else None,
        "ddpcheck_at_least_0.97x_loop": bool(ratios) and min(ratios) >= RATIO_MIN,
        "check_wall_max_s": on_w.get("process_max_s"),
        "check_wall_at_most_2s": on_w.get("process_max_s") is not None and on_w["process_max_s"] <= WALL_MAX_S,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    print(f"copy bandwidth, {len(on)} checks with the step; GB/s are 1e9 bytes/s, medians of the runs")
    for g in summary["gpus"]:
        print(f"GPU {g['pci_bus_id']} {g['name']}: link {g['link_max']} = {g['capacity_gbps']} GB/s each way")
        for d in DIRS:
            x = g[d]
            print(f"  {d}: ddpcheck {x['ddpcheck_median_gbps']} ({x['ddpcheck_share_of_capacity']} of the link),"
                  f" loop {x['loop_median_gbps']} ({x['loop_share_of_capacity']}), ddpcheck/loop {x['ddpcheck_over_loop']}")
            print(f"    runs: ddpcheck {x['ddpcheck_gbps']} loop {x['loop_gbps']}")
    for kind, w in summary["wall"].items():
        print(f"check {kind}: process wall {w['process_s']} s (median {w['process_median_s']}),"
              f" report {w['report_wall_s']}, host_copies step {w['host_copies_step_s']}, verdicts {w['verdicts']}")
    c = summary["checks"]
    print(f"ddpcheck >= {RATIO_MIN}x loop: {c['ddpcheck_at_least_0.97x_loop']} (min {c['ddpcheck_over_loop_min']})")
    print(f"check wall <= {WALL_MAX_S} s: {c['check_wall_at_most_2s']} (max {c['check_wall_max_s']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
