#!/usr/bin/env python3
"""Predicted (ddpcheck recommend's step-time model) against measured DDP speedups.

For each regime: the all-reduce curve comes from a `bench collectives --json` report and the
compute time from the 1-GPU *base* rows of a `bench ddp --json` report; the multi-GPU rows are
held out (the model never sees them, no calibration), then compared with the predictions.

Usage: predict-vs-measured.py [--min-params N] [--pool-1gpu] [--probe-curve] [--inputs FILE]... DDPCHECK REGIME:COLLECTIVES.json:DDP.json[:CALIBRATION.json] [...]

--min-params N leaves out models below N parameters (the judged range starts at 0.8M; smaller
ones are calibration candidates). --pool-1gpu replaces every 1-GPU run by the median of the
same model and variant over all the reports given (1-GPU runs do not depend on the regime, so
one call holds several launches of each), for the model's input and the measured speedup alike:
it measures how much of the error is the 1-GPU launch's own noise. A measured speedup above the GPU count is marked `!`: with weak
scaling it cannot be real, so its 1-GPU reference ran slow.

A hooked variant's speedup, predicted and measured, is taken against one GPU running the same
recipe without the hook (fp16 -> base, bf16+accum4 -> accum4), as ddpcheck does
(`ddp::one_gpu_reference`); the measured one is recomputed from the runs' throughputs, so
reports that took it against one GPU running the hook too (those before 2026-11-30 14:04)
read the same way; the pages of those measurements give their figures as they were.

--probe-curve takes the all-reduce curve from the held-out runs' own `all_reduce_probe` (each
N-GPU run times all-reduces alone in its process group before its steps; the median over the
model's runs) in place of the `bench collectives` report: the network as the DDP launches saw it.
Runs without probes (reports before 2026-11-30 18:17) keep the report's curve, as `recommend` does.

--inputs FILE adds a `bench ddp --json` report of model inputs to every prediction: the `nocomm`
runs at 1 and N GPUs (N processes side by side with no communication), launched separately from
the judged runs. A report's own `nocomm` runs are inputs too. Without any the model assumes N
processes compute as fast as one.

With CALIBRATION.json (a `bench ddp --json` of OTHER models on the same node and regime), the
model's DDP overheads are fitted on those runs (cross-calibration: the evaluated runs stay unseen)."""
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

args = sys.argv[1:]
min_params, pool, inputs, probe_curve = 0, False, [], False
while args and args[0].startswith("--"):
    if args[0] == "--inputs":
        inputs, args = inputs + ["--from", args[1]], args[2:]
    elif args[0] == "--min-params":
        min_params, args = float(args[1]), args[2:]
    elif args[0] == "--pool-1gpu":
        pool, args = True, args[1:]
    elif args[0] == "--probe-curve":
        probe_curve, args = True, args[1:]
    else:
        sys.exit(f"unknown option {args[0]}")
ddpcheck = args[0]
rows = []
pooled = {}
if pool:
    runs = {}
    for arg in args[1:]:
        for r in json.load(open(arg.split(":")[2]))["results"]:
            if r["world_size"] == 1:
                runs.setdefault((r["model"], r["variant"]), []).append(r)
    for k, rs in runs.items():
        pooled[k] = statistics.median(r["step_time_median_s"] for r in rs)


def pooled_report(rep):
    """The report with its 1-GPU runs replaced by the pooled medians and speedups recomputed."""
    if not pool:
        return rep
    out = []
    for r in rep["results"]:
        r = dict(r)
        step1 = pooled.get((r["model"], r["variant"]))
        if step1 is not None:
            if r["world_size"] == 1:
                r["throughput"] *= r["step_time_median_s"] / step1
                r["step_time_median_s"] = step1
            elif r.get("speedup"):
                r["speedup"] = r["world_size"] * step1 / r["step_time_median_s"]
        out.append(r)
    return dict(rep, results=out)


def ref_variant(variant):
    """The variant whose 1-GPU run is the speedup's reference: the same name without its comm
    hook (ddpcheck's `ddp::one_gpu_reference`)."""
    rest = [p for p in variant.split("+") if p.strip().lower() not in ("fp16", "bf16")]
    return "+".join(rest) or "base"


def probe_report(coll_path, runs):
    """A `bench collectives` report (the given one's header) whose all-reduce sweep is the median
    of the runs' probes at each size; None when no run carries one."""
    probes = [r["all_reduce_probe"] for r in runs if r.get("all_reduce_probe")]
    if not probes:
        return None
    samples = []
    for s in probes[0]["samples"]:
        times = [x["out_of_place"]["time_us"] for p in probes for x in p["samples"] if x["bytes"] == s["bytes"]]
        samples.append(dict(s, out_of_place=dict(s["out_of_place"], time_us=statistics.median(times))))
    coll = json.load(open(coll_path))
    run = coll["runs"][0]
    sweep = dict(probes[0], samples=samples)
    return dict(coll, runs=[dict(run, run=dict(run["run"], sweeps=[sweep]))])


def one_gpu(rep, r):
    """The 1-GPU run of the report that r's speedup is taken against, or None."""
    return next((s for s in rep["results"] if s["world_size"] == 1 and s["model"] == r["model"]
                 and s["variant"] == ref_variant(r["variant"])), None)


def launch_range(rep, r):
    """With repeated launches (`--repeats`): the lowest and highest speedup any pairing of a
    1-GPU launch with an N-GPU launch gives, i.e. how far the measurement itself moves; None
    for single launches."""
    one = one_gpu(rep, r)
    l1 = one.get("launch_step_medians_s") if one else None
    ln = r.get("launch_step_medians_s")
    if not l1 or not ln:
        return None
    n = r["world_size"]
    return (n * min(l1) / max(ln), n * max(l1) / min(ln))


def uncertainty(rep, r):
    """With repeated launches on both sides: the measured speedup's relative standard error,
    sqrt(pi/2 * (sd1^2/n1 + sdN^2/nN)) with sd the spread of ln(step) over each side's launches
    (the formula of ddpcheck's `speedup_uncertainty`); None otherwise."""
    one = one_gpu(rep, r)
    sides = [one.get("launch_step_medians_s") if one else None, r.get("launch_step_medians_s")]
    if not all(xs and len(xs) > 1 for xs in sides):
        return None
    return math.sqrt(math.pi / 2 * sum(statistics.variance([math.log(x) for x in xs]) / len(xs) for xs in sides))


def launches(rep, r):
    """Each launch's ln(step) of the run's 1-GPU partner and of the run itself, in launch order
    (a `--repeats` launch runs every configuration once, so index i is the same launch for every
    run of one side); None without repeated launches."""
    one = one_gpu(rep, r)
    sides = [one.get("launch_step_medians_s") if one else None, r.get("launch_step_medians_s")]
    if not all(xs and len(xs) > 1 for xs in sides):
        return None
    return tuple([math.log(x) for x in xs] for xs in sides)


def paired_ratio(a, b):
    """ln(speedup_a / speedup_b) from the launches, each side's difference taken within each
    launch (the launch's common speed cancels), with its standard error; None when the two runs
    were not launched together the same number of times."""
    if not (a and b) or any(len(x) != len(y) for x, y in zip(a, b)):
        return None
    d1 = [x - y for x, y in zip(a[0], b[0])]
    dn = [x - y for x, y in zip(a[1], b[1])]
    est = statistics.median(d1) - statistics.median(dn)
    se = math.sqrt(math.pi / 2 * (statistics.variance(d1) / len(d1) + statistics.variance(dn) / len(dn)))
    return est, se


for arg in args[1:]:
    parts = arg.split(":")
    regime, coll, ddp = parts[:3]
    calib = ["--from", parts[3]] if len(parts) > 3 else []
    rep = pooled_report(json.load(open(ddp)))
    # The model sees only 1-GPU runs: base and accumK (compute and optimizer step) and a hook run
    # (the hook's own cost), and `nocomm` runs at any GPU count (N processes side by side with no
    # communication: what recommend's quick runs measure on a fresh node); every multi-GPU run
    # that communicates is held out.
    singles = dict(rep, results=[r for r in rep["results"]
                                 if r["world_size"] == 1 or "nocomm" in r["variant"].split("+")])
    held_out = [r for r in rep["results"]
                if r["world_size"] > 1 and r.get("speedup") and r["params"] >= min_params]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(singles, f)
        singles_path = f.name
    for model in sorted({r["model"] for r in held_out}):
        cli_model = model.replace("x4", ",4") if model.startswith("mlp:") else model
        mb = [r["micro_batch"] for r in held_out if r["model"] == model][0]
        world = max(r["world_size"] for r in held_out if r["model"] == model)
        curve_path = coll
        if probe_curve:
            probed = probe_report(coll, [r for r in held_out if r["model"] == model])
            if probed is not None:
                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                    json.dump(probed, f)
                    curve_path = f.name
        out = subprocess.run(
            [ddpcheck, "recommend", "--model", cli_model, "--micro-batch", str(mb), "--gpus", str(world),
             "--from", curve_path, "--from", singles_path, *inputs, *calib, "--json"],
            capture_output=True, text=True)
        if curve_path != coll:
            os.unlink(curve_path)
        if out.returncode != 0:
            print(f"{regime} {model}: recommend failed: {out.stderr.strip()}")
            continue
        rec = json.loads(out.stdout)
        if calib:
            print(f"{regime} {model}: overheads {rec['overheads_source']}")
        base_row = next((r for r in rec["rows"] if r["variant"] == "base"), None)
        if (inputs or any(r["world_size"] > 1 for r in singles["results"])) and base_row:
            p = base_row["prediction"]
            print(f"{regime} {model}: side-by-side slowdown x{1 + p['side_by_side_s'] / p['single_gpu_step_s']:.3f}")
        pred = {r["variant"]: r["prediction"]["speedup"] for r in rec["rows"]}
        for r in held_out:
            if r["model"] != model:
                continue
            name = {"base": "base"}.get(r["variant"], r["variant"])
            if name not in pred:
                continue
            # Recomputed, not the report's own: reports before 2026-11-30 14:04 took a hooked
            # variant's speedup against one GPU running the hook.
            one = one_gpu(rep, r)
            if not one:
                continue
            measured = r["throughput"] / one["throughput"]
            rows.append((regime, model, r["variant"], r["world_size"], pred[name], measured,
                         launch_range(rep, r), uncertainty(rep, r), launches(rep, r)))
    os.unlink(singles_path)

print(f"{'regime':<8} {'model':<12} {'variant':<12} {'n':>2} {'predicted':>9} {'measured':>9} {'error':>7}")
errs = []
inside = 0
ranged = [r for r in rows if r[6]]
with_u = [r for r in rows if r[7] is not None]
beyond = 0
for regime, model, variant, n, p, m, rng, u, _ in rows:
    e = (p - m) / m
    errs.append(abs(e))
    mark = " !" if m > n else ""
    span = ""
    if rng:
        ok = rng[0] <= p <= rng[1]
        inside += ok
        span = f"  launches {rng[0]:.2f}..{rng[1]:.2f}{' in' if ok else ''}"
    if u is not None:
        far = abs(e) > 2 * u
        beyond += far
        span += f"  ±{u:.1%}{' beyond 2σ' if far else ''}"
    print(f"{regime:<8} {model:<12} {variant:<12} {n:>2} {p:>9.2f} {m:>9.2f} {e:>+7.1%}{mark}{span}")
if errs:
    print(f"\n{len(errs)} cases: median |error| {statistics.median(errs):.1%}, largest {max(errs):.1%}")
if ranged:
    print(f"{inside} of {len(ranged)} predictions inside the speedup range their repeated launches span")
if with_u:
    print(f"{beyond} of {len(with_u)} errors beyond twice the measured speedup's standard error "
          f"(median standard error {statistics.median(r[7] for r in with_u):.1%})")
# Ranking: within each (regime, model), variants ordered by predicted and by measured speedup,
# compared wherever measured speedups differ by more than 5%.
bad = 0
pairs = 0
# With repeated launches: the pairs whose measured difference also stands out of the noise
# (their ln ratio beyond twice the combined standard error).
resolved, resolved_bad = 0, 0
for key in sorted({(r[0], r[1]) for r in rows}):
    grp = [r for r in rows if (r[0], r[1]) == key]
    for i in range(len(grp)):
        for j in range(i + 1, len(grp)):
            a, b = grp[i], grp[j]
            if abs(a[5] - b[5]) / max(a[5], b[5]) > 0.05:
                pairs += 1
                wrong = (a[4] - b[4]) * (a[5] - b[5]) < 0
                if wrong:
                    bad += 1
                    print(f"ranking differs: {key} {a[2]} vs {b[2]}: predicted {a[4]:.2f}/{b[4]:.2f}, measured {a[5]:.2f}/{b[5]:.2f}")
                if a[7] is not None and b[7] is not None:
                    if abs(math.log(a[5] / b[5])) > 2 * math.hypot(a[7], b[7]):
                        resolved += 1
                        resolved_bad += wrong
print(f"ranking: {pairs - bad} of {pairs} pairs (measured >5% apart) in the measured order")
if with_u:
    print(f"ranking where the measured difference is also beyond twice its standard error: "
          f"{resolved - resolved_bad} of {resolved} pairs in the measured order")
# The same ranking with each pair's ratio measured within launches: every configuration of a
# report ran once per launch, so a launch's common speed cancels from the ratio of two variants.
p_pairs = p_bad = p_res = p_res_bad = 0
for key in sorted({(r[0], r[1]) for r in rows}):
    grp = [r for r in rows if (r[0], r[1]) == key]
    for i in range(len(grp)):
        for j in range(i + 1, len(grp)):
            a, b = grp[i], grp[j]
            pr = paired_ratio(a[8], b[8])
            if pr is None or abs(math.exp(pr[0]) - 1) <= 0.05 and abs(math.exp(-pr[0]) - 1) <= 0.05:
                continue
            p_pairs += 1
            wrong = (a[4] - b[4]) * pr[0] < 0
            far = abs(pr[0]) > 2 * pr[1]
            p_bad += wrong
            p_res += far
            p_res_bad += wrong and far
            if wrong:
                print(f"paired ranking differs: {key} {a[2]} vs {b[2]}: predicted {a[4]:.2f}/{b[4]:.2f}, "
                      f"measured ratio {math.exp(pr[0]):.3f} ±{pr[1]:.1%}{' beyond 2σ' if far else ''}")
if p_pairs:
    print(f"paired within launches: {p_pairs - p_bad} of {p_pairs} pairs (>5% apart) in the measured order; "
          f"beyond twice the standard error: {p_res - p_res_bad} of {p_res}")
