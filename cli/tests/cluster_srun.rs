//! `ddpcheck cluster srun` end to end: the real binary as the tasks of real srun steps on a
//! two-node Slurm on this machine (common/slurm.rs: two slurmds on 127.0.0.1), on simulated
//! nodes: a healthy step passes, a slow NIC fails it with the slow finding, the root comes from
//! the step's node list through the real scontrol, a hung backend gives TIMEOUT within its
//! stage deadline, and steps that are not one task per node are usage errors. Outside srun the
//! command is a usage error without any Slurm.
//!
//! The Slurm part needs root and Debian's slurm-wlm and munge (.ci/install-services); it skips
//! without them, and fails instead when DDPCHECK_REQUIRE_SERVICES=1.

// Test code: a failed unwrap is a failed test (clippy.toml allows it in #[test] fns only).
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::slurm::{self, Cluster};
use common::{bin, code, output_within, stderr, stdout};

/// Bound of every srun below: a step that hangs fails the test instead of stalling it.
const WITHIN: Duration = Duration::from_secs(60);

/// The sizes of every run: small, so the simulated sweep is quick.
const SIZES: [&str; 4] = ["--min-bytes", "1M", "--max-bytes", "64M"];

#[test]
fn outside_srun_is_a_usage_error_in_one_line() {
    let o = output_within(
        Command::new(bin("ddpcheck"))
            .env_clear()
            .args(common::words(
                "--sim h200x2-nvlink cluster srun --gpus-per-node 2",
            )),
        Duration::from_secs(30),
    );
    assert_eq!(code(&o), 64, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("ddpcheck: ") && err.contains("srun --ntasks-per-node=1"),
        "{err}"
    );
}

/// `srun -N2 --ntasks-per-node=1 [SRUN_OPTS] ddpcheck --sim SPEC cluster srun ARGS...`.
fn step(
    c: &Cluster,
    name: &str,
    srun_opts: &[&str],
    spec: &str,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let bin = bin("ddpcheck");
    let mut argv = srun_opts.to_vec();
    argv.extend([
        "-N2",
        "--ntasks-per-node=1",
        "-t",
        "1",
        "-J",
        name,
        bin.to_str().unwrap(),
        "--sim",
        spec,
        "cluster",
        "srun",
        "--gpus-per-node",
        "2",
    ]);
    argv.extend(SIZES);
    argv.extend(args);
    c.srun(&argv, WITHIN)
}

/// The lines of task `rank` (text output), in order.
fn task_lines(out: &str, rank: u32) -> Vec<&str> {
    let prefix = format!("[rank {rank}/2 ");
    out.lines().filter(|l| l.starts_with(&prefix)).collect()
}

/// The --json output of a step run with `--output=DIR/NAME-%t.json` (one file per task, as
/// docs/cluster.md says: srun splits a task's lines at 1 KiB and interleaves the pieces), one
/// object per file, in rank order.
fn tasks_json(c: &Cluster, name: &str) -> Vec<serde_json::Value> {
    (0..2)
        .map(|t| {
            let p = c.path(&format!("{name}-{t}.json"));
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(text.lines().count(), 1, "{text}");
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
        })
        .collect()
}

fn output_pattern(c: &Cluster, name: &str) -> String {
    format!("--output={}", c.path(&format!("{name}-%t.json")).display())
}

/// All scenarios on one Slurm: starting one is the slow part, and only one runs at a time.
#[test]
fn srun_steps_on_a_real_two_node_slurm() {
    if !slurm::available("the real-Slurm cluster srun test") {
        return;
    }
    let c = slurm::start_cluster(slurm::Spec {
        nodes: 2,
        extra_conf: |_| Vec::new(),
    });
    let port = common::free_loopback_port().to_string();
    let root = format!("127.0.0.1:{port}");

    // 1. Healthy simulated nodes: OK, one result line per task with the sim label.
    let (rc, out, err) = step(&c, "srun-ok", &[], "h200x2-nvlink", &["--root", &root]);
    assert_eq!(rc, Some(0), "{out}{err}\n{}", c.logs());
    for (rank, node) in c.nodes.iter().enumerate() {
        let lines = task_lines(&out, u32::try_from(rank).unwrap());
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with(&format!("[rank {rank}/2 {node}] "))),
            "{out}"
        );
        let results: Vec<&&str> = lines.iter().filter(|l| l.contains(" result: ")).collect();
        assert_eq!(results.len(), 1, "rank {rank}: {out}");
        assert!(
            results[0].contains("sim:h200x2-nvlink") && results[0].ends_with("[SIMULATED]"),
            "{}",
            results[0]
        );
        assert!(
            lines.last().is_some_and(|l| l.contains("ddpcheck: OK: ")),
            "rank {rank}: {out}"
        );
    }
    // Rank 0 states the root and what this mode cannot do.
    let r0 = task_lines(&out, 0).join("\n");
    assert!(r0.contains(&format!("root {root}")), "{r0}");
    assert!(
        r0.contains("no pairwise isolation") && r0.contains("cluster check"),
        "{r0}"
    );
    assert!(
        r0.contains("every peer is assumed to be like this node"),
        "{r0}"
    );

    // 2. A slow NIC: WARNING or CRITICAL by core's bands, the slow figure named, every task
    //    agreeing (one collective), and srun's exit code the tasks' verdict.
    let (rc, out, err) = step(
        &c,
        "srun-slow",
        &[&output_pattern(&c, "slow")],
        "h200x2-nvlink+slow-nic",
        &["--root", &root, "--json"],
    );
    let tasks = tasks_json(&c, "slow");
    let verdict = tasks[0]["verdict"].as_str().unwrap().to_string();
    assert!(["WARNING", "CRITICAL"].contains(&verdict.as_str()), "{out}");
    for (rank, t) in tasks.iter().enumerate() {
        assert_eq!(t["srun"]["rank"], rank as u64);
        assert_eq!(t["srun"]["node"], c.nodes[rank].as_str());
        assert_eq!(t["srun"]["root"], root.as_str());
        assert_eq!(t["backend"], "sim");
        assert_eq!(t["verdict"], verdict.as_str(), "{out}");
        assert_eq!(t["cluster_busbw_gbps"], tasks[0]["cluster_busbw_gbps"]);
        let busbw = t["cluster_busbw_gbps"].as_f64().unwrap();
        let expected = t["expected"]["busbw_gbps"].as_f64().unwrap();
        assert!(busbw < 0.75 * expected, "{busbw} of {expected}");
        let low = t["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == "cluster_busbw_low")
            .unwrap_or_else(|| panic!("no cluster_busbw_low: {t}"));
        assert!(low["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{busbw:.1} GB/s")));
        assert_eq!(t["nodes"][0]["state"], "unresolved");
    }
    assert_eq!(
        rc,
        tasks[0]["exit_code"]
            .as_i64()
            .and_then(|c| i32::try_from(c).ok()),
        "{out}{err}"
    );

    // 3. No --root: the step's first node (expanded by the real scontrol) at the derived port,
    //    the same on every task.
    let (rc, out, err) = step(
        &c,
        "srun-derived",
        &[&output_pattern(&c, "derived")],
        "h200x2-nvlink",
        &["--json"],
    );
    assert_eq!(rc, Some(0), "{out}{err}");
    let tasks = tasks_json(&c, "derived");
    let derived = tasks[0]["srun"]["root"].as_str().unwrap().to_string();
    assert_eq!(tasks[1]["srun"]["root"], derived.as_str());
    let (host, port) = derived.rsplit_once(':').unwrap();
    assert_eq!(host, c.node());
    let port: u16 = port.parse().unwrap();
    assert!((20000..32000).contains(&port), "{derived}");
    assert_eq!(tasks[0]["srun"]["job_id"], tasks[1]["srun"]["job_id"]);

    // 4. A backend that hangs: TIMEOUT (exit 5) from every task within the stage deadline.
    let t0 = Instant::now();
    let (rc, out, err) = step(
        &c,
        "srun-hang",
        &[],
        "h200x2-nvlink+hang",
        &["--root", &root, "--stage-deadline", "2"],
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert_eq!(rc, Some(5), "{out}{err}");
    for rank in 0..2 {
        assert!(
            task_lines(&out, rank)
                .last()
                .is_some_and(|l| l.contains("ddpcheck: TIMEOUT: ")),
            "rank {rank}: {out}"
        );
    }

    // 5. Not one task per node: two tasks on one node, or a single node. Usage error (64),
    //    one line per task, before any work.
    let bin = bin("ddpcheck");
    let bin = bin.to_str().unwrap();
    for (what, shape, want) in [
        (
            "two tasks on one node",
            ["-N1", "-n2", "-O"],
            "one task per node",
        ),
        ("one node", ["-N1", "-n1", "-O"], "at least 2"),
    ] {
        let mut argv = shape.to_vec();
        argv.extend(["-t", "1", bin, "--sim", "h200x2-nvlink", "cluster", "srun"]);
        argv.extend(["--root", &root]);
        let (rc, out, err) = c.srun(&argv, WITHIN);
        assert_eq!(rc, Some(64), "{what}: {out}{err}");
        assert_eq!(out, "", "{what}");
        let ours: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("ddpcheck: "))
            .collect();
        assert_eq!(ours.len(), argv_tasks(shape[1]), "{what}: {err}");
        assert!(ours.iter().all(|l| l.contains(want)), "{what}: {err}");
    }
}

/// Tasks of an `-nN` flag.
fn argv_tasks(n: &str) -> usize {
    n.trim_start_matches("-n").parse().unwrap()
}
