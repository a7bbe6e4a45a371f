//! docs/exit-codes.md is the contract, both ways: each exit code of a simulated node's fault
//! is the same from a local run (`--sim`) as through a real `ddpcheckd` on that node. Before,
//! a benchmark past its deadline exited 3 through the daemon and 5 locally, a lost GPU 3 and 2.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr, stdout, Daemon};

/// One command on one simulated node, and the exit code the contract gives it.
struct Case {
    node: &'static str,
    args: &'static [&'static str],
    code: i32,
}

const fn case(node: &'static str, args: &'static [&'static str], code: i32) -> Case {
    Case { node, args, code }
}

/// Every verdict's code, from a preflight and from benchmarks (which have no report to carry
/// a verdict: their failure is the code), and usage errors the CLI and the daemon refuse.
const CASES: &[Case] = &[
    case("h200x2-nvlink", &["check"], 0),
    case("h200x2-nvlink+degraded-pcie", &["check"], 1),
    case("h200x2-nvlink+ecc", &["check"], 2),
    case("h200x2-nvlink+gpu-lost", &["bench", "collectives"], 2),
    case("h200x8-nvswitch+no-fabric-manager", &["check"], 2),
    case(
        "h200x8-nvswitch+no-fabric-manager",
        &["check", "--gpus", "0"],
        2,
    ),
    case(
        "h200x8-nvswitch+no-fabric-manager",
        &["bench", "collectives"],
        2,
    ),
    case("h200x2-nvlink+busy", &["check"], 4),
    case("h200x2-nvlink+busy", &["bench", "collectives"], 4),
    case("h200x2-nvlink+hang", &["check", "--deadline", "1"], 5),
    case(
        "h200x2-nvlink+hang",
        &["bench", "collectives", "--deadline", "1"],
        5,
    ),
    case(
        "h200x2-nvlink+hang",
        &["bench", "ddp", "--deadline", "1"],
        5,
    ),
    case("h200x2-nvlink", &["check", "--deadline", "0"], 64),
    case("h200x2-nvlink", &["bench", "ddp", "--gpus", "8"], 64),
];

#[test]
fn every_exit_code_is_the_same_locally_and_through_the_daemon() {
    let mut nodes: Vec<&str> = CASES.iter().map(|c| c.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut wrong = Vec::new();
    for node in nodes {
        let d = Daemon::start(Some(node));
        for c in CASES.iter().filter(|c| c.node == node) {
            let mut args = vec!["--sim", node];
            args.extend(c.args);
            let here = local(&args);
            let there = d.cli(c.args);
            for (way, o) in [("local", &here), ("daemon", &there)] {
                if code(o) != c.code {
                    wrong.push(format!(
                        "{node} {:?} {way}: exit {} (expected {})\n{}{}",
                        c.args,
                        code(o),
                        c.code,
                        stdout(o),
                        stderr(o)
                    ));
                }
            }
        }
        d.stop();
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
