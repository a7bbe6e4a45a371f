//! The corpus of public field cases (`fixtures/field-cases/`): every folder's `case.toml` has
//! every field, every folder has a row in docs/field-cases.md and every row a folder, the rows
//! agree with the cases' truth, and a replay of each case through the real binary (`explain
//! --from-artifacts DIR --json`, with `--expect-gpus N` where the case gives the machine type's
//! count) gives the verdict and causes its row states, with the summary line's counts of false
//! fails and false passes. Two-run cases (`judged_by = "diff"`) are replayed through `diff a b`
//! instead (`two_runs`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use ddpcheck_core::explain::CauseKind;
use serde_json::Value;

#[path = "field_cases/two_runs.rs"]
mod two_runs;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn cases_dir() -> PathBuf {
    root().join("fixtures/field-cases")
}

/// One case folder and its `case.toml`.
struct Case {
    id: String,
    dir: PathBuf,
    toml: toml::Table,
}

impl Case {
    fn str(&self, key: &str) -> &str {
        self.toml
            .get(key)
            .and_then(toml::Value::as_str)
            .unwrap_or_else(|| panic!("{}: `{key}` is not a string", self.id))
    }

    /// A two-run case, judged by `diff a b`.
    fn is_diff(&self) -> bool {
        self.toml.get("judged_by").and_then(toml::Value::as_str) == Some("diff")
    }

    fn healthy(&self) -> bool {
        self.toml
            .get("truth_healthy")
            .and_then(toml::Value::as_bool)
            .unwrap_or_else(|| panic!("{}: `truth_healthy` is not a bool", self.id))
    }

    /// The operator's GPU count for the machine type (`expect_gpus`), where the thread publishes
    /// it; the replay passes it as `--expect-gpus`.
    fn expect_gpus(&self) -> Option<i64> {
        self.toml
            .get("expect_gpus")
            .and_then(toml::Value::as_integer)
    }

    /// The truth's cause where it is a word of ddpcheck's vocabulary.
    fn vocabulary_cause(&self) -> Option<&str> {
        let c = self.str("truth_cause");
        (c != "none" && !c.starts_with("none_in_vocabulary:")).then_some(c)
    }
}

fn cases() -> Vec<Case> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("fixtures/field-cases")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .map(|dir| {
            let id = dir.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(dir.join("case.toml"))
                .unwrap_or_else(|e| panic!("{id}: case.toml: {e}"));
            let toml = text
                .parse::<toml::Table>()
                .unwrap_or_else(|e| panic!("{id}: case.toml: {e}"));
            Case { id, dir, toml }
        })
        .collect()
}

/// One row of the table in docs/field-cases.md.
#[derive(Debug)]
struct Row {
    case: String,
    truth: String,
    expected: String,
    verdict: String,
    cause: String,
    matched: String,
}

fn doc() -> String {
    std::fs::read_to_string(root().join("docs/field-cases.md")).expect("docs/field-cases.md")
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().trim_matches('`').to_string())
        .collect()
}

/// The rows of the table whose header starts `| case |`.
fn rows(doc: &str) -> Vec<Row> {
    let mut lines = doc.lines().skip_while(|l| !l.starts_with("| case |"));
    let header = cells(
        lines
            .next()
            .expect("the corpus table's header `| case | …`"),
    );
    assert_eq!(
        header,
        ["case", "source", "truth", "expected", "ddpcheck", "cause", "fix", "match"],
        "the table's columns"
    );
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let c = cells(l);
            assert_eq!(c.len(), 8, "row {l:?} has {} cells", c.len());
            Row {
                case: c[0].clone(),
                truth: c[2].clone(),
                expected: c[3].clone(),
                verdict: c[4].clone(),
                cause: c[5].clone(),
                matched: c[7].clone(),
            }
        })
        .collect()
}

/// The truth cell a case's row carries: `healthy` or `fault`, and the cause in parentheses
/// unless it is `none`.
fn truth_cell(case: &Case) -> String {
    let state = if case.healthy() { "healthy" } else { "fault" };
    match case.str("truth_cause") {
        "none" => state.to_string(),
        cause => format!("{state} ({cause})"),
    }
}

/// The fields of every case.
const SOURCE_FIELDS: [&str; 6] = [
    "source_repo",
    "source_number",
    "source_kind",
    "title",
    "artifacts_provenance",
    "truth_summary",
];

/// The fields of a case judged by `explain --from-artifacts`.
const FIELDS: [&str; 3] = ["truth_healthy", "truth_cause", "expected_verdict"];

/// A check's line where `ok` is false.
fn want(bad: &mut Vec<String>, case: &Case, ok: bool, what: &str) {
    if !ok {
        bad.push(format!("{}: {what}", case.id));
    }
}

/// A line for each of `fields` the case's case.toml lacks.
fn missing(case: &Case, fields: &[&str]) -> Vec<String> {
    fields
        .iter()
        .filter(|f| !case.toml.contains_key(**f))
        .map(|f| format!("{}: no `{f}`", case.id))
        .collect()
}

/// The fields every case has: its source, title, summary of the truth and provenance.
fn check_source(case: &Case) -> Vec<String> {
    let mut bad = missing(case, &SOURCE_FIELDS);
    if !bad.is_empty() {
        return bad;
    }
    let b = &mut bad;
    want(
        b,
        case,
        case.str("source_repo").contains('/'),
        "source_repo is not owner/name",
    );
    let number = case.toml["source_number"].as_integer();
    want(
        b,
        case,
        number.is_some_and(|n| n > 0),
        "source_number is not a positive integer",
    );
    let kind = case.str("source_kind");
    want(
        b,
        case,
        ["issue", "pr", "discussion"].contains(&kind),
        "source_kind is not issue|pr|discussion",
    );
    want(b, case, !case.str("title").is_empty(), "title is empty");
    want(
        b,
        case,
        !case.str("truth_summary").is_empty(),
        "truth_summary is empty",
    );
    let provenance = case.str("artifacts_provenance");
    want(
        b,
        case,
        ["published", "rebuilt"].contains(&provenance),
        "artifacts_provenance is not published|rebuilt",
    );
    let rebuilt_from = case.toml.get("rebuilt_from").and_then(toml::Value::as_str);
    want(
        b,
        case,
        (provenance == "rebuilt") == rebuilt_from.is_some_and(|s| !s.is_empty()),
        "rebuilt_from is required with (and only with) rebuilt artifacts",
    );
    bad
}

fn check_fields(case: &Case) -> Vec<String> {
    let mut bad = check_source(case);
    if case.is_diff() {
        bad.extend(two_runs::check_fields(case));
        return bad;
    }
    let missing: Vec<String> = FIELDS
        .iter()
        .filter(|f| !case.toml.contains_key(**f))
        .map(|f| format!("{}: no `{f}`", case.id))
        .collect();
    if !bad.is_empty() || !missing.is_empty() {
        bad.extend(missing);
        return bad;
    }
    let b = &mut bad;
    let verdict = case.str("expected_verdict");
    want(
        b,
        case,
        ["ok", "warning", "critical"].contains(&verdict),
        "expected_verdict is not ok|warning|critical",
    );
    let _ = case.healthy();
    let expect_from = case
        .toml
        .get("expect_gpus_from")
        .and_then(toml::Value::as_str);
    want(
        b,
        case,
        case.toml
            .get("expect_gpus")
            .is_none_or(|v| v.as_integer().is_some_and(|n| n > 0))
            && case.expect_gpus().is_some() == expect_from.is_some_and(|s| !s.is_empty()),
        "expect_gpus (a positive integer) goes with expect_gpus_from (where the thread gives it)",
    );
    want(
        b,
        case,
        cause_is_known(case.str("truth_cause")),
        "truth_cause is not a cause word",
    );
    bad
}

/// `none`, a CauseKind word, or `none_in_vocabulary:<short>`.
fn cause_is_known(cause: &str) -> bool {
    cause == "none"
        || cause
            .strip_prefix("none_in_vocabulary:")
            .is_some_and(|s| !s.is_empty() && !s.contains(' '))
        || CauseKind::ALL.iter().any(|k| k.as_str() == cause)
}

fn check_folder(case: &Case) -> Vec<String> {
    let mut bad = Vec::new();
    if !case.dir.join("README.md").is_file() {
        bad.push(format!("{}: no README.md", case.id));
    }
    let folders: &[&str] = if case.is_diff() {
        &["a", "b"]
    } else {
        &["artifacts"]
    };
    for dir in folders {
        if files_in(&case.dir.join(dir)) == 0 {
            bad.push(format!("{}: {dir}/ holds no file", case.id));
        }
    }
    bad
}

/// How many plain files a folder holds (0 where it is missing).
fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_file())
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn every_case_has_every_field_a_readme_and_artifacts() {
    let cases = cases();
    assert!(
        cases.len() >= 20,
        "{} cases: the issue asks for 20",
        cases.len()
    );
    let bad: Vec<String> = cases
        .iter()
        .flat_map(|c| check_fields(c).into_iter().chain(check_folder(c)))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn every_folder_has_a_row_and_every_row_a_folder() {
    let folders: BTreeSet<String> = cases().into_iter().map(|c| c.id).collect();
    let listed: Vec<String> = rows(&doc()).into_iter().map(|r| r.case).collect();
    let rows: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(rows.len(), listed.len(), "a case has two rows: {listed:?}");
    let no_row: Vec<_> = folders.difference(&rows).collect();
    let no_folder: Vec<_> = rows.difference(&folders).collect();
    assert!(
        no_row.is_empty() && no_folder.is_empty(),
        "folders without a row: {no_row:?}; rows without a folder: {no_folder:?}"
    );
}

#[test]
fn each_row_states_its_cases_truth_and_expected_verdict() {
    let rows = rows(&doc());
    let bad: Vec<String> = cases()
        .iter()
        .filter_map(|c| {
            let row = rows.iter().find(|r| r.case == c.id)?;
            let want = if c.is_diff() {
                (two_runs::truth_cell(c), two_runs::expected_cell(c))
            } else {
                (truth_cell(c), c.str("expected_verdict").to_string())
            };
            let got = (row.truth.clone(), row.expected.clone());
            (want != got).then(|| format!("{}: row says {got:?}, case.toml {want:?}", c.id))
        })
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// What one replay gave.
#[derive(Debug)]
struct Replay {
    verdict: String,
    /// (kind, severity, action) of every top-level cause.
    causes: Vec<(String, String, String)>,
}

impl Replay {
    /// The cause cell: the causes' kinds, sorted and unique, or `none`.
    fn cause_cell(&self) -> String {
        let kinds: BTreeSet<&str> = self.causes.iter().map(|(k, _, _)| k.as_str()).collect();
        if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.into_iter().collect::<Vec<_>>().join(", ")
        }
    }

    fn names(&self, kind: &str) -> bool {
        self.causes.iter().any(|(k, _, _)| k == kind)
    }

    /// A healthy node judged critical, or given a fault (not a platform limit) at warning+.
    fn false_fail(&self, case: &Case) -> bool {
        let fault = self.causes.iter().any(|(k, s, a)| {
            let limit = a == "platform_limit"
                || CauseKind::ALL
                    .iter()
                    .any(|c| c.as_str() == k && c.is_platform_limit());
            !limit && (s == "warning" || s == "critical")
        });
        case.healthy() && (self.verdict == "critical" || fault)
    }

    /// A faulty node judged ok with no cause naming its problem.
    fn false_pass(&self, case: &Case) -> bool {
        let named = case.vocabulary_cause().is_some_and(|c| self.names(c));
        !case.healthy() && self.verdict == "ok" && !named
    }

    /// The expected verdict, and the truth's cause named where it is a word of the vocabulary.
    fn matches(&self, case: &Case) -> bool {
        self.verdict == case.str("expected_verdict")
            && case.vocabulary_cause().is_none_or(|c| self.names(c))
    }
}

/// A replay's JSON report; a panic naming the case, the exit code and stderr where the output
/// is not JSON.
fn report_json(case: &Case, out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: not JSON ({e}), exit {:?}: {}",
            case.id,
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A replay: the report's verdict and causes, or `refused` where ddpcheck turned the folder
/// down as bad input (exit 64: truncated, mixed or foreign files), which its row must say.
fn replay(case: &Case) -> Replay {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ddpcheck"));
    cmd.args(["explain", "--from-artifacts"])
        .arg(case.dir.join("artifacts"))
        .arg("--json");
    if let Some(n) = case.expect_gpus() {
        cmd.args(["--expect-gpus", &n.to_string()]);
    }
    let out = cmd.output().expect("run ddpcheck");
    if out.status.code() == Some(64) {
        return Replay {
            verdict: "refused".to_string(),
            causes: Vec::new(),
        };
    }
    let v = report_json(case, &out);
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    Replay {
        verdict: text(&v, "verdict"),
        causes: v["causes"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no `causes` list", case.id))
            .iter()
            .map(|c| (text(c, "kind"), text(c, "severity"), text(c, "action")))
            .collect(),
    }
}

/// `N cases, F false fails, P false passes` from the line starting `Summary:`.
fn summary(doc: &str) -> String {
    doc.lines()
        .find_map(|l| l.strip_prefix("Summary:"))
        .expect("a `Summary:` line")
        .trim()
        .trim_end_matches('.')
        .to_string()
}

fn row_misses(case: &Case, row: &Row, r: &Replay) -> Vec<String> {
    let mut bad = Vec::new();
    if row.verdict != r.verdict || row.cause != r.cause_cell() {
        bad.push(format!(
            "{}: row says {} / {}, the replay {} / {}",
            case.id,
            row.verdict,
            row.cause,
            r.verdict,
            r.cause_cell()
        ));
    }
    let says_yes = row.matched == "yes";
    if says_yes != r.matches(case) || (!says_yes && !row.matched.starts_with("no: ")) {
        bad.push(format!(
            "{}: match cell {:?}, the replay {} (a miss reads `no: why`)",
            case.id,
            row.matched,
            if r.matches(case) { "matches" } else { "misses" }
        ));
    }
    bad
}

#[test]
fn each_replay_gives_its_rows_verdict_and_causes_and_the_summary_counts() {
    let doc = doc();
    let rows = rows(&doc);
    let cases = cases();
    let (mut bad, mut fails, mut passes) = (Vec::new(), 0, 0);
    for case in &cases {
        let row = rows.iter().find(|row| row.case == case.id);
        if case.is_diff() {
            let (misses, pass) = two_runs::judge(case, row);
            bad.extend(misses);
            passes += usize::from(pass);
            continue;
        }
        let r = replay(case);
        fails += usize::from(r.false_fail(case));
        passes += usize::from(r.false_pass(case));
        if let Some(row) = row {
            bad.extend(row_misses(case, row, &r));
        }
    }
    let want = format!(
        "{} cases, {fails} false fails, {passes} false passes",
        cases.len()
    );
    if summary(&doc) != want {
        bad.push(format!("summary {:?}, the replay {want:?}", summary(&doc)));
    }
    assert!(bad.is_empty(), "{bad:#?}");
}
