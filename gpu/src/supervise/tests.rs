//! Tests of the child supervisor: real `sh` children for deadlines, signals, process groups and
//! JSON-line handling.
use super::*;

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    c
}

fn opts(deadline_ms: u64) -> Options {
    Options {
        grace: Duration::from_millis(200),
        ..Options::new(Duration::from_millis(deadline_ms))
    }
}

fn pgid_from(values: &[serde_json::Value]) -> i32 {
    values
        .iter()
        .find_map(|v| v.get("pgid").and_then(|p| p.as_i64()))
        .and_then(|p| i32::try_from(p).ok())
        .expect("child printed its pgid")
}

#[test]
fn good_json_lines_are_parsed() {
    let mut got = Vec::new();
    let out = run_json_lines_with(
        sh(r#"echo '{"event":"a","n":1}'; echo; echo '[2,3]'; read x; echo "{\"in\":\"$x\"}""#),
        Some(b"hello\n".to_vec()),
        &opts(5000),
        |v| got.push(v),
    )
    .unwrap();
    assert!(out.status.success());
    assert_eq!(out.lines, 3);
    assert_eq!(got[0]["n"], 1);
    assert_eq!(got[1], serde_json::json!([2, 3]));
    assert_eq!(got[2]["in"], "hello");
}

#[test]
fn crash_is_an_error_with_stderr() {
    let err = run_json_lines_with(
        sh(r#"echo '{"ok":true}'; echo 'segfault-ish trouble' >&2; exit 3"#),
        None,
        &opts(5000),
        |_| {},
    )
    .unwrap_err();
    match &err {
        SuperviseError::Failed { code, lines, .. } => {
            assert_eq!((*code, *lines), (Some(3), 1));
        }
        other => panic!("{other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("exited with code 3"), "{msg}");
    assert!(msg.contains("segfault-ish trouble"), "{msg}");
}

#[test]
fn garbage_line_is_reported_and_the_child_stopped() {
    let t = Instant::now();
    let mut got = Vec::new();
    let err = run_json_lines_with(
        sh(r#"echo "{\"pgid\":$$}"; echo 'NCCL INFO this is not json'; sleep 30"#),
        None,
        &opts(10_000),
        |v| got.push(v),
    )
    .unwrap_err();
    match &err {
        SuperviseError::NotJson { line_no, line, .. } => {
            assert_eq!(*line_no, 2);
            assert_eq!(line, "NCCL INFO this is not json");
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("NCCL INFO this is not json"));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(live_members(pgid_from(&got)).is_empty());
}

#[test]
fn long_garbage_is_truncated() {
    let err = run_json_lines_with(
        sh("head -c 5000 /dev/zero | tr '\\0' x; echo"),
        None,
        &opts(5000),
        |_| {},
    )
    .unwrap_err();
    let SuperviseError::NotJson { line, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(line.chars().count(), 201);
}

#[test]
fn partial_json_at_eof_is_an_error() {
    let err =
        run_json_lines_with(sh(r#"printf '{"event":"do'"#), None, &opts(5000), |_| {}).unwrap_err();
    assert!(matches!(err, SuperviseError::Partial { .. }), "{err}");
    assert!(err.to_string().contains(r#"{\"event\":\"do"#), "{err}");
    // A complete value without its newline is accepted.
    let mut got = Vec::new();
    run_json_lines_with(sh(r#"printf '{"a":1}'"#), None, &opts(5000), |v| {
        got.push(v)
    })
    .unwrap();
    assert_eq!(got.len(), 1);
}

#[test]
fn hang_past_deadline_is_a_timeout_and_nothing_is_left() {
    for script in [
        // Plain: SIGTERM ends both.
        r#"sleep 1000 & echo "{\"pgid\":$$}"; wait"#,
        // Both ignore SIGTERM: only SIGKILL after the grace ends them.
        r#"trap '' TERM; sleep 1000 & echo "{\"pgid\":$$}"; wait; sleep 1000"#,
    ] {
        let t = Instant::now();
        let mut got = Vec::new();
        let err = run_json_lines_with(sh(script), None, &opts(1000), |v| got.push(v)).unwrap_err();
        let took = t.elapsed();
        assert!(err.is_timeout(), "{err}");
        assert!(
            err.to_string().contains("did not finish within 1.0 s"),
            "{err}"
        );
        assert!(took >= Duration::from_millis(1000), "{took:?}");
        assert!(took < Duration::from_secs(4), "{took:?}");
        let pgid = pgid_from(&got);
        assert_eq!(live_members(pgid), Vec::<i32>::new(), "{script}");
        // Killed grandchildren are zombies until their reaper (PID 1 here) collects them;
        // then the group is gone: kill(-pgid, 0) fails with ESRCH.
        let t = Instant::now();
        while group_exists(pgid) && t.elapsed() < Duration::from_secs(10) {
            thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !group_exists(pgid),
            "process group {pgid} still exists: {script}"
        );
    }
}

#[test]
fn live_members_sees_a_running_group() {
    // Guards the checks above against a scan that never finds anything.
    let mut c = Command::new("sleep");
    c.arg("5").process_group(0);
    let mut child = c.spawn().unwrap();
    let pgid = i32::try_from(child.id()).unwrap();
    assert_eq!(live_members(pgid), vec![pgid]);
    assert!(group_exists(pgid));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(live_members(pgid).is_empty());
}

#[test]
fn leftover_grandchild_is_killed_when_the_leader_exits() {
    let t = Instant::now();
    let mut got = Vec::new();
    // The backgrounded sleep keeps stdout open; the leader exits at once.
    run_json_lines_with(
        sh(r#"sleep 1000 & echo "{\"pgid\":$$}"; exit 0"#),
        None,
        &opts(10_000),
        |v| got.push(v),
    )
    .unwrap();
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(live_members(pgid_from(&got)).is_empty());
}

#[test]
fn lenient_mode_records_non_json() {
    let mut opts = opts(5000);
    opts.allow_non_json = true;
    let mut got = Vec::new();
    let out = run_json_lines_with(
        sh(r#"echo 'running 1 test'; echo '{"a":1}'"#),
        None,
        &opts,
        |v| got.push(v),
    )
    .unwrap();
    assert_eq!(out.non_json, vec!["running 1 test".to_string()]);
    assert_eq!(got.len(), 1);
}

#[test]
fn missing_program_is_a_spawn_error() {
    let err = run_json_lines(
        Command::new("/nonexistent/ddpcheck-worker"),
        None,
        Duration::from_secs(1),
        |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, SuperviseError::Spawn { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/ddpcheck-worker"));
}

#[test]
fn run_lines_hands_on_text_and_json_in_order() {
    let mut opts = opts(5000);
    opts.allow_non_json = true;
    let mut got: Vec<(String, Option<serde_json::Value>)> = Vec::new();
    let out = run_lines(
        sh(r#"echo 'hello'; echo '{"a":1}'; echo; echo '[1]'; printf 'no newline'"#),
        None,
        &opts,
        |l| {
            got.push((l.text.to_string(), l.json));
            Next::More
        },
    )
    .unwrap();
    let texts: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(texts, ["hello", r#"{"a":1}"#, "[1]", "no newline"]);
    let parsed: Vec<bool> = got.iter().map(|(_, j)| j.is_some()).collect();
    assert_eq!(parsed, [false, true, true, false]);
    assert_eq!(out.lines, 2);
    assert_eq!(out.non_json, ["hello", "no newline"]);
}

/// The bound must not depend on how the pipe hands the line over: here the whole line and
/// its newline come in one read.
#[test]
fn a_long_line_read_at_once_is_refused_or_cut() {
    let data = format!("{}\n{{\"a\":1}}\n", "x".repeat(5000));
    let chunks = |cut: bool| {
        let (tx, rx) = mpsc::channel();
        read_lines(
            std::io::Cursor::new(data.clone().into_bytes()),
            100,
            cut,
            tx,
        );
        rx.try_iter().collect::<Vec<Chunk>>()
    };
    let strict = chunks(false);
    assert!(
        matches!(strict.as_slice(), [Chunk::TooLong]),
        "{} chunks, first {:?}",
        strict.len(),
        strict.first().map(std::mem::discriminant)
    );
    let lenient = chunks(true);
    match lenient.as_slice() {
        [Chunk::Line(a), Chunk::Line(b), Chunk::Eof] => {
            assert_eq!(a.len(), 100);
            assert_eq!(b.as_slice(), br#"{"a":1}"#);
        }
        other => panic!("{} chunks", other.len()),
    }
}

#[test]
fn lenient_mode_cuts_a_long_line_and_strict_mode_refuses_it() {
    let script = "head -c 5000 /dev/zero | tr '\\0' x; echo; echo '{\"a\":1}'";
    let mut lenient = opts(5000);
    lenient.allow_non_json = true;
    lenient.max_line_bytes = 100;
    let mut got = Vec::new();
    run_lines(sh(script), None, &lenient, |l| {
        got.push((l.text.len(), l.json));
        Next::More
    })
    .unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], (100, None));
    assert_eq!(got[1].1, Some(serde_json::json!({"a": 1})));

    let strict = Options {
        max_line_bytes: 100,
        ..opts(5000)
    };
    let err = run_json_lines_with(sh(script), None, &strict, |_| {}).unwrap_err();
    assert!(
        matches!(err, SuperviseError::LineTooLong { max: 100, .. }),
        "{err}"
    );
}

#[test]
fn done_gives_a_short_grace_then_stops_the_group() {
    let mut o = opts(20_000);
    o.done_grace = Duration::from_millis(300);
    let t = Instant::now();
    let mut got = Vec::new();
    let err = run_lines(
        sh(r#"sleep 1000 & echo "{\"pgid\":$$}"; echo '{"result":7}'; wait"#),
        None,
        &o,
        |l| {
            let done = l.json.as_ref().is_some_and(|v| v.get("result").is_some());
            got.extend(l.json);
            if done {
                Next::Done
            } else {
                Next::More
            }
        },
    )
    .unwrap_err();
    let took = t.elapsed();
    assert!(
        matches!(err, SuperviseError::Lingered { lines: 2, .. }),
        "{err}"
    );
    assert!(!err.is_timeout());
    assert!(err.to_string().contains("within 0.3 s"), "{err}");
    // Stopped by our SIGTERM, well before the 20 s deadline; what was read stays ours.
    assert_eq!(
        err.exit_status().and_then(|s| s.signal()),
        Some(libc::SIGTERM)
    );
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(got[1]["result"], 7);
    assert!(live_members(pgid_from(&got)).is_empty());
}

#[test]
fn done_then_exit_is_a_success_and_the_grace_never_extends_the_deadline() {
    let mut o = opts(5000);
    o.done_grace = Duration::from_secs(60);
    let out = run_lines(sh(r#"echo '{"result":1}'; sleep 0.2"#), None, &o, |_| {
        Next::Done
    })
    .unwrap();
    assert_eq!(out.lines, 1);

    let o = Options {
        done_grace: Duration::from_secs(60),
        ..opts(500)
    };
    let t = Instant::now();
    let err = run_lines(sh(r#"echo '{"result":1}'; sleep 30"#), None, &o, |_| {
        Next::Done
    })
    .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

#[test]
fn lines_written_while_stopping_are_read_only_when_asked() {
    // At SIGTERM the child says so on stdout, then exits.
    let script =
        r#"trap 'echo "{\"at\":\"term\"}"; exit 1' TERM; echo '{"at":"start"}'; sleep 30 & wait"#;
    for read_while_stopping in [false, true] {
        let o = Options {
            read_while_stopping,
            ..opts(500)
        };
        let mut got = Vec::new();
        let err = run_json_lines_with(sh(script), None, &o, |v| got.push(v)).unwrap_err();
        assert!(err.is_timeout(), "{err}");
        let at: Vec<&str> = got.iter().filter_map(|v| v["at"].as_str()).collect();
        if read_while_stopping {
            assert_eq!(at, ["start", "term"]);
        } else {
            assert_eq!(at, ["start"]);
        }
    }
}

#[test]
fn new_session_or_only_a_new_process_group() {
    // pid, process group and session of the child, from its /proc stat.
    let script = r#"read -r _ _ _ _ pgrp sid _ < /proc/$$/stat; echo "{\"pid\":$$,\"pgrp\":$pgrp,\"sid\":$sid}""#;
    // SAFETY: getsid(0) only reads our own session id.
    let ours = i64::from(unsafe { libc::getsid(0) });
    for new_session in [true, false] {
        let o = Options {
            new_session,
            ..opts(5000)
        };
        let mut got = Vec::new();
        run_json_lines_with(sh(script), None, &o, |v| got.push(v)).unwrap();
        let v = &got[0];
        let pid = v["pid"].as_i64().unwrap();
        assert_eq!(v["pgrp"].as_i64(), Some(pid), "{v}");
        let sid = v["sid"].as_i64().unwrap();
        if new_session {
            assert_eq!(sid, pid, "{v}");
        } else {
            assert_eq!(sid, ours, "{v}");
        }
    }
}

#[test]
fn failed_carries_its_exit_status() {
    let err = run_json_lines_with(sh("kill -SEGV $$"), None, &opts(5000), |_| {}).unwrap_err();
    assert_eq!(
        err.exit_status().and_then(|s| s.signal()),
        Some(libc::SIGSEGV)
    );
    assert!(err.to_string().contains("SIGSEGV"), "{err}");
}

#[test]
fn multicast_stays_off_unless_chosen() {
    let mut c = Command::new("true");
    c.env("NCCL_NVLS_ENABLE", "1");
    keep_multicast_off(&mut c);
    let envs: Vec<(String, Option<String>)> = c
        .get_envs()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.map(|v| v.to_string_lossy().into_owned()),
            )
        })
        .collect();
    assert!(envs.contains(&("NCCL_NVLS_ENABLE".into(), Some("1".into()))));
    if std::env::var_os("NVSHMEM_DISABLE_NVLS").is_none() {
        assert!(envs.contains(&("NVSHMEM_DISABLE_NVLS".into(), Some("1".into()))));
    }
}
