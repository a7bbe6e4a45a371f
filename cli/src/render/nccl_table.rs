//! A collective sweep as nccl-tests prints it: same columns, same order, with its footer.

use std::fmt::Write;

use ddpcheck_core::collective::{Sweep, Timing};

const HEADER: &str = concat!(
    "#                                                              out-of-place                       in-place          \n",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n",
);

/// The sweep as nccl-tests prints it: same columns, same order, with its footer.
pub fn sweep(sw: &Sweep) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {} over {} ranks", sw.op.name(), sw.ranks);
    s.push_str(HEADER);
    let redop = if sw.op.has_redop() {
        sw.redop.as_str()
    } else {
        "none"
    };
    let root = if sw.op.has_root() { sw.root } else { -1 };
    for smp in &sw.samples {
        let _ = write!(
            s,
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
            smp.bytes, smp.count, smp.dtype, redop, root
        );
        for t in [Some(smp.out_of_place), smp.in_place] {
            s.push_str(&timing_columns(t));
        }
        s.push('\n');
    }
    let wrong = sw.wrong_total().unwrap_or(0);
    let _ = writeln!(
        s,
        "# Out of bounds values : {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    );
    let _ = writeln!(s, "# Avg bus bandwidth    : {:.4} ", sw.avg_busbw());
    s
}

/// time, algbw, busbw and #wrong of one placement; N/A where it did not run.
fn timing_columns(t: Option<Timing>) -> String {
    match t {
        Some(t) => format!(
            "  {:>7.2}  {:>6.2}  {:>6.2}  {:>5}",
            t.time_us,
            t.algbw_gbps,
            t.busbw_gbps,
            t.wrong.map_or_else(|| "N/A".into(), |w| w.to_string())
        ),
        None => "      N/A     N/A     N/A    N/A".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::collective::{Collective, Sample};
    use ddpcheck_core::num::ToF64;

    fn two_sizes() -> Sweep {
        let mk = |bytes: u64, bus: f64| {
            // 2 ranks: busbw factor 1, so time = bytes / busbw.
            let t_us = bytes.to_f64() / (bus * 1e9) * 1e6;
            let t = Timing::from_time(Collective::AllReduce, 2, bytes, t_us, Some(0));
            Sample {
                bytes,
                count: bytes / 4,
                dtype: "float".into(),
                out_of_place: t,
                in_place: Some(t),
            }
        };
        Sweep {
            op: Collective::AllReduce,
            ranks: 2,
            redop: "sum".into(),
            root: -1,
            samples: vec![mk(1 << 20, 100.0), mk(1 << 30, 300.0)],
        }
    }

    #[test]
    fn table_has_nccl_tests_columns_and_footer() {
        let table = sweep(&two_sizes());
        assert!(
            table.contains("# Avg bus bandwidth    : 200.0000"),
            "{table}"
        );
        assert!(
            table.contains("  1073741824     268435456     float"),
            "{table}"
        );
        assert!(table.contains("#wrong"));
    }
}
