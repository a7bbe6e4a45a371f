//! Which wrapper where DDP fits: each FSDP2 wrapper that fits, its step at the job's GPU count
//! predicted by FSDP2's model (or measured), set against the DDP variant chosen. Measurements
//! overrule the model: a wrapper replaces DDP's answer only where the node measured it faster by
//! more than the model's tolerance; one predicted faster is named with the command that
//! measures it.

use serde::{Deserialize, Serialize};

use crate::ddp::{Amp, Wrapper};

use super::fit::describe;
use super::{fsdp2_snippet, Recommendation, Warning, MODEL_TOLERANCE};

/// One FSDP2 wrapper at the job's GPU count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WrapperRow {
    pub wrapper: Wrapper,
    pub gpus: u32,
    /// Seconds of one micro-batch's step, predicted (`None` where the model lacked a curve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_step_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_step_s: Option<f64>,
    /// N GPUs' throughput over one GPU's plain step: the measured step's where there is one.
    pub speedup: f64,
    pub measured: bool,
    /// Where the wrapper's own work at one GPU comes from.
    pub own_how: String,
    /// The own work at one GPU was measured (on this wrapper or one it was carried from): a
    /// prediction without it is not set against DDP's, which counts DDP's own.
    pub own_known: bool,
}

/// The DDP row chosen: its speedup (measured where measured) and name.
fn ddp_choice(rec: &Recommendation) -> Option<(f64, bool, String)> {
    let row = rec.rows.iter().find(|r| r.variant == rec.chosen)?;
    Some(match &row.measured {
        Some(m) => (m.speedup, true, row.variant.clone()),
        None => (row.prediction.speedup, false, row.variant.clone()),
    })
}

/// Sets the wrappers beside DDP's answer and, where the node measured one faster, answers with
/// it (module docs).
pub fn weigh_wrappers(rec: &mut Recommendation, rows: Vec<WrapperRow>, amp: Amp) {
    let choice = ddp_choice(rec);
    let best = rows
        .iter()
        .filter(|r| r.speedup.is_finite() && r.speedup > 0.0 && (r.measured || r.own_known))
        .max_by(|a, b| a.speedup.total_cmp(&b.speedup))
        .cloned();
    rec.wrapper_rows = rows;
    let (Some((ddp, ddp_measured, variant)), Some(best)) = (choice, best) else {
        return;
    };
    if best.speedup <= ddp * (1.0 + MODEL_TOLERANCE) || rec.use_one_gpu {
        return;
    }
    let (w, n) = (best.wrapper, best.gpus);
    let said = format!(
        "{w} {} {:.2}x one GPU's throughput at {n} GPUs, DDP's {variant} {:.2}x ({})",
        if best.measured {
            "measured"
        } else {
            "is predicted at"
        },
        best.speedup,
        ddp,
        if ddp_measured {
            "measured"
        } else {
            "predicted"
        }
    );
    if !best.measured {
        rec.warnings.push(Warning {
            code: "wrapper_predicted_faster".into(),
            text: format!(
                "{said}: measure it before changing wrapper: `ddpcheck bench ddp --variants \
                 {variant},{w} --gpus {n} --micro-batch {}`.",
                rec.micro_batch
            ),
            rests_on: format!("FSDP2's step-time model; own work {}", best.own_how),
        });
        return;
    }
    rec.summary = format!(
        "Use {} instead of DDP: {said}. {}",
        describe(w),
        rec.summary
    );
    rec.chosen = w.to_string();
    rec.python = fsdp2_snippet(w, amp, 1, false, rec.device);
    if let Some(a) = rec.answer.as_mut() {
        a.variant = w.to_string();
        a.times_sooner = best.speedup;
        a.measured = true;
        a.gpu_seconds_per_million = a.one_gpu_seconds_per_million * f64::from(n) / best.speedup;
        a.cost_per_million = a
            .price_per_gpu_hour
            .map(|p| p * a.gpu_seconds_per_million / 3600.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommend::{recommend, tests::a6000_input};

    fn ddp_answer() -> (Recommendation, f64) {
        let rec = recommend(&a6000_input()).unwrap();
        let (s, _, _) = ddp_choice(&rec).unwrap();
        (rec, s)
    }

    fn row(w: Wrapper, speedup: f64, measured: bool, own_known: bool) -> WrapperRow {
        WrapperRow {
            wrapper: w,
            gpus: 4,
            predicted_step_s: Some(1.0),
            measured_step_s: measured.then_some(1.0),
            speedup,
            measured,
            own_how: "test".into(),
            own_known,
        }
    }

    #[test]
    fn a_wrapper_measured_faster_beyond_the_tolerance_answers_instead_of_ddp() {
        let (mut rec, ddp) = ddp_answer();
        let fast = ddp * (1.0 + MODEL_TOLERANCE) * 1.05;
        weigh_wrappers(
            &mut rec,
            vec![row(Wrapper::Replicate, fast, true, false)],
            Amp::Bf16,
        );
        assert_eq!(rec.chosen, "replicate", "{}", rec.summary);
        assert!(rec.python.contains("replicate(model"), "{}", rec.python);
        assert!(
            rec.summary.starts_with("Use replicate()"),
            "{}",
            rec.summary
        );
        let a = rec.answer.as_ref().unwrap();
        assert!(a.measured && (a.times_sooner - fast).abs() < 1e-12);
    }

    #[test]
    fn a_prediction_only_names_the_command_and_within_tolerance_nothing_changes() {
        let (mut rec, ddp) = ddp_answer();
        let chosen = rec.chosen.clone();
        let fast = ddp * (1.0 + MODEL_TOLERANCE) * 1.05;
        weigh_wrappers(
            &mut rec,
            vec![row(Wrapper::Fsdp, fast, false, true)],
            Amp::Bf16,
        );
        assert_eq!(rec.chosen, chosen);
        let w = rec
            .warnings
            .iter()
            .find(|w| w.code == "wrapper_predicted_faster");
        assert!(w.unwrap().text.contains("--variants"), "{:?}", rec.warnings);

        let (mut rec, ddp) = ddp_answer();
        let near = ddp * (1.0 + MODEL_TOLERANCE) * 0.99;
        weigh_wrappers(
            &mut rec,
            vec![row(Wrapper::Fsdp, near, true, true)],
            Amp::Bf16,
        );
        assert_eq!(
            (rec.chosen.as_str(), rec.wrapper_rows.len()),
            (chosen.as_str(), 1)
        );
        // Without its own work, a prediction is not set against DDP's.
        let (mut rec, _) = ddp_answer();
        weigh_wrappers(
            &mut rec,
            vec![row(Wrapper::Fsdp, fast, false, false)],
            Amp::Bf16,
        );
        assert!(rec
            .warnings
            .iter()
            .all(|w| w.code != "wrapper_predicted_faster"));
    }
}
