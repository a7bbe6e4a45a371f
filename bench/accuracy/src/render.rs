//! The accuracy tables as markdown (what the results page holds and its test compares).

use std::fmt::Write;

use crate::case::Case;
use crate::fixtures::{Dataset, Regime, FIT_HOSTS, JUDGED_HOSTS};
use crate::fresh::{cases_split, LaunchSplit};
use crate::inputs::Knobs;
use crate::protocol::{cases, Protocol};
use crate::score::{score, Picks, Score};

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn signed(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// "S of G (B by > 5%; C not base)": measured slower than plain DDP in S of G groups, B of them
/// by more than 5%, and a change from plain DDP chosen in C.
fn picks(p: &Picks, groups: usize) -> String {
    format!(
        "{} of {groups} ({} by > 5%; {} not base)",
        p.slower, p.slower_beyond_gap, p.changed
    )
}

fn row(label: &str, predictor: &str, s: &Score) -> String {
    format!(
        "| {label} | {predictor} | {} | {} | {} |\n",
        error_cells(s),
        picks(&s.choice, s.groups),
        picks(&s.fastest, s.groups),
    )
}

/// A score's cases, median and largest |error|, bias and pairs ranked right, as table cells.
fn error_cells(s: &Score) -> String {
    format!(
        "{} | {} | {} | {} | {} of {}",
        s.cases,
        pct(s.median),
        pct(s.largest),
        signed(s.bias),
        s.pairs_right,
        s.pairs,
    )
}

const HEAD: &str = "| protocol | predictor | cases | median \\|error\\| | largest \\|error\\| | bias | ranking (pairs > 5% apart) | recommend's choice measured slower than base | predicted fastest measured slower than base |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";

fn model(c: &Case) -> f64 {
    c.predicted
}

fn naive(c: &Case) -> f64 {
    c.naive
}

/// The main table: each protocol, the model and the naive formula; for P1 also its input
/// launch reproduced exactly (the launch-noise floor of one-launch inputs).
fn protocols_table(all: &[(Protocol, Vec<Case>)]) -> String {
    let mut t = String::from(HEAD);
    for (p, cs) in all {
        t += &row(p.name(), "model", &score(cs, model));
        t += &row(p.name(), "naive formula", &score(cs, naive));
        let floor: Vec<Case> = cs
            .iter()
            .filter(|c| c.input_launch.is_some())
            .cloned()
            .collect();
        if !floor.is_empty() {
            t += &row(
                p.name(),
                "the input launch itself (noise floor)",
                &score(&floor, |c| c.input_launch.unwrap_or(f64::NAN)),
            );
        }
    }
    t
}

fn regime_table(all: &[(Protocol, Vec<Case>)]) -> String {
    let mut t = String::from(
        "| protocol | regime | cases | median \\|error\\| | largest \\|error\\| | bias | naive median | naive bias |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (p, cs) in all {
        for r in Regime::ALL {
            let mine: Vec<Case> = cs.iter().filter(|c| c.regime == r).cloned().collect();
            let (s, n) = (score(&mine, model), score(&mine, naive));
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                p.name(),
                r.name(),
                s.cases,
                pct(s.median),
                pct(s.largest),
                signed(s.bias),
                pct(n.median),
                signed(n.bias)
            );
        }
    }
    t
}

/// Whether each target of the issue is met.
fn targets_table(all: &[(Protocol, Vec<Case>)]) -> String {
    let mut t = String::from("| protocol | target | figure | met |\n| --- | --- | ---: | --- |\n");
    let yes = |ok: bool| if ok { "yes" } else { "no" };
    for (p, cs) in all {
        let s = score(cs, model);
        let (median, largest, bias) = match p {
            Protocol::P0 => (0.08, 0.25, 0.03),
            Protocol::P1 => (0.05, 0.15, 0.02),
            Protocol::P2 => continue,
        };
        let lines = [
            (
                format!("median ≤ {}", pct(median)),
                pct(s.median),
                s.median <= median,
            ),
            (
                format!("largest ≤ {}", pct(largest)),
                pct(s.largest),
                s.largest <= largest,
            ),
            (
                format!("\\|bias\\| ≤ {}", pct(bias)),
                signed(s.bias),
                s.bias.abs() <= bias,
            ),
            (
                "ranking right on every pair > 5% apart".into(),
                format!("{} of {}", s.pairs_right, s.pairs),
                s.pairs_right == s.pairs,
            ),
            (
                "recommend's choice never measured slower than base".into(),
                picks(&s.choice, s.groups),
                s.choice.slower == 0,
            ),
        ];
        for (what, fig, ok) in lines {
            let _ = writeln!(t, "| {} | {what} | {fig} | {} |", p.name(), yes(ok));
        }
    }
    t
}

fn cases_of(datasets: &[&Dataset]) -> Vec<(Protocol, Vec<Case>)> {
    Protocol::ALL
        .iter()
        .map(|p| (*p, cases(*p, datasets, Knobs::default())))
        .collect()
}

/// P1 with one, two and three input launches, all judged on the same later launches (so only
/// the inputs differ): what more launches within a budget would buy. A last row takes four
/// launches against the next four: its "input launches themselves" is how well the measured
/// speedup reproduces itself.
fn more_launches_table(judged: &[&Dataset]) -> String {
    let mut t = String::from(
        "| input launches | judged on launches | cases | median \\|error\\| | largest \\|error\\| | bias | input launches themselves: median | largest |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    // The same data sets in every row: those with launches enough for the last one's split.
    let judged: Vec<&Dataset> = judged
        .iter()
        .copied()
        .filter(|ds| ds.launches() >= MORE_LAUNCHES_MIN)
        .collect();
    let splits = (1..=MORE_LAUNCHES_JUDGED_FROM)
        .map(|inputs| (inputs, MORE_LAUNCHES_JUDGED_FROM))
        .chain([(4, 4)]);
    for (inputs, judged_from) in splits {
        let split = LaunchSplit {
            inputs,
            judged_from,
        };
        let cs: Vec<Case> = judged
            .iter()
            .flat_map(|ds| cases_split(ds, Knobs::default(), split))
            .collect();
        let s = score(&cs, model);
        let floor = score(&cs, |c| c.input_launch.unwrap_or(f64::NAN));
        let _ = writeln!(
            t,
            "| {inputs} | {} and later | {} | {} | {} | {} | {} | {} |",
            judged_from + 1,
            s.cases,
            pct(s.median),
            pct(s.largest),
            signed(s.bias),
            pct(floor.median),
            pct(floor.largest)
        );
    }
    t
}

/// The first judged launch (0-based) of the more-launches table: three launches can be inputs.
const MORE_LAUNCHES_JUDGED_FROM: usize = 3;
/// Launches a data set needs for the more-launches table: four against four.
const MORE_LAUNCHES_MIN: usize = 8;

/// Every table, as the results page holds them.
pub fn tables(datasets: &[Dataset]) -> String {
    let judged: Vec<&Dataset> = datasets.iter().filter(|d| d.judged()).collect();
    let fit: Vec<&Dataset> = datasets.iter().filter(|d| !d.judged()).collect();
    let all = cases_of(&judged);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Split: constants fitted only on the calls of 2026-11-30 at {} ({} datasets); judged only on {} ({} datasets).\n",
        FIT_HOSTS.join(", "),
        fit.len(),
        JUDGED_HOSTS.join(", "),
        judged.len()
    );
    out += "### Judged calls, by protocol\n\n";
    out += &protocols_table(&all);
    out += "\n### Judged calls, by regime\n\n";
    out += &regime_table(&all);
    out += "\n### Targets\n\n";
    out += &targets_table(&all);
    out +=
        "\n### P1 with more input launches (judged calls; data sets of eight launches or more)\n\n";
    out += &more_launches_table(&judged);
    out += "\n### Fit calls (P0; their runs timed no probes, so P1 and P2 do not apply)\n\n";
    let p0: Vec<(Protocol, Vec<Case>)> =
        vec![(Protocol::P0, cases(Protocol::P0, &fit, Knobs::default()))];
    out += &protocols_table(&p0);
    out
}

/// Every case of every protocol, one a line: protocol, dataset, model, variant, predicted,
/// naive, measured, error (judged calls first, then the fit calls).
pub fn case_list(datasets: &[Dataset]) -> String {
    let mut out = String::from(
        "protocol\tcalls\tdataset\tmodel\tvariant\tpredicted\tnaive\tmeasured\terror\n",
    );
    for judged in [true, false] {
        let set: Vec<&Dataset> = datasets.iter().filter(|d| d.judged() == judged).collect();
        for (p, cs) in cases_of(&set) {
            for c in cs {
                let _ = writeln!(
                    out,
                    "{:?}\t{}\t{}\t{}\t{}{}\t{:.3}\t{:.3}\t{:.3}\t{}",
                    p,
                    if judged { "judged" } else { "fit" },
                    c.dataset,
                    c.model,
                    c.variant,
                    if c.judged { "" } else { " (input)" },
                    c.predicted,
                    c.naive,
                    c.measured,
                    signed(c.error())
                );
            }
        }
    }
    out
}

/// The README's table: P0 and P1, the model's figures on the judged calls (the page holds P2 and
/// the rest).
pub fn readme_table(datasets: &[Dataset]) -> String {
    let judged: Vec<&Dataset> = datasets.iter().filter(|d| d.judged()).collect();
    let mut t = String::from(
        "| protocol | what the model reads | cases | median error | largest error | bias | ranking | choice slower than plain DDP |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (p, reads) in [
        (
            Protocol::P0,
            "another node's all-reduce sweep and 1-GPU runs (`recommend --from`)",
        ),
        (
            Protocol::P1,
            "what `recommend` measures on a fresh node: one launch of plain DDP at N GPUs and 1-GPU runs",
        ),
    ] {
        let s = score(&cases(p, &judged, Knobs::default()), model);
        let _ = writeln!(
            t,
            "| {} | {reads} | {} | {} of {} ({} by > 5%) |",
            p.short(),
            error_cells(&s),
            s.choice.slower,
            s.groups,
            s.choice.slower_beyond_gap
        );
    }
    t
}
