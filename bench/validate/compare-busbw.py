#!/usr/bin/env python3
"""Compares ddpcheck's all-reduce busbw with nccl-tests' all_reduce_perf per size and regime.

Usage: compare-busbw.py LOGDIR  (reads ours-REGIME.json and ref-REGIME.txt written by gpu-validate.sh)
Prints one table per regime: size, ours (out-of-place busbw), nccl-tests, ratio; and the minimum
ratio at >= 64 MiB, the figure the validation is judged on (>= 0.97)."""
import json
import pathlib
import sys


def ours(path):
    rep = json.loads(path.read_text())
    sweep = [s for s in rep["runs"][0]["run"]["sweeps"] if s["op"] == "all_reduce"][0]
    return {s["bytes"]: s["out_of_place"]["busbw_gbps"] for s in sweep["samples"]}, rep["runs"][0]["run"].get("nccl_version")


def ref(path):
    out = {}
    for line in path.read_text().splitlines():
        f = line.split()
        # size count type redop root time algbw busbw #wrong time algbw busbw #wrong
        if len(f) >= 13 and f[0].isdigit():
            try:
                out[int(f[0])] = float(f[7])
            except ValueError:
                pass
    return out


def rounds(logs):
    """--rounds: per size, the median over rounds of each tool (run alternately, same regime)."""
    import statistics
    o_all, r_all = {}, {}
    for path in sorted(logs.glob("ours-hostnet-r*.json")):
        for size, v in ours(path)[0].items():
            o_all.setdefault(size, []).append(v)
    for path in sorted(logs.glob("ref-hostnet-r*.txt")):
        for size, v in ref(path).items():
            r_all.setdefault(size, []).append(v)
    print("\nhostnet, alternating rounds: median busbw over rounds (each round listed)")
    print(f"{'size':>12} {'ddpcheck':>10} {'nccl-tests':>10} {'ratio':>7}  rounds ddpcheck / nccl-tests")
    worst = None
    for size in sorted(o_all):
        o, r = statistics.median(o_all[size]), statistics.median(r_all.get(size, [float("nan")]))
        ratio = o / r if r == r and r > 0 else float("nan")
        if size >= 64 << 20:
            worst = ratio if worst is None or ratio < worst else worst
        print(f"{size:>12} {o:>10.2f} {r:>10.2f} {ratio:>7.3f}  {['%.2f' % x for x in o_all[size]]} / {['%.2f' % x for x in r_all.get(size, [])]}")
    if worst is not None:
        print(f"min ratio of medians at >= 64 MiB: {worst:.3f} ({'PASS' if worst >= 0.97 else 'FAIL'} vs 0.97)")


def main():
    logs = pathlib.Path(sys.argv[1])
    if "--rounds" in sys.argv:
        rounds(logs)
        return
    worst = {}
    for regime in ["nvlink", "shm", "hostnet"]:
        o_path, r_path = logs / f"ours-{regime}.json", logs / f"ref-{regime}.txt"
        if not o_path.exists():
            print(f"{regime}: no ddpcheck result")
            continue
        try:
            o, ver = ours(o_path)
        except Exception as e:  # report, don't crash the summary
            print(f"{regime}: unreadable ddpcheck JSON: {e}")
            continue
        r = ref(r_path) if r_path.exists() else {}
        print(f"\n{regime} (NCCL {ver})")
        print(f"{'size':>12} {'ddpcheck':>10} {'nccl-tests':>10} {'ratio':>7}")
        ratios = []
        for size in sorted(o):
            rv = r.get(size)
            ratio = o[size] / rv if rv else None
            if ratio is not None and size >= 64 << 20:
                ratios.append(ratio)
            print(f"{size:>12} {o[size]:>10.2f} {rv if rv is not None else float('nan'):>10.2f} {ratio if ratio is not None else float('nan'):>7.3f}")
        if ratios:
            worst[regime] = min(ratios)
            print(f"min ratio at >= 64 MiB: {min(ratios):.3f} ({'PASS' if min(ratios) >= 0.97 else 'FAIL'} vs 0.97)")
    print("\nregime   min ratio >= 64 MiB")
    for k, v in worst.items():
        print(f"{k:<8} {v:.3f}")


main()
