//! `ddpcheck bench ddp`: the DDP benchmark command, its table and its SVG plot.

use clap::Args;
use ddpcheck_core::bounded::FileKind;
use ddpcheck_core::ddp::{DdpRequest, DdpVariant, ModelSpec, Reference, RunDevice};
use ddpcheck_core::num::ToF64;
use ddpcheck_core::saved;
use ddpcheck_core::unknown_name::UnknownName;
use ddpcheck_engine::read_file;

use crate::flag_values::parse_u32_list;
use crate::global_args::{make_target, GlobalArgs};
use crate::model_args;
use crate::recipe_args::{self, RecipeArgs, VariantList};
use crate::{print_json, progress, render};
use ddpcheck_engine::RunError;

/// `--reference plain|ddp`.
pub fn parse_reference(s: &str) -> Result<Reference, UnknownName> {
    s.parse()
}

#[derive(Args, Debug)]
pub struct DdpArgs {
    /// Model: your own, py:FILE.py:FUNCTION or py:MODULE:FUNCTION (a factory, docs/recommend.md
    /// "Your own model"); a library's from random weights, torchvision:NAME, timm:NAME,
    /// hf:MODEL_TYPE[,KEY=VALUE...] or hf:PATH/config.json (nothing is downloaded); or a
    /// preset: gpt2-124m, gpt2-355m, decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]][,llama][,ffn=N][,kv=N][,untied],
    /// mlp:WIDTH[,DEPTH], mlp:WIDTHxDEPTH or 'mlp:IN->WIDTHxDEPTH->OUT' (quoted: '>' is a
    /// redirection to the shell). Repeatable.
    #[arg(long = "model", value_parser = model_args::model())]
    pub models: Vec<ModelSpec>,
    /// A decoder from its Hugging Face config.json (GPT-2, LLaMA or Mistral); repeatable.
    #[arg(long = "model-config", value_name = "FILE", value_parser = model_args::model_config())]
    pub model_configs: Vec<ModelSpec>,
    /// MLP width sweep (speedup against parameters, the crossover): mlp:W1,W2,... (square,
    /// depth 4) or 'mlp:IN->W1,W2,...xDEPTH->OUT'.
    #[arg(long, value_name = "mlp:WIDTHS")]
    pub sweep: Option<String>,
    /// Variants, comma-separated: base, bf16, fp16, powersgd (rank 1) or powersgdN (rank N,
    /// 1..=256), accumN, bucketMB, joined with '+'; a wrapper other than DDP: replicate
    /// (FSDP2's replicate()), fsdp (fully_shard per block, resharding after forward),
    /// fsdp-noreshard, hsdp (replicate x shard, 4+ GPUs), each with MixedPrecisionPolicy bf16;
    /// nocomm: no gradient communication at all (N GPUs side by side; an input of `recommend`).
    /// Default: base,bf16,accum4,bf16+accum4; on CPU ranks (gloo, which has no bf16 hook)
    /// base,fp16,accum4,fp16+accum4. Reports name each by its parts in one order (wrapper,
    /// nocomm, hook, accumN, bucketMB, nobucketview): accum4+bf16 is bf16+accum4.
    #[arg(long, value_parser = recipe_args::variants())]
    pub variants: Option<VariantList>,
    /// GPU counts to run, comma-separated (1 is added: speedup is against one GPU). Default:
    /// 1,2, or 1 on a node of one GPU.
    #[arg(long)]
    pub gpus: Option<String>,
    /// Micro-batch per GPU (sequences for decoders; the MLP uses 256 samples when not given).
    #[arg(long)]
    pub micro_batch: Option<u32>,
    #[arg(long, default_value_t = 40)]
    pub steps: u32,
    #[arg(long, default_value_t = 10)]
    pub warmup_steps: u32,
    /// Time at least this many seconds of steps in each run: more than --steps where steps are
    /// short. Runs of one launch then compare to a few percent (recommend's own runs take 2 s).
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    pub min_timed_seconds: f64,
    /// What speedups, efficiency, exposed communication and cost rest on. plain: one GPU
    /// without DDP (the same model, parameters, optimizer and batches called directly), timed
    /// in the 1-GPU launch in blocks interleaved with its DDP steps (doubles that launch's timed
    /// steps); the 1-GPU DDP row then shows DDP's own work (a ratio below 1). ddp: the 1-GPU
    /// step inside DDP, no plain blocks timed.
    #[arg(long, default_value = "plain", value_name = "plain|ddp", value_parser = parse_reference)]
    pub reference: Reference,
    /// Accepted and does nothing: the plain reference is the default (--reference plain).
    #[arg(long, conflicts_with = "reference")]
    pub plain_reference: bool,
    /// Price of the whole node per hour (split over its GPUs for cost per million tokens).
    #[arg(long)]
    pub price_per_hour: Option<f64>,
    /// NCCL_* variable for every run (the regime), NAME=VALUE; repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Hard deadline of each launch, seconds.
    #[arg(long, default_value_t = 600.0)]
    pub deadline: f64,
    /// Launch each configuration N times and report the median (with the launches' spread): one launch of the same command can land several percent from the next
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeats: u32,
    /// Write an SVG plot: speedup against parameters with the y = 1 line, communication share as bars.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Show (and with --plot, draw) a saved `bench ddp --json` report instead of running.
    #[arg(long = "from", value_name = "FILE")]
    pub from: Option<std::path::PathBuf>,
    /// Write the embedded benchmark script into DIR and print, one per line, the torchrun commands
    /// that run the same launches by hand (the reference for ddpcheck's own overhead); runs nothing.
    #[arg(long, value_name = "DIR", hide = true)]
    pub print_manual: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub recipe: RecipeArgs,
}

/// `--print-manual`: the by-hand commands for the launches this request makes.
fn print_manual(req: &DdpRequest, dir: &std::path::Path) -> Result<i32, RunError> {
    use ddpcheck_gpu::ddp;
    std::fs::create_dir_all(dir)
        .map_err(|e| RunError::Usage(format!("--print-manual {}: {e}", dir.display())))?;
    let script = ddp::write_script(dir)
        .map_err(|e| RunError::Usage(format!("--print-manual {}: {e}", dir.display())))?;
    let plan = ddp::plan(req).map_err(RunError::from)?;
    let cfg = ddpcheck_gpu::RealConfig::default();
    for (world, items) in ddp::launch_groups(req, &plan) {
        outln!(
            "{}",
            ddp::manual_command_group(&cfg, req, &items, world, &script)
        );
    }
    Ok(0)
}

/// The models of `--sweep`: `mlp:W1,W2,...` (square, depth 4) or `mlp:IN->W1,W2,...xD->OUT`.
fn sweep_models(sweep: &str) -> Result<Vec<ModelSpec>, RunError> {
    let usage = || {
        RunError::Usage(format!(
            "--sweep {sweep:?}: expected mlp:WIDTH,WIDTH,... or 'mlp:IN->WIDTH,WIDTH,...xDEPTH->OUT'"
        ))
    };
    let number = |s: &str| s.trim().parse::<u32>().map_err(|_| usage());
    let body = sweep.trim().strip_prefix("mlp:").ok_or_else(usage)?;
    let models: Vec<ModelSpec> = match body.split_once("->") {
        None => parse_u32_list(body)?
            .into_iter()
            .map(|width| ModelSpec::square_mlp(width, 4))
            .collect(),
        Some((input, rest)) => {
            let (widths, output) = rest.split_once("->").ok_or_else(usage)?;
            let (widths, depth) = widths.split_once('x').ok_or_else(usage)?;
            let (input, depth, output) = (number(input)?, number(depth)?, number(output)?);
            parse_u32_list(widths)?
                .into_iter()
                .map(|width| ModelSpec::Mlp {
                    width,
                    depth,
                    input: Some(input),
                    output: Some(output),
                })
                .collect()
        }
    };
    for m in &models {
        m.validate()
            .map_err(|e| RunError::Usage(format!("--sweep {sweep:?}: {e}")))?;
    }
    Ok(models)
}

/// The variants run where `--variants` names none; on CPU ranks fp16, since gloo has no bf16
/// hook.
fn default_variants(device: RunDevice) -> Result<Vec<DdpVariant>, RunError> {
    let names = match device {
        RunDevice::Cuda => ["base", "bf16", "accum4", "bf16+accum4"],
        RunDevice::Cpu => ["base", "fp16", "accum4", "fp16+accum4"],
    };
    names
        .iter()
        .map(|v| v.parse().map_err(RunError::usage))
        .collect()
}

pub fn build_request(a: &DdpArgs, node_gpus: Option<usize>) -> Result<DdpRequest, RunError> {
    let mut models: Vec<ModelSpec> = a.models.clone();
    models.extend(a.model_configs.iter().cloned());
    if let Some(sweep) = &a.sweep {
        models.extend(sweep_models(sweep)?);
    }
    if models.is_empty() {
        models.push(ModelSpec::gpt2_124m());
    }
    let device = a.recipe.device;
    let variants = match &a.variants {
        Some(VariantList(given)) => given.clone(),
        None => default_variants(device)?,
    };
    let default_gpus = if node_gpus == Some(1) { "1" } else { "1,2" };
    let mut world_sizes = parse_u32_list(a.gpus.as_deref().unwrap_or(default_gpus))?;
    if !world_sizes.contains(&1) {
        world_sizes.insert(0, 1);
    }
    world_sizes.sort_unstable();
    world_sizes.dedup();
    let mut env = Vec::new();
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| RunError::Usage(format!("--env {kv:?} is not NAME=VALUE")))?;
        if !k.starts_with("NCCL_") {
            return Err(RunError::Usage(format!(
                "--env {k:?}: only NCCL_* variables"
            )));
        }
        env.push((k.to_string(), v.to_string()));
    }
    let only_mlp = models.iter().all(|m| matches!(m, ModelSpec::Mlp { .. }));
    let price_per_gpu_hour = match (a.price_per_hour, node_gpus) {
        (Some(p), Some(n)) if n > 0 => Some(p / n.to_f64()),
        (Some(_), _) => {
            return Err(RunError::Usage(
                "--price-per-hour: the node's GPU count is unknown".into(),
            ))
        }
        (None, _) => None,
    };
    Ok(DdpRequest {
        models,
        variants,
        world_sizes,
        micro_batch: a.micro_batch.unwrap_or(if only_mlp { 256 } else { 8 }),
        warmup_steps: a.warmup_steps,
        steps: a.steps,
        min_timed_s: a.min_timed_seconds,
        price_per_gpu_hour,
        env,
        deadline_s: a.deadline,
        repeats: a.repeats,
        recipe: a.recipe.recipe(),
        device,
        reference: a.reference,
    })
}

/// A saved `bench ddp --json` report of a version this build reads, its figures in range.
pub(crate) fn saved_ddp_report(
    text: &str,
    file: &std::path::Path,
) -> Result<ddpcheck_core::report::DdpReport, RunError> {
    let usage = |e: String| RunError::Usage(format!("--from {}: {e}", file.display()));
    let not_ddp = |e: serde_json::Error| usage(format!("not a bench ddp report: {e}"));
    let v: serde_json::Value = serde_json::from_str(text).map_err(not_ddp)?;
    saved::check_schema_version(&v).map_err(|e| usage(e.to_string()))?;
    let r = serde_json::from_value(v).map_err(not_ddp)?;
    saved::check_ddp(&r).map_err(|e| usage(e.to_string()))?;
    Ok(r)
}

pub fn run(cli: &GlobalArgs, a: &DdpArgs) -> Result<i32, RunError> {
    if let Some(dir) = &a.print_manual {
        return print_manual(&build_request(a, None)?, dir);
    }
    if let Some(file) = &a.from {
        let text = read_file(file, FileKind::Report)
            .map_err(|e| RunError::Usage(format!("--from {}: {e}", file.display())))?;
        return show(cli, a, &saved_ddp_report(&text, file)?);
    }
    let target = make_target(cli)?;
    // The price's split, and the default GPU counts.
    // CPU ranks ask no GPU of the node (there may be none).
    let cpu = a.recipe.device == RunDevice::Cpu;
    let node_gpus = if !cpu && (a.price_per_hour.is_some() || a.gpus.is_none()) {
        Some(target.topo("")?.gpus.len())
    } else {
        None
    };
    let req = build_request(a, node_gpus)?;
    let reporter = progress::Reporter::new();
    let r = target.bench_ddp(&req, &mut |p| reporter.update(p));
    reporter.finish();
    show(cli, a, &r?)
}

/// Prints the report (table or JSON) and draws the plot if asked.
fn show(
    cli: &GlobalArgs,
    a: &DdpArgs,
    r: &ddpcheck_core::report::DdpReport,
) -> Result<i32, RunError> {
    if let Some(path) = &a.plot {
        crate::plot::ddp_svg(r, path)
            .map_err(|e| RunError::Usage(format!("--plot {}: {e}", path.display())))?;
        errln!("ddpcheck: wrote {}", path.display());
    }
    if cli.json {
        print_json(r)?;
    } else {
        out!("{}", render::bench_ddp(r, cli.width()));
    }
    // What finished is shown above; the deadline that stopped the rest is the exit code.
    if let Some(stopped) = &r.stopped {
        let e = stopped.error();
        errln!("ddpcheck: {e} (the runs that finished before it are reported)");
        return Ok(e.exit_code());
    }
    // A model that failed to compile: its eager figures stand, with one line and a warning.
    if let Some(line) = ddpcheck_core::ddp::compile_failure(&r.results) {
        errln!("ddpcheck: {line}");
        return Ok(ddpcheck_core::Verdict::Warning.exit_code());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        a: DdpArgs,
    }

    fn args(v: &[&str]) -> DdpArgs {
        Wrap::try_parse_from(std::iter::once("bench-ddp").chain(v.iter().copied()))
            .unwrap()
            .a
    }

    /// gloo has no bf16 hook (the launch fails with 64): CPU ranks default to fp16.
    #[test]
    fn cpu_ranks_default_to_variants_gloo_runs() {
        let names = |v: &[&str]| -> Vec<String> {
            build_request(&args(v), None)
                .unwrap()
                .variants
                .iter()
                .map(|x| x.name.clone())
                .collect()
        };
        assert_eq!(names(&[]), ["base", "bf16", "accum4", "bf16+accum4"]);
        assert_eq!(
            names(&["--device", "cpu"]),
            ["base", "fp16", "accum4", "fp16+accum4"]
        );
        assert_eq!(names(&["--device", "cpu", "--variants", "base"]), ["base"]);
    }

    /// --compile and --compile-mode reach the request's recipe; an unknown mode is refused
    /// where clap reads it, with the reader's own line.
    #[test]
    fn compile_flags_set_the_recipes_mode() {
        use ddpcheck_core::ddp::CompileMode;
        let mode = |v: &[&str]| build_request(&args(v), None).unwrap().recipe.compile;
        assert_eq!(mode(&[]), None);
        assert_eq!(mode(&["--compile"]), Some(CompileMode::Default));
        assert_eq!(
            mode(&["--compile-mode", "reduce-overhead"]),
            Some(CompileMode::ReduceOverhead)
        );
        let bad = Wrap::try_parse_from(["bench-ddp", "--compile-mode", "fast"])
            .err()
            .unwrap();
        assert_eq!(bad.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(bad.to_string().contains("max-autotune"), "{bad}");
    }

    /// `--variants` is read into its parts where clap reads it, empty items skipped; a bad part
    /// is refused there.
    #[test]
    fn variants_are_read_at_the_edge() {
        let given = args(&["--variants", "bf16+accum4,, fsdp "])
            .variants
            .unwrap();
        let names: Vec<&str> = given.0.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["bf16+accum4", "fsdp"]);
        assert_eq!(given.0[0].hook, ddpcheck_core::ddp::CommHook::Bf16);
        let bad = Wrap::try_parse_from(["bench-ddp", "--variants", "base,turbo"])
            .err()
            .unwrap();
        assert!(bad.to_string().contains("unknown variant part"), "{bad}");
    }

    #[test]
    fn default_gpu_counts_follow_the_node() {
        let worlds = |v: &[&str], node| build_request(&args(v), node).unwrap().world_sizes;
        assert_eq!(worlds(&[], Some(1)), vec![1]);
        assert_eq!(worlds(&[], Some(8)), vec![1, 2]);
        assert_eq!(worlds(&[], None), vec![1, 2]);
        // Given counts stand as given (the engine refuses those beyond the node).
        assert_eq!(worlds(&["--gpus", "4"], Some(1)), vec![1, 4]);
    }
}
