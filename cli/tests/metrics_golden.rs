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

/// Each preflight clears the causes of the one before: a preflight on the GPU whose link is fine
/// leaves no cause of the downtrained one.
#[test]
fn each_preflight_sets_its_own_causes() {
    let d = Daemon::start(Some("h200x2-nvlink+degraded-pcie"));
    assert_eq!(code(&d.cli(&["check"])), 1);
    let causes = |t: &str| -> Vec<String> {
        series(t, "ddpcheck_bandwidth_cause")
            .into_iter()
            .map(|(l, _)| l)
            .collect()
    };
    let all = causes(&d.scrape());
    assert!(
        all.iter().any(|l| l.contains("cause=\"pcie_downtrained\"")
            && l.contains("action=\"check_link\"")
            && l.contains("severity=\"warning\"")),
        "{all:?}"
    );
    let downtrained = all
        .iter()
        .find(|l| l.contains("pcie_downtrained"))
        .and_then(|l| l.split("gpus=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    let other = if downtrained == "0" { "1" } else { "0" };
    let o = d.cli(&["check", "--gpus", other]);
    assert!(code(&o) <= 1, "{}", common::stderr(&o));
    let after = causes(&d.scrape());
    assert!(
        after.iter().all(|l| !l.contains("pcie_downtrained")),
        "{after:?}"
    );
    d.stop();
}

/// The value of every series of `name` (its samples' lines, by labels).
fn series(text: &str, name: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// A restart (an upgrade, a reboot) shows the last stored verdict, its causes of low bandwidth
/// and DDP results again, so an alert on the verdict does not clear by itself; the counters
/// start from zero.
#[test]
fn a_restart_shows_the_stored_verdict_and_ddp_results_again() {
    let sim = "h200x2-nvlink+degraded-pcie";
    let d = Daemon::start(Some(sim));
    assert_eq!(code(&d.cli(&["check"])), 1);
    let o = d.cli(&common::words(
        "bench ddp --sweep mlp:1024 --variants base --steps 5",
    ));
    assert_eq!(code(&o), 0, "{}", common::stderr(&o));
    let before = d.scrape();
    let (status, dir) = d.stop_keeping_dir();
    assert!(status.success(), "{status:?}");
    let d = Daemon::start_in(dir, Some(sim), &[], &[]);
    let after = d.scrape();
    for name in [
        "ddpcheck_preflight_verdict",
        "ddpcheck_preflight_exit_code",
        "ddpcheck_preflight_findings",
        "ddpcheck_preflight_duration_seconds",
        "ddpcheck_preflight_step_duration_seconds",
        "ddpcheck_allreduce_busbw_bytes_per_second",
        "ddpcheck_allreduce_busbw_ratio",
        "ddpcheck_bandwidth_cause",
        "ddpcheck_ddp_speedup_ratio",
        "ddpcheck_ddp_scaling_efficiency_ratio",
        "ddpcheck_ddp_throughput_per_second",
    ] {
        let (b, a) = (series(&before, name), series(&after, name));
        assert!(!b.is_empty(), "{name} missing before the restart");
        let same = b.len() == a.len()
            && b.iter().zip(&a).all(|((lb, vb), (la, va))| {
                lb == la && (vb - va).abs() <= 1e-9 * vb.abs().max(1.0)
            });
        assert!(same, "{name}: before {b:?}, after the restart {a:?}");
    }
    assert!(
        series(&after, "ddpcheck_preflight_verdict")
            .iter()
            .any(|(l, v)| l.contains("verdict=\"WARNING\"") && *v == 1.0),
        "{after}"
    );
    // The time of the stored run, not of the restart (the stored one is its start plus its
    // wall time; the live one was read at its end).
    let stamp = |t: &str| series(t, "ddpcheck_preflight_last_run_timestamp_seconds")[0].1;
    assert!(
        (stamp(&before) - stamp(&after)).abs() < 1.0,
        "{} vs {}",
        stamp(&before),
        stamp(&after)
    );
    let runs = series(&after, "ddpcheck_preflight_runs_total");
    assert!(
        !runs.is_empty() && runs.iter().all(|(_, v)| *v == 0.0),
        "{runs:?}"
    );
    d.stop();
}
