//! `--fit`: the mechanism constants searched on the fit calls only (P0, the one protocol their
//! reports allow), by the mean squared ln(predicted/measured speedup) over a grid.

use ddpcheck_core::num::ToF64;
use std::fmt::Write;

use crate::fixtures::Dataset;
use crate::inputs::Knobs;
use crate::protocol::{cases, Protocol};

fn loss(datasets: &[&Dataset], knobs: Knobs) -> f64 {
    let cs = cases(Protocol::P0, datasets, knobs);
    let sq: f64 = cs
        .iter()
        .map(|c| (c.predicted / c.measured).ln().powi(2))
        .sum();
    sq / cs.len().max(1).to_f64()
}

/// The grid and its best point, as text.
pub fn fit(datasets: &[Dataset]) -> String {
    let fit: Vec<&Dataset> = datasets.iter().filter(|d| !d.judged()).collect();
    let mut out = String::from("slow_link_overlap\tno_sync_host_ms\trms ln error\n");
    let mut best = (f64::INFINITY, Knobs::default());
    for o in 0..=4 {
        for s in 0..=10 {
            let knobs = Knobs {
                slow_link_overlap: Some(f64::from(o) * 0.25),
                no_sync_host_s: Some(f64::from(s) * 0.05e-3),
            };
            let l = loss(&fit, knobs);
            let _ = writeln!(
                out,
                "{:.2}\t{:.2}\t{:.4}",
                f64::from(o) * 0.25,
                f64::from(s) * 0.05e-3 * 1e3,
                l.sqrt()
            );
            if l < best.0 {
                best = (l, knobs);
            }
        }
    }
    let _ = writeln!(out, "best: {:?}, rms ln error {:.4}", best.1, best.0.sqrt());
    out
}
