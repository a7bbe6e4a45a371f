//! Golden `/metrics`: the exact series, labels and deterministic values a simulated node exports,
//! before and after a preflight. Regenerate with `UPDATE_GOLDEN=1 cargo test --test metrics_golden`
//! and review the diff: a change here is a change to every dashboard and alert.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test harness: a failed set-up is a failed test

mod common;

use common::{code, Daemon};

/// Series whose values depend on the clock; their values are masked, their labels are not.
const VOLATILE: [&str; 5] = [
    "ddpcheck_snapshot_age_seconds",
    "ddpcheck_collector_duration_seconds",
    "ddpcheck_preflight_last_run_timestamp_seconds",
    "ddpcheck_preflight_duration_seconds",
    "ddpcheck_preflight_step_duration_seconds",
];

fn normalise(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        if !line.starts_with('#') && VOLATILE.contains(&name) {
            let (series, _) = line.rsplit_once(' ').unwrap_or((line, ""));
            out.push_str(series);
            out.push_str(" <volatile>\n");
        } else if line.starts_with("ddpcheck_build_info") {
            out.push_str(&line.replace(env!("CARGO_PKG_VERSION"), "<version>"));
            out.push('\n');
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn check_golden(name: &str, actual: &str) {
    let path = common::repo_root().join("cli/tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing {}; run with UPDATE_GOLDEN=1", path.display()));
    if want != actual {
        let diff: Vec<String> = want
            .lines()
            .zip(actual.lines())
            .filter(|(a, b)| a != b)
            .take(10)
            .map(|(a, b)| format!("- {a}\n+ {b}"))
            .collect();
        panic!(
            "/metrics differs from {} ({} vs {} lines):\n{}",
            path.display(),
            want.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}

#[test]
fn metrics_match_golden_before_and_after_a_preflight() {
    let d = Daemon::start(Some("h200x2-nvlink+degraded-pcie"));
    check_golden("metrics_first_scrape.txt", &normalise(&d.scrape()));
    let o = d.cli(&["check"]);
    assert_eq!(code(&o), 1);
    check_golden("metrics_after_check.txt", &normalise(&d.scrape()));
}
