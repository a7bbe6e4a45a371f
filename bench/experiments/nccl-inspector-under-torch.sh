#!/usr/bin/env bash
# NCCL Inspector in Prometheus mode under a torch all-reduce job on this node's GPUs (one on the
# lent H200): builds the Inspector plugin from an NCCL source tree, runs `torchrun` with one rank
# per GPU all-reducing 24.5 MiB and 64 MiB float32 tensors for JOB_S seconds with the plugin
# loaded (NCCL_INSPECTOR_PROM_DUMP=1, the 30 s minimum dump interval), copies the textfile(s) it
# writes while the job runs (the plugin deletes them at teardown), and says what they hold.
# RANKS=2 on one GPU runs two ranks on it, each with its own NCCL_HOSTID (NCCL then takes them
# for two hosts: no duplicate-GPU refusal, a network transport over loopback sockets) and its own
# dump folder (the file is named by the GPU's UUID, which both share).
#   bench/experiments/nccl-inspector-under-torch.sh OUTDIR          (about 120 s: build 20-40 s, job 55 s)
# Needs: NCCL source at $NCCL_SRC (default .fetched/nccl, tag v2.29.7-1 of NVIDIA/nccl: its
# plugins/profiler/inspector; v2.29.3-1 has it at ext-profiler/inspector), g++ and CUDA's
# runtime (CUDA_HOME from nvcc), torch for PYTHON (bench/lib.sh).
# Writes OUTDIR/summary.txt, build.log, job.log and nccl_inspector_metrics_<GPU UUID>.prom.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
NCCL_SRC=${NCCL_SRC:-$ROOT/.fetched/nccl}
JOB_S=${JOB_S:-55}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say "nccl-inspector-under-torch $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)"
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader 2>&1 | sed 's/^/gpu /' | tee -a "$SUMMARY"
src=
for d in plugins/profiler/inspector ext-profiler/inspector; do
    [ -f "$NCCL_SRC/$d/inspector_prom.cc" ] && src=$NCCL_SRC/$d && break
done
if [ -z "$src" ]; then say "FAILED: no Inspector with a Prometheus mode under $NCCL_SRC"; exit 1; fi
say "source $src ($(cat "$NCCL_SRC/SOURCE" 2>/dev/null || git -C "$NCCL_SRC" describe --tags --always 2>/dev/null))"
first() { local f; for f in "$@"; do [ -e "$f" ] && echo "$f" && return; done; } # the first PATH that exists
nvcc=$(command -v nvcc || first /usr/local/cuda*/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$nvcc")")}
cudart=$(first "$CUDA_HOME"/lib64/libcudart.so* "$CUDA_HOME"/targets/x86_64-linux/lib/libcudart.so*)
CUDA_LIB=$(dirname "${cudart:-$CUDA_HOME/lib64/x}")
say "CUDA_HOME $CUDA_HOME, libcudart in $CUDA_LIB"
B=$(mktemp -d /tmp/nccl-inspector.XXXXXX)
cp -r "$src" "$B/inspector"
t0=$(date +%s)
if ! make -C "$B/inspector" -j"$(nproc)" CUDA_HOME="$CUDA_HOME" CUDA_LIB="$CUDA_LIB" > "$OUT/build.log" 2>&1; then
    say "FAILED: build (tail of build.log):"; tail -15 "$OUT/build.log" | tee -a "$SUMMARY"; exit 1
fi
LIB=$B/inspector/libnccl-profiler-inspector.so
say "built $LIB in $(( $(date +%s) - t0 )) s"
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tee -a "$SUMMARY"
NGPU=$(nvidia-smi -L | grep -c '^GPU')
DUMP=$B/textfile
mkdir -p "$DUMP"
RANKS=${RANKS:-$NGPU}
cat > "$B/job.py" << 'PY'
import os, time, torch, torch.distributed as dist
local, ngpu = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
if int(os.environ["WORLD_SIZE"]) > ngpu:  # ranks sharing a GPU: each its own "host" and folder
    os.environ["NCCL_HOSTID"] = "ddpcheck-inspector-rank%d" % local
    os.environ["NCCL_INSPECTOR_DUMP_DIR"] = os.path.join(os.environ["NCCL_INSPECTOR_DUMP_DIR"], "rank%d" % local)
    os.makedirs(os.environ["NCCL_INSPECTOR_DUMP_DIR"], exist_ok=True)
torch.cuda.set_device(local % ngpu)
dist.init_process_group("nccl")
rank, n = dist.get_rank(), dist.get_world_size()
bufs = [torch.ones(int(24.5 * 2**20) // 4, device="cuda"), torch.ones(2**26 // 4, device="cuda")]
end, i = time.time() + float(os.environ["JOB_S"]), 0
while time.time() < end:
    for b in bufs:
        dist.all_reduce(b)
        i += 1
    if i % 200 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"rank {rank}/{n}: {i} all-reduces", flush=True)
dist.destroy_process_group()
PY
say "job: torchrun --nproc_per_node=$RANKS on $NGPU GPU(s), $JOB_S s of all-reduces (24.5 MiB, 64 MiB)"
SHARED=()
[ "$RANKS" -gt "$NGPU" ] && SHARED=(NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
env "${SHARED[@]}" JOB_S="$JOB_S" NCCL_PROFILER_PLUGIN="$LIB" NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_PROM_DUMP=1 \
    NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=30000000 NCCL_INSPECTOR_DUMP_DIR="$DUMP" \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,PROFILE SLURM_JOB_ID=inspector-h200 SLURM_JOB_NAME=allreduce-loop \
    timeout -k 5 $((JOB_S + 60)) "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$RANKS" "$B/job.py" \
    > "$OUT/job.log" 2>&1 &
JOB=$!
# The plugin writes at start and then every 30 s; keep the last copy that has series, until the job ends.
got=0
while kill -0 "$JOB" 2> /dev/null; do
    for f in "$DUMP"/*.prom "$DUMP"/rank*/*.prom; do
        [ -f "$f" ] || continue
        d=$(basename "$(dirname "$f")")
        case $d in rank*) name=$d-$(basename "$f") ;; *) name=$(basename "$f") ;; esac
        if grep -q '^nccl_' "$f"; then cp "$f" "$OUT/$name"; got=1; fi
    done
    sleep 1
done
wait "$JOB"; rc=$?
say "job exit $rc; $(grep -c 'all-reduces' "$OUT/job.log") rank(s) reported: $(grep 'all-reduces' "$OUT/job.log" | tr '\n' ' ')"
say "plugin lines in the NCCL log: $(grep -ci 'inspector' "$OUT/job.log")"
grep -i 'PROFILER/Plugin\|Inspector' "$OUT/job.log" | head -8 | tee -a "$SUMMARY"
if [ "$got" = 1 ]; then
    for f in "$OUT"/*nccl_inspector_metrics_*.prom; do
        say "textfile $(basename "$f"): $(grep -c '^nccl_' "$f") series"
        grep '^nccl_bus_bandwidth_gbs' "$f" | tee -a "$SUMMARY"
    done
else
    say "no textfile with series appeared while the job ran (files seen: $(find "$DUMP" 2> /dev/null | tr '\n' ' '))"
fi
rm -rf "$B"
say "done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
