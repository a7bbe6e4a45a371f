//! DDP benchmark vocabulary: models, variants (hook, accumulation, buckets, FSDP), results and
//! the scaling arithmetic (speedup, efficiency, exposed communication, cost) shared by all backends.
//!
//! Parts: `spec` (models, hooks, variants), `model_arg` (a model's text form), `architecture`
//! (a model's tensors and parameter count), `hf_config` (a decoder from a Hugging Face
//! `config.json`), `request`, `result` (one configuration, repeats folded, scaling) and `noise`
//! (launch-to-launch noise: standard errors, Student's t bounds, the beyond-noise test).

mod architecture;
mod hf_config;
mod model_arg;
mod noise;
mod request;
mod result;
mod spec;

pub use architecture::DecoderTensors;
pub use hf_config::from_hf_config;
pub use model_arg::MODEL_FORMS;
pub use noise::{
    beyond_noise, describe_noise_bound, noise_bound, speedup_noise_bound, speedup_uncertainty,
    throughput_ratio, ThroughputRatio,
};
pub use request::{timed_steps, DdpRequest, MAX_REPEATS, MAX_STEPS};
pub use result::{
    fill_scaling, merge_repeats, one_gpu_partner, probe_curve, DdpResult, SoloSlowdown,
    ALL_REDUCE_PROBE_BYTES,
};
pub use spec::{one_gpu_reference, CommHook, DdpVariant, DecoderArch, ModelSpec, GPT2_VOCAB};

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
