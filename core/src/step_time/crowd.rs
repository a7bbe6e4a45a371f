//! N processes side by side: how much a node's `nocomm` runs say N ranks slow one model's work.

use crate::ddp::{CommHook, DdpResult, DdpVariant};

/// What a node's runs measure of N processes side by side: see [`side_by_side`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SideBySide<'a> {
    /// The N-GPU `nocomm` step over the 1-GPU step (not clamped: noise can put it below 1).
    pub slowdown: f64,
    /// How far ln(slowdown) may move by its launches' noise alone (the bound
    /// [`SideBySide::distinct`] tests); `None` unless every side was launched at least twice.
    pub noise_bound: Option<f64>,
    pub nocomm: &'a DdpResult,
    /// The separately launched 1-GPU run it is compared with; `None` where the `nocomm` run's
    /// own launches timed one GPU alone ([`crate::ddp::DdpResult::solo_slowdown`]), which is
    /// preferred: paired within each launch, the launch's own speed cancels.
    pub one_gpu: Option<&'a DdpResult>,
}

impl SideBySide<'_> {
    /// Both runs were launched more than once.
    pub fn repeated(&self) -> bool {
        self.fewest_launches() > 1
    }

    /// Launches of the less-launched side (1 for a single launch).
    pub fn fewest_launches(&self) -> usize {
        let launches = |r: &DdpResult| {
            if r.launch_range().is_some() {
                r.launch_step_medians_s.len()
            } else {
                1
            }
        };
        let n = launches(self.nocomm);
        self.one_gpu.map_or(n, |one| n.min(launches(one)))
    }

    /// One GPU alone was timed inside the `nocomm` run's own launches.
    pub fn within_launch(&self) -> bool {
        self.one_gpu.is_none()
    }

    /// Both sides were launched more than once and the slowdown lies beyond their launches'
    /// noise ([`crate::ddp::speedup_noise_bound`]: Student's t times the standard error, at
    /// least twice it; within the same launches, the noise of the per-launch ratios,
    /// [`crate::ddp::SoloSlowdown::noise_bound`]). Only then is it counted ([`SideBySide::counted`]); on 2×H200 a single
    /// launch of a short step moved 10–57%, more than the slowdowns measured (4–21%), and
    /// counting them made predictions worse. (The rule before, until the ten-launch runs of
    /// 2026-11-30 14:04, had every N-GPU launch slower than every 1-GPU one: a test that grows
    /// stricter the more launches there are, as ranges only widen.)
    pub fn distinct(&self) -> bool {
        self.slowdown > 1.0 && self.noise_bound.is_some_and(|b| self.slowdown.ln() > b)
    }

    /// The slowdown the model takes: the measured one where it stands out of the launches'
    /// spread, else 1 (none).
    pub fn counted(&self) -> f64 {
        if self.distinct() {
            self.slowdown.max(1.0)
        } else {
            1.0
        }
    }
}

/// How much N processes side by side slow one model's work on this node, from its runs: the
/// `nocomm` run at `world` GPUs against one GPU alone inside its own launches where it timed
/// that, else against one GPU at the same micro-batch and accumulation (a 1-GPU `nocomm` run
/// when there is one, else a plain DDP run: no hook, bucket or FSDP).
/// Accumulation 1 is preferred, then the newest rows (last in `rows`).
pub fn side_by_side<'a>(
    rows: &[&'a DdpResult],
    model: &str,
    micro_batch: u32,
    world: u32,
) -> Option<SideBySide<'a>> {
    let parsed = |r: &DdpResult| r.variant.parse::<DdpVariant>().ok();
    let usable = |r: &&&DdpResult| {
        r.model == model
            && r.micro_batch == micro_batch
            && r.step_time_median_s.is_finite()
            && r.step_time_median_s > 0.0
    };
    let reference = |accum: u32| {
        let one: Vec<&&DdpResult> = rows
            .iter()
            .filter(usable)
            .filter(|r| r.world_size == 1 && r.accum == accum)
            .collect();
        one.iter()
            .rev()
            .find(|r| parsed(r).is_some_and(|v| v.nocomm))
            .or_else(|| {
                one.iter()
                    .rev()
                    .find(|r| parsed(r).is_some_and(|v| v.plain_ddp_with(CommHook::None)))
            })
            .map(|r| **r)
    };
    let mut candidates: Vec<&&DdpResult> = rows
        .iter()
        .filter(usable)
        .filter(|r| r.world_size == world && world > 1 && parsed(r).is_some_and(|v| v.nocomm))
        .collect();
    // Accumulation 1 first, the newest first within it.
    candidates.reverse();
    candidates.sort_by_key(|r| r.accum != 1);
    candidates.into_iter().find_map(|n| {
        if let Some(solo) = n.solo_slowdown() {
            return Some(SideBySide {
                slowdown: solo.ratio,
                noise_bound: solo.noise_bound,
                nocomm: n,
                one_gpu: None,
            });
        }
        let one = reference(n.accum)?;
        let slowdown = n.step_time_median_s / one.step_time_median_s;
        let noise_bound = crate::ddp::speedup_noise_bound(n, one);
        Some(SideBySide {
            slowdown,
            noise_bound,
            nocomm: n,
            one_gpu: Some(one),
        })
    })
}
