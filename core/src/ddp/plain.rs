//! The model timed without DDP inside the same launch, blocks interleaved with the DDP steps:
//! the reference DDP's own per-step work is read against where a launch's speed cancels.

use serde::{Deserialize, Serialize};

use super::{one_gpu_partner, DdpResult};

/// A run's plain reference (`DdpRequest::plain_reference`): the same model, parameters,
/// optimizer and batches called without its DDP wrapper, in rounds of a DDP block and a plain
/// block (A B B A). One GPU's launches spread ±7–12% and two runs of one launch 3–8%
/// (docs/results/2026-12-01-h200-one-gpu-launch-noise.md), so only blocks interleaved in one
/// launch compare to a few percent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlainReference {
    /// Median step without DDP, seconds (the median over launches when repeated).
    pub step_time_median_s: f64,
    /// Each round's [DDP block median, plain block median], seconds, round after round (every
    /// launch's rounds in turn when repeated).
    pub rounds: Vec<[f64; 2]>,
}

impl PlainReference {
    /// From a launch's report: `None` without a positive plain median.
    pub fn from_launch(
        step_time_median_s: Option<f64>,
        rounds: Option<Vec<[f64; 2]>>,
    ) -> Option<Self> {
        let step = step_time_median_s.filter(|t| t.is_finite() && *t > 0.0)?;
        Some(PlainReference {
            step_time_median_s: step,
            rounds: rounds
                .unwrap_or_default()
                .into_iter()
                .filter(|[d, p]| d.is_finite() && p.is_finite() && *d > 0.0 && *p > 0.0)
                .collect(),
        })
    }

    /// The DDP step over the plain step: the median of the rounds' ratios, each taken inside one
    /// round where the launch's drift cancels; `None` without rounds.
    pub fn ddp_over_plain(&self) -> Option<f64> {
        let ratios: Vec<f64> = self.rounds.iter().map(|[d, p]| d / p).collect();
        crate::expect::median(&ratios)
    }

    /// Repeated launches folded: the median of their plain medians, every round kept. `None`
    /// unless every launch had one.
    pub fn fold(launches: &[Option<&PlainReference>]) -> Option<PlainReference> {
        let all: Vec<&PlainReference> = launches.iter().copied().collect::<Option<_>>()?;
        let steps: Vec<f64> = all.iter().map(|p| p.step_time_median_s).collect();
        Some(PlainReference {
            step_time_median_s: crate::expect::median(&steps)?,
            rounds: all.iter().flat_map(|p| p.rounds.iter().copied()).collect(),
        })
    }
}

/// `r`'s speedup against its 1-GPU partner's step without DDP (where that run timed one):
/// what training on one GPU, which nobody wraps in DDP, would do. The table's speedup is
/// against the partner's DDP step, which on one H200 ran 1–19% slower than the same model
/// without DDP in the same launch (docs/results/2026-12-02-h200-ddp-own-work.md).
pub fn speedup_without_ddp(runs: &[DdpResult], r: &DdpResult) -> Option<f64> {
    if r.world_size < 2 || r.step_time_median_s <= 0.0 {
        return None;
    }
    let one = one_gpu_partner(runs, r)?;
    let plain = one.plain_reference.as_ref()?.step_time_median_s;
    // Weak scaling: N times the work per step, so the throughput ratio is N·t_1/t_N.
    (plain > 0.0).then(|| {
        f64::from(r.world_size) * plain * f64::from(r.accum.max(1))
            / (r.step_time_median_s * f64::from(one.accum.max(1)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(world: u32, variant: &str, step: f64, plain: Option<f64>) -> DdpResult {
        DdpResult {
            model: "m".into(),
            variant: variant.into(),
            world_size: world,
            accum: 1,
            step_time_median_s: step,
            plain_reference: PlainReference::from_launch(plain, None),
            ..DdpResult::default()
        }
    }

    #[test]
    fn the_speedup_without_ddp_is_against_the_one_gpu_plain_step() {
        // One GPU: 12 ms in DDP, 10 ms without; two GPUs 15 ms a step.
        let runs = vec![
            run(1, "base", 0.012, Some(0.010)),
            run(2, "base", 0.015, None),
        ];
        let s = speedup_without_ddp(&runs, &runs[1]).unwrap();
        assert!((s - 2.0 * 0.010 / 0.015).abs() < 1e-12, "{s}");
        assert_eq!(
            speedup_without_ddp(&runs, &runs[0]),
            None,
            "not for the 1-GPU run itself"
        );
        // A hooked variant is against its unhooked 1-GPU partner, as the table's speedup.
        let runs = vec![
            run(1, "base", 0.012, Some(0.010)),
            run(2, "bf16", 0.014, None),
        ];
        assert!(speedup_without_ddp(&runs, &runs[1]).is_some());
        let runs = vec![run(1, "base", 0.012, None), run(2, "base", 0.015, None)];
        assert_eq!(
            speedup_without_ddp(&runs, &runs[1]),
            None,
            "no plain step, no figure"
        );
    }

    #[test]
    fn the_ratio_is_the_median_of_each_rounds_own_ratio() {
        // A launch that slows 20% half-way: the block medians move, each round's ratio does not.
        let p = PlainReference::from_launch(
            Some(0.0105),
            Some(vec![
                [0.0103, 0.0100],
                [0.0123, 0.0120],
                [0.0125, 0.0120],
                [f64::NAN, 0.01],
            ]),
        )
        .unwrap();
        assert_eq!(
            p.rounds.len(),
            3,
            "a round with a non-finite median is dropped"
        );
        let r = p.ddp_over_plain().unwrap();
        assert!((r - 0.0103 / 0.0100).abs() < 1e-12, "{r}");
    }

    #[test]
    fn no_plain_median_no_reference_and_folding_needs_every_launch() {
        assert_eq!(
            PlainReference::from_launch(None, Some(vec![[1.0, 1.0]])),
            None
        );
        assert_eq!(PlainReference::from_launch(Some(0.0), None), None);
        let a = PlainReference::from_launch(Some(0.010), Some(vec![[0.011, 0.010]])).unwrap();
        let b = PlainReference::from_launch(Some(0.014), Some(vec![[0.0147, 0.014]])).unwrap();
        let c = PlainReference::from_launch(Some(0.012), None).unwrap();
        let folded = PlainReference::fold(&[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(folded.step_time_median_s, 0.012);
        assert_eq!(folded.rounds.len(), 2);
        assert_eq!(PlainReference::fold(&[Some(&a), None]), None);
        assert!(PlainReference::from_launch(Some(0.01), None)
            .unwrap()
            .ddp_over_plain()
            .is_none());
    }
}
