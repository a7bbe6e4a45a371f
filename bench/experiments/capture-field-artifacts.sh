#!/usr/bin/env bash
# capture-field-artifacts.sh: what does a real GPU node print in the artifacts users attach to
# bug reports? Captures, unedited, the outputs `ddpcheck explain --from-artifacts` reads:
# `nvidia-smi topo -m`, `topo -p2p r|w|n|a`, `nvidia-smi -q`, `nvidia-smi nvlink -s`,
# `lspci -vvv` (where the machine has it), nccl-tests' all_reduce_perf, all_gather_perf and
# reduce_scatter_perf output (built from .fetched/nccl-tests) and their NCCL_DEBUG=INFO logs,
# and a torch all-reduce's NCCL_DEBUG=INFO log. Also the versions of each tool. One GPU is
# enough for the formats; NCCL's per-channel transport lines need two ranks (two GPUs).
#
#   bench/experiments/capture-field-artifacts.sh OUTDIR
#
# Writes OUTDIR/artifacts.tar.gz (one file per artifact) and OUTDIR/summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
A=$(mktemp -d)/artifacts
mkdir -p "$A"
cap() { # NAME COMMAND...: stdout and stderr of COMMAND into $A/NAME, its exit code in the summary
    local name=$1
    shift
    timeout 120 "$@" > "$A/$name" 2>&1
    say "$name: rc $?"
}
date -u +%FT%TZ > "$A/date.txt"
cap nvidia-smi-version.txt nvidia-smi --version
cap nvidia-smi-topo-m.txt nvidia-smi topo -m
for k in r w n a; do cap "nvidia-smi-topo-p2p-$k.txt" nvidia-smi topo -p2p "$k"; done
cap nvidia-smi-q.txt nvidia-smi -q
cap nvidia-smi-nvlink-s.txt nvidia-smi nvlink -s
cap nvidia-smi-nvlink-c.txt nvidia-smi nvlink -c
if command -v lspci > /dev/null; then cap lspci-vvv.txt lspci -vvv; else say "lspci: not on this machine"; fi
cap uname.txt uname -a
"$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())' > "$A/torch-version.txt" 2>&1

if [ -d .fetched/nccl-tests ]; then
    NT=$(bash bench/validate/build-nccl-tests.sh .fetched/nccl-tests 2> "$A/nccl-tests-build.txt")
    NT_LIBDIR=$(grep -o 'LD_LIBRARY_PATH=[^ ]*' "$A/nccl-tests-build.txt" | tail -1 | cut -d= -f2)
    say "nccl-tests: ${NT:-not built}"
    if [ -n "${NT:-}" ]; then
        NTDIR=$(dirname "$NT")
        for op in all_reduce all_gather reduce_scatter; do
            LD_LIBRARY_PATH=$NT_LIBDIR:${LD_LIBRARY_PATH:-} cap "nccl-tests-$op.txt" \
                "$NTDIR/${op}_perf" -b 8 -e 1G -f 2 -g 1 -c 1
        done
        LD_LIBRARY_PATH=$NT_LIBDIR:${LD_LIBRARY_PATH:-} NCCL_DEBUG=INFO cap nccl-tests-all_reduce-debug-info.txt \
            "$NTDIR/all_reduce_perf" -b 8 -e 128M -f 2 -g 1 -c 1
        LD_LIBRARY_PATH=$NT_LIBDIR:${LD_LIBRARY_PATH:-} NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
            NCCL_SOCKET_IFNAME=lo cap nccl-tests-all_reduce-debug-info-p2p-off.txt \
            "$NTDIR/all_reduce_perf" -b 8 -e 128M -f 2 -g 1 -c 1
    fi
else
    say "nccl-tests: no .fetched/nccl-tests"
fi
cat > "$A/torch_allreduce.py" <<'EOF'
import os
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
t = torch.ones(64 << 20, device="cuda")
for _ in range(5):
    dist.all_reduce(t)
torch.cuda.synchronize()
print("allreduce ok", t[0].item())
dist.destroy_process_group()
EOF
NCCL_DEBUG=INFO MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
    cap torch-allreduce-nccl-debug-info.txt "$PYTHON" "$A/torch_allreduce.py"
tar -C "$(dirname "$A")" -czf "$OUT/artifacts.tar.gz" artifacts
say "done"
