#!/usr/bin/env bash
# DDP, FSDP2's replicate(), fully_shard and fully_shard without resharding on one GPU, each
# against the plain step in the same launch (`bench ddp --gpus 1 --plain-reference`): a LLaMA-style
# decoder preset and torchvision's resnet50. Per run: the step, the wrapper's own work, torch's
# peak memory (torch.cuda.max_memory_allocated), one step read at its phases (what each wrapper's
# forward keeps for backward, measured by the run itself: `memory_phases` in the report) and,
# where this ddpcheck has `memory`, its prediction beside the peak. Then slices of an 8.7B LLaMA
# config (2 and 4 of its 32 layers): each slice's peaks are predicted before launch and from the
# other slice's activations under the same wrapper. Then `recommend` on the whole config, which
# does not fit one 80 GB GPU with DDP: its answer must come without an out-of-memory or a
# timeout. Then torch's process-group backends through `bench ddp --backend`: gloo on the GPU,
# and nccl2. Last (`table`), memory-table.md: every run's peak beside its predictions and its
# phases, the table of the results page.
#
#   bench/experiments/fsdp2-variants-one-gpu.sh OUTDIR      (about 7 minutes on one H100 or H200)
#   PARTS="models slices recommend backends table" ...      (some parts)
#   BUDGET_S=390                                            (no launch starts after it)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR and torch >= 2.6 with fully_shard (replicate() where the torch
# has torch.distributed._composable.replicate_with_fsdp; its run says so where not), torchvision
# for PYTHON (bench/lib.sh); no network. Writes OUTDIR/NAME.json (bench ddp's reports), their
# stderr, memory-NAME.{txt,json}, recommend-{8b,hf7b}.{txt,stderr}, memory-table.md,
# summary.txt, and all of it in OUTDIR/fsdp2-variants.tar.gz.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
PARTS=${PARTS:-models slices recommend backends table}
VARIANTS=${VARIANTS:-base,replicate,fsdp,fsdp-noreshard}
SMALL_LLAMA="decoder:12,1024,16,1024,32000,llama"
BIG=(32 4096 32 2048 32000)  # layers, width, heads, seq, vocab: 8.7B parameters
HF_7B="hf:llama,hidden_size=4096,intermediate_size=11008,num_hidden_layers=32,num_attention_heads=32,num_key_value_heads=32"
big() { echo "decoder:$1,${BIG[1]},${BIG[2]},${BIG[3]},${BIG[4]},llama"; }
SUMMARY=$OUT/summary.txt
{ date -u +%FT%TZ; "$DDPCHECK" --version; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PYTHON" - <<'PYEOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
for what, mod in (("fully_shard", "torch.distributed.fsdp"),
                  ("replicate (FSDP2)", "torch.distributed._composable.replicate_with_fsdp")):
    try:
        __import__(mod)
        print(what, "yes")
    except Exception as e:
        print(what, "no:", e)
import torch.distributed as dist
print("backends", sorted(getattr(dist.Backend, "backend_list", [])))
PYEOF
} > "$SUMMARY" 2>&1

HAVE_MEMORY=0
if "$DDPCHECK" memory --help > /dev/null 2>&1; then HAVE_MEMORY=1; fi

# The script's own bound: no launch starts after this many seconds (the whole stays under 8 min).
BUDGET_S=${BUDGET_S:-390}

launch() { # TAG MODEL MICRO_BATCH DEADLINE VARIANTS
    local tag=$1 model=$2 mb=$3 deadline=$4 variants=$5 t0=$SECONDS
    if [ "$SECONDS" -gt "$BUDGET_S" ]; then
        echo "== $tag: not run, $SECONDS s of the script's $BUDGET_S s gone" >> "$SUMMARY"
        return
    fi
    deadline=$(( deadline < BUDGET_S + 60 - SECONDS ? deadline : BUDGET_S + 60 - SECONDS ))
    timeout $((deadline + 30)) "$DDPCHECK" --json bench ddp --gpus 1 --variants "$variants" \
        --model "$model" --micro-batch "$mb" --warmup-steps 3 --steps 10 --min-timed-seconds 1 \
        --plain-reference --deadline "$deadline" > "$OUT/$tag.json" 2> "$OUT/$tag.stderr"
    local rc=$?
    echo "== $tag ($model, micro-batch $mb, $variants): bench rc $rc, $((SECONDS - t0)) s" >> "$SUMMARY"
    if [ "$rc" != 0 ]; then tail -3 "$OUT/$tag.stderr" | sed 's/^/  stderr: /' >> "$SUMMARY"; fi
    "$PYTHON" - "$OUT/$tag.json" >> "$SUMMARY" 2>&1 <<'PYEOF'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no report (%s)" % e); sys.exit()
for r in report.get("results", []):
    pl = r.get("plain_reference") or {}
    ratios = sorted(d / p for d, p in pl.get("rounds", []))
    own = "%+.1f%%" % ((ratios[len(ratios) // 2] - 1) * 100) if ratios else "-"
    peak = r.get("max_memory_bytes")
    print("  %-15s step %7.2f ms, plain %s ms, own work %s (%d rounds), peak %s GiB"
          % (r["variant"], r["step_time_median_s"] * 1e3,
             "%.2f" % (pl["step_time_median_s"] * 1e3) if pl.get("step_time_median_s") else "-",
             own, len(ratios), "%.2f" % (peak / 2**30) if peak else "-"))
if report.get("stopped"):
    print("  stopped:", report["stopped"])
PYEOF
}

# The variants a report has no result for.
missing() { # REPORT
    "$PYTHON" - "$1" "$VARIANTS" <<'PYEOF'
import json, sys
try:
    have = {r["variant"] for r in json.load(open(sys.argv[1])).get("results", [])}
except Exception:
    have = set()
print(" ".join(v for v in sys.argv[2].split(",") if v not in have))
PYEOF
}

bench() { # TAG MODEL MICRO_BATCH DEADLINE: every variant in one launch; any it lost, alone
    local tag=$1 model=$2 mb=$3 deadline=$4 v
    launch "$tag" "$model" "$mb" "$deadline" "$VARIANTS"
    for v in $(missing "$OUT/$tag.json"); do
        launch "$tag-$v" "$model" "$mb" "$deadline" "$v"
    done
    memory "$tag" "$model" "$mb"
}

memory() { # TAG MODEL MICRO_BATCH [SLICE_TAG...]: the model's peaks beside its predictions, as
    # text and JSON; the slices' reports give each wrapper's measured activations.
    local tag=$1 model=$2 mb=$3 from=() f t
    shift 3
    [ "$HAVE_MEMORY" = 1 ] || return 0
    for t in "$tag" "$@"; do
        for f in "$OUT/$t".json "$OUT/$t"-*.json; do [ -s "$f" ] && from+=(--from "$f"); done
    done
    "$DDPCHECK" memory --model "$model" --micro-batch "$mb" --gpus 1 "${from[@]}" \
        > "$OUT/memory-$tag.txt" 2>&1
    "$DDPCHECK" --json memory --model "$model" --micro-batch "$mb" --gpus 1 "${from[@]}" \
        > "$OUT/memory-$tag.json" 2> "$OUT/memory-$tag.stderr"
    sed 's/^/  /' "$OUT/memory-$tag.txt" >> "$SUMMARY"
}

for part in $PARTS; do
    case $part in
        models)
            bench llama-small "$SMALL_LLAMA" 8 150
            bench resnet50 torchvision:resnet50 64 150 ;;
        slices)
            # Two and four of the 8.7B config's layers: the difference is one layer's memory.
            # Each slice is checked again from the other's activations, wrapper by wrapper.
            bench llama8b-2layers "$(big 2)" 1 120
            bench llama8b-4layers "$(big 4)" 1 120
            echo "== the slices, each from the other's measured activations" >> "$SUMMARY"
            memory llama8b-2layers "$(big 2)" 1 llama8b-4layers
            memory llama8b-4layers "$(big 4)" 1 llama8b-2layers ;;
        recommend)
            t0=$SECONDS
            timeout 170 "$DDPCHECK" recommend --gpus 1 --model "$(big "${BIG[0]}")" --micro-batch 1 \
                --budget 150 > "$OUT/recommend-8b.txt" 2> "$OUT/recommend-8b.stderr"
            rc=$?
            echo "== recommend on $(big "${BIG[0]}") at one GPU: rc $rc, $((SECONDS - t0)) s" >> "$SUMMARY"
            sed 's/^/  /' "$OUT/recommend-8b.txt" | head -60 >> "$SUMMARY"
            tail -5 "$OUT/recommend-8b.stderr" | sed 's/^/  stderr: /' >> "$SUMMARY"
            # The 6.7B Hugging Face LLaMA whose launch once stopped at the 60 s import limit.
            t0=$SECONDS
            timeout 120 "$DDPCHECK" recommend --gpus 1 --model "$HF_7B" --micro-batch 1 --budget 100 \
                > "$OUT/recommend-hf7b.txt" 2> "$OUT/recommend-hf7b.stderr"
            rc=$?
            { echo "== recommend on $HF_7B at one GPU: rc $rc, $((SECONDS - t0)) s"
              grep -E "^Recommendation:" "$OUT/recommend-hf7b.txt" | sed 's/^/  /'
              tail -3 "$OUT/recommend-hf7b.stderr" | sed 's/^/  stderr: /'; } >> "$SUMMARY"
            if [ "$HAVE_MEMORY" = 1 ]; then
                # The slices' reports, where the slices part ran: activations extrapolated.
                slices=()
                for f in "$OUT"/llama8b-*layers*.json; do [ -s "$f" ] && slices+=(--from "$f"); done
                "$DDPCHECK" memory --model "$(big "${BIG[0]}")" --micro-batch 1 --gpus 1 "${slices[@]}" \
                    > "$OUT/memory-8b.txt" 2>&1
                sed 's/^/  /' "$OUT/memory-8b.txt" >> "$SUMMARY"
            fi ;;
        backends)
            # torch's process-group backend: gloo on the GPU, and nccl2, which torch 2.11 lacks
            # (one line expected).
            for b in gloo nccl2; do
                t0=$SECONDS
                if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "== --backend $b: not run (time)" >> "$SUMMARY"; continue; fi
                timeout 150 "$DDPCHECK" --json bench ddp --gpus 1 --variants base --backend "$b" \
                    --model "$SMALL_LLAMA" --micro-batch 8 --warmup-steps 3 --steps 10 --deadline 120 \
                    > "$OUT/backend-$b.json" 2> "$OUT/backend-$b.stderr"
                rc=$?
                { echo "== --backend $b: rc $rc, $((SECONDS - t0)) s"
                  tail -2 "$OUT/backend-$b.stderr" | sed 's/^/  stderr: /'
                  [ "$rc" -eq 0 ] && "$PYTHON" -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print("  step %.2f ms, recipe %s" % (r["step_time_median_s"] * 1e3, r.get("recipe")))' \
                      "$OUT/backend-$b.json" 2>&1; } >> "$SUMMARY"
            done ;;
        table)
            # Every run's peak beside its predictions and its phases, as the results page's
            # table (memory-table.md).
            "$PYTHON" "$(dirname "$0")/memory-table.py" "$OUT" > "$OUT/memory-table.md" \
                2> "$OUT/memory-table.stderr"
            { echo "== memory-table.md"; cat "$OUT/memory-table.md" "$OUT/memory-table.stderr"; } >> "$SUMMARY" ;;
        *) die "unknown part $part (models slices recommend backends table)" ;;
    esac
done
date -u +%FT%TZ >> "$SUMMARY"
tar -czf "$OUT/fsdp2-variants.tar.gz" -C "$OUT" --exclude fsdp2-variants.tar.gz . 2>/dev/null
cat "$SUMMARY"
