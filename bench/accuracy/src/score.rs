//! The figures a protocol is judged by: median and largest |error|, mean signed error (bias),
//! the ranking of variants measured more than 5% apart, and whether the variant the model would
//! pick was ever measured slower than the baseline.

use crate::protocol::Case;
use ddpcheck_core::num::ToF64;

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
    /// Groups (one model in one dataset) with a measured baseline, and how many of them had the
    /// predicted-fastest variant measured slower than the baseline.
    pub groups: usize,
    pub picks_slower: usize,
    /// Of those, how many were measured slower by more than [`RANKING_GAP`].
    pub picks_slower_beyond_gap: usize,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
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
        median: median(errors.iter().map(|e| e.abs()).collect()),
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
        let pick = g
            .iter()
            .max_by(|a, b| predicted(a).total_cmp(&predicted(b)))
            .unwrap_or(base);
        s.groups += 1;
        s.picks_slower += usize::from(pick.measured < base.measured);
        s.picks_slower_beyond_gap +=
            usize::from(pick.measured < base.measured * (1.0 - RANKING_GAP));
    }
    s
}
