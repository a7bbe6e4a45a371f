#!/usr/bin/env bash
# The reference for ddpcheck's own overhead: the same embedded DDP script, launched by hand with
# torchrun (the commands `ddpcheck bench ddp --print-manual` prints), interleaved with ddpcheck
# running the same launches: ROUNDS rounds (default 3), the order alternating every round
# (ddpcheck first, then by hand first, ...) so that drift of the machine hits both alike.
# Prints, per run, every round of each and the ratio of the medians. BYHAND_VARIANTS picks the
# variants (default: the four of the DDP validation), BYHAND_STEPS the timed steps per run (default
# 25; more steps average over the minutes-long shifts of step time seen on shared machines).
#   ddp-by-hand.sh DDPCHECK NGPU LOGDIR [bench ddp args...]
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
[ $# -ge 3 ] || die "usage: ddp-by-hand.sh DDPCHECK NGPU LOGDIR [bench ddp args...]"
DDPCHECK=$1; NGPU=$2; LOGS=$3; shift 3
ROUNDS=${ROUNDS:-3}
VARIANTS=${BYHAND_VARIANTS:-base,bf16,accum4,bf16+accum4}
STEPS=${BYHAND_STEPS:-25}
ARGS=(--model gpt2-124m --variants "$VARIANTS" --gpus "1,$NGPU" --steps "$STEPS" --warmup-steps 5 "$@")
"$DDPCHECK" bench ddp "${ARGS[@]}" --print-manual "$LOGS/byhand-script" > "$LOGS/byhand-commands.txt"
through_ddpcheck() {
    "$DDPCHECK" bench ddp "${ARGS[@]}" --json > "$LOGS/byhand-ddpcheck-$1.json" 2> "$LOGS/byhand-ddpcheck-$1.err"
    echo "round $1: ddpcheck rc=$?"
}
by_hand() {
    : > "$LOGS/byhand-results-$1.jsonl"
    while IFS= read -r cmd; do
        [ -n "$cmd" ] || continue
        (cd "$LOGS/byhand-script" && bash -c "$cmd") 2>> "$LOGS/byhand-$1.err" | grep '"event": *"result"' >> "$LOGS/byhand-results-$1.jsonl"
    done < "$LOGS/byhand-commands.txt"
    echo "round $1: by hand, $(wc -l < "$LOGS/byhand-results-$1.jsonl") results"
}
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then through_ddpcheck "$r"; by_hand "$r"; else by_hand "$r"; through_ddpcheck "$r"; fi
    # A run cut at its time limit still brings back the rounds it finished.
    [ -n "${OUT:-}" ] && tar -czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
done
"$PYTHON" "$VALIDATE/compare-byhand.py" "$LOGS" "$ROUNDS"
