//! The code to copy: Python for DDP with the chosen hook and accumulation loop, and the shell
//! lines that set (or unset) the NCCL environment.

use std::fmt::Write as _;

use super::p2p;
use super::warnings::{disabled_nvlink_transports, p2p_forced};
use super::RecommendInput;
use crate::ddp::{Amp, CommHook, Recipe, RunDevice, POWERSGD_DEFAULT_RANK};
use crate::step_time::powersgd::TORCH_DEFAULT_START_ITER;

/// The Python for the recommendation: none on one GPU (or one CPU rank).
pub(super) fn python_for(
    use_one_gpu: bool,
    hook: CommHook,
    accum: u32,
    recipe: &Recipe,
    device: RunDevice,
) -> String {
    match (use_one_gpu, device) {
        (true, RunDevice::Cuda) => "# one GPU: no DDP needed\n".to_string(),
        (true, RunDevice::Cpu) => "# one CPU rank: no DDP needed\n".to_string(),
        (false, device) => python_snippet_on(hook, accum, recipe, device),
    }
}

/// Copy-paste Python: DDP with the comm hook and the `no_sync` accumulation loop.
pub fn python_snippet(hook: CommHook, accum: u32) -> String {
    python_snippet_for(hook, accum, &Recipe::default())
}

/// The lines that register PowerSGD at `rank` on a DDP model `ddp`: plain all-reduce for the
/// first [`TORCH_DEFAULT_START_ITER`] steps (torch's default warm-up), error feedback on.
pub fn powersgd_registration(rank: u32) -> String {
    format!(
        "state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank={rank}, \
         start_powerSGD_iter={TORCH_DEFAULT_START_ITER})  # plain all-reduce until then\n\
         ddp.register_comm_hook(state, powerSGD.powerSGD_hook)\n"
    )
}

/// [`python_snippet`] with the user's DDP options (as measured) in the constructor, and fp16
/// autocast's gradient scaler where the recipe uses it.
fn python_snippet_for(hook: CommHook, accum: u32, recipe: &Recipe) -> String {
    python_snippet_on(hook, accum, recipe, RunDevice::Cuda)
}

/// The snippet for GPUs over NCCL, or for CPU ranks over gloo (no device ids, no CUDA).
fn python_snippet_on(hook: CommHook, accum: u32, recipe: &Recipe, device: RunDevice) -> String {
    let k = accum.max(1);
    let cpu = device == RunDevice::Cpu;
    let mut s = String::new();
    s.push_str("import contextlib\n");
    if recipe.compile.is_some() {
        s.push_str("import torch\n");
    }
    if cpu {
        s.push_str("import torch.distributed as dist\n");
    }
    if matches!(hook, CommHook::Fp16 | CommHook::Bf16) {
        s.push_str("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n");
    }
    if hook == CommHook::PowerSgd {
        s.push_str(
            "from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD\n",
        );
    }
    s.push_str("from torch.nn.parallel import DistributedDataParallel as DDP\n\n");
    if cpu {
        s.push_str("dist.init_process_group(backend=\"gloo\")  # CPU ranks: gloo\n");
    }
    // CPU ranks take no device ids: the module stays where it is.
    let mut kwargs = if cpu {
        Vec::new()
    } else {
        vec!["device_ids=[local_rank]".to_string()]
    };
    kwargs.extend(recipe.ddp_kwargs());
    if recipe.gradient_as_bucket_view {
        kwargs.push("gradient_as_bucket_view=True".into());
    }
    let args = std::iter::once("model".to_string())
        .chain(kwargs)
        .collect::<Vec<_>>();
    let _ = writeln!(s, "ddp = DDP({})", args.join(", "));
    if recipe.amp == Amp::Fp16 && !cpu {
        s.push_str("# fp16 autocast, as measured: scale the loss (scaler = torch.amp.GradScaler(\"cuda\"); scaler.scale(loss).backward(); scaler.step(opt); scaler.update())\n");
    }
    match hook {
        CommHook::Bf16 => s.push_str(
            "ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)  # gradients travel as bf16\n",
        ),
        CommHook::Fp16 => s.push_str(
            "ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)  # gradients travel as fp16\n",
        ),
        CommHook::PowerSgd => s.push_str(&powersgd_registration(POWERSGD_DEFAULT_RANK)),
        CommHook::None => {}
    }
    // What the loop calls: the DDP model, or its compiled form (no_sync stays DDP's).
    let net = match recipe.compile {
        Some(mode) => {
            let _ = writeln!(
                s,
                "net = {}  # after DDP, as measured: DDPOptimizer makes one graph piece per bucket (bucket_cap_mb sets both)",
                mode.call("ddp")
            );
            "net"
        }
        None => "ddp",
    };
    if k > 1 {
        let _ = write!(
            s,
            "\nACCUM = {k}  # effective batch = micro-batch x {k} x world size: retune the learning rate\n"
        );
        s.push_str("for step in range(num_steps):\n");
        s.push_str("    for k in range(ACCUM):\n");
        s.push_str("        # all-reduce only on the last micro-batch\n");
        s.push_str("        ctx = ddp.no_sync() if k < ACCUM - 1 else contextlib.nullcontext()\n");
        s.push_str("        with ctx:\n");
        let _ = writeln!(s, "            loss = loss_fn({net}, next_batch()) / ACCUM");
        s.push_str("            loss.backward()\n");
    } else {
        s.push_str("\nfor step in range(num_steps):\n");
        let _ = writeln!(s, "    loss = loss_fn({net}, next_batch())");
        s.push_str("    loss.backward()\n");
    }
    s.push_str("    opt.step()\n");
    s.push_str("    opt.zero_grad(set_to_none=True)\n");
    s
}

/// Shell lines for the NCCL environment: unset what fights the node's links, export what an
/// environment A/B measured faster; a comment when nothing changes.
pub(super) fn env_lines(input: &RecommendInput) -> Vec<String> {
    if input.device == RunDevice::Cpu {
        return vec!["# CPU ranks over gloo: no NCCL environment to set".into()];
    }
    let mut env = Vec::new();
    let risk = input.p2p.as_ref();
    let mut unset_level = false;
    if let Some(link) = input.worst_link {
        if !link.is_nvlink() && link.crosses_host_bridge() && p2p_forced(input, link) {
            unset_level = true;
            let why = p2p::unset_level_comment(risk)
                .unwrap_or_else(|| "NCCL's own choice is faster across the host bridge".into());
            env.push(format!("unset NCCL_P2P_LEVEL   # {why}"));
        }
        let disabled = disabled_nvlink_transports(input);
        if link.is_nvlink() && !disabled.is_empty() {
            env.push(format!("unset {}   # keep NVLink", disabled.join(" ")));
        }
    }
    let p2p_off = input
        .nccl_env
        .get("NCCL_P2P_DISABLE")
        .is_some_and(|v| v.trim() == "1");
    let p2p_lines = p2p::env_lines(risk, &input.env_ab, unset_level, p2p_off);
    let exports_disable = p2p_lines.iter().any(|l| l.starts_with("export"));
    env.extend(p2p_lines);
    for ab in input.env_ab.iter().filter(|ab| ab.busbw_ratio >= 1.05) {
        for (k, v) in ab.label.split(',').filter_map(|kv| kv.split_once('=')) {
            let k = k.trim();
            if p2p::refused_candidate(risk, k) {
                env.push(format!(
                    "# not {k}={}: ×{:.2} in the env A/B, but NVML's policy is off here and forced P2P hangs or returns wrong values on these cards",
                    v.trim(),
                    ab.busbw_ratio
                ));
            } else if k == "NCCL_P2P_DISABLE" && exports_disable {
                // Already exported above, with its measurement.
            } else if k.starts_with("NCCL_") {
                env.push(format!(
                    "export {}={}   # all-reduce busbw ×{:.2} in the env A/B",
                    k,
                    v.trim(),
                    ab.busbw_ratio
                ));
            }
        }
    }
    if !env.iter().any(|l| !l.starts_with('#')) {
        env.insert(
            0,
            "# no NCCL environment change: keep the environment that was measured".into(),
        );
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommend::tests::a6000_input;
    use crate::recommend::EnvAb;
    use crate::recommend::P2pRisk;
    use crate::topology::LinkClass;

    fn ddp_line(recipe: &Recipe) -> String {
        let s = python_snippet_for(CommHook::Bf16, 1, recipe);
        s.lines()
            .find(|l| l.starts_with("ddp = DDP("))
            .unwrap()
            .to_string()
    }

    /// The constructor passes the options the run measured, and only those torch does not
    /// default to.
    #[test]
    fn the_ddp_constructor_carries_the_measured_recipe() {
        let default = ddp_line(&Recipe::default());
        assert_eq!(
            default,
            "ddp = DDP(model, device_ids=[local_rank], gradient_as_bucket_view=True)"
        );
        let recipe = Recipe {
            static_graph: true,
            broadcast_buffers: false,
            ..Recipe::default()
        };
        assert_eq!(
            ddp_line(&recipe),
            "ddp = DDP(model, device_ids=[local_rank], static_graph=True, broadcast_buffers=False, gradient_as_bucket_view=True)"
        );
    }

    /// A compiled recipe: DDP first, then torch.compile of the DDP model at the measured mode,
    /// and the loop calls the compiled model while no_sync stays DDP's.
    #[test]
    fn a_compiled_recipe_compiles_the_ddp_model_after_wrapping() {
        let recipe = Recipe {
            compile: Some(crate::ddp::CompileMode::MaxAutotune),
            ..Recipe::default()
        };
        let s = python_snippet_for(CommHook::Bf16, 4, &recipe);
        let at = |needle: &str| s.find(needle).unwrap_or_else(|| panic!("{needle}: {s}"));
        assert!(at("ddp = DDP(model") < at("net = torch.compile(ddp, mode=\"max-autotune\")"));
        assert!(at("register_comm_hook") < at("net = torch.compile"));
        assert!(
            s.contains("loss = loss_fn(net, next_batch()) / ACCUM"),
            "{s}"
        );
        assert!(s.contains("ddp.no_sync()"), "{s}");
        let eager = python_snippet_for(CommHook::Bf16, 4, &Recipe::default());
        assert!(!eager.contains("torch.compile"), "{eager}");
    }

    /// CPU ranks: gloo, no device ids, nothing of CUDA.
    #[test]
    fn the_cpu_snippet_runs_on_gloo_without_cuda() {
        let s = python_snippet_on(CommHook::Fp16, 4, &Recipe::default(), RunDevice::Cpu);
        assert!(
            s.contains("dist.init_process_group(backend=\"gloo\")"),
            "{s}"
        );
        assert!(
            s.contains("ddp = DDP(model, gradient_as_bucket_view=True)"),
            "{s}"
        );
        for cuda in ["device_ids", "cuda", "local_rank", "nccl"] {
            assert!(!s.to_lowercase().contains(cuda), "{cuda}: {s}");
        }
        assert!(
            python_for(true, CommHook::None, 1, &Recipe::default(), RunDevice::Cpu)
                .contains("one CPU rank")
        );
    }

    // The P2P lines rest on the node's own A/B and on NVML's refusal (`p2p`'s policy).
    fn refused_node() -> crate::recommend::RecommendInput {
        let mut input = a6000_input();
        input.worst_link = Some(LinkClass::Phb);
        input.p2p = Some(P2pRisk {
            refused: Some("GPU0–GPU1 (PHB): NVML reports P2P read GPU_NOT_SUPPORTED".into()),
            suspect: Some("GPU0–GPU1 (PHB): NCCL_P2P_LEVEL=SYS forces P2P".into()),
        });
        input.nccl_env.insert("NCCL_P2P_LEVEL".into(), "SYS".into());
        input
    }

    #[test]
    fn the_disable_line_rests_on_the_nodes_own_ab_where_it_ran() {
        let mut input = refused_node();
        input.env_ab.push(EnvAb {
            label: "NCCL_P2P_DISABLE=1".into(),
            busbw_ratio: 1.5,
        });
        let env = env_lines(&input);
        let disable: Vec<&String> = env
            .iter()
            .filter(|l| l.contains("NCCL_P2P_DISABLE=1"))
            .collect();
        assert_eq!(disable.len(), 1, "{env:?}");
        assert!(
            disable[0].contains("measured on this node: all-reduce busbw ×1.50 in the env A/B"),
            "{env:?}"
        );
    }

    #[test]
    fn a_faster_forced_p2p_in_the_ab_is_not_exported_where_the_policy_is_off() {
        let mut input = refused_node();
        input.env_ab.push(EnvAb {
            label: "NCCL_P2P_LEVEL=SYS".into(),
            busbw_ratio: 1.2,
        });
        let env = env_lines(&input);
        assert!(
            !env.iter().any(|l| l.starts_with("export NCCL_P2P_LEVEL")),
            "{env:?}"
        );
        assert!(
            env.iter()
                .any(|l| l.starts_with("# not NCCL_P2P_LEVEL=SYS: ×1.20 in the env A/B")),
            "{env:?}"
        );
        // Without NVML's refusal, the measured gain is exported as before.
        input.p2p = None;
        let env = env_lines(&input);
        assert!(
            env.iter()
                .any(|l| l.starts_with("export NCCL_P2P_LEVEL=SYS")),
            "{env:?}"
        );
    }
}
