//! The `recommend --json` document: the report head, the recommendation, and what `--verify`
//! measured against what was predicted.

use ddpcheck_core::recommend::Recommendation;
use ddpcheck_core::report::Header;
use serde::{Deserialize, Serialize};

/// Predicted against measured, for `--verify`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyRow {
    pub variant: String,
    pub world_size: u32,
    pub predicted_speedup: f64,
    pub measured_speedup: f64,
    pub error: f64,
    /// With --repeats: the larger launch spread of the measured 1-GPU and N-GPU rows
    /// ((slowest − fastest) / median), how soft the measured speedup is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_spread: Option<f64>,
    /// With --repeats: the measured speedup's relative standard error
    /// (`ddpcheck_core::ddp::speedup_uncertainty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_uncertainty: Option<f64>,
    /// With --repeats: how far the measured speedup may move by launch noise alone
    /// (`ddpcheck_core::ddp::speedup_noise_bound`); an error beyond it is the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_noise_bound: Option<f64>,
}

/// What `--verify` measured of the recommendation against the baseline at the same GPU count:
/// throughput over throughput, within launches when they were repeated
/// (`ddpcheck_core::ddp::throughput_ratio`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyGain {
    pub variant: String,
    pub baseline: String,
    pub world_size: u32,
    pub predicted_ratio: f64,
    pub measured_ratio: f64,
    /// With --repeats: the measured ratio's relative standard error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_uncertainty: Option<f64>,
    /// With --repeats: how far the measured ratio may move by launch noise alone
    /// (`ddpcheck_core::ddp::noise_bound`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_noise_bound: Option<f64>,
}

/// The network during `--verify`'s runs (their all-reduce probes) against the curve the
/// predictions read, at DDP's bucket size: where the two part, the verify errors follow.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyNetwork {
    pub world_size: u32,
    pub bytes: u64,
    /// What the predictions read at `bytes`, GB/s.
    pub predicted_busbw_gbps: f64,
    /// What the verify runs timed in their own process group before their steps, GB/s.
    pub measured_busbw_gbps: f64,
    /// How many runs' probes (their median).
    pub runs: usize,
}

/// One GPU during `--verify`'s runs against the one-GPU step the predictions read (the quick
/// runs', or the history's): a measured speedup is over the verify runs' own one-GPU step, so
/// where the node's compute moved between the two, the verify errors follow. (On 2×H200 the
/// same MLP's one-GPU step went from 1.77 to 2.50 ms between the quick runs and the verify runs
/// minutes later, in the 2×H200 measurements of docs/results.)
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyCompute {
    /// The one-GPU run's variant (a hooked variant's speedup is taken against one GPU without
    /// the hook).
    pub variant: String,
    /// What the predictions read, seconds per step.
    pub predicted_step_s: f64,
    /// What the verify runs measured on one GPU, seconds per step.
    pub measured_step_s: f64,
}

/// What `--verify` measured of the offered PowerSGD rank at the recommendation's GPU count,
/// beside the casting hook it was offered against (the benchmark compresses from its third
/// step, so its timed steps compress).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyPowerSgd {
    /// The variant run, `powersgdN`.
    pub variant: String,
    pub rank: u32,
    pub world_size: u32,
    pub predicted_step_s: f64,
    pub measured_step_s: f64,
    /// The casting hook's variant (`bf16`, `fp16` on CPU ranks) and its steps.
    pub against: String,
    pub against_predicted_step_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against_measured_step_s: Option<f64>,
}

/// The `--json` document: the report head, the recommendation, and `--verify` rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecommendReport {
    #[serde(flatten)]
    pub header: Header,
    #[serde(flatten)]
    pub recommendation: Recommendation,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<VerifyRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_gain: Option<VerifyGain>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_network: Option<VerifyNetwork>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify_compute: Vec<VerifyCompute>,
    /// `--verify`'s run of the offered PowerSGD rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_powersgd: Option<VerifyPowerSgd>,
    /// What recommend measured itself on a fresh node (the measure-first path), against its
    /// budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_measurements: Option<super::OwnMeasurements>,
    /// Seconds spent (measurements included).
    pub seconds: f64,
    /// Some DDP runs it rests on ran on CPU ranks (gloo): a test of the flow, not GPU figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cpu_ranks: bool,
    /// Under `--compile`: the longest compile a run of this model took among the runs it rests
    /// on (outside their timed steps); their compute is the compiled one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<ddpcheck_core::ddp::CompileOutcome>,
}
