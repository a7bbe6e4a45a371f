//! DDP benchmark vocabulary: models, variants (hook, accumulation, buckets, FSDP), results and
//! the scaling arithmetic (speedup, efficiency, exposed communication, cost) shared by all backends.
//!
//! Parts: `spec` (models, hooks, variants), `decoder` (a decoder's shape, one struct),
//! `model_arg` (a model's text form, read at the command line's edge), `model_error` (why a model
//! is refused: its text, its shape's bounds, a `config.json`, a launch's parameters), `source` (models built by
//! code: the user's factory, torchvision, timm, Hugging Face), `architecture` (a preset's
//! tensors and parameter count), `layout` (parameters as torch registers them, DDP's buckets), `hf_config` (a decoder from a Hugging Face
//! `config.json`), `request`, `result` (one configuration, repeats folded, scaling, the speedup's uncertainty),
//! `ratio` (one run's throughput over another's, launch by launch) and `noise` (launch-to-launch
//! noise: Student's t bounds, the beyond-noise test).

mod architecture;
mod decoder;
mod hf_config;
mod host;
mod layout;
mod model_arg;
mod model_error;
mod noise;
mod plain;
mod ratio;
mod request;
mod result;
mod source;
mod spec;
mod wrapper;

pub use architecture::DecoderTensors;
pub use decoder::{Decoder, DecoderArch, GPT2_VOCAB};
pub use hf_config::{from_hf_config, hf_llama_decoder};
pub use host::{Buffers, HostFacts, NoGrad};
pub use layout::{
    bucket_groups, constructor_groups, dtype_bytes, BucketOrder, LayoutSummary, ParamLayout,
    ParamTensor, TorchBuckets,
};
pub use model_arg::MODEL_FORMS;
pub use model_error::{FormError, HfConfigError, LayoutError, ModelSpecError, ShapeError};
pub use noise::{beyond_noise, describe_noise_bound, noise_bound, rounds_noise_bound};
pub use plain::{PlainReference, Reference};
pub use ratio::{throughput_ratio, ThroughputRatio};
pub use request::{
    timed_steps, Amp, Backend, CompileMode, DdpRequest, Recipe, RunDevice, MAX_CPU_RANKS,
    MAX_REPEATS, MAX_STEPS,
};
pub use request::{PLAIN_ROUNDS, SIZING_STEPS, SOLO_ROUNDS};
pub use result::{
    compile_failure, fill_scaling, fill_scaling_against, merge_repeats, one_gpu_partner,
    probe_curve, speedup_noise_bound, speedup_uncertainty, CompileOutcome, DdpResult, RunPhases,
    SoloSlowdown, ALL_REDUCE_PROBE_BYTES,
};
pub use source::{is_file_target, ModelSource, SourceError, HF_DEFAULT_SEQ, SOURCE_FORMS};
pub use spec::{
    one_gpu_reference, CommHook, DdpVariant, ModelSpec, VariantError, POWERSGD_DEFAULT_RANK,
    POWERSGD_MAX_RANK,
};
pub use wrapper::{Wrapper, HSDP_REPLICAS};

#[cfg(test)]
mod layout_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
