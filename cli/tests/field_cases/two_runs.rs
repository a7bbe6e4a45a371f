//! Two-run field cases (`judged_by = "diff"`: folders `a/` before and `b/` after): each is
//! replayed through `ddpcheck diff a b --json`, and the first-ranked change and the kind of the
//! change named as its cause are held against the case's truth and its row.

use std::process::Command;

use serde_json::Value;

use super::{Case, Row};

/// The fields a two-run case has besides the source's and the title.
pub const FIELDS: [&str; 3] = ["judged_by", "truth_change", "truth_change_cause"];

/// The change kinds `diff` names (docs/diff.md's table).
const CHANGE_KINDS: [&str; 13] = [
    "transport",
    "pcie_link",
    "topology",
    "p2p_status",
    "nccl_version",
    "driver",
    "cuda",
    "nccl_env",
    "algo_proto",
    "clocks",
    "throttling",
    "nvlink_count",
    "gpu_model",
];

/// What a two-run case lacks or gets wrong, one line each.
pub fn check_fields(case: &Case) -> Vec<String> {
    let mut bad = super::missing(case, &FIELDS);
    if !bad.is_empty() {
        return bad;
    }
    for key in ["truth_change", "truth_change_cause"] {
        if !CHANGE_KINDS.contains(&case.str(key)) {
            bad.push(format!("{}: `{key}` is not a change kind of diff", case.id));
        }
    }
    bad
}

/// The truth cell: the change the thread found and what brought it about.
pub fn truth_cell(case: &Case) -> String {
    format!(
        "change: {} ({})",
        case.str("truth_change"),
        case.str("truth_change_cause")
    )
}

/// The expected cell: a correct diff ranks the truth's change first, caused by its cause.
pub fn expected_cell(case: &Case) -> String {
    format!(
        "diff: {} first, caused by {}",
        case.str("truth_change"),
        case.str("truth_change_cause")
    )
}

/// What one diff replay gave: every change's kind in rank order, and the kind of the change
/// whose `caused` names the first one's kind (`none` where none does).
#[derive(Debug)]
pub struct DiffReplay {
    pub kinds: Vec<String>,
    pub cause: String,
}

impl DiffReplay {
    fn first(&self) -> &str {
        self.kinds.first().map_or("none", String::as_str)
    }

    fn matches(&self, case: &Case) -> bool {
        self.first() == case.str("truth_change") && self.cause == case.str("truth_change_cause")
    }

    /// The thread's change not named at all: the diff passes over what made the run slower.
    fn false_pass(&self, case: &Case) -> bool {
        !self.kinds.iter().any(|k| k == case.str("truth_change"))
    }
}

pub fn replay(case: &Case) -> DiffReplay {
    let out = Command::new(env!("CARGO_BIN_EXE_ddpcheck"))
        .arg("diff")
        .arg(case.dir.join("a"))
        .arg(case.dir.join("b"))
        .arg("--json")
        .output()
        .expect("run ddpcheck");
    let v = super::report_json(case, &out);
    let changes = v["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no `changes` list", case.id));
    let kind = |c: &Value| c["kind"].as_str().unwrap_or_default().to_string();
    let kinds: Vec<String> = changes.iter().map(kind).collect();
    let first = kinds.first().cloned().unwrap_or_default();
    let cause = changes
        .iter()
        .find(|c| {
            c["caused"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k.as_str() == Some(first.as_str())))
        })
        .map_or_else(|| "none".to_string(), kind);
    DiffReplay { kinds, cause }
}

/// The replay against its row: (misses, a false pass).
pub fn judge(case: &Case, row: Option<&Row>) -> (Vec<String>, bool) {
    let r = replay(case);
    let mut bad = Vec::new();
    if let Some(row) = row {
        if row.verdict != r.first() || row.cause != r.cause {
            bad.push(format!(
                "{}: row says {} / {}, the diff {} / {}",
                case.id,
                row.verdict,
                row.cause,
                r.first(),
                r.cause
            ));
        }
        let says_yes = row.matched == "yes";
        if says_yes != r.matches(case) || (!says_yes && !row.matched.starts_with("no: ")) {
            bad.push(format!(
                "{}: match cell {:?}, the diff {:?} (a miss reads `no: why`)",
                case.id, row.matched, r
            ));
        }
    }
    (bad, r.false_pass(case))
}
