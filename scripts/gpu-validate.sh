#!/usr/bin/env bash
# GPU validation of ddpcheck's real backends, run by hand on a GPU machine (here through the
# `device` tool): every phase writes its raw output under $OUT/logs, and the summary goes last.
#
#   scripts/gpu-validate.sh [PHASE...]      phases: probe nccl preflight hang ddp mlp manual repeat
#
# Binaries come from .device/ (release builds copied there; not committed). nccl-tests source is
# read from .fetched/nccl-tests (fetched, never committed) and built for the run.
# The GPU count comes from the machine, so the same script serves 2, 4 and 8 GPUs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ddpcheck-validate}
LOGS=$OUT/logs
mkdir -p "$LOGS"
BIN=${DDPCHECK_BIN_DIR:-$PWD/.device}
DDPCHECK=$BIN/ddpcheck
# NVLink multicast must stay off on shared machines (DEVICE.md): in every program we start.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PHASES=${*:-probe nccl preflight hang ddp mlp manual}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 0)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
now() { date +%s.%N; }
el() { python3 -c "print(f'{$2-$1:.2f}')"; }

REGIMES=("nvlink::" "shm:NCCL_P2P_DISABLE=1:" "hostnet:NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo:")

say "# ddpcheck GPU validation $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $NGPU GPUs"
{
    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version --format=csv
    nvidia-smi topo -m
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
    "$DDPCHECK" --version
} > "$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"

for phase in $PHASES; do
case $phase in
probe)
    say "## probe: ddpcheck topo"
    "$DDPCHECK" topo > "$LOGS/topo.txt" 2>&1; rc=$?
    cat "$LOGS/topo.txt"
    "$DDPCHECK" topo --json > "$LOGS/topo.json" 2>&1
    say "topo rc=$rc pair(s): $(grep -o 'NV[0-9]*' "$LOGS/topo.txt" | sort | uniq -c | tr '\n' ' ')"
    ;;
nccl)
    say "## nccl: ddpcheck all-reduce sweep vs all_reduce_perf, same sizes, 3 regimes"
    NT=$(bash scripts/build-nccl-tests.sh .fetched/nccl-tests > "$LOGS/nccl-tests-build.txt" 2>&1 && tail -1 "$LOGS/nccl-tests-build.txt")
    say "all_reduce_perf: ${NT:-BUILD FAILED (see logs/nccl-tests-build.txt)}"
    # all_reduce_perf needs the pip package's libnccl.so.2 on the loader path (the build log says where).
    NT_LIBDIR=$(grep -o 'LD_LIBRARY_PATH=[^ ]*' "$LOGS/nccl-tests-build.txt" | tail -1 | cut -d= -f2)
    for r in "${REGIMES[@]}"; do
        name=${r%%:*}; rest=${r#*:}; envs=${rest%:}
        t0=$(now)
        env $envs "$DDPCHECK" bench collectives --ops all_reduce -b 4K -e 1G -f 2 -n 20 -w 5 --json > "$LOGS/ours-$name.json" 2> "$LOGS/ours-$name.err"
        say "ours $name rc=$? $(el "$t0" "$(now)") s"
        if [ -n "${NT:-}" ] && [ -x "$NT" ]; then
            env $envs LD_LIBRARY_PATH="$NT_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$NT" -b 4K -e 1G -f 2 -g "$NGPU" -n 20 -w 5 -c 1 > "$LOGS/ref-$name.txt" 2>&1
            say "nccl-tests $name rc=$?"
        fi
    done
    python3 scripts/compare-busbw.py "$LOGS" | tee -a "$SUMMARY"
    ;;
preflight)
    say "## preflight: ddpcheck check (wall time with NCCL init), twice"
    for i in 1 2; do
        t0=$(now)
        "$DDPCHECK" check > "$LOGS/check-$i.txt" 2>&1; rc=$?
        say "check run $i: exit $rc, wall $(el "$t0" "$(now)") s (process, incl. NCCL init)"
    done
    cat "$LOGS/check-1.txt"
    "$DDPCHECK" check --json > "$LOGS/check.json" 2>&1
    grep -E '"name"|"seconds"' "$LOGS/check.json" | paste - - | head -12 | tee -a "$SUMMARY"
    ;;
hang)
    say "## hang: injected worker hang must end at its deadline with TIMEOUT, nothing left"
    t0=$(now)
    "$DDPCHECK" check --inject-hang --deadline 8 > "$LOGS/hang.txt" 2>&1; rc=$?
    t1=$(now)
    sleep 1
    left=$(pgrep -fa 'ddpcheck worker' | grep -v pgrep || true)
    say "hang: exit $rc (want 5) after $(el "$t0" "$t1") s; workers left: ${left:-none}"
    tail -3 "$LOGS/hang.txt"
    ;;
ddp)
    say "## ddp: gpt2-124m, 4 variants, 1..$NGPU GPUs, NVLink and host-network regimes"
    for r in "nvlink::" "hostnet:NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo:"; do
        name=${r%%:*}; rest=${r#*:}; envs=${rest%:}
        envargs=""; for e in $envs; do envargs="$envargs --env $e"; done
        t0=$(now)
        "$DDPCHECK" bench ddp --model gpt2-124m --variants base,bf16,accum4,bf16+accum4 --gpus "1,$NGPU" $envargs \
            --steps 25 --warmup-steps 5 --plot "$LOGS/ddp-$name.svg" --json > "$LOGS/ddp-$name.json" 2> "$LOGS/ddp-$name.err"
        say "ddp $name rc=$? $(el "$t0" "$(now)") s"
    done
    python3 scripts/summarise-ddp.py "$LOGS"/ddp-*.json | tee -a "$SUMMARY"
    ;;
mlp)
    say "## mlp: width sweep, host-network regime (crossover)"
    t0=$(now)
    "$DDPCHECK" bench ddp --sweep mlp:512,1024,2048,4096,8192 --variants base,fp16,accum8 --gpus "1,$NGPU" --steps 25 --warmup-steps 5 \
        --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_DISABLE=1 --env NCCL_SOCKET_IFNAME=lo \
        --plot "$LOGS/mlp-hostnet.svg" --json > "$LOGS/mlp-hostnet.json" 2> "$LOGS/mlp-hostnet.err"
    say "mlp rc=$? $(el "$t0" "$(now)") s"
    python3 scripts/summarise-ddp.py "$LOGS"/mlp-hostnet.json | tee -a "$SUMMARY"
    ;;
manual)
    say "## manual: the same embedded script launched by hand with torchrun (reference for overhead)"
    bash scripts/ddp-by-hand.sh "$DDPCHECK" "$NGPU" "$LOGS" 2>&1 | tee -a "$SUMMARY"
    ;;
repeat)
    say "## repeat: the NVLink DDP run again (run-to-run agreement)"
    "$DDPCHECK" bench ddp --model gpt2-124m --variants base,bf16,accum4,bf16+accum4 --gpus "1,$NGPU" --steps 25 --warmup-steps 5 --json > "$LOGS/ddp-nvlink-repeat.json" 2> "$LOGS/ddp-nvlink-repeat.err"
    say "repeat rc=$?"
    python3 scripts/summarise-ddp.py "$LOGS/ddp-nvlink.json" "$LOGS/ddp-nvlink-repeat.json" | tee -a "$SUMMARY"
    ;;
notorch)
    say "## notorch: a benchmark on a node whose python has no torch must fail fast with one line"
    NOTORCH_PY=$(command -v /usr/bin/python3 || echo /nonexistent/python3)
    t0=$(now)
    DDPCHECK_PYTHON=$NOTORCH_PY "$DDPCHECK" bench ddp --model gpt2-124m --gpus 1 > "$LOGS/notorch.txt" 2>&1; rc=$?
    say "notorch ($NOTORCH_PY): exit $rc after $(el "$t0" "$(now)") s, $(wc -l < "$LOGS/notorch.txt") line(s): $(head -c 300 "$LOGS/notorch.txt")"
    ;;
hostnet3)
    say "## hostnet3: the host-network regime, ddpcheck and nccl-tests alternately, 3 rounds, 64 MiB..1 GiB"
    NT=$(bash scripts/build-nccl-tests.sh .fetched/nccl-tests > "$LOGS/nccl-tests-build.txt" 2>&1 && tail -1 "$LOGS/nccl-tests-build.txt")
    NT_LIBDIR=$(grep -o 'LD_LIBRARY_PATH=[^ ]*' "$LOGS/nccl-tests-build.txt" | tail -1 | cut -d= -f2)
    HN="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo"
    for round in 1 2 3; do
        env $HN "$DDPCHECK" bench collectives --ops all_reduce -b 64M -e 1G -f 2 -n 10 -w 2 --json > "$LOGS/ours-hostnet-r$round.json" 2>> "$LOGS/hostnet3.err"
        env $HN LD_LIBRARY_PATH="$NT_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$NT" -b 64M -e 1G -f 2 -g "$NGPU" -n 10 -w 2 -c 1 > "$LOGS/ref-hostnet-r$round.txt" 2>&1
    done
    python3 scripts/compare-busbw.py "$LOGS" --rounds | tee -a "$SUMMARY"
    ;;
*) say "unknown phase $phase" ;;
esac
# After every phase, so a run cut at its limit still brings its logs back.
tar -czf "$OUT/logs.tgz" -C "$OUT" logs
done
tar -czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$LOGS"/*.svg "$OUT"/ 2>/dev/null | true
say "# done $(date -u +%H:%M:%SZ)"
echo "=== SUMMARY ==="
cat "$SUMMARY"
