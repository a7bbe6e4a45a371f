//! How quantities read in words: durations, byte counts, large counts and money. Core's
//! reasons and warnings carry numbers in their text, and the CLI's tables show the same
//! quantities: both format them here, so the two agree.

use crate::step_time::MIB;

/// Money per million units: more decimals as it gets smaller.
pub fn fmt_money(c: f64) -> String {
    if c >= 1.0 {
        format!("${c:.2}")
    } else if c >= 0.01 {
        format!("${c:.4}")
    } else {
        format!("${c:.6}")
    }
}

/// A duration in s, ms or µs.
pub fn fmt_s(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// A byte count as people read it (KiB, MiB, GiB).
pub fn fmt_bytes(b: f64) -> String {
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else if b >= MIB {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

/// A large count with k, M or G.
pub fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
