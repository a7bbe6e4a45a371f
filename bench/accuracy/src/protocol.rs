//! The three protocols: which runs the model may read and which it is judged against.
//!
//! * P0 offline: the regime's `bench collectives` sweep and the model's 1-GPU runs (what
//!   `recommend --from` a colleague's node has); judged on every multi-GPU run.
//! * P1 fresh node: what a measure-first `recommend` measures itself in ONE N-GPU launch: the
//!   first launch's baseline (`base`) run, the all-reduce that run timed in DDP's own process
//!   group, and the 1-GPU runs of that launch. Judged on the other variants, measured as the
//!   median over the other launches only (never a launch that gave an input). Only datasets with
//!   three launches or more and the runs' own probes qualify.
//! * P2 after `bench ddp`: the runs' own probes (the median over the judged runs of the model),
//!   the 1-GPU and `nocomm` runs of the same launches, and plain DDP's measured step, which the
//!   model is calibrated on as `recommend` is; judged on every other multi-GPU run.

use ddpcheck_core::ddp::{probe_curve, DdpResult, DdpVariant};
use ddpcheck_core::step_time::LinkCurve;

use crate::baseline::fit_on_baseline;
use crate::case::{judged_rows, models, partner, Case};
use crate::fixtures::Dataset;
use crate::inputs::{Knobs, Reading};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    P0,
    P1,
    P2,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::P0, Protocol::P1, Protocol::P2];

    /// `P0`, `P1`, `P2`.
    pub fn short(self) -> &'static str {
        match self {
            Protocol::P0 => "P0",
            Protocol::P1 => "P1",
            Protocol::P2 => "P2",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::P0 => "P0 offline (sweep + 1-GPU runs)",
            Protocol::P1 => "P1 fresh node (one launch's baseline)",
            Protocol::P2 => "P2 after `bench ddp` (runs' own probes)",
        }
    }
}

/// Every case of a protocol over the datasets.
pub fn cases(protocol: Protocol, datasets: &[&Dataset], knobs: Knobs) -> Vec<Case> {
    datasets
        .iter()
        .flat_map(|ds| match protocol {
            Protocol::P0 | Protocol::P2 => whole_runs(protocol, ds, knobs),
            Protocol::P1 => crate::fresh::cases(ds, knobs),
        })
        .collect()
}

/// P0 and P2: the reports' medians over all launches.
fn whole_runs(protocol: Protocol, ds: &Dataset, knobs: Knobs) -> Vec<Case> {
    let rows = judged_rows(ds);
    let Ok(sweep) = LinkCurve::from_sweep(&ds.sweep) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for model in models(&rows) {
        let mine: Vec<&DdpResult> = rows.iter().copied().filter(|r| r.model == model).collect();
        let (mb, world) = (
            mine[0].micro_batch,
            mine.iter().map(|r| r.world_size).max().unwrap_or(2),
        );
        let inputs: Vec<DdpResult> = ds
            .runs
            .iter()
            .filter(|r| {
                r.world_size == 1
                    || (protocol == Protocol::P2
                        && r.variant.parse::<DdpVariant>().is_ok_and(|v| v.nocomm))
            })
            .cloned()
            .collect();
        let curve = match protocol {
            Protocol::P2 => probed_curve(ds, &model, world).unwrap_or_else(|| sweep.clone()),
            _ => sweep.clone(),
        };
        let Some(mut reading) = Reading::from_runs(&inputs, &model, mb, world) else {
            continue;
        };
        reading.knobs = knobs;
        // After `bench ddp` recommend is calibrated on plain DDP's measured step, as on a fresh
        // node: that run is then an input, never a judged case.
        let baseline = (protocol == Protocol::P2)
            .then(|| mine.iter().find(|r| r.variant == "base"))
            .flatten()
            .map(|b| fit_on_baseline(&reading, b.step_time_median_s, &curve));
        for r in mine {
            let (Some(one), Ok(v)) = (partner(ds, r), r.variant.parse::<DdpVariant>()) else {
                continue;
            };
            let predicted = match &baseline {
                Some(fitted) => fitted.predict(&reading, &v, &curve),
                None => reading.predict(&v, &curve),
            };
            let Some(predicted) = predicted else {
                continue;
            };
            out.push(Case {
                dataset: ds.label(),
                regime: ds.spec.regime,
                model: model.clone(),
                variant: r.variant.clone(),
                world: r.world_size,
                predicted,
                naive: reading.naive(&v, &curve),
                input_launch: None,
                measured: r.throughput / one.throughput,
                judged: baseline.is_none() || r.variant != "base",
            });
        }
    }
    out
}

/// The curve the model's multi-GPU runs timed in their own process group (the median of
/// their probes), as `recommend` reads a `bench ddp` report.
fn probed_curve(ds: &Dataset, model: &str, world: u32) -> Option<LinkCurve> {
    let runs: Vec<DdpResult> = ds
        .runs
        .iter()
        .filter(|r| r.model == model && r.world_size > 1 && r.speedup.is_some())
        .cloned()
        .collect();
    let (sweep, _) = probe_curve(&runs, world)?;
    LinkCurve::from_sweep(&sweep).ok()
}
