//! The recommend issue's published accuracy figures are what this code computes from the
//! committed GPU measurements: `bench/accuracy/judged-set.sh` against the table of
//! docs/results/h200x2-session10.md (sessions 5-9 keep the tables computed then), and
//! `bench/accuracy/loo-calibration-all.sh` against that page's calibration table (session 9's, with
//! session 10's set added). The scripts
//! need python3: without it the tests skip, and fail instead when DDPCHECK_REQUIRE_SERVICES=1
//! (as in CI).

mod common;

use common::{bin, repo_root, services_must_run};
use std::process::Command;

const S10: &str = "docs/results/h200x2-session10.md";

/// For each block of the script's output: the label of its table row (the first block whose
/// heading starts so).
const ROWS: [(&str, &str); 20] = [
    (
        "== single launches, sessions 2-4",
        "sessions 2–4, single launches",
    ),
    ("== mlprep, s3", "mlprep s3, 3 launches"),
    ("== mlprep, s4", "mlprep s4, 3 launches"),
    ("== mlprep5, s5", "mlprep5 s5, 5 launches"),
    ("== mlprep10, s6", "mlprep10 s6, 10 launches (8 hostnet)"),
    ("== mlprep8, s7 (", "mlprep8 s7, 8 launches"),
    (
        "== mlprep8, s7, with the nocomm",
        "mlprep8 s7, with nocomm inputs",
    ),
    ("== s8, the sweep's curve", "s8, the sweep's curve"),
    (
        "== s8, the curve DDP's runs timed",
        "s8, the runs' own curve (as recommend reads it)",
    ),
    ("== s9, the sweep's curve", "s9, the sweep's curve"),
    (
        "== s9, the curve DDP's runs timed",
        "s9, the runs' own curve (as recommend reads it)",
    ),
    (
        "== s8 and s9, every case",
        "s8 and s9, every case measured with the probes",
    ),
    ("== s10, the sweep's curve", "s10, the sweep's curve"),
    (
        "== s10, the curve DDP's runs timed",
        "s10, the runs' own curve (as recommend reads it)",
    ),
    (
        "== s10 accumgap",
        "s10 accumgap, with the nocomm runs of the same launches",
    ),
    (
        "== s8, s9 and s10, every case",
        "s8, s9 and s10, every case measured with the probes",
    ),
    (
        "== device cases: GPT-2",
        "device cases: GPT-2 single launches, MLPs s6 and s7",
    ),
    (
        "== device cases with s8,",
        "device cases with s8, each as recommend reads it",
    ),
    (
        "== device cases with s8 and s9,",
        "device cases with s8 and s9, each as recommend reads it",
    ),
    (
        "== device cases with s8, s9 and s10",
        "device cases with s8, s9 and s10, each as recommend reads it",
    ),
];

/// The rest of the first line of `text` after `prefix`, up to `end` (`None`: the line's end).
fn field<'a>(text: &'a str, prefix: &str, end: Option<&str>) -> Option<&'a str> {
    let line = text.lines().find(|l| l.contains(prefix))?;
    let rest = &line[line.find(prefix)? + prefix.len()..];
    match end {
        Some(end) => Some(&rest[..rest.find(end)?]),
        None => Some(rest),
    }
}

/// Whether python3 runs (the scripts need it); without it the tests skip, unless CI requires the
/// services (then they fail).
fn python_runs() -> bool {
    let python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        assert!(
            !services_must_run(),
            "DDPCHECK_REQUIRE_SERVICES=1 but python3 does not run"
        );
        eprintln!("skipping: python3 does not run (the scripts need it)");
    }
    python
}

/// `bash scripts/SCRIPT ddpcheck` from the repository root: its standard output (the test fails
/// if the script does).
fn script_output(script: &str) -> String {
    let o = Command::new("bash")
        .arg(repo_root().join("bench/accuracy").join(script))
        .arg(bin("ddpcheck"))
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("bash runs bench/accuracy/{script}: {e}"));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{script} failed: {}\n{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn the_published_figures_are_what_the_model_computes_from_the_committed_runs() {
    if !python_runs() {
        return;
    }
    let root = repo_root();
    let out = script_output("judged-set.sh");
    let doc = std::fs::read_to_string(root.join(S10)).unwrap_or_else(|e| panic!("{S10}: {e}"));
    for (block, label) in ROWS {
        let start = out
            .find(block)
            .unwrap_or_else(|| panic!("no block {block:?} in:\n{out}"));
        let rest = &out[start + block.len()..];
        let text = &rest[..rest.find("\n== ").unwrap_or(rest.len())];
        let summary = |prefix: &str, end: Option<&str>| {
            field(text, prefix, end)
                .unwrap_or_else(|| panic!("no {prefix:?} in {block:?}:\n{text}"))
        };
        let cases = text
            .lines()
            .find_map(|l| Some(l.split_once(" cases: ")?.0))
            .unwrap_or_else(|| panic!("no case count in {block:?}:\n{text}"));
        let row = format!(
            "| {label} | {cases} | {} | {} | {} |",
            summary("median |error| ", Some(",")),
            summary("largest ", None),
            summary("ranking: ", Some(" pairs")),
        );
        assert!(
            doc.contains(&row),
            "{S10} lacks {row:?}: the model or the data changed; re-run bench/accuracy/judged-set.sh and update the table\n{text}"
        );
    }
}

#[test]
fn the_calibration_table_is_what_the_gated_calibration_computes() {
    // Session 9's §5, with session 10's set (its page): each repeated MLP dataset's models
    // predicted with overheads fitted on the others (`bench/accuracy/loo-calibration-all.sh`); the "checked first (now)" column, the third
    // cell of its row, is the current code's.
    if !python_runs() {
        return;
    }
    let out = script_output("loo-calibration-all.sh");
    let doc = std::fs::read_to_string(repo_root().join(S10)).expect("the session 10 page");
    let blocks: Vec<&str> = out.split("== ").skip(1).collect();
    assert_eq!(blocks.len(), 7, "{out}");
    for block in blocks {
        let name = block.lines().next().unwrap_or_default().trim();
        let found = |prefix: &str, end: Option<&str>| {
            field(block, prefix, end).unwrap_or_else(|| panic!("no {prefix:?} in {block}"))
        };
        let cell = format!(
            "{}, {}, {}",
            found("median |error| ", Some(",")),
            found("largest ", None),
            found("ranking: ", Some(" pairs"))
        );
        let row = doc
            .lines()
            // The calibration table's rows read "| s8, 8 launches, …"; the standing table's
            // "| s8, the sweep's curve …".
            .find(|l| {
                l.strip_prefix(&format!("| {name}, "))
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .unwrap_or_else(|| panic!("{S10} has no row for {name}"));
        let third = row.split('|').nth(3).map(str::trim);
        assert_eq!(
            third,
            Some(cell.as_str()),
            "{S10}'s calibration row for {name} is stale: re-run bench/accuracy/loo-calibration-all.sh\n{row}"
        );
    }
}
