//! The figures a protocol is judged by: median and largest |error|, mean signed error (bias),
//! the ranking of variants measured more than 5% apart, and whether the variant `recommend`
//! would choose from these predictions (and the one predicted fastest) was ever measured slower
//! than the baseline.

use crate::case::Case;
use ddpcheck_core::expect::median;
use ddpcheck_core::num::ToF64;
use ddpcheck_core::recommend::{pick, DEFAULT_TARGET_EFFICIENCY};

/// Two variants of one model and regime are ranked when their measured speedups differ by more
/// than this (relative to the larger).
pub const RANKING_GAP: f64 = 0.05;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Score {
    pub cases: usize,
    pub median: f64,
    pub largest: f64,
    /// Mean signed relative error (positive: over-predicted).
    pub bias: f64,
    /// Pairs measured more than [`RANKING_GAP`] apart, and how many are predicted in that order.
    pub pairs: usize,
    pub pairs_right: usize,
    /// Groups (one model in one dataset) with a measured baseline.
    pub groups: usize,
    /// What `recommend`'s rule chose from the predictions (the simplest change reaching the
    /// default target efficiency, else the most efficient) against the measured baseline.
    pub choice: Picks,
    /// The variant predicted fastest against the measured baseline (a stricter reading).
    pub fastest: Picks,
}

/// How often a chosen variant was measured slower than plain DDP.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Picks {
    /// Groups where something other than plain DDP was chosen.
    pub changed: usize,
    pub slower: usize,
    /// Of those, how many were measured slower by more than [`RANKING_GAP`].
    pub slower_beyond_gap: usize,
}

impl Picks {
    fn count(&mut self, chosen: &Case, base: &Case) {
        self.changed += usize::from(chosen.variant != base.variant);
        self.slower += usize::from(chosen.measured < base.measured);
        self.slower_beyond_gap +=
            usize::from(chosen.measured < base.measured * (1.0 - RANKING_GAP));
    }
}

/// The case recommend's rule chooses among a group's variants, from `predicted` speedups.
fn recommended<'a>(g: &[&'a Case], predicted: &impl Fn(&Case) -> f64) -> Option<&'a Case> {
    let efficiencies: Vec<(&str, f64)> = g
        .iter()
        .map(|c| (c.variant.as_str(), predicted(c) / f64::from(c.world.max(1))))
        .collect();
    pick(&efficiencies, DEFAULT_TARGET_EFFICIENCY).map(|p| g[p.chosen])
}

/// The cases of each (dataset, model), in first-seen order.
fn groups(cases: &[Case]) -> Vec<Vec<&Case>> {
    let mut out: Vec<Vec<&Case>> = Vec::new();
    for c in cases {
        match out
            .iter_mut()
            .find(|g| g[0].dataset == c.dataset && g[0].model == c.model)
        {
            Some(g) => g.push(c),
            None => out.push(vec![c]),
        }
    }
    out
}

/// The score of `predicted` (the model's speedup, or the naive formula's) over the cases.
pub fn score(cases: &[Case], predicted: impl Fn(&Case) -> f64) -> Score {
    let judged: Vec<&Case> = cases.iter().filter(|c| c.judged).collect();
    let errors: Vec<f64> = judged
        .iter()
        .map(|c| (predicted(c) - c.measured) / c.measured)
        .collect();
    let mut s = Score {
        cases: judged.len(),
        median: median(&errors.iter().map(|e| e.abs()).collect::<Vec<_>>()).unwrap_or(f64::NAN),
        largest: errors.iter().fold(0.0, |m, e| m.max(e.abs())),
        bias: errors.iter().sum::<f64>() / errors.len().max(1).to_f64(),
        ..Score::default()
    };
    for g in groups(cases) {
        let ranked: Vec<&&Case> = g.iter().filter(|c| c.judged).collect();
        for (i, a) in ranked.iter().enumerate() {
            for b in &ranked[i + 1..] {
                if (a.measured - b.measured).abs() / a.measured.max(b.measured) > RANKING_GAP {
                    s.pairs += 1;
                    let same = (predicted(a) - predicted(b)) * (a.measured - b.measured) > 0.0;
                    s.pairs_right += usize::from(same);
                }
            }
        }
        let Some(base) = g.iter().find(|c| c.variant == "base") else {
            continue;
        };
        let fastest = g
            .iter()
            .max_by(|a, b| predicted(a).total_cmp(&predicted(b)))
            .unwrap_or(base);
        s.groups += 1;
        s.fastest.count(fastest, base);
        s.choice
            .count(recommended(&g, &predicted).unwrap_or(base), base);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::Regime;

    fn case(variant: &str, predicted: f64, measured: f64) -> Case {
        Case {
            dataset: "d".into(),
            regime: Regime::Shm,
            model: "m".into(),
            variant: variant.into(),
            world: 2,
            predicted,
            naive: predicted,
            input_launch: None,
            measured,
            judged: true,
        }
    }

    #[test]
    fn recommends_choice_keeps_plain_ddp_where_it_reaches_the_target_and_the_fastest_does_not() {
        // Plain DDP is predicted at 0.9 efficiency (target 0.85): recommend keeps it, although
        // accum8 is predicted faster and was measured slower.
        let cases = [case("base", 1.80, 1.80), case("accum8", 1.85, 1.78)];
        let s = score(&cases, |c| c.predicted);
        assert_eq!(s.groups, 1);
        assert_eq!((s.choice.changed, s.choice.slower), (0, 0));
        assert_eq!((s.fastest.changed, s.fastest.slower), (1, 1));
        assert_eq!(s.fastest.slower_beyond_gap, 0);
    }

    #[test]
    fn a_change_measured_slower_beyond_the_gap_is_counted() {
        // Plain DDP misses the target; accum8 is chosen and measured 10% slower than plain DDP.
        let cases = [case("base", 1.2, 1.50), case("accum8", 1.8, 1.35)];
        let s = score(&cases, |c| c.predicted);
        assert_eq!(
            (
                s.choice.changed,
                s.choice.slower,
                s.choice.slower_beyond_gap
            ),
            (1, 1, 1)
        );
    }
}
