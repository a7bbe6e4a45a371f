//! The all-reduce curve the model reads: the one the multi-GPU DDP runs timed in their own
//! process group where there is one, else the node's sweep. The rule is here, once.

use ddpcheck_core::collective::Sweep;
use ddpcheck_core::ddp::probe_curve;
use ddpcheck_core::recommend::{CurveProvenance, OtherCurve};
use ddpcheck_core::report::Header;
use ddpcheck_core::step_time::LinkCurve;

use super::measurements::Measurements;
use crate::runner::RunError;

/// Where and when a curve was measured, as the recommendation cites it.
pub(super) fn provenance_of(h: &Header) -> CurveProvenance {
    CurveProvenance {
        host: h.provenance.hostname.clone(),
        time: h.provenance.time.clone(),
        backend: Some(h.backend),
        label: h.backend_label.clone(),
        method: String::new(),
    }
}

/// The all-reduce curve the multi-GPU DDP runs timed in their own process group before their
/// steps, at `gpus` (or, with no count known, the largest count probed): the median over those
/// runs, their report's header, and how many runs. Preferred to a `bench collectives` sweep:
/// over the host network DDP's all-reduces ran 0.84-1.37x a sweep's time minutes apart, and
/// these probes followed them (the 2×H200 measurements of docs/results).
fn in_launch_curve(m: &Measurements, gpus: Option<u32>) -> Option<(Sweep, Header, usize)> {
    let (runs, header) = m.probed.as_ref()?;
    let world = gpus.or_else(|| runs.iter().map(|r| r.world_size).max())?;
    let (curve, n) = probe_curve(runs, world)?;
    Some((curve, header.clone(), n))
}

/// The all-reduce curve the model reads, and what it rests on.
pub(super) struct ChosenCurve {
    pub header: Header,
    pub curve: LinkCurve,
    /// How it was measured when not by a sweep (`CurveProvenance::method`).
    pub method: String,
    /// With the curve from DDP's runs, the node's sweep: a second look at the same link.
    pub other: Option<OtherCurve>,
}

/// Whether the measurements hold a curve for `gpus`: DDP's probes at that count (any count
/// when `None`), or a sweep.
pub(super) fn has_curve(m: &Measurements, gpus: Option<u32>) -> bool {
    m.sweep.is_some() || in_launch_curve(m, gpus).is_some()
}

/// The curve for `gpus` (with `None`, the largest count DDP's runs probed): DDP's own probes
/// (`in_launch_curve`'s answer) where there are any, else the node's sweep.
pub(super) fn choose_curve(m: &Measurements, gpus: Option<u32>) -> Result<ChosenCurve, RunError> {
    let read = |s: &Sweep| {
        LinkCurve::from_sweep(s).map_err(|e| RunError::Usage(format!("all-reduce curve: {e}")))
    };
    Ok(match in_launch_curve(m, gpus) {
        Some((probes, header, runs)) => ChosenCurve {
            curve: read(&probes)?,
            header,
            method: format!(
                "by {runs} bench ddp run(s) in DDP's own process group before their steps"
            ),
            other: m.sweep.as_ref().and_then(|(s, h)| {
                Some(OtherCurve {
                    curve: LinkCurve::from_sweep(s).ok()?,
                    provenance: provenance_of(h),
                })
            }),
        },
        None => {
            let (sweep, header) = m.sweep.clone().ok_or_else(|| {
                RunError::Usage("the measurements hold no all-reduce sweep".into())
            })?;
            ChosenCurve {
                curve: read(&sweep)?,
                header,
                method: String::new(),
                other: None,
            }
        }
    })
}

/// What recommend says on a node of fewer than two GPUs, where it has no curve to read.
pub(super) fn one_gpu_node(gpus: usize) -> String {
    format!(
        "this node has {gpus} GPU{}: no interconnect to measure, and DDP needs two or more. \
         To predict DDP for a node of N GPUs from here, give --from that node's `ddpcheck check \
         --json` or `ddpcheck bench collectives --json` report and --gpus N (the compute is then \
         measured on this node's GPU, or give --step-time-ms)",
        if gpus == 1 { "" } else { "s" }
    )
}
