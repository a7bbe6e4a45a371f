//! The worker's JSON-lines protocol: one [`WorkerEvent`] per stdout line, tagged by `event`.
//!
//! ```text
//! {"event":"progress","stage":"nccl init","done":0,"total":12,"message":"..."}
//! {"event":"init","seconds":1.2,"nccl_version":"2.28.9","nccl_path":"/opt/...","ranks":2,...}
//! {"event":"sample","op":"all_reduce","ranks":2,"sample":{...},"rank_time_us":[..],"host_time_us":..}
//! {"event":"done","run":{...CollectiveRun...}}
//! {"event":"host_copies","run":{...HostCopyRun...}}          (worker host-copies)
//! {"event":"error","kind":"timeout","message":"...","stage":"all_reduce 1048576 B in-place"}
//! ```
//! Exactly one terminal event (`done`, `host_copies` or `error`) ends a run.

use ddpcheck_core::backend::CollectiveRun;
use ddpcheck_core::collective::{Collective, Sample};
use ddpcheck_core::hostcopy::HostCopyRun;
use serde::{Deserialize, Serialize};

/// What kind of failure an `error` event reports; each maps to one `ProbeError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// No driver, library or GPU.
    Unavailable,
    /// GPUs in use (exclusive mode, memory held by others).
    Busy,
    /// The worker's own watchdog stopped the run at its deadline.
    Timeout,
    /// A CUDA or NCCL failure that points at the hardware.
    GpuFailed,
    /// Anything else the worker could not do.
    Worker,
    /// The request itself was refused.
    Invalid,
}

impl FailKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailKind::Unavailable => "unavailable",
            FailKind::Busy => "busy",
            FailKind::Timeout => "timeout",
            FailKind::GpuFailed => "gpu_failed",
            FailKind::Worker => "worker",
            FailKind::Invalid => "invalid",
        }
    }
}

/// One GPU of the run, as the worker resolved it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankDevice {
    pub rank: u32,
    /// The bus id asked for (empty when the request named no GPUs).
    pub requested_bus_id: String,
    /// CUDA's ordinal in this process (follows CUDA_VISIBLE_DEVICES).
    pub cuda_ordinal: i32,
    /// The bus id CUDA reports for that ordinal.
    pub cuda_bus_id: Option<String>,
    pub name: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    Progress {
        stage: String,
        done: u32,
        total: u32,
        message: String,
    },
    /// Communicators are up.
    Init {
        /// Communicator creation, the slowest rank, seconds.
        seconds: f64,
        /// From `ncclGetVersion`, never from the NCCL_VERSION variable.
        nccl_version: String,
        nccl_path: String,
        nccl_found_by: String,
        cuda_path: String,
        /// `cuDriverGetVersion`: the CUDA version the driver supports.
        cuda_driver_version: Option<String>,
        ranks: u32,
        devices: Vec<RankDevice>,
    },
    /// One size of one collective, every rank done.
    Sample {
        op: Collective,
        ranks: u32,
        sample: Sample,
        /// Out-of-place time per rank from CUDA events (the sample takes the max), µs.
        #[serde(default)]
        rank_time_us: Vec<f64>,
        /// Out-of-place host wall time per op, mean over ranks (nccl-tests' default timer), µs.
        #[serde(default)]
        host_time_us: f64,
    },
    Done {
        run: CollectiveRun,
    },
    /// The terminal event of `worker host-copies`: every GPU's copies.
    HostCopies {
        run: HostCopyRun,
    },
    Error {
        kind: FailKind,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stage: Option<String>,
    },
}

impl WorkerEvent {
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            WorkerEvent::Done { .. } | WorkerEvent::HostCopies { .. } | WorkerEvent::Error { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_tagged_lines() {
        let e = WorkerEvent::Error {
            kind: FailKind::GpuFailed,
            message: "x".into(),
            stage: None,
        };
        let s = serde_json::to_string(&e).unwrap();
        assert_eq!(s, r#"{"event":"error","kind":"gpu_failed","message":"x"}"#);
        let back: WorkerEvent = serde_json::from_str(&s).unwrap();
        assert_eq!(back, e);
        assert!(back.is_terminal());
        let p: WorkerEvent = serde_json::from_str(
            r#"{"event":"progress","stage":"s","done":1,"total":2,"message":"m"}"#,
        )
        .unwrap();
        assert!(!p.is_terminal());
    }
}
