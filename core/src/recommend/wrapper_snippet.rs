//! The Python for an FSDP2-based wrapper, as the benchmark measures it
//! (gpu/src/ddp/bench_ddp/wrappers.py): MixedPrecisionPolicy bf16 with fp32 reduction, BatchNorm
//! in units of its own, each block and then the root, no autocast.

use std::fmt::Write as _;

use crate::ddp::{Amp, RunDevice, Wrapper, HSDP_REPLICAS};

/// The lines that wrap `model` (whose blocks are `model.layers`: the outermost
/// `nn.ModuleList`'s layers) under `wrapper`, then the training loop's gradient sync with
/// `accum` micro-batches a step. `checkpointing`: every block recomputes its activations in the
/// backward pass (`checkpoint_wrapper`).
pub fn fsdp2_snippet(
    wrapper: Wrapper,
    amp: Amp,
    accum: u32,
    checkpointing: bool,
    device: RunDevice,
) -> String {
    let mut s = String::new();
    let replicate = wrapper == Wrapper::Replicate;
    s.push_str("import torch\n");
    s.push_str("from torch.distributed.device_mesh import init_device_mesh\n");
    s.push_str("from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard\n");
    if replicate {
        s.push_str("from torch.distributed._composable.replicate_with_fsdp import replicate  # FSDP2's replicate() (torch 2.11 has it)\n");
    }
    if checkpointing {
        s.push_str("from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\n");
    }
    s.push('\n');
    let kind = if device == RunDevice::Cpu {
        "cpu"
    } else {
        "cuda"
    };
    if wrapper == Wrapper::Hsdp {
        let _ = writeln!(
            s,
            "mesh = init_device_mesh(\"{kind}\", ({HSDP_REPLICAS}, world_size // {HSDP_REPLICAS}), mesh_dim_names=(\"replicate\", \"shard\"))  # replicas x shards"
        );
    } else {
        let _ = writeln!(s, "mesh = init_device_mesh(\"{kind}\", (world_size,))");
    }
    if amp == Amp::None {
        s.push_str("mp = MixedPrecisionPolicy()  # full precision, as measured\n");
    } else {
        s.push_str(
            "mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n",
        );
        s.push_str("norm_mp = MixedPrecisionPolicy(output_dtype=torch.bfloat16)  # BatchNorm keeps fp32 parameters (its running statistics are fp32)\n");
    }
    if checkpointing {
        s.push_str("for i, block in enumerate(model.layers):\n");
        s.push_str("    model.layers[i] = checkpoint_wrapper(block)  # recompute each block's activations in backward (not measured by ddpcheck)\n");
    }
    let (call, extra) = match wrapper {
        Wrapper::Replicate => ("replicate", String::new()),
        Wrapper::FsdpNoReshard => ("fully_shard", ", reshard_after_forward=False".to_string()),
        _ => ("fully_shard", ", reshard_after_forward=True".to_string()),
    };
    if amp != Amp::None {
        s.push_str("for m in model.modules():\n");
        s.push_str("    if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):\n");
        let _ = writeln!(s, "        {call}(m, mesh=mesh, mp_policy=norm_mp{extra})");
    }
    s.push_str("for block in model.layers:  # each transformer block, then the root\n");
    let _ = writeln!(s, "    {call}(block, mesh=mesh, mp_policy=mp{extra})");
    let _ = writeln!(s, "{call}(model, mesh=mesh, mp_policy=mp{extra})");
    s.push_str("opt = torch.optim.AdamW(model.parameters(), lr=lr)  # after wrapping: it holds the wrapped parameters\n");
    s.push_str(
        "# no torch.autocast around the forward: MixedPrecisionPolicy casts the parameters\n",
    );
    let k = accum.max(1);
    if k > 1 {
        let _ = write!(
            s,
            "\nACCUM = {k}  # effective batch = micro-batch x {k} x world size\n"
        );
        s.push_str("for step in range(num_steps):\n");
        s.push_str("    for k in range(ACCUM):\n");
        s.push_str("        model.set_requires_gradient_sync(k == ACCUM - 1)  # reduce on the last micro-batch only\n");
        s.push_str("        (loss_fn(model(next(batches))) / ACCUM).backward()\n");
        s.push_str("    opt.step()\n");
        s.push_str("    opt.zero_grad(set_to_none=True)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wrapper_is_written_as_the_benchmark_wraps_it() {
        let fsdp = fsdp2_snippet(Wrapper::Fsdp, Amp::Bf16, 1, false, RunDevice::Cuda);
        assert!(fsdp.contains(
            "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)"
        ));
        assert!(fsdp
            .contains("fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=True)"));
        assert!(fsdp
            .contains("fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=True)"));
        assert!(!fsdp.contains("checkpoint_wrapper") && !fsdp.contains("ACCUM"));
        let nr = fsdp2_snippet(Wrapper::FsdpNoReshard, Amp::Bf16, 1, false, RunDevice::Cuda);
        assert!(nr.contains("reshard_after_forward=False"));
        let rep = fsdp2_snippet(Wrapper::Replicate, Amp::Bf16, 1, false, RunDevice::Cuda);
        assert!(rep.contains("replicate_with_fsdp import replicate"));
        assert!(rep.contains("replicate(model, mesh=mesh, mp_policy=mp)"));
        let hsdp = fsdp2_snippet(Wrapper::Hsdp, Amp::Bf16, 4, true, RunDevice::Cuda);
        assert!(hsdp.contains("(2, world_size // 2), mesh_dim_names=(\"replicate\", \"shard\")"));
        assert!(hsdp.contains("checkpoint_wrapper(block)"));
        assert!(hsdp.contains("set_requires_gradient_sync(k == ACCUM - 1)"));
    }
}
