//! A collective sweep as nccl-tests prints it: same columns, same order, with its footer; where
//! the width is narrower than nccl-tests' lines, the columns that do not change within a sweep
//! (count, type, redop, root) go to its heading line, and below that the in-place columns go.

use std::fmt::Write;

use ddpcheck_core::collective::{Sweep, Timing};

const HEADER: &str = concat!(
    "#                                                              out-of-place                       in-place          \n",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n",
);

/// The head of one placement's timing columns in the narrow forms, three lines as [`HEADER`]'s.
const TIMING_HEAD: [&str; 3] = [
    "          out-of-place          ",
    "     time   algbw   busbw #wrong",
    "     (us)  (GB/s)  (GB/s)       ",
];
const IN_PLACE_HEAD: &str = "             in-place           ";

/// The widest line of nccl-tests' form (its header's), in characters.
fn full_width() -> usize {
    HEADER.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// The sweep as nccl-tests prints it where `width` holds its lines, else in the narrow form.
pub fn sweep(sw: &Sweep, width: usize) -> String {
    if width >= full_width() {
        return full(sw);
    }
    // Size and one placement's columns are 44 wide, both placements' 76.
    narrow(sw, width >= 12 + 2 * TIMING_HEAD[1].len())
}

/// The sweep in nccl-tests' own columns, with its footer.
fn full(sw: &Sweep) -> String {
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
    s.push_str(&footer(sw));
    s
}

/// The size and the timings of each placement shown, with type, redop and root in the heading.
fn narrow(sw: &Sweep, in_place: bool) -> String {
    let mut s = String::new();
    let dtype = sw.samples.first().map_or("?", |x| x.dtype.as_str());
    let mut kind = dtype.to_string();
    if sw.op.has_redop() {
        let _ = write!(kind, ", redop {}", sw.redop);
    }
    if sw.op.has_root() {
        let _ = write!(kind, ", root {}", sw.root);
    }
    let _ = writeln!(s, "# {} ({kind}) over {} ranks", sw.op.name(), sw.ranks);
    let lead = ["#           ", "#       size", "#        (B)"];
    for (lead, head) in lead.iter().zip(TIMING_HEAD) {
        let mut line = format!("{lead}{head}");
        if in_place {
            line.push_str(if head == TIMING_HEAD[0] {
                IN_PLACE_HEAD
            } else {
                head
            });
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    for smp in &sw.samples {
        let _ = write!(s, "{:>12}", smp.bytes);
        s.push_str(&timing_columns(Some(smp.out_of_place)));
        if in_place {
            s.push_str(&timing_columns(smp.in_place));
        }
        s.push('\n');
    }
    s.push_str(&footer(sw));
    s
}

/// nccl-tests' two footer lines: wrong values and the average bus bandwidth.
fn footer(sw: &Sweep) -> String {
    let mut s = String::new();
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
    use ddpcheck_testkit::two_size_sweep as two_sizes;

    #[test]
    fn table_has_nccl_tests_columns_and_footer() {
        let table = sweep(&two_sizes(), full_width());
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

    #[test]
    fn narrower_than_nccl_tests_the_constant_columns_go_to_the_heading() {
        for (width, in_place) in [(100, true), (80, true), (60, false)] {
            let table = sweep(&two_sizes(), width);
            assert!(
                table.lines().all(|l| l.chars().count() <= width),
                "{width}: {table}"
            );
            assert!(
                table.starts_with("# all_reduce (float, redop sum) over 2 ranks\n"),
                "{table}"
            );
            assert!(table.contains("  1073741824"), "{table}");
            assert_eq!(table.contains("in-place"), in_place, "{table}");
            assert!(table.contains("# Avg bus bandwidth    : 200.0000"));
        }
    }
}
