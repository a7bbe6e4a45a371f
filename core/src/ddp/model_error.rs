//! Why a model is refused: its text form (`--model`), the bounds of its shape, a Hugging Face
//! `config.json`, or the parameters a launch reported. A model's text and shape are usage errors
//! wherever they are read; each variant keeps the one line that names what is wrong.

use super::source::SourceError;

/// A model given as text and refused, named by that text (`model "mlp:x": ...`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelSpecError {
    /// None of the forms, or one of them malformed; `expected` lists the forms.
    #[error("model {arg:?}: {cause}; expected {expected}")]
    Form {
        arg: String,
        cause: FormError,
        expected: &'static str,
    },
    /// A model built by code (`py:`, `torchvision:`, `timm:`, `hf:`), malformed; `expected`
    /// lists those forms.
    #[error("model {arg:?}: {cause}; expected {expected}")]
    Source {
        arg: String,
        cause: SourceError,
        expected: &'static str,
    },
    /// A well-formed spec outside the bounds the benchmark builds within.
    #[error("model {arg:?}: {cause}")]
    Shape { arg: String, cause: ShapeError },
}

/// What is wrong with the text of a preset, `mlp:` or `decoder:` spec.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("unknown model")]
    Unknown,
    #[error("{0:?} is not a number")]
    NotANumber(String),
    #[error("{0:?} is not WIDTHxDEPTH")]
    NotWidthByDepth(String),
    #[error("the in/out form is IN->WIDTHxDEPTH->OUT")]
    MlpInOut,
    #[error("mlp:WIDTH[,DEPTH] takes one or two numbers")]
    MlpNumbers,
    #[error("a decoder needs three to five numbers: LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]]")]
    DecoderNumbers,
    #[error("unknown decoder option {0:?} (options: llama, gpt2, ffn=N, kv=N, untied)")]
    DecoderOption(String),
}

/// A model's shape outside what the benchmark script builds: which field, and its bounds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("layers {0} outside 1..=256")]
    Layers(u32),
    #[error("width {width} with {heads} heads: width must be 8..=32768 and divisible by heads (1..=256)")]
    WidthHeads { width: u32, heads: u32 },
    #[error("sequence {seq} (8..=131072) or vocabulary {vocab} (2..=1000000) out of range")]
    SeqVocab { seq: u32, vocab: u32 },
    #[error("MLP width ffn={0} outside 8..=262144")]
    Ffn(u32),
    #[error("{kv} key/value heads: must divide the {heads} query heads")]
    KvHeads { kv: u32, heads: u32 },
    #[error("head width {} (width {width} / {heads} heads) must be even for rotary positions", width / heads)]
    OddHeadWidth { width: u32, heads: u32 },
    #[error("a decoder's name is 1 to 128 printable ASCII characters")]
    DecoderName,
    #[error("MLP width {width} (8..=65536) or depth {depth} (1..=64) out of range")]
    MlpSize { width: u32, depth: u32 },
    #[error("MLP input {input} or output {output} outside 1..=1048576")]
    MlpInOut { input: u32, output: u32 },
    #[error("an MLP takes both an input and an output width, or neither")]
    MlpInOutPair,
    /// A model built by code, outside the bounds its text form is read by.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// A Hugging Face `config.json` ddpcheck does not build as the config says.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HfConfigError {
    #[error("not JSON ({0})")]
    NotJson(String),
    #[error("not a JSON object with the model's hyperparameters")]
    NotAnObject,
    /// `llama_types`: the LLaMA-style model types read, as a sentence.
    #[error("model_type {model_type:?} is not one ddpcheck builds: it reads GPT-2 configs (n_layer, n_embd, n_head) and LLaMA-style ones (model_type {llama_types}); give the shape as --model decoder:... or only --params")]
    ModelType {
        model_type: String,
        llama_types: String,
    },
    #[error("{0} is true: the benchmark's LLaMA blocks have no biases")]
    Bias(&'static str),
    #[error("hidden_act {0}: the benchmark's LLaMA MLP is gated SiLU")]
    Activation(String),
    #[error("head_dim {0} is not hidden_size / num_attention_heads: not supported")]
    HeadDim(u32),
    /// `value` as the JSON has it.
    #[error("{key} must be a positive integer, got {value}")]
    NotACount { key: String, value: String },
    #[error("{0} is missing")]
    Missing(String),
    #[error("{key} must be true or false, got {value}")]
    NotAFlag { key: String, value: String },
    #[error(transparent)]
    Shape(#[from] ShapeError),
}

/// The parameters a launch reported, which no DDP run can train.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("the model has no parameters")]
    NoParameters,
    #[error("the model has no trainable parameters (every one is frozen)")]
    NoTrainable,
    #[error("parameter {name} has an empty shape {shape:?}")]
    EmptyShape { name: String, shape: Vec<u64> },
}

impl From<ShapeError> for crate::ProbeError {
    /// A model out of bounds in a request: invalid input (exit 64).
    fn from(e: ShapeError) -> Self {
        crate::ProbeError::Invalid(e.to_string())
    }
}
