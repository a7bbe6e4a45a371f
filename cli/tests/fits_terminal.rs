//! Text output fits the terminal: at `COLUMNS=80` and `COLUMNS=100` no line that `check`,
//! `explain` (live and from artifacts) or `recommend` prints is longer than the width, and their
//! JSON is the same bytes with and without `COLUMNS`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{bin, code, output_within, repo_root, stderr, stdout};

/// `ddpcheck ARGS` locally, with `COLUMNS` set to `columns` or unset.
fn ddpcheck(args: &[&str], columns: Option<&str>) -> Output {
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.args(args)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .env_remove("COLUMNS");
    if let Some(c) = columns {
        cmd.env("COLUMNS", c);
    }
    let o = output_within(&mut cmd, Duration::from_secs(60));
    // 0 OK, 1 WARNING, 2 CRITICAL: a verdict, with its report on stdout.
    assert!((0..=2).contains(&code(&o)), "{args:?}: {}", stderr(&o));
    o
}

fn node(name: &str) -> String {
    repo_root()
        .join("artifacts/tests/fixtures/nodes")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Every command whose text is held to the width: healthy and faulty nodes, tables and prose.
fn commands() -> Vec<Vec<String>> {
    let sim = |spec: &str, rest: &[&str]| {
        let mut v = vec!["--sim".to_string(), spec.to_string()];
        v.extend(rest.iter().map(|s| (*s).to_string()));
        v
    };
    let gpt2 = common::words("recommend --model gpt2-124m --price-per-hour 2.64");
    let mut all = vec![
        sim("a6000x4-phb", &["check"]),
        sim("a6000x4-phb+degraded-pcie", &["check"]),
        sim("h200x8-nvswitch", &["check"]),
        sim("a6000x4-phb", &["explain"]),
        sim("a6000x4-phb+degraded-pcie", &["explain"]),
        sim("a6000x4-phb", &gpt2),
        sim("h200x2-nvlink", &gpt2),
        sim("rtx4090x4-phb", &["recommend", "--model", "mlp:4096x8"]),
    ];
    for n in [
        "a10g-x2-vm-no-p2p",
        "a6000x2-phb-p2p-forced",
        "h100pcie-nvbridge-x2",
        "hgx-h100-slice-nvlinks-down",
        "pcie-pair-log-only-shm",
        "titanxp-x2-plx-acs",
    ] {
        all.push(vec!["explain".into(), "--from-artifacts".into(), node(n)]);
    }
    all
}

/// The lines of `text` longer than `width` characters (not bytes: `≈`, `│` are one each). A
/// single word longer than the width (a path, a URL) cannot wrap without breaking it: a line
/// holding only that word is allowed.
fn too_long(text: &str, width: usize) -> Vec<String> {
    text.lines()
        .filter(|l| l.chars().count() > width && l.trim().contains(' '))
        .map(str::to_string)
        .collect()
}

#[test]
fn text_output_is_no_wider_than_columns() {
    for args in commands() {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for width in [80, 100] {
            let o = ddpcheck(&args, Some(&width.to_string()));
            let text = stdout(&o);
            assert!(text.lines().count() > 3, "{args:?}: {text}");
            // A table fits by wrapping its cells, never by cutting its rows: each row is whole.
            let cut: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with('│') != l.ends_with('│'))
                .collect();
            assert!(
                cut.is_empty(),
                "{args:?} at COLUMNS={width}: {cut:?}\n{text}"
            );
            let long = too_long(&text, width);
            assert!(
                long.is_empty(),
                "{args:?} at COLUMNS={width}: {} lines are longer, e.g.\n{}\n\nwhole output:\n{text}",
                long.len(),
                long[0]
            );
        }
    }
}

#[test]
fn without_a_terminal_or_columns_tables_are_100_wide_and_sentences_whole() {
    // The tests' stdout is a pipe: no terminal width to read.
    let o = ddpcheck(&["--sim", "a6000x4-phb", "check"], None);
    let text = stdout(&o);
    let table: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(['│', '┌', '└', '╞']))
        .collect();
    assert!(table.len() > 10, "{text}");
    let widest = table.iter().map(|l| l.chars().count()).max().unwrap();
    // The findings' table wraps to 100, not to its content (about 400 columns).
    assert!((91..=100).contains(&widest), "{widest}: {text}");
    // A sentence stays on one line for what reads a pipe (grep, a log).
    let expected = text
        .lines()
        .find(|l| l.starts_with("# expected ≈"))
        .unwrap();
    assert!(expected.ends_with("scaled by PCIe generation)"), "{text}");
}

/// JSON with its figures of the moment (time of day, seconds a step took) masked: they differ
/// between two runs whatever the width.
fn steady(json: &[u8]) -> String {
    let mut v: serde_json::Value = serde_json::from_slice(json).unwrap();
    mask(&mut v);
    serde_json::to_string_pretty(&v).unwrap()
}

fn mask(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "time" || k.ends_with("seconds") {
                    *x = Value::Null;
                } else {
                    mask(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(mask),
        Value::String(s) => {
            // An RFC 3339 time inside a citation: 2026-12-06T05:01:04Z.
            let b = s.as_bytes();
            let mut out = String::new();
            let mut i = 0;
            while i < s.len() {
                let at_time = b.len() >= i + 20
                    && b[i + 4] == b'-'
                    && b[i + 10] == b'T'
                    && b[i + 19] == b'Z'
                    && b[i..i + 4].iter().all(u8::is_ascii_digit);
                if at_time {
                    out.push_str("TIME");
                    i += 20;
                } else {
                    let c = s[i..].chars().next().unwrap();
                    out.push(c);
                    i += c.len_utf8();
                }
            }
            *s = out;
        }
        _ => {}
    }
}

#[test]
fn json_is_the_same_whatever_the_width() {
    for args in commands() {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.push("--json");
        let plain = ddpcheck(&args, None);
        // Artifacts are read, not measured: their JSON is the same bytes.
        let exact = args.contains(&"--from-artifacts");
        for width in ["80", "100"] {
            let narrow = ddpcheck(&args, Some(width));
            if exact {
                assert_eq!(stdout(&narrow), stdout(&plain), "{args:?} COLUMNS={width}");
            } else {
                assert_eq!(
                    steady(&narrow.stdout),
                    steady(&plain.stdout),
                    "{args:?} COLUMNS={width}"
                );
            }
        }
    }
}
