//! NCCL's tuning lines (`NCCL_DEBUG_SUBSYS=TUNING`, rank 0): the algorithm and protocol each
//! collective ran with. NCCL 2.19 on name them (`AllReduce: 268435456 Bytes -> Algo RING proto
//! SIMPLE channel{Lo..Hi}={0..31}`); older versions print numbers and no collective (`268435456
//! Bytes -> Algo 1 proto 2 time 1180.5`), numbered as NCCL's `nccl_tuner.h` numbers them.

use serde::{Deserialize, Serialize};

/// One tuning line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tuning {
    /// `AllReduce`; `None` in the numeric lines of older versions, which name none.
    pub func: Option<String>,
    pub bytes: u64,
    /// `Ring`, `Tree`, `CollNetDirect`, `CollNetChain`, `NVLS`, `NVLSTree`, `PAT`.
    pub algo: String,
    /// `LL`, `LL128`, `Simple`.
    pub proto: String,
}

/// NCCL's algorithm numbers (`NCCL_ALGO_TREE` 0 … `NCCL_ALGO_PAT` 6) and names, in one spelling.
fn algo(word: &str) -> Option<&'static str> {
    Some(match word.to_ascii_uppercase().as_str() {
        "0" | "TREE" => "Tree",
        "1" | "RING" => "Ring",
        "2" | "COLLNET_DIRECT" | "COLLNETDIRECT" | "COLLNET" => "CollNetDirect",
        "3" | "COLLNET_CHAIN" | "COLLNETCHAIN" => "CollNetChain",
        "4" | "NVLS" => "NVLS",
        "5" | "NVLS_TREE" | "NVLSTREE" => "NVLSTree",
        "6" | "PAT" => "PAT",
        _ => return None,
    })
}

/// NCCL's protocol numbers (`NCCL_PROTO_LL` 0, `LL128` 1, `SIMPLE` 2) and names.
fn proto(word: &str) -> Option<&'static str> {
    Some(match word.to_ascii_uppercase().as_str() {
        "0" | "LL" => "LL",
        "1" | "LL128" => "LL128",
        "2" | "SIMPLE" => "Simple",
        _ => return None,
    })
}

/// A tuning line's message (past `NCCL INFO `), or `None` where it is another line.
pub fn parse(msg: &str) -> Option<Tuning> {
    let (head, rest) = msg.split_once(" Bytes -> Algo ")?;
    let (func, bytes) = match head.split_once(": ") {
        Some((f, b)) => (Some(f.trim().to_string()), b),
        None => (None, head),
    };
    let bytes = bytes.trim().parse().ok()?;
    let mut w = rest.split_whitespace();
    let a = algo(w.next()?)?;
    (w.next()? == "proto").then_some(())?;
    let p = proto(w.next()?)?;
    Some(Tuning {
        func,
        bytes,
        algo: a.to_string(),
        proto: p.to_string(),
    })
}

/// The algorithm and protocol of the largest all-reduce (`Ring/Simple`): of the lines that name
/// it, else, where `numeric_is_all_reduce` (the log is an all-reduce run's own), of the numeric
/// lines that name no collective.
pub fn largest_all_reduce(lines: &[Tuning], numeric_is_all_reduce: bool) -> Option<String> {
    let named = lines
        .iter()
        .filter(|t| t.func.as_deref() == Some("AllReduce"))
        .max_by_key(|t| t.bytes);
    let numeric = || {
        lines
            .iter()
            .filter(|t| t.func.is_none() && numeric_is_all_reduce)
            .max_by_key(|t| t.bytes)
    };
    named
        .or_else(numeric)
        .map(|t| format!("{}/{}", t.algo, t.proto))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn named_and_numbered_lines_read_the_same_and_the_largest_all_reduce_wins() {
        let named =
            parse("AllReduce: 268435456 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}")
                .unwrap();
        assert_eq!(
            (named.func.as_deref(), named.bytes),
            (Some("AllReduce"), 268_435_456)
        );
        assert_eq!(
            (named.algo.as_str(), named.proto.as_str()),
            ("Ring", "Simple")
        );
        let with_comm = parse(
            "AllGather: 4 Bytes -> Algo NVLS_TREE proto LL128 channel{Lo..Hi}={0..0} comm 0x55a7",
        )
        .unwrap();
        assert_eq!(
            (with_comm.algo.as_str(), with_comm.proto.as_str()),
            ("NVLSTree", "LL128")
        );
        let old = parse("4096 Bytes -> Algo 0 proto 0 time 25.874907").unwrap();
        assert_eq!(
            (old.func, old.algo.as_str(), old.proto.as_str()),
            (None, "Tree", "LL")
        );
        assert_eq!(parse("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"), None);
        assert_eq!(parse("4096 Bytes -> Algo 9 proto 0 time 1.0"), None);

        let small =
            parse("AllReduce: 1024 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}").unwrap();
        let big_bcast =
            parse("Broadcast: 999999999 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..3}")
                .unwrap();
        let lines = vec![small, named.clone(), big_bcast];
        assert_eq!(
            largest_all_reduce(&lines, false).as_deref(),
            Some("Ring/Simple")
        );
        let numbered = vec![parse("268435456 Bytes -> Algo 1 proto 2 time 1180.5").unwrap()];
        assert_eq!(
            largest_all_reduce(&numbered, true).as_deref(),
            Some("Ring/Simple")
        );
        assert_eq!(largest_all_reduce(&numbered, false), None);
    }
}
