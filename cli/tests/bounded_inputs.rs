//! Inputs are bounded and versioned: every file a caller names is read up to a size limit (an
//! endless /dev/zero is refused with one line, exit 64, instead of filling memory).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::process::Command;
use std::time::Duration;

use common::{bin, code, output_within, stderr, stdout};

/// `ddpcheck ARGS` locally, bounded in time: a read without a limit would not end by itself.
fn ddpcheck(args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.args(args)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON");
    output_within(&mut cmd, Duration::from_secs(60))
}

/// Each command that reads a file the caller names, given /dev/zero: refused at the file's
/// limit, one line naming the flag, the file and the limit.
#[test]
fn endless_files_are_refused_at_their_limit() {
    // The CA and certificate are only looked at for a PEM header before the key is read.
    let d = tempfile::tempdir().unwrap();
    let pem = d.path().join("any.pem");
    std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let pem = pem.to_str().unwrap();
    let tls_key = [
        "--daemon",
        "https://127.0.0.1:1",
        "--tls-ca",
        pem,
        "--tls-cert",
        pem,
        "--tls-key",
        "/dev/zero",
        "topo",
    ];
    let cases: [(&[&str], &str); 7] = [
        (
            &["recommend", "--model", "gpt2-124m", "--from", "/dev/zero"],
            "--from /dev/zero: larger than 64.0 MiB, the limit for a saved report",
        ),
        (
            &["bench", "ddp", "--from", "/dev/zero"],
            "--from /dev/zero: larger than 64.0 MiB, the limit for a saved report",
        ),
        (
            &common::words("--sim h200x2-nvlink recommend --model-config /dev/zero"),
            "--model-config /dev/zero: larger than 1.0 MiB, the limit for a configuration file",
        ),
        (
            &common::words("--daemon https://127.0.0.1:1 --tls-ca /dev/zero topo"),
            "--tls-ca /dev/zero: larger than 1.0 MiB, the limit for a PEM file",
        ),
        (
            &tls_key,
            "--tls-key /dev/zero: larger than 1.0 MiB, the limit for a PEM file",
        ),
        (
            &["config", "check", "--config", "/dev/zero"],
            "config file /dev/zero: larger than 1.0 MiB, the limit for a configuration file",
        ),
        (
            &["cluster", "check", "--nodefile", "/dev/zero"],
            "--nodefile /dev/zero: larger than 4.0 MiB, the limit for a node list",
        ),
    ];
    for (args, said) in cases {
        let o = ddpcheck(args);
        let err = stderr(&o);
        assert_eq!(code(&o), 64, "{args:?}: {}{err}", stdout(&o));
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
}

/// A saved `bench ddp --json` of the simulated H200 pair, as JSON to edit.
fn saved_ddp_report() -> serde_json::Value {
    let o = common::local(&common::words(
        "--sim h200x2-nvlink bench ddp --model gpt2-124m --variants base --gpus 1,2 --json",
    ));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A change made to a saved report.
type Edit<'a> = dyn Fn(&mut serde_json::Value) + 'a;

/// An edited saved report: an unknown schema version, or a figure no run gives, is refused by
/// both readers of saved reports (`bench ddp --from`, `recommend --from`) with one line that
/// names the version or the field; the versions this build reads are read.
#[test]
fn saved_reports_of_unknown_versions_or_impossible_figures_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let good = saved_ddp_report();
    let edited = |name: &str, edit: &Edit<'_>| {
        let mut v = good.clone();
        edit(&mut v);
        let p = d.path().join(name);
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let readers = |file: &str| {
        [
            ddpcheck(&["bench", "ddp", "--from", file]),
            ddpcheck(&[
                "recommend",
                "--model",
                "gpt2-124m",
                "--gpus",
                "2",
                "--from",
                file,
            ]),
        ]
    };
    let refused: [(&str, &Edit<'static>, &str); 4] = [
        (
            "v0.json",
            &|v| v["schema_version"] = 0.into(),
            "schema_version 0 is not a version ddpcheck wrote (it reads versions 1 to 3)",
        ),
        (
            "v99.json",
            &|v| v["schema_version"] = 99.into(),
            "schema_version 99 is newer than this ddpcheck (it reads versions 1 to 3)",
        ),
        (
            "negative-p90.json",
            &|v| v["results"][1]["step_time_p90_s"] = (-0.5).into(),
            "results[1].step_time_p90_s = -0.5: must be above 0",
        ),
        (
            "no-gpus.json",
            &|v| v["results"][0]["world_size"] = 0.into(),
            "results[0].world_size = 0: must be at least 1",
        ),
    ];
    for (name, edit, said) in refused {
        let file = edited(name, edit);
        for o in readers(&file) {
            let err = stderr(&o);
            assert_eq!(code(&o), 64, "{name}: {}{err}", stdout(&o));
            assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
            assert!(err.contains(&format!("{file}: {said}")), "{name}: {err}");
        }
    }
    for version in [1, 2, 3] {
        let file = edited(&format!("v{version}.json"), &|v| {
            v["schema_version"] = version.into();
        });
        for o in readers(&file) {
            assert_eq!(code(&o), 0, "v{version}: {}", stderr(&o));
        }
    }
}

/// Absurd numbers are refused at the flag with one line and exit 64, before anything runs;
/// `--max-age` without a daemon (a local run keeps no verdict to reuse) is a usage error.
#[test]
fn absurd_numbers_are_refused_at_the_flag() {
    let sim = ["--sim", "h200x2-nvlink"];
    let recommend = ["recommend", "--model", "gpt2-124m"];
    let cases: [(Vec<&str>, &str); 10] = [
        (
            [&sim[..], &["check", "--max-bytes", "0"]].concat(),
            "--max-bytes",
        ),
        (
            [&sim[..], &["check", "--min-bytes", "0"]].concat(),
            "--min-bytes",
        ),
        (
            [&sim[..], &["check", "--max-bytes", "1T"]].concat(),
            "--max-bytes",
        ),
        (
            [&sim[..], &["check", "--max-age", "60"]].concat(),
            "--max-age",
        ),
        (
            [&sim[..], &recommend[..], &["--seq", "0"]].concat(),
            "--seq",
        ),
        (
            [&sim[..], &recommend[..], &["--seq", "4000000000"]].concat(),
            "--seq",
        ),
        (
            [&sim[..], &recommend[..], &["--budget", "1e30"]].concat(),
            "--budget",
        ),
        (
            [&sim[..], &recommend[..], &["--repeats", "0"]].concat(),
            "--repeats",
        ),
        (
            [&sim[..], &recommend[..], &["--repeats", "1000"]].concat(),
            "--repeats",
        ),
        (
            [&sim[..], &["bench", "collectives", "--min-bytes", "0"]].concat(),
            "--min-bytes",
        ),
    ];
    for (args, flag) in cases {
        let o = ddpcheck(&args);
        let err = stderr(&o);
        assert_eq!(code(&o), 64, "{args:?}: {}{err}", stdout(&o));
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
}
