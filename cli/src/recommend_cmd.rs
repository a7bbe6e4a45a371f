//! `ddpcheck recommend`: predicts DDP scaling for a model on this node and recommends settings,
//! from this node's measurements: saved reports (`--from`), the daemon's history, or quick runs
//! (gathered by the engine's `recommend`). Here: the arguments and the text.

use std::path::PathBuf;

use clap::Args;
use ddpcheck_core::ddp::{beyond_noise, ModelSpec, MAX_REPEATS};
use ddpcheck_core::recommend::DEFAULT_TARGET_EFFICIENCY;
use ddpcheck_core::verdict::Verdict;
use ddpcheck_engine::recommend::{
    self, OwnMeasurements, RecommendReport, RecommendRequest, DEFAULT_BUDGET_S,
};
use ddpcheck_engine::saved_runs::SavedRuns;
use ddpcheck_engine::{RunError, Runner};

use crate::flag_values::parse_seconds_up_to_a_day;
use crate::flag_values::FlagValueError;
use crate::global_args::{make_target, GlobalArgs};
use crate::model_args;
use crate::recipe_args::RecipeArgs;
use crate::{print_json, progress};

#[derive(Args, Debug)]
pub struct RecommendArgs {
    /// Model: your own, py:FILE.py:FUNCTION or py:MODULE:FUNCTION (a factory, docs/recommend.md
    /// "Your own model"); a library's from random weights, torchvision:NAME, timm:NAME,
    /// hf:MODEL_TYPE[,KEY=VALUE...] or hf:PATH/config.json; or a preset: gpt2-124m, gpt2-355m,
    /// decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]][,llama][,ffn=N][,kv=N][,untied], mlp:WIDTH[,DEPTH],
    /// mlp:WIDTHxDEPTH or 'mlp:IN->WIDTHxDEPTH->OUT' (quoted: '>' is a redirection to the shell).
    #[arg(long, conflicts_with_all = ["params", "model_config"], value_parser = model_args::model())]
    pub model: Option<ModelSpec>,
    /// Or a decoder from its Hugging Face config.json (GPT-2, LLaMA or Mistral).
    #[arg(long, value_name = "FILE", conflicts_with = "params", value_parser = model_args::model_config())]
    pub model_config: Option<ModelSpec>,
    /// Or only a parameter count: 124M, 1.3B, 350000000.
    #[arg(long, value_parser = parse_count)]
    pub params: Option<u64>,
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub micro_batch: u32,
    /// Tokens a sequence (decoders; 1 to 1,048,576).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub seq: u32,
    /// GPUs the job will use (default: those of the measured all-reduce).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub gpus: Option<u32>,
    /// Price of the whole node per hour (split over its GPUs: the price of a GPU-hour), for the
    /// money N GPUs and one GPU spend per million tokens or samples. A positive number.
    #[arg(long)]
    pub price_per_hour: Option<f64>,
    /// Efficiency to reach (speedup over the GPU count): the simplest change that reaches it is
    /// recommended.
    #[arg(long, default_value_t = DEFAULT_TARGET_EFFICIENCY)]
    pub target_efficiency: f64,
    /// Saved reports to use instead of measuring (`check --json`, `topo --json`, `bench
    /// collectives --json`, `bench ddp --json`); repeatable. Lets a colleague's node be advised
    /// offline. Multi-GPU `bench ddp` runs also give the all-reduce curve (timed in DDP's own
    /// process group), which is read before a sweep.
    #[arg(long = "from", value_name = "FILE")]
    pub from: Vec<PathBuf>,
    /// Compute time of one micro-batch on one GPU, instead of measuring it.
    #[arg(long)]
    pub step_time_ms: Option<f64>,
    /// Estimate compute from FLOPs at this rate (TFLOP/s) instead of measuring (flagged as an estimate).
    #[arg(long, conflicts_with = "step_time_ms")]
    pub estimate_tflops: Option<f64>,
    /// Measure candidate NCCL settings and fold them in (as `bench collectives --env-ab`).
    #[arg(long, value_name = "CANDIDATES")]
    pub env_ab: Option<String>,
    /// Run the DDP benchmark for the baseline and the recommended variant and print predicted against measured.
    #[arg(long)]
    pub verify: bool,
    /// Launch each DDP run (the 1-GPU compute measurement and --verify's runs) N times and use
    /// the median: short steps moved 10-57% between launches of the same command on 2xH200.
    /// With N > 1 it also measures how much the GPUs slow each other side by side (`nocomm`).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REPEATS)))]
    pub repeats: u32,
    /// Keep what this run measures itself in DIR (created), each as the JSON report its own
    /// command writes: sweep.json, the quick runs (ddp-1gpu.json, ddp-nocomm-Ngpu.json),
    /// topo.json and verify.json. `recommend --from` each of them but verify.json, in that
    /// order, gives the same answer offline. One that cannot be written is said on stderr, and
    /// the exit code is then 1 (WARNING).
    #[arg(long, value_name = "DIR")]
    pub save_runs: Option<PathBuf>,
    /// Seconds (at most 86400) recommend may spend measuring before it recommends: every launch and sweep it
    /// runs (the 1-GPU launch; on a node that has not run DDP for this model one N-GPU launch of
    /// plain DDP, its all-reduces in DDP's own process group, the GPUs side by side without
    /// communication and as many likely changes as fit; else an all-reduce sweep; --env-ab's
    /// sweep) runs with the budget's end as its deadline and is stopped there. --verify's runs
    /// come after the recommendation and are not counted. The model is calibrated on the
    /// measured plain DDP and predicts the rest.
    #[arg(long, default_value_t = DEFAULT_BUDGET_S, value_name = "SECONDS", value_parser = parse_seconds_up_to_a_day)]
    pub budget: f64,
    /// Measure only an all-reduce sweep and 1-GPU runs (no N-GPU launch): faster, and less
    /// accurate on slow transports.
    #[arg(long)]
    pub quick: bool,
    /// What the speedups, efficiencies and cost ratios rest on. plain: one GPU without DDP,
    /// timed in its own 1-GPU launch interleaved with the DDP step (or read from a saved 1-GPU
    /// run that carries it); the model's compute is that step and DDP's own work at one GPU a
    /// term of every step. ddp: the 1-GPU step inside DDP, no plain blocks timed.
    #[arg(long, default_value = "plain", value_name = "plain|ddp", value_parser = crate::ddp_cmd::parse_reference)]
    pub reference: ddpcheck_core::ddp::Reference,
    /// Accepted and does nothing: the plain reference is the default (--reference plain).
    #[arg(long, conflicts_with = "reference")]
    pub plain_reference: bool,
    #[command(flatten)]
    pub recipe: RecipeArgs,
}

/// `124M`, `1.3B`, `350000`.
pub fn parse_count(s: &str) -> Result<u64, FlagValueError> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('B') | Some('G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| FlagValueError::NotACount(s.to_string()))?;
    let n = v * mult;
    if !(n.is_finite() && (1e3..=1e13).contains(&n)) {
        return Err(FlagValueError::CountRange(s.to_string()));
    }
    Ok(ddpcheck_core::num::floor_u64(n))
}

impl RecommendArgs {
    /// What the engine is asked for: the model as clap read it (`model_args`).
    pub fn request(&self) -> Result<RecommendRequest, RunError> {
        Ok(RecommendRequest {
            model: self.model.clone().or_else(|| self.model_config.clone()),
            params: self.params,
            micro_batch: self.micro_batch,
            seq: self.seq,
            gpus: self.gpus,
            price_per_hour: self.price_per_hour,
            target_efficiency: self.target_efficiency,
            from: self.from.clone(),
            step_time_ms: self.step_time_ms,
            estimate_tflops: self.estimate_tflops,
            env_ab: self.env_ab.clone(),
            repeats: self.repeats,
            quick: self.quick,
            budget_s: self.budget,
            recipe: self.recipe.recipe(),
            device: self.recipe.device,
            reference: self.reference,
        })
    }
}

/// The report as text, `width` columns wide at most.
pub fn render(r: &RecommendReport, width: crate::width::Width) -> String {
    let mut s = if r.cpu_ranks && r.header.backend == ddpcheck_core::BackendKind::Real {
        // No driver or CUDA version to name: the ranks ran on the host's CPU.
        format!(
            "ddpcheck recommend — host {}, CPU ranks over gloo\n",
            r.header.provenance.hostname
        )
    } else {
        crate::render::banner(&r.header, "recommend")
    };
    if r.cpu_ranks {
        s.push_str("CPU RANKS (gloo): DDP measured on CPU processes, a test of the flow and the model, not GPU figures\n");
    }
    if let Some(own) = &r.own_measurements {
        s.push_str(&own_measurements(own, r.cpu_ranks));
    }
    if let Some(c) = &r.compile {
        s.push_str(&compile_line(c));
    }
    // The lines around the recommendation are prose: they wrap; its own code lines must not.
    let head = crate::render::fit(&s, width);
    let recommendation = crate::render::recommendation(&r.recommendation, width);
    let mut s = String::new();
    let (gpus, one_gpu) = if r.cpu_ranks {
        ("CPU ranks", "one CPU rank")
    } else {
        ("GPUs", "one GPU")
    };
    if !r.verify.is_empty() {
        s.push_str("\n--verify: predicted against measured speedup\n");
        for v in &r.verify {
            let spread = v
                .measured_spread
                .map(|sp| format!("  (launches {:.0}% apart)", sp * 100.0))
                .unwrap_or_default();
            // fill_scaling sets both together, from repeated launches.
            let noise = v
                .measured_uncertainty
                .zip(v.measured_noise_bound)
                .map(|(u, bound)| {
                    let verdict = if beyond_noise(v.error, Some(bound)) {
                        "the error exceeds the measurement's noise"
                    } else {
                        "the error is within the measurement's noise"
                    };
                    format!(
                        "  measured ±{:.1}% (noise up to ±{:.1}% for these launches): {verdict}",
                        u * 100.0,
                        bound * 100.0
                    )
                })
                .unwrap_or_default();
            s.push_str(&format!(
                "  {:<14} {} {gpus}  predicted {:.2}x  measured {:.2}x  error {:+.1}%{spread}{noise}\n",
                v.variant,
                v.world_size,
                v.predicted_speedup,
                v.measured_speedup,
                v.error * 100.0
            ));
        }
    }
    if let Some(n) = &r.verify_network {
        let ratio = n.predicted_busbw_gbps / n.measured_busbw_gbps;
        s.push_str(&format!(
            "  network during these runs ({} run(s) on {} {gpus}, all-reduce alone in DDP's process group): {:.2} GB/s busbw at {}, the predictions read {:.2} GB/s: an all-reduce took {ratio:.2}x the time the model assumed\n",
            n.runs,
            n.world_size,
            n.measured_busbw_gbps,
            ddpcheck_core::units::fmt_bytes(ddpcheck_core::num::ToF64::to_f64(n.bytes)),
            n.predicted_busbw_gbps,
        ));
    }
    if !r.verify_compute.is_empty() {
        let each: Vec<String> = r
            .verify_compute
            .iter()
            .map(|c| {
                format!(
                    "{} {:.2} ms a step, the predictions read {:.2} ms ({:.2}x)",
                    c.variant,
                    c.measured_step_s * 1e3,
                    c.predicted_step_s * 1e3,
                    c.measured_step_s / c.predicted_step_s
                )
            })
            .collect();
        s.push_str(&format!(
            "  {one_gpu} during these runs: {}\n",
            each.join("; ")
        ));
    }
    if let Some(g) = &r.verify_gain {
        let how = match g.measured_uncertainty {
            Some(u) => format!(" ±{:.1}% (within launches)", u * 100.0),
            None => " (one launch each)".to_string(),
        };
        // The same noise test as the rows above, on ln(ratio) so faster and slower weigh alike.
        let verdict = if !beyond_noise(g.measured_ratio.ln(), g.measured_noise_bound) {
            match g.measured_uncertainty {
                Some(_) => "these launches do not tell the two apart",
                None => "one launch each cannot tell the two apart (--repeats 3 or more can)",
            }
        } else if g.measured_ratio > 1.0 {
            "the recommendation pays off on this node"
        } else {
            "the recommendation measured slower than the baseline: keep the baseline"
        };
        s.push_str(&format!(
            "  {} against {} on {} {gpus}: predicted {:.2}x the throughput, measured {:.2}x{how}: {verdict}\n",
            g.variant, g.baseline, g.world_size, g.predicted_ratio, g.measured_ratio
        ));
    }
    if let Some(p) = &r.verify_powersgd {
        let against = p.against_measured_step_s.map_or_else(
            || format!("{} did not run", p.against),
            |m| format!("{} measured {:.2} ms", p.against, m * 1e3),
        );
        s.push_str(&format!(
            "  {} on {} {gpus}: predicted {:.2} ms a step, measured {:.2} ms; {against} (predicted {:.2} ms)\n",
            p.variant,
            p.world_size,
            p.predicted_step_s * 1e3,
            p.measured_step_s * 1e3,
            p.against_predicted_step_s * 1e3
        ));
    }
    format!("{head}{recommendation}{}", crate::render::fit(&s, width))
}

/// One line: what recommend measured itself (each launch's variants as they ran, each sweep),
/// against its budget.
/// The compiled recipe in one line: the mode, the compile time on its own, and that the compute
/// figures below are compiled ones.
fn compile_line(c: &ddpcheck_core::ddp::CompileOutcome) -> String {
    let took = c
        .compile_s
        .map_or_else(|| "?".to_string(), |s| format!("{s:.1} s"));
    let split = match c.ddp_optimizer {
        Some(false) => ", DDPOptimizer off",
        _ => ", DDPOptimizer: one graph piece per bucket",
    };
    format!(
        "compiled: torch.compile (mode {}) after DDP{split}; compile up to {took} a run, outside the timed steps; the compute below is compiled\n",
        c.mode.as_str()
    )
}

fn own_measurements(own: &OwnMeasurements, cpu_ranks: bool) -> String {
    let ranks = |n: u32| {
        let one = if cpu_ranks { "CPU rank" } else { "GPU" };
        format!("{n} {one}{}", if n == 1 { "" } else { "s" })
    };
    let launches = own.launches.iter().map(|l| {
        format!(
            "{} ({}) {:.0} s",
            ranks(l.gpus),
            l.variants.join(", "),
            l.seconds
        )
    });
    let sweeps = own.sweeps.iter().map(|w| {
        format!(
            "all-reduce sweep on {} ({}) {:.0} s",
            ranks(w.gpus),
            w.purpose,
            w.seconds
        )
    });
    let all: Vec<String> = launches.chain(sweeps).collect();
    let mut s = format!(
        "measured here: {}; {:.0} s of the {:.0} s budget\n",
        if all.is_empty() {
            "nothing".to_string()
        } else {
            all.join("; ")
        },
        own.spent_s(),
        own.budget_s
    );
    if let Some(why) = &own.skipped {
        s.push_str(&format!("  {why}\n"));
    }
    s
}

pub fn run(cli: &GlobalArgs, a: &RecommendArgs) -> Result<i32, RunError> {
    let target = make_target(cli)?;
    let req = a.request()?;
    let mut saved = SavedRuns::open(a.save_runs.as_deref())?;
    let reporter = progress::Reporter::new();
    let built = recommend::build(&req, target.as_ref(), &mut saved, &mut |p| {
        reporter.update(p)
    });
    reporter.finish();
    let mut report = built?;
    if a.verify {
        let reporter = progress::Reporter::new();
        let verified =
            recommend::verify(&req, target.as_ref(), &mut report, &mut saved, &mut |p| {
                reporter.update(p)
            });
        reporter.finish();
        verified?;
    }
    if a.save_runs.is_some() && saved.written().is_empty() && saved.failed() == 0 {
        errln!("ddpcheck: --save-runs: nothing was measured here (all from --from or history), nothing kept");
    }
    if !saved.written().is_empty() {
        let files: Vec<String> = saved
            .written()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        errln!(
            "ddpcheck: kept this run's measurements: {}",
            files.join(", ")
        );
    }
    if cli.json {
        print_json(&report)?;
    } else {
        out!("{}", render(&report, cli.width()));
    }
    // Measurements asked to be kept but not kept: the recommendation stands, with a warning.
    Ok(if saved.failed() > 0 {
        Verdict::Warning.exit_code()
    } else {
        0
    })
}

/// The demo's recommendation: gpt2-124m on the simulated node, from the demo node's
/// preflight plus a collective sweep and a 1-GPU run on the same simulated node.
pub fn demo_recommendation(target: &dyn Runner) -> Result<RecommendReport, RunError> {
    let req = RecommendRequest {
        model: Some(ModelSpec::gpt2_124m()),
        params: None,
        micro_batch: 8,
        seq: 1024,
        gpus: None,
        price_per_hour: Some(2.64),
        target_efficiency: 0.85,
        from: Vec::new(),
        step_time_ms: None,
        estimate_tflops: None,
        env_ab: Some("NCCL_P2P_LEVEL=SYS".into()),
        repeats: 1,
        quick: false,
        budget_s: DEFAULT_BUDGET_S,
        recipe: Default::default(),
        device: Default::default(),
        reference: Default::default(),
    };
    let reporter = progress::Reporter::new();
    let built = recommend::build(&req, target, &mut SavedRuns::open(None)?, &mut |p| {
        reporter.update(p)
    });
    reporter.finish();
    built
}
