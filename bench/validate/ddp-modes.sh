#!/usr/bin/env bash
# Why does one launch of the same DDP command land several percent from the next? Launches the
# embedded script by hand (the commands of `bench ddp --print-manual`) again and again, unpinned
# and with every rank pinned to its own physical cores (config "cpu_binding": "cores"),
# alternating, while nvidia-smi logs clocks, power and throttle reasons. Then MLP 2048x4 accum8
# (host-bound steps) the same way at 1 GPU, and at N GPUs with measure_nocomm (all micro-batches
# under no_sync: does compute alone slow down with N processes?).
#   ddp-modes.sh DDPCHECK NGPU LOGDIR            (MODES_ROUNDS=N rounds, default 5)
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
[ $# -ge 3 ] || die "usage: ddp-modes.sh DDPCHECK NGPU LOGDIR"
DDPCHECK=$1; NGPU=$2; LOGS=$3
ROUNDS=${MODES_ROUNDS:-5}
D=$LOGS/modes
mkdir -p "$D"
REASONS=clocks_event_reasons.active
nvidia-smi --help-query-gpu 2>/dev/null | grep -q "$REASONS" || REASONS=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,$REASONS \
    --format=csv,noheader -lms 250 > "$D/smi.csv" 2> "$D/smi.err" &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT

# manual MODEL VARIANT NGPU STEPS WARMUP -> the by-hand command line for NGPU GPUs
manual() {
    "$DDPCHECK" bench ddp --model "$1" --variants "$2" --gpus "$3" --steps "$4" --warmup-steps "$5" \
        --print-manual "$D/script" | grep -- "--nproc_per_node $3 "
}
# launch NAME BINDING NOCOMM CMD: one launch; its result line, tagged, goes to results.jsonl
launch() {
    local name=$1 binding=$2 nocomm=$3 cmd=$4 t0 t1
    cmd=${cmd/\"measure_nocomm\":false\}/\"measure_nocomm\":$nocomm,\"cpu_binding\":\"$binding\"\}}
    t0=$(date +%s.%N)
    (cd "$D/script" && NCCL_DEBUG=INFO bash -c "$cmd") > "$D/$name.out" 2> "$D/$name.err"
    t1=$(date +%s.%N)
    grep '"event": *"result"' "$D/$name.out" | "$PYTHON" -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line); r["launch"] = sys.argv[1]; r["binding"] = sys.argv[2]; r["t0"] = float(sys.argv[3]); r["t1"] = float(sys.argv[4])
    print(json.dumps(r))' "$name" "$binding" "$t0" "$t1" >> "$D/results.jsonl"
    grep -h '"event": *"env"' "$D/$name.out" | head -1 > "$D/$name.env"
}
: > "$D/results.jsonl"
GPT=$(manual gpt2-124m base "$NGPU" 60 10)
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then order="none cores"; else order="cores none"; fi
    for b in $order; do launch "gpt-$b-$r" "$b" false "$GPT"; done
    [ -n "${OUT:-}" ] && tar -czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
done
MLP1=$(manual mlp:2048 accum8 1 30 5)
MLPN=$(manual mlp:2048 accum8 "$NGPU" 30 5)
for r in 1 2 3; do
    for b in none cores; do launch "mlp1-$b-$r" "$b" false "$MLP1"; done
done
for r in 1 2; do
    for b in none cores; do launch "mlpN-$b-$r" "$b" true "$MLPN"; done
done
kill $SMI 2>/dev/null
"$PYTHON" - "$D" <<'PY'
import csv, json, pathlib, statistics, sys
d = pathlib.Path(sys.argv[1])
rows = [json.loads(l) for l in (d / "results.jsonl").read_text().splitlines() if l.strip()]
print(f"{'launch':<18} {'model':<10} {'var':<7} {'n':>2} {'bind':<5} {'median ms':>9} {'p90 ms':>8} {'nocomm ms':>9} {'sm MHz':>7} {'W':>5} {'reasons':<10}")
smi = []
try:
    for rec in csv.reader((d / "smi.csv").read_text().splitlines()):
        if len(rec) >= 8:
            smi.append(rec)
except OSError:
    pass
import datetime
def ts(s):
    try:
        return datetime.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        return None
groups = {}
for r in rows:
    window = [s for s in smi if (t := ts(s[0])) is not None and r["t0"] <= t <= r["t1"] and s[1].strip() == "0"]
    busy = [s for s in window if s[6].strip().split()[0].isdigit() and int(s[6].strip().split()[0]) > 50]
    sm = statistics.median([float(s[2].split()[0]) for s in busy]) if busy else float("nan")
    w = statistics.median([float(s[4].split()[0]) for s in busy]) if busy else float("nan")
    reasons = sorted({s[7].strip() for s in busy})
    nc = r.get("nocomm_step_time_median_s")
    print(f"{r['launch']:<18} {r['model']:<10} {r['variant']:<7} {r['world_size']:>2} {r['binding']:<5} "
          f"{r['step_time_median_s']*1e3:>9.2f} {r['step_time_p90_s']*1e3:>8.2f} {(nc*1e3 if nc else float('nan')):>9.2f} "
          f"{sm:>7.0f} {w:>5.0f} {','.join(reasons)[:30]:<10}")
    groups.setdefault((r["model"], r["variant"], r["world_size"], r["binding"]), []).append(r["step_time_median_s"])
print()
print(f"{'group':<36} {'launches':>8} {'min ms':>8} {'median':>8} {'max ms':>8} {'spread':>7}")
for k, v in sorted(groups.items()):
    print(f"{' '.join(map(str, k)):<36} {len(v):>8} {min(v)*1e3:>8.2f} {statistics.median(v)*1e3:>8.2f} {max(v)*1e3:>8.2f} {max(v)/min(v)-1:>7.1%}")
PY
