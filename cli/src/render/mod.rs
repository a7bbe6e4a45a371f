//! Text output of reports: what a person reads. `--json` prints the reports themselves.

mod columns;
mod diff;
mod explain;
mod explain_artifacts;
mod fit;
mod fsdp2;
mod memory;
mod nccl_table;
mod recommend;
mod topology;

pub use diff::diff;
pub use explain::explain;
pub use explain_artifacts::explain_artifacts;
pub use fit::{fit, render as fit_table, table};
pub use memory::memory_plan;
pub use recommend::recommendation;

use comfy_table::Cell;
use ddpcheck_core::ddp::{probe_curve, DdpResult, Reference, RunDevice};
use ddpcheck_core::hostcopy::{self, CopyDirection, HostCopyRun};
use ddpcheck_core::num::ToF64;
use ddpcheck_core::report::{
    BenchCollectivesReport, DdpReport, Header, PreflightReport, TopoReport,
};
use ddpcheck_core::units::fmt_bytes;
use ddpcheck_core::{BackendKind, Severity};
use fit::render;

use crate::width::Width;

/// The first line of every text report: what was measured, and loudly when it was simulated
/// or ran on CPU ranks.
pub fn banner(h: &Header, what: &str) -> String {
    if h.on_cpu_ranks() {
        return format!(
            "ddpcheck {what} — host {}, CPU ranks over gloo (torch {}): CPU figures, not GPU ones\n",
            h.provenance.hostname,
            h.provenance.torch_version.as_deref().unwrap_or("?")
        );
    }
    match h.backend {
        BackendKind::Sim => format!(
            "ddpcheck {what} — SIMULATED NODE ({}), not a measurement of real GPUs\n",
            h.backend_label
        ),
        BackendKind::Real => format!(
            "ddpcheck {what} — host {} (driver {}, CUDA {})\n",
            h.provenance.hostname,
            h.provenance.driver_version.as_deref().unwrap_or("?"),
            h.provenance.cuda_version.as_deref().unwrap_or("?")
        ),
    }
}

pub fn topo(r: &TopoReport) -> String {
    let mut s = banner(&r.header, "topo");
    s.push('\n');
    s.push_str(&topology::topo_m(&r.topology));
    s
}

/// The preflight's steps, host copies, sweep and findings, `width` columns wide at most.
pub fn preflight(r: &PreflightReport, width: Width) -> String {
    let mut s = banner(&r.header, "check");
    let mut steps = table();
    steps.set_header(vec!["step", "seconds", "status", "detail"]);
    for st in &r.steps {
        steps.add_row(vec![
            Cell::new(&st.name),
            Cell::new(format!("{:.3}", st.seconds)),
            Cell::new(format!("{:?}", st.status).to_lowercase()),
            Cell::new(&st.detail),
        ]);
    }
    s.push_str(&format!("\n{}\n", render(steps, width)));
    if let Some(run) = &r.host_copies {
        s.push_str(&host_copies(&r.gpus, run, width));
    }
    if let Some(sw) = &r.all_reduce {
        s.push('\n');
        s.push_str(&nccl_table::sweep(sw, width.tables));
    }
    if let Some(e) = &r.expected {
        s.push_str(&format!("# expected ≈ {:.2} GB/s busbw for {} (warning below {:.0}%, critical below {:.0}%; source: {})\n", e.busbw_gbps, e.class, ddpcheck_core::expect::WARN_RATIO * 100.0, ddpcheck_core::expect::CRITICAL_RATIO * 100.0, e.source));
    }
    if !r.findings.is_empty() {
        let mut f = table();
        f.set_header(vec!["severity", "finding", "message"]);
        let mut sorted: Vec<_> = r.findings.iter().collect();
        sorted.sort_by_key(|x| std::cmp::Reverse(x.severity));
        for x in sorted {
            let sev = match x.severity {
                Severity::Critical => "CRITICAL",
                Severity::Warning => "WARNING",
                Severity::Info => "info",
            };
            f.add_row(vec![
                Cell::new(sev),
                Cell::new(&x.code),
                Cell::new(&x.message),
            ]);
        }
        s.push_str(&format!("\n{}\n", render(f, width)));
    }
    s.push_str(&format!(
        "\nverdict: {} (exit {}) in {:.2} s — {}\n",
        r.verdict, r.exit_code, r.wall_seconds, r.reason
    ));
    fit(&s, width)
}

/// Each GPU's best copy size per direction against its link's capacity and class reference.
pub fn host_copies(
    gpus: &[ddpcheck_core::node_gpus::GpuInfo],
    run: &HostCopyRun,
    width: Width,
) -> String {
    let mut t = table();
    t.set_header(vec![
        "GPU",
        "direction",
        "GB/s",
        "at",
        "link",
        "of capacity",
        "reference",
    ]);
    for c in &run.gpus {
        let g = gpus.iter().find(|g| g.uuid == c.gpu.uuid);
        for d in CopyDirection::BOTH {
            let Some(best) = c.best(d) else { continue };
            let link = g.and_then(hostcopy::link_capacity).map(|(cap, p)| {
                (
                    format!("gen{} x{} ({:.1} GB/s)", p.gen_max, p.width_max, cap / 1e9),
                    format!("{:.0}%", best.gbps * 1e9 / cap * 100.0),
                )
            });
            let (link, share) = link.unwrap_or_else(|| ("?".into(), "?".into()));
            let reference = g
                .and_then(|g| copy_reference_cell(g, d))
                .unwrap_or_else(|| "none for this class".into());
            t.add_row(vec![
                Cell::new(c.gpu.index),
                Cell::new(d.describe()),
                Cell::new(format!("{:.2}", best.gbps)),
                Cell::new(fmt_bytes(best.bytes.to_f64())),
                Cell::new(link),
                Cell::new(share),
                Cell::new(reference),
            ]);
        }
    }
    format!(
        "\n# host↔device copies, pinned memory, best size of each direction (warning below {:.0}% of the link or below the reference)\n{}\n",
        hostcopy::CAPACITY_WARN_RATIO * 100.0,
        render(t, width)
    )
}

/// A GPU's reference for one copy direction: its class's floor, else a consumer card's
/// published range (a figure to read by, not a floor).
fn copy_reference_cell(g: &ddpcheck_core::node_gpus::GpuInfo, d: CopyDirection) -> Option<String> {
    if let Some(r) = hostcopy::reference(g) {
        return Some(format!("≥ {:.0} GB/s ({})", r.min_gbps, r.class));
    }
    let p = hostcopy::published(g)?;
    let (lo, hi) = match d {
        CopyDirection::HostToDevice => p.h2d_gbps,
        CopyDirection::DeviceToHost => p.d2h_gbps,
    };
    Some(format!("published {lo:.1}–{hi:.1} GB/s ({})", p.class))
}

/// The host-copy references of the GPUs, one line per class, with where each number comes from.
pub fn copy_reference_lines(gpus: &[ddpcheck_core::node_gpus::GpuInfo]) -> Vec<String> {
    let mut out: Vec<String> = gpus
        .iter()
        .filter_map(|g| {
            if let Some(r) = hostcopy::reference(g) {
                return Some(format!(
                    "  host copies ≥ {:.0} GB/s each way for {} ({})",
                    r.min_gbps, r.class, r.source
                ));
            }
            let p = hostcopy::published(g)?;
            Some(format!(
                "  host copies published for {}: host-to-device {:.2}–{:.2} GB/s, device-to-host {:.2}–{:.2} GB/s, a reference to read by, not a floor ({})",
                p.class, p.h2d_gbps.0, p.h2d_gbps.1, p.d2h_gbps.0, p.d2h_gbps.1, p.source
            ))
        })
        .collect();
    out.dedup();
    out
}

pub fn bench_collectives(r: &BenchCollectivesReport, width: Width) -> String {
    let torch = r.header.provenance.torch_version.as_deref().unwrap_or("?");
    let mut s = banner(&r.header, "bench collectives");
    for run in &r.runs {
        let library = if r.header.on_cpu_ranks() {
            format!("gloo (torch {torch})")
        } else {
            format!(
                "NCCL {}{}",
                run.run.nccl_version.as_deref().unwrap_or("?"),
                run.run
                    .nccl_library
                    .as_deref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            )
        };
        s.push_str(&format!(
            "\n# environment: {}   {library}   init {:.2} s\n",
            run.label, run.run.init_seconds
        ));
        for sw in &run.run.sweeps {
            s.push_str(&nccl_table::sweep(sw, width.tables));
        }
    }
    if r.runs.len() > 1 {
        s.push_str("\n# A/B: out-of-place busbw (GB/s) per size, candidate / current\n");
        let base = &r.runs[0].run.sweeps;
        for sw in base {
            let mut t = table();
            let mut head = vec![format!("{} size (B)", sw.op), "current".to_string()];
            head.extend(r.runs[1..].iter().map(|x| x.label.clone()));
            t.set_header(head);
            for (i, smp) in sw.samples.iter().enumerate() {
                let cur = smp.out_of_place.busbw_gbps;
                let mut row = vec![smp.bytes.to_string(), format!("{cur:.2}")];
                for other in &r.runs[1..] {
                    let v = other
                        .run
                        .sweeps
                        .iter()
                        .find(|o| o.op == sw.op)
                        .and_then(|o| o.samples.get(i))
                        .map(|o| o.out_of_place.busbw_gbps);
                    row.push(match v {
                        Some(v) if cur > 0.0 => format!("{v:.2} ({:.2}x)", v / cur),
                        Some(v) => format!("{v:.2}"),
                        None => "-".into(),
                    });
                }
                t.add_row(row);
            }
            s.push_str(&format!("{}\n", render(t, width)));
        }
    }
    fit(&s, width)
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

/// One line per `nocomm` run that timed one GPU alone inside its own launches: that step, and
/// the side-by-side slowdown taken launch by launch with its noise bound (what `recommend`
/// weighs).
fn solo_lines(results: &[ddpcheck_core::ddp::DdpResult]) -> Vec<String> {
    results
        .iter()
        .filter_map(|x| {
            let solo = x.solo_step_time_median_s?;
            let slowdown = x.solo_slowdown()?;
            let launches = x.launch_step_medians_s.len().max(1);
            let bound = slowdown.noise_bound.map_or_else(
                || "one launch: no noise bound".to_string(),
                |b| ddpcheck_core::ddp::describe_noise_bound(b, launches),
            );
            Some(format!(
                "{} {} at {} GPUs: one GPU alone in the same {} {:.2} ms a step; side by side x{:.3} ({bound})",
                x.model,
                x.variant,
                x.world_size,
                if launches > 1 { "launches" } else { "launch" },
                solo * 1e3,
                slowdown.ratio
            ))
        })
        .collect()
}

/// One line per 1-GPU run timed beside its model without DDP in the same launch: both steps and
/// the wrapper's own work (DDP's, or an FSDP2 wrapper's), the median of each interleaved round's
/// ratio (`ddp_over_plain`), and torch's peak memory where the launch gave it.
fn plain_lines(results: &[DdpResult]) -> Vec<String> {
    results
        .iter()
        .filter_map(|x| {
            let p = x.plain_reference.as_ref()?;
            let ratio = p.ddp_over_plain()?;
            let wrapper = x
                .variant
                .parse::<ddpcheck_core::ddp::DdpVariant>()
                .map_or(ddpcheck_core::ddp::Wrapper::Ddp, |v| v.wrapper());
            let (under, own) = match wrapper {
                ddpcheck_core::ddp::Wrapper::Ddp => ("in DDP".to_string(), "DDP's".to_string()),
                w => (format!("under {w}"), format!("{w}'s")),
            };
            let wrapped = if wrapper == ddpcheck_core::ddp::Wrapper::Ddp {
                "DDP"
            } else {
                "it"
            };
            let peak = x.max_memory_bytes.map_or(String::new(), |b| {
                format!("; peak memory {}", fmt_bytes(b.to_f64()))
            });
            Some(format!(
                "{} {} at {} GPU(s): {:.2} ms a step {under}, {:.2} ms without {wrapped} in the same launch; {own} own work {:+.1}% (ddp_over_plain {ratio:.3}, median of {} interleaved rounds){peak}",
                x.model,
                x.variant,
                x.world_size,
                x.step_time_median_s * 1e3,
                p.step_time_median_s * 1e3,
                (ratio - 1.0) * 100.0,
                p.rounds.len()
            ))
        })
        .collect()
}

/// The table's footer: what the speedups rest on, said once (each row's `reference` in --json).
fn reference_line(results: &[DdpResult]) -> String {
    let scaled = || results.iter().filter(|x| x.speedup.is_some());
    let on_ddp: Vec<String> = scaled()
        .filter(|x| x.reference == Reference::Ddp)
        .map(|x| format!("{} {} at {}", x.model, x.variant, x.world_size))
        .collect();
    let any_plain = scaled().any(|x| x.reference == Reference::Plain);
    let against = match (any_plain, on_ddp.is_empty()) {
        (true, true) => "1 GPU without DDP (the same model and recipe, timed in the 1-GPU launch; the 1-GPU DDP row shows DDP's own work)".to_string(),
        (true, false) => format!(
            "1 GPU without DDP where its 1-GPU run timed it; {} against 1 GPU inside DDP",
            on_ddp.join(", ")
        ),
        (false, _) => "1 GPU inside DDP (reference ddp: DDP's own work at world size one included)".to_string(),
    };
    format!("speedup: against {against}, of the same model and variant without its comm hook (weak scaling); exposed comm: (step_N − step_1) / step_N\n")
}

/// One line per compiled run: its compile time, on its own (never inside a step), and whether
/// DDPOptimizer split the graph at the buckets; or the compiler's first line where it failed and
/// the run ran eager.
pub fn compile_lines(results: &[DdpResult]) -> Vec<String> {
    results
        .iter()
        .filter_map(|x| {
            let c = x.compile.as_ref()?;
            let run = format!("{} {} at {} GPU(s)", x.model, x.variant, x.world_size);
            if let Some(error) = &c.error {
                return Some(format!(
                    "{run}: torch.compile (mode {}) failed: {error}; its figures are eager",
                    c.mode.as_str()
                ));
            }
            let secs = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |s| format!("{s:.1} s"));
            let plain = c
                .plain_compile_s
                .map_or_else(String::new, |p| format!(", {} without DDP", secs(Some(p))));
            let split = match c.ddp_optimizer {
                Some(true) => "; DDPOptimizer: one compiled graph piece per DDP bucket",
                Some(false) => "; DDPOptimizer off (torch._dynamo.config.optimize_ddp): no overlap of the all-reduces with the backward pass",
                None => "",
            };
            let settled = if c.steady {
                "until steady"
            } else {
                "without settling"
            };
            Some(format!(
                "{run}: compiled (torch.compile, mode {}): compile {}{plain}, outside the timed steps ({} warm-up steps {settled}){split}",
                c.mode.as_str(),
                secs(c.compile_s),
                c.warmup_steps
            ))
        })
        .collect()
}

/// How many steps the runs timed, where they did not all time the same count (a minimum timed
/// stretch lengthened the short ones); nothing for reports that do not say.
fn timed_steps_line(results: &[ddpcheck_core::ddp::DdpResult]) -> Option<String> {
    let counts: Vec<u32> = results.iter().filter_map(|x| x.timed_steps).collect();
    let (lo, hi) = (counts.iter().min()?, counts.iter().max()?);
    (lo != hi).then(|| {
        format!("timed steps: {lo} to {hi} a run (short steps stretched to --min-timed-seconds)")
    })
}

/// Per GPU count, what the runs' all-reduce probes (timed alone in their own process group
/// before their steps) measured at the largest and smallest size: the curve `recommend` reads.
fn probe_lines(results: &[ddpcheck_core::ddp::DdpResult]) -> Vec<String> {
    let mut worlds: Vec<u32> = results
        .iter()
        .filter(|x| x.all_reduce_probe.is_some())
        .map(|x| x.world_size)
        .collect();
    worlds.sort_unstable();
    worlds.dedup();
    worlds
        .into_iter()
        .filter_map(|n| {
            let (m, runs) = probe_curve(results, n)?;
            let (small, large) = (m.samples.first()?, m.samples.last()?);
            Some(format!(
                "all-reduce alone in DDP's process group before the steps ({n} GPUs, median of {runs} run(s)): {} in {:.3} ms ({:.2} GB/s busbw), {} in {:.3} ms",
                fmt_bytes(large.bytes.to_f64()),
                large.out_of_place.time_us / 1e3,
                large.out_of_place.busbw_gbps,
                fmt_bytes(small.bytes.to_f64()),
                small.out_of_place.time_us / 1e3,
            ))
        })
        .collect()
}

/// Whether torch's own buckets are ddpcheck's in the recipe's assignment `order`: "the same
/// buckets" only where every tensor is in the same bucket and torch's logged bucket sizes (where
/// it logged them) are the lists'.
pub(crate) fn bucket_agreement(
    tb: &ddpcheck_core::ddp::TorchBuckets,
    layout: &ddpcheck_core::ddp::ParamLayout,
    order: ddpcheck_core::ddp::BucketOrder,
    trainable_tensors: u32,
) -> String {
    let moved = tb.moved(layout, order);
    let ours = layout
        .ddp_buckets_in(order, tb.cap_bytes, tb.first_cap_bytes)
        .len();
    let kept = match order {
        ddpcheck_core::ddp::BucketOrder::Constructor => {
            "; DDP keeps its constructor's buckets under find_unused_parameters"
        }
        ddpcheck_core::ddp::BucketOrder::Rebuilt => "",
    };
    if moved > 0 {
        return format!(
            "{ours} buckets, torch's own ({}) {}; {moved} of {trainable_tensors} tensors in another bucket than torch's: their gradients are ready in another order than registration's{kept}",
            tb.source,
            tb.buckets.len(),
        );
    }
    match tb.sizes_agree(layout) {
        Some(false) => format!(
            "{ours} buckets with the same tensors as torch's own ({}), but torch logged bucket sizes {:?} bytes that are not theirs",
            tb.source,
            tb.sizes_bytes.as_deref().unwrap_or_default()
        ),
        _ => format!(
            "the same {} buckets as torch's own ({}){kept}",
            tb.buckets.len(),
            tb.source
        ),
    }
}

/// Per model: its tensors and DDP's buckets from the parameters torch reported, and whether
/// torch's own bucket assignment agrees with ddpcheck's.
fn layout_lines(results: &[DdpResult]) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for x in results {
        let Some(layout) = &x.param_layout else {
            continue;
        };
        if !seen.insert(x.model.clone()) {
            continue;
        }
        let frozen = layout.trainable_params() != layout.total_params();
        let order = x
            .recipe
            .as_ref()
            .map(|r| r.bucket_order())
            .unwrap_or_default();
        let line = match &x.torch_buckets {
            Some(tb) => {
                let summary = layout.summary(order, tb.cap_bytes, tb.first_cap_bytes);
                let agree = bucket_agreement(tb, layout, order, summary.trainable_tensors);
                format!(
                    "{}: {}; {agree}",
                    x.model,
                    recommend::layout_line(&summary, frozen)
                )
            }
            None => {
                let summary = layout.summary(order, 25 << 20, 1 << 20);
                format!("{}: {}", x.model, recommend::layout_line(&summary, frozen))
            }
        };
        out.push(line);
    }
    out
}

pub fn bench_ddp(r: &DdpReport, width: Width) -> String {
    let mut s = banner(&r.header, "bench ddp");
    if r.results.iter().any(|x| x.device == RunDevice::Cpu) {
        s.push_str("CPU RANKS (gloo): a test of the benchmark and the model, not a GPU measurement; \"GPUs\" below are CPU processes\n");
    }
    let mut t = table();
    // Repeated launches: how far apart they landed, next to the median they give.
    let repeated = r.results.iter().any(|x| x.launch_spread().is_some());
    let mut header = vec![
        "model",
        "params",
        "variant",
        "GPUs",
        "step p50 (ms)",
        "step p90 (ms)",
        "throughput",
        "speedup",
        "efficiency",
        "exposed comm",
        "$/M",
    ];
    if repeated {
        header.push("launches (spread)");
    }
    t.set_header(header);
    for x in &r.results {
        let mut row = vec![
            x.model.clone(),
            format!("{:.1}M", x.params.to_f64() / 1e6),
            x.variant.clone(),
            x.world_size.to_string(),
            format!("{:.1}", x.step_time_median_s * 1e3),
            format!("{:.1}", x.step_time_p90_s * 1e3),
            format!("{:.0} {}", x.throughput, x.throughput_unit),
            match (x.speedup, x.speedup_uncertainty) {
                (Some(v), Some(u)) => format!("{v:.2}x ±{:.1}%", u * 100.0),
                (v, _) => opt(v, |v| format!("{v:.2}x")),
            },
            opt(x.efficiency, |v| format!("{:.0}%", v * 100.0)),
            opt(x.exposed_comm_fraction, |v| format!("{:.0}%", v * 100.0)),
            opt(x.cost_per_million, |v| format!("{v:.3}")),
        ];
        if repeated {
            row.push(match x.launch_spread() {
                Some(sp) => format!("{} ({:.1}%)", x.launch_step_medians_s.len(), sp * 100.0),
                None => "1".into(),
            });
        }
        t.add_row(row);
    }
    s.push_str(&format!("\n{}\n", render(t, width)));
    s.push_str(&reference_line(&r.results));
    if repeated {
        s.push_str("steps: the median over the launches of each launch's median step; spread: (slowest − fastest launch) / median\n");
    }
    if r.results.iter().any(|x| x.speedup_uncertainty.is_some()) {
        s.push_str("±: the speedup's standard error from how far the launches at 1 and N GPUs spread; differences within Student's t times it (about 2 with many launches, 4-13 with two or three: speedup_noise_bound in --json) are not measured\n");
    }
    if let Some(line) = timed_steps_line(&r.results) {
        s.push_str(&line);
        s.push('\n');
    }
    for line in probe_lines(&r.results) {
        s.push_str(&line);
        s.push('\n');
    }
    for line in layout_lines(&r.results) {
        s.push_str(&line);
        s.push('\n');
    }
    let nocomm = r.results.iter().any(|x| {
        x.variant
            .parse::<ddpcheck_core::ddp::DdpVariant>()
            .is_ok_and(|v| v.nocomm)
    });
    if nocomm {
        s.push_str("nocomm: no gradient communication at all; its exposed comm is what N GPUs side by side cost each other\n");
    }
    for line in solo_lines(&r.results) {
        s.push_str(&line);
        s.push('\n');
    }
    for line in plain_lines(&r.results) {
        s.push_str(&line);
        s.push('\n');
    }
    for line in fsdp2::fsdp2_lines(&r.results) {
        s.push_str(&line);
        s.push('\n');
    }
    for line in compile_lines(&r.results) {
        s.push_str(&line);
        s.push('\n');
    }
    let caveats = ddpcheck_core::caveats::ddp_caveats(&r.results);
    if !caveats.is_empty() {
        s.push_str("caveats:\n");
        for c in caveats {
            s.push_str(&format!("  - {c}\n"));
        }
    }
    fit(&s, width)
}
