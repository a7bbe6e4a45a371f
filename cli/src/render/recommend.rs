//! The recommendation as text: what it read, the variants' table, the choice, reasons,
//! warnings, Python and environment lines.

use std::fmt::Write as _;

use ddpcheck_core::ddp::{CommHook, LayoutSummary, Reference, RunDevice};
use ddpcheck_core::num::ToF64;
use ddpcheck_core::recommend::{PowerSgdOffer, Recommendation, VariantRow};
use ddpcheck_core::units::{fmt_bytes, fmt_count, fmt_money, fmt_s};

use super::columns::layout;
use super::fit::{fit, fit_code};
use crate::width::Width;

/// Plain-text report, `width` columns wide at most: the table, the recommendation, reasons,
/// warnings, Python, environment.
pub fn recommendation(r: &Recommendation, width: Width) -> String {
    // Where DDP does not fit, the answer rests on memory alone: no variants' table.
    let mut s = if r.rows.is_empty() && r.memory.is_some() {
        String::new()
    } else {
        let mut s = fit(&inputs(r), width);
        s.push('\n');
        s.push_str(&layout(&table(r), width.tables));
        s
    };
    if let Some(plan) = &r.memory {
        s.push('\n');
        s.push_str(&super::memory::memory_plan(plan, width));
    }
    let mut prose = wrappers(r);
    let _ = write!(prose, "\nRecommendation: {}\n", r.summary);
    if !r.reasons.is_empty() {
        prose.push_str("\nWhy:\n");
        for x in &r.reasons {
            let _ = writeln!(prose, "  - {}\n      rests on: {}", x.text, x.rests_on);
        }
    }
    if !r.warnings.is_empty() {
        prose.push_str("\nWarnings:\n");
        for w in &r.warnings {
            let _ = writeln!(
                prose,
                "  ! [{}] {}\n      rests on: {}",
                w.code, w.text, w.rests_on
            );
        }
    }
    s.push_str(&fit(&prose, width));
    if let Some(o) = &r.powersgd {
        s.push_str(&powersgd(o, width));
    }
    s.push_str("\nPython:\n");
    for l in r.python.lines() {
        s.push_str(&fit_code(&format!("    {l}"), width));
    }
    s.push_str("\nEnvironment:\n");
    for l in &r.env {
        s.push_str(&fit_code(&format!("    {l}"), width));
    }
    s
}

/// PowerSGD against the casting hook: the rank offered with its predicted step and its costs
/// (numerics, error-feedback memory, warm-up) and registration lines, or why none is offered.
///
/// Before it, where DDP fits: the FSDP2 wrappers weighed beside it, one line each.
fn wrappers(r: &Recommendation) -> String {
    let mut s = String::new();
    let one = unit(r.device);
    if let Some(first) = r.wrapper_rows.first() {
        let _ = writeln!(
            s,
            "\nFSDP2's wrappers at {} (one {one}'s plain step = 1×):",
            ranks(r.device, first.gpus)
        );
    }
    for w in &r.wrapper_rows {
        let step = w.measured_step_s.or(w.predicted_step_s).unwrap_or(0.0);
        let _ = writeln!(
            s,
            "  {:<15} {:.2}×, {:.2} ms a micro-batch ({}); own work at one {one}: {}",
            w.wrapper.as_str(),
            w.speedup,
            step * 1e3,
            if w.measured { "measured" } else { "predicted" },
            w.own_how
        );
    }
    s
}

fn powersgd(o: &PowerSgdOffer, width: Width) -> String {
    let cast = match o.against {
        CommHook::Fp16 => "fp16",
        _ => "bf16",
    };
    let mut s = String::from("\nPowerSGD:\n");
    let Some(rank) = o.rank else {
        let why = o
            .why_not
            .as_deref()
            .unwrap_or("no rank beats the casting hook");
        let _ = writeln!(s, "  not offered: {why}");
        return fit(&s, width);
    };
    let row = o.rows.iter().find(|x| x.rank == rank);
    let step = row.and_then(|x| x.step_s).unwrap_or(f64::NAN);
    let compute = row.and_then(|x| x.compute_s).unwrap_or(f64::NAN);
    let _ = writeln!(
        s,
        "  rank {rank} beats {cast}: {} a step predicted against {}, {} on the wire, its compression {} a step as measured on one rank",
        fmt_s(step),
        fmt_s(o.against_step_s),
        fmt_bytes(row.map_or(f64::NAN, |x| x.wire_bytes)),
        fmt_s(compute)
    );
    let _ = writeln!(s, "  numerics: {}", o.numerics);
    let _ = writeln!(
        s,
        "  memory: error feedback keeps {} (the gradients' size) for the whole training",
        fmt_bytes(o.error_feedback_bytes)
    );
    let _ = writeln!(
        s,
        "  warm-up: plain all-reduce for the first {} steps (start_powerSGD_iter)",
        o.start_iter
    );
    if let Some(cite) = &o.rests_on {
        let _ = writeln!(s, "      rests on: {cite}");
    }
    let mut s = fit(&s, width);
    for l in o.snippet.iter().flat_map(|x| x.lines()) {
        s.push_str(&fit_code(&format!("    {l}"), width));
    }
    s
}

/// `161 tensors, 25.6M trainable (102 MB a step), 5 buckets of 25 MiB`: what DDP sends, from
/// the model's own parameter list.
pub fn layout_line(l: &LayoutSummary, some_frozen: bool) -> String {
    format!(
        "{} tensors{}, {} trainable parameters ({} a step), {} DDP bucket{} at {} cap",
        l.tensors,
        if some_frozen {
            format!(" ({} trainable)", l.trainable_tensors)
        } else {
            String::new()
        },
        fmt_count(l.trainable_params.to_f64()),
        fmt_bytes(l.gradient_bytes.to_f64()),
        l.buckets,
        if l.buckets == 1 { "" } else { "s" },
        fmt_bytes(l.cap_bytes.to_f64())
    )
}

/// The heading lines: the model, the compute time, the all-reduce curve and the overheads.
fn inputs(r: &Recommendation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "ddpcheck recommend: {} ({} parameters{}), micro-batch {}, {}",
        r.model,
        fmt_count(r.params.to_f64()),
        r.trainable_params
            .map(|t| format!(", {} trainable", fmt_count(t.to_f64())))
            .unwrap_or_default(),
        r.micro_batch,
        ranks(r.device, r.gpus)
    );
    if let Some(l) = &r.layout {
        let _ = writeln!(
            s,
            "gradients: {}",
            layout_line(l, r.trainable_params.is_some())
        );
    }
    let _ = writeln!(s, "compute:   {}", r.compute.describe());
    let _ = writeln!(s, "reference: {}", reference(r));
    let _ = writeln!(
        s,
        "all-reduce: busbw {:.2} GB/s at {}, α {:.1} µs, {} ranks, {}",
        r.curve.busbw_at_bucket_gbps,
        fmt_bytes(r.curve.bucket_bytes.to_f64()),
        r.curve.alpha_us,
        r.curve.ranks,
        r.curve.provenance
    );
    let _ = writeln!(s, "overheads: {}", r.overheads_source);
    s
}

/// What the speedups, efficiencies and costs rest on, once, with DDP's own work where measured.
fn reference(r: &Recommendation) -> String {
    let one = if r.device == RunDevice::Cpu {
        "one CPU rank"
    } else {
        "one GPU"
    };
    let own = r.ddp_over_plain.map(|x| {
        format!(
            "DDP's own work at {one} {:+.1}% (ddp_over_plain {x:.3})",
            (x - 1.0) * 100.0
        )
    });
    match (r.reference, own) {
        (Reference::Plain, Some(own)) => format!(
            "{one} without DDP (speedups, efficiencies, costs); {own}, part of every step in DDP"
        ),
        (Reference::Plain, None) => format!("{one} without DDP (speedups, efficiencies, costs)"),
        (Reference::Ddp, Some(own)) => format!(
            "{one} inside DDP (--reference ddp); {own}: against {one} without DDP each speedup is that much lower"
        ),
        (Reference::Ddp, None) => format!(
            "{one} inside DDP (no step without DDP measured: DDP's own work at {one} is in the reference)"
        ),
    }
}

/// The table's cells, header first: one GPU, then every variant. The cost column shows where
/// a price was given (at the measured speedup where the node measured the row, said so), the
/// measured one where the node measured a variant.
fn table(r: &Recommendation) -> Vec<Vec<String>> {
    let cost_col = r.rows.iter().any(|x| x.cost_per_million.is_some());
    let measured_col = r.rows.iter().any(|x| x.measured.is_some());
    let unit_word = r.throughput_unit.trim_end_matches("/s");
    let mut header = vec![
        "variant".to_string(),
        "step".into(),
        r.throughput_unit.clone(),
        "speedup".into(),
        "efficiency".into(),
        "comm share".into(),
    ];
    if cost_col {
        header.push(format!("$/M {unit_word}"));
    }
    header.push("target".into());
    if measured_col {
        header.push("measured".into());
    }
    let mut one = vec![
        ranks(r.device, 1),
        fmt_s(r.single_gpu.step_s),
        fmt_count(r.single_gpu.throughput),
        "1.00×".into(),
        "100%".into(),
        "0%".into(),
    ];
    if cost_col {
        one.push(
            r.single_gpu
                .cost_per_million
                .map(fmt_money)
                .unwrap_or_default(),
        );
    }
    one.push(String::new());
    if measured_col {
        one.push(String::new());
    }
    let mut table = vec![header, one];
    // Where the model missed a measured row, the other rows' target is still its prediction.
    let unreliable = r.model_check.as_ref().is_some_and(|c| !c.reliable);
    for row in &r.rows {
        let marked = unreliable && row.measured.is_none();
        table.push(variant_cells(
            row,
            &r.chosen,
            (cost_col, measured_col),
            marked,
        ));
    }
    table
}

/// One variant's cells; the chosen one is marked `<` beside its target column, a target the
/// model predicted under an unreliable model `(predicted)`. `columns`: whether the cost and
/// the measured columns show.
fn variant_cells(
    r: &VariantRow,
    chosen: &str,
    (cost_col, measured_col): (bool, bool),
    predicted_target: bool,
) -> Vec<String> {
    let p = &r.prediction;
    let mut line = vec![
        r.variant.clone(),
        fmt_s(p.step_s),
        fmt_count(p.throughput),
        format!("{:.2}×", p.speedup),
        format!("{:.0}%", p.efficiency * 100.0),
        format!("{:.0}%", p.comm_share * 100.0),
    ];
    if cost_col {
        // A measured row's cost rests on its measured speedup, as the recommendation's does.
        line.push(match r.cost_per_million {
            Some(c) if r.cost_measured => format!("{} measured", fmt_money(c)),
            Some(c) => fmt_money(c),
            None => String::new(),
        });
    }
    let mark = if r.variant == chosen { " <" } else { "" };
    line.push(format!(
        "{}{}{mark}",
        if r.reaches_target { "yes" } else { "no" },
        if predicted_target { " (predicted)" } else { "" }
    ));
    if measured_col {
        line.push(match &r.measured {
            Some(m) => match m.uncertainty {
                Some(u) => format!("{:.2}× ±{:.1}%", m.speedup, u * 100.0),
                None => format!("{:.2}×", m.speedup),
            },
            // Every row says which it is: the speedup column is the model's throughout.
            None => "predicted".into(),
        });
    }
    line
}

/// `GPU` or `CPU rank`: what one rank runs on.
fn unit(device: RunDevice) -> &'static str {
    match device {
        RunDevice::Cuda => "GPU",
        RunDevice::Cpu => "CPU rank",
    }
}

/// `2 GPUs`, `1 CPU rank`: what the ranks run on.
fn ranks(device: RunDevice, n: u32) -> String {
    format!("{n} {}{}", unit(device), if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::recommend::{recommend, MeasuredSpeedup, PowerSgdMeasured};
    use ddpcheck_core::step_time::LinkCurve;

    /// Wide enough that no line wraps: these tests read the content, not its layout.
    const WIDE: Width = Width {
        tables: 1000,
        lines: Some(1000),
    };

    use ddpcheck_testkit::a6000_input;

    #[test]
    fn the_table_shows_what_the_node_measured_beside_the_prediction() {
        let header = |text: &str| {
            let line = text.lines().find(|l| l.starts_with("variant")).unwrap();
            line.to_string()
        };
        let plain = recommendation(&recommend(&a6000_input()).unwrap(), WIDE);
        assert!(header(&plain).ends_with("target"), "{plain}");
        let mut input = a6000_input();
        input.measured = vec![MeasuredSpeedup {
            variant: "base".into(),
            speedup: 2.5,
            uncertainty: Some(0.05),
            noise_bound: Some(0.1),
            rests_on: "bench ddp of base".into(),
        }];
        let text = recommendation(&recommend(&input).unwrap(), WIDE);
        assert!(text.contains("measured"));
        assert!(header(&text).ends_with(" measured"), "{text}");
        assert!(text.contains("2.50× ±5.0%"), "{text}");
    }

    #[test]
    fn the_chosen_rows_cost_is_the_recommendations_with_its_source() {
        // A fast link (plain DDP reaches the target), plain DDP measured 5% below its prediction.
        let r = recommend(&ddpcheck_testkit::a6000_fast_base_measured()).unwrap();
        let text = recommendation(&r, WIDE);
        let said = fmt_money(r.answer.as_ref().unwrap().cost_per_million.unwrap());
        let line = text
            .lines()
            .find(|l| l.starts_with("Recommendation:"))
            .unwrap();
        assert!(
            line.contains(&said) && line.contains("(measured)"),
            "{line}"
        );
        let row = text.lines().find(|l| l.starts_with("base ")).unwrap();
        assert!(
            row.contains(&format!("{said} measured")),
            "{said}: {row}\n{text}"
        );
        // A row nobody measured: its cost is the model's, and the row says so.
        let bf16 = text.lines().find(|l| l.starts_with("bf16 ")).unwrap();
        assert!(!bf16.contains(" measured"), "{bf16}");
        assert!(bf16.ends_with("predicted"), "{bf16}");
    }

    #[test]
    fn under_an_unreliable_model_the_target_column_marks_predictions() {
        // Plain DDP measured at half its prediction: the model misses it.
        let r = recommend(&ddpcheck_testkit::a6000_unreliable()).unwrap();
        assert!(!r.model_check.as_ref().unwrap().reliable);
        let text = recommendation(&r, WIDE);
        let row = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap()
                .to_string()
        };
        // The measured row's target is its measurement's; every other row's is the model's.
        assert!(!row("base").contains("(predicted)"), "{}", row("base"));
        for name in ["bf16", "accum8", "bf16+accum8"] {
            let line = row(name);
            assert!(
                line.contains("yes (predicted)") || line.contains("no (predicted)"),
                "{line}"
            );
        }
        // With a reliable model nothing is marked: the measured column says which rows are
        // predictions.
        let text = recommendation(&recommend(&a6000_input()).unwrap(), WIDE);
        assert!(
            !text.contains("yes (predicted)") && !text.contains("no (predicted)"),
            "{text}"
        );
    }

    #[test]
    fn the_text_says_the_reference_once() {
        let text = recommendation(&recommend(&a6000_input()).unwrap(), WIDE);
        assert!(
            text.contains("reference: one GPU inside DDP (no step without DDP measured"),
            "{text}"
        );
        let mut input = a6000_input();
        input.ddp_own_work = Some(ddpcheck_core::recommend::DdpOwnWork {
            ddp_step_s: 0.1508,
            plain_step_s: 0.130,
            ratio: 1.16,
            noise_bound: None,
            rests_on: "a test".into(),
        });
        let text = recommendation(&recommend(&input).unwrap(), WIDE);
        assert!(
            text.contains("reference: one GPU without DDP (speedups, efficiencies, costs); DDP's own work at one GPU +16.0% (ddp_over_plain 1.160)"),
            "{text}"
        );
        assert_eq!(text.matches("reference: ").count(), 1, "{text}");
    }

    #[test]
    fn the_a6000_text_reads_the_same_after_a_json_round_trip() {
        let input = ddpcheck_testkit::a6000_p2p_level_sys();
        let r = recommend(&input).unwrap();
        let text = recommendation(&r, WIDE);
        for want in [
            "bf16+accum8",
            "1 GPU",
            "Recommendation:",
            "rests on:",
            "$/M tokens",
            "$0.00",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
        let json = serde_json::to_string(&r).unwrap();
        let back: Recommendation = serde_json::from_str(&json).unwrap();
        // serde_json may change the last bit of a float: compare the text.
        assert_eq!(recommendation(&back, WIDE), text);
    }

    #[test]
    fn the_powersgd_offer_is_said_with_its_costs_and_its_rank_in_the_snippet() {
        let mut input = a6000_input();
        input.curve = LinkCurve::flat(4, 1.0, 50e-6).unwrap();
        let text = recommendation(&recommend(&input).unwrap(), WIDE);
        assert!(
            text.contains("PowerSGD:\n  not offered: compression compute unmeasured: run bench ddp --gpus 1 --variants base,powersgd4"),
            "{text}"
        );
        input.powersgd_compute = vec![PowerSgdMeasured {
            rank: 2,
            compute_s: 0.012,
            rests_on: "1-GPU powersgd2 run over base (test)".into(),
        }];
        let text = recommendation(&recommend(&input).unwrap(), WIDE);
        for want in [
            "rank 2 beats bf16:",
            "numerics: PowerSGD is a biased compressor",
            "72.5%",
            "memory: error feedback keeps",
            "warm-up: plain all-reduce for the first 1000 steps",
            "rests on: 1-GPU powersgd2 run over base (test)",
            "matrix_approximation_rank=2,",
            "import powerSGD_hook as powerSGD",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
    }
}
