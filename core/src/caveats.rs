//! Caveats of DDP measurements: the results a reader should not take at face value, and why.
//!
//! On shared GPU machines the same launch moves between runs (docs/results/2026-11-30-h200x2-launch-spread.md:
//! gpt2-124m on 2xH200 8% between launches, MLP steps of 2–18 ms 10–57%), so a table of DDP
//! results says where its own numbers are soft instead of leaving that to the reader.

use crate::ddp::DdpResult;

/// Steps shorter than this are bound by the host (Python, kernel launches) rather than the GPU.
pub const HOST_BOUND_STEP_S: f64 = 0.020;
/// Repeated launches farther apart than this make a figure uncertain by about as much.
pub const NOISY_SPREAD: f64 = 0.10;
/// A weak-scaling speedup above the GPU count by more than this is noise, not a result.
const SUPERLINEAR_SLACK: f64 = 1.02;
/// Lines shown before the rest is counted.
const MAX_LINES: usize = 8;

/// One line per soft result, in result order, then at most one hint; empty when nothing is soft.
pub fn ddp_caveats(results: &[DdpResult]) -> Vec<String> {
    let mut lines = Vec::new();
    for r in results {
        let what = format!(
            "{} {} on {} GPU{}",
            r.model,
            r.variant,
            r.world_size,
            if r.world_size == 1 { "" } else { "s" }
        );
        if let Some(s) = r.speedup {
            if r.world_size > 1 && s > f64::from(r.world_size) * SUPERLINEAR_SLACK {
                lines.push(format!(
                    "{what}: speedup {s:.2}x is above {n}x, impossible with weak scaling: its 1-GPU run was slow",
                    n = r.world_size
                ));
            }
        }
        if let Some(sp) = r.launch_spread() {
            if sp > NOISY_SPREAD {
                lines.push(format!(
                    "{what}: its {} launches landed {:.0}% apart; what is computed from it is uncertain by about as much",
                    r.launch_step_medians_s.len(),
                    sp * 100.0
                ));
            }
        }
    }
    if lines.len() > MAX_LINES {
        let more = lines.len() - MAX_LINES;
        lines.truncate(MAX_LINES);
        lines.push(format!("... and {more} more like these"));
    }
    let repeated = results.iter().any(|r| !r.launch_step_medians_s.is_empty());
    let short = results
        .iter()
        .any(|r| r.step_time_median_s > 0.0 && r.step_time_median_s < HOST_BOUND_STEP_S);
    if short && !repeated {
        lines.push(format!(
            "steps under {:.0} ms are bound by the host and moved 10-57% between launches of the same command on 2xH200: repeat with --repeats 5 or more before trusting a speedup (each speedup then shows its ± from the launches' spread)",
            HOST_BOUND_STEP_S * 1e3
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        variant: &str,
        n: u32,
        step: f64,
        speedup: Option<f64>,
        launches: Vec<f64>,
    ) -> DdpResult {
        DdpResult {
            model: "mlp:448x4".into(),
            params: 804_608,
            variant: variant.into(),
            world_size: n,
            micro_batch: 256,
            accum: 1,
            step_time_median_s: step,
            step_time_p90_s: step,
            throughput: f64::from(n) * 256.0 / step,
            throughput_unit: "samples/s".into(),
            speedup,
            launch_step_medians_s: launches,
            ..DdpResult::default()
        }
    }

    #[test]
    fn steady_slow_steps_have_no_caveat() {
        // gpt2-124m-like: 40 ms steps, one launch each, a plausible speedup.
        let rows = [
            row("base", 1, 0.040, Some(1.0), vec![]),
            row("base", 2, 0.042, Some(1.9), vec![]),
        ];
        assert!(ddp_caveats(&rows).is_empty());
        // Repeated launches close together are not flagged either.
        let rows = [row("base", 2, 0.042, Some(1.9), vec![0.041, 0.042, 0.043])];
        assert!(ddp_caveats(&rows).is_empty());
    }

    #[test]
    fn flags_superlinear_speedup_noisy_launches_and_short_single_launches() {
        // The shm MLP of 2026-11-30 08:47 on 2xH200: 2.27x on 2 GPUs, its 1-GPU launches 42% apart.
        let rows = [
            row(
                "accum8",
                1,
                0.0159,
                Some(1.0),
                vec![0.01809, 0.0159, 0.01285],
            ),
            row(
                "accum8",
                2,
                0.0140,
                Some(2.27),
                vec![0.0140, 0.0167, 0.0131],
            ),
        ];
        let c = ddp_caveats(&rows);
        assert_eq!(c.len(), 3, "{c:?}");
        assert!(
            c[0].starts_with("mlp:448x4 accum8 on 1 GPU: its 3 launches landed 33% apart"),
            "{c:?}"
        );
        assert!(
            c[1].contains("on 2 GPUs: speedup 2.27x is above 2x"),
            "{c:?}"
        );
        assert!(
            c[2].contains("on 2 GPUs: its 3 launches landed 26% apart"),
            "{c:?}"
        );

        // Short steps from one launch each: the hint to repeat, once.
        let rows = [
            row("base", 1, 0.002, Some(1.0), vec![]),
            row("base", 2, 0.0023, Some(1.7), vec![]),
        ];
        let c = ddp_caveats(&rows);
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(c[0].contains("--repeats 5"), "{c:?}");
    }

    #[test]
    fn long_lists_are_cut() {
        let rows: Vec<_> = (0..12)
            .map(|i| row(&format!("v{i}"), 2, 0.05, Some(2.5), vec![]))
            .collect();
        let c = ddp_caveats(&rows);
        assert_eq!(c.len(), MAX_LINES + 1);
        assert_eq!(c[MAX_LINES], "... and 4 more like these");
    }
}
