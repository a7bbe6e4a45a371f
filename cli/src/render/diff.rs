//! `ddpcheck diff` and `history --compare` as text: both runs, the measured ratio, the changes
//! ranked by what they explain (with their arithmetic and cause), and what stays unexplained.

use ddpcheck_core::diff::{Change, Diff, RunSummary};

fn run_line(name: &str, r: &RunSummary) -> String {
    let mut s = format!("{name}: {} ({} GPUs)", r.source, r.gpu_count);
    match &r.figure {
        Some(f) => s.push_str(&format!("\n   {}: {}", f.what(), f.words())),
        None => s.push_str("\n   no figure"),
    }
    if let Some(c) = &r.ceiling {
        s.push_str(&format!(
            "; its path carries at most {:.2} GB/s ({}: {})",
            c.gbps, c.hop, c.path
        ));
    }
    s
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |r| format!("{r:.2}×"))
}

/// Where a change is: every name up to four, else the first three and how many more.
fn places(c: &Change) -> String {
    let n = c.r#where.len();
    if n <= 4 {
        c.r#where.join(", ")
    } else {
        format!("{}, and {} more", c.r#where[..3].join(", "), n - 3)
    }
}

fn change_lines(c: &Change) -> String {
    let explains = match c.explains_ratio {
        Some(r) => format!("explains {r:.2}×"),
        None => "not sized by capacity".into(),
    };
    let mut s = format!(
        "{:>2}. {} on {}: {} → {} ({explains})\n    {}\n",
        c.rank,
        c.kind.as_str().replace('_', " "),
        places(c),
        c.before,
        c.after,
        c.message
    );
    if let Some(a) = &c.arithmetic {
        s.push_str(&format!("    arithmetic: {a}\n"));
    }
    s
}

pub fn diff(d: &Diff) -> String {
    let mut s = String::from("ddpcheck diff — what changed between two runs\n\n");
    s.push_str(&run_line("A (before)", &d.a));
    s.push('\n');
    s.push_str(&run_line("B (after) ", &d.b));
    s.push_str("\n\n");
    s.push_str(&format!(
        "measured B ÷ A: {}   explained by capacity: {}   unexplained: {}\n\n",
        ratio(d.measured_ratio),
        ratio(d.explained_ratio),
        ratio(d.unexplained_ratio)
    ));
    if d.changes.is_empty() {
        s.push_str("no change recorded between the runs\n");
    } else {
        s.push_str("changes, those explaining most first:\n");
        for c in &d.changes {
            s.push_str(&change_lines(c));
        }
    }
    s.push_str(&format!("\nunexplained: {}\n", d.unexplained));
    if !d.undecided.is_empty() {
        s.push_str("\nnot recorded:\n");
        for u in &d.undecided {
            s.push_str(&format!("  - {u}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::diff::ChangeKind;

    fn transport(places: usize) -> Change {
        Change {
            rank: 1,
            kind: ChangeKind::Transport,
            r#where: (0..places).map(|i| format!("GPU0–GPU{}", i + 1)).collect(),
            before: "P2P".into(),
            after: "SHM".into(),
            explains_ratio: None,
            arithmetic: None,
            cause: None,
            caused: vec![],
            message: "m".into(),
        }
    }

    #[test]
    fn many_places_are_counted_and_an_unsized_change_says_so() {
        let text = change_lines(&transport(6));
        assert!(
            text.starts_with(
                " 1. transport on GPU0–GPU1, GPU0–GPU2, GPU0–GPU3, and 3 more: P2P → SHM (not sized by capacity)"
            ),
            "{text}"
        );
        assert!(change_lines(&transport(2)).contains("on GPU0–GPU1, GPU0–GPU2: P2P"));
    }
}
