"""ddpcheck's DDP benchmark: PyTorch DDP (or FSDP2) training throughput on this node's GPUs.

Embedded in the ddpcheck binary (gpu/src/ddp/mod.rs) and written out as this folder into a private
temporary folder at run time; `ddpcheck bench ddp --print-manual DIR` writes it out for a run by
hand. Run one process per GPU:

    python3 -m torch.distributed.run --standalone --nproc_per_node N ddpcheck_bench_ddp/__main__.py \
        --config '{"model": {"kind": "decoder", "name": "gpt2-124m", "layers": 12, "width": 768,
                   "heads": 12, "seq": 1024, "vocab": 50257}, "variant": {"hook": "bf16"}}'

or, for one GPU without torchrun, `python3 ddpcheck_bench_ddp/__main__.py --config '...'`
(`python3 -m ddpcheck_bench_ddp` with the folder's parent on PYTHONPATH works as well).

Recipe: a decoder on random tokens, GPT-2 style (tied embeddings, pre-LN, GELU MLP, learned
positions) or LLaMA style (RMSNorm, no biases, gated SiLU MLP, rotary positions, grouped
key/value heads, tied or not), causal attention through F.scaled_dot_product_attention; or an MLP
of square linear layers, with an input and an output layer around them, on random inputs; or a
model built by code (a factory, torchvision, timm, a Hugging Face config). Random data made on the
GPU; bf16 autocast; fused AdamW; weak scaling (every GPU gets its own micro-batch). Each optimizer
step is timed with CUDA-synchronised wall time; warm-up steps are discarded; each step's time is
the maximum over ranks (all_gather); median and p90 are computed on rank 0.

With "all_reduce_probe_bytes" in the config (ddpcheck sends 4 KiB to 64 MiB), each run on more
than one GPU (`nocomm` too: the network is there) first all-reduces those sizes alone in the
same process group, on the idle GPUs, and reports the mean time of each (the slowest rank's) as the
result's "all_reduce_probe": the network as this launch's NCCL saw it, seconds before the steps.

Output: JSON lines on stdout. Rank 0 prints {"event":"env"}, {"event":"progress"} and
{"event":"result"}; any rank that fails prints {"event":"error","kind":..,"message":..} and exits
non-zero. Everything else (Python warnings, NCCL_DEBUG output, tracebacks) goes to stderr.

Modules: `main` (the launch), `config` (the --config JSON), `presets` and `models` (the model
sources), `recipe` (autocast, optimizer, DDP's options and hooks, FSDP), `layout` (parameters and
torch's buckets), `timing` (the rounds and statistics), `steps` (the timed training steps),
`collectives` (the all-reduce probe, gathers), `ranks` (processes, CPU pinning, the process group),
`torchenv` (torch's version, GPUs, out-of-memory), `report` (the result line), `channel` and
`errors` (the JSON stream, one-line failures). Nothing here imports torch at import time: a
missing torch is one JSON line.
"""
