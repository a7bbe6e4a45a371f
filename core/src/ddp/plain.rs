//! The model timed without DDP inside the same launch, blocks interleaved with the DDP steps:
//! the reference every speedup is taken against ([`Reference::Plain`]), and DDP's own per-step
//! work read against it where a launch's speed cancels.

use serde::{Deserialize, Serialize};

/// What a row's speedup, efficiency, exposed share and cost ratio are taken against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reference {
    /// The same model and recipe on one GPU without the DDP wrapper, timed in the 1-GPU launch
    /// interleaved with its DDP step: the training a user would otherwise run.
    #[default]
    Plain,
    /// The 1-GPU step inside DDP, DDP's own work at world size one included (1–19% on one
    /// H200, docs/results/2026-12-02-h200-ddp-own-work.md); what reports before the plain
    /// reference rest on.
    Ddp,
}

impl Reference {
    pub fn as_str(self) -> &'static str {
        match self {
            Reference::Plain => "plain",
            Reference::Ddp => "ddp",
        }
    }

    /// What rows of reports written before the field rest on: the 1-GPU step in DDP.
    pub fn before_the_field() -> Self {
        Reference::Ddp
    }
}

impl std::str::FromStr for Reference {
    type Err = crate::unknown_name::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "plain" => Ok(Reference::Plain),
            "ddp" => Ok(Reference::Ddp),
            other => Err(Self::Err::new("--reference", other, "plain or ddp")),
        }
    }
}

/// A run's plain reference (`DdpRequest::reference`): the same model, parameters,
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

    /// The plain step that stands for a 1-GPU run whose DDP step is `ddp_step_s`: that step
    /// over [`PlainReference::ddp_over_plain`], so the 1-GPU row's own ratio is exactly the
    /// rounds' median; the plain median where no round was kept.
    pub fn step_against(&self, ddp_step_s: f64) -> f64 {
        match self.ddp_over_plain() {
            Some(r) if r.is_finite() && r > 0.0 && ddp_step_s > 0.0 => ddp_step_s / r,
            _ => self.step_time_median_s,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
