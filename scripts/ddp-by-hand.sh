#!/usr/bin/env bash
# The reference for ddpcheck's own overhead: the same embedded DDP script, launched by hand with
# torchrun (the commands `ddpcheck bench ddp --print-manual` prints), right after ddpcheck ran the
# same launches. Prints throughput through ddpcheck / by hand per run.
#   ddp-by-hand.sh DDPCHECK NGPU LOGDIR [bench ddp args...]
set -uo pipefail
DDPCHECK=$1; NGPU=$2; LOGS=$3; shift 3
ARGS=(--model gpt2-124m --variants base,bf16,accum4,bf16+accum4 --gpus "1,$NGPU" --steps 25 --warmup-steps 5 "$@")
"$DDPCHECK" bench ddp "${ARGS[@]}" --json > "$LOGS/byhand-ddpcheck.json" 2> "$LOGS/byhand-ddpcheck.err"
echo "ddpcheck run rc=$?"
"$DDPCHECK" bench ddp "${ARGS[@]}" --print-manual "$LOGS/byhand-script" > "$LOGS/byhand-commands.txt"
: > "$LOGS/byhand-results.jsonl"
while IFS= read -r cmd; do
    [ -n "$cmd" ] || continue
    (cd "$LOGS/byhand-script" && bash -c "$cmd") 2>> "$LOGS/byhand.err" | grep '"event": *"result"' >> "$LOGS/byhand-results.jsonl"
done < "$LOGS/byhand-commands.txt"
python3 - "$LOGS/byhand-ddpcheck.json" "$LOGS/byhand-results.jsonl" <<'PY'
import json, sys
ours = {(r["model"], r["variant"], r["world_size"]): r["throughput"] for r in json.load(open(sys.argv[1]))["results"]}
hand = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    hand[(r["model"], r["variant"], r["world_size"])] = r["throughput"]
print(f"{'run':<32} {'ddpcheck':>12} {'by hand':>12} {'ratio':>7}")
worst = 0.0
for k in sorted(ours):
    if k in hand:
        ratio = ours[k] / hand[k]
        worst = max(worst, abs(ratio - 1))
        print(f"{' '.join(map(str, k)):<32} {ours[k]:>12.0f} {hand[k]:>12.0f} {ratio:>7.3f}")
    else:
        print(f"{' '.join(map(str, k)):<32} {ours[k]:>12.0f} {'missing':>12}")
print(f"largest |ddpcheck/by-hand - 1| = {worst:.1%} ({'PASS' if worst <= 0.03 else 'FAIL'} vs 3%)")
PY
