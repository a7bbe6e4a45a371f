//! A decoder-only transformer's shape as one value (`Decoder`): the fields `--model decoder:...`,
//! a Hugging Face `config.json` and the presets give, checked here, counted in `architecture`,
//! and sent as they are to the benchmark script.

use serde::{Deserialize, Serialize};

use super::model_error::ShapeError;

/// GPT-2's BPE vocabulary, used by the decoder presets.
pub const GPT2_VOCAB: u32 = 50257;

/// A decoder-only transformer: GPT-2 style by default (tied embeddings, 4x GELU MLP), or LLaMA
/// style. Fields added after the first reports take defaults, so older JSON still reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decoder {
    pub name: String,
    pub layers: u32,
    pub width: u32,
    pub heads: u32,
    pub seq: u32,
    pub vocab: u32,
    #[serde(default, skip_serializing_if = "DecoderArch::is_gpt2")]
    pub arch: DecoderArch,
    /// The MLP's hidden width (`intermediate_size`); none: 4 x width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn: Option<u32>,
    /// Key/value heads (grouped-query attention); none: as many as query heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<u32>,
    /// The output projection is its own matrix rather than the token embedding.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untied: bool,
}

/// How a decoder's blocks are built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecoderArch {
    /// LayerNorm, biases on every linear layer, learned positions, GELU MLP.
    #[default]
    Gpt2,
    /// RMSNorm, no biases, rotary positions, gated SiLU MLP (LLaMA, Mistral).
    Llama,
}

impl DecoderArch {
    pub fn is_gpt2(&self) -> bool {
        *self == DecoderArch::Gpt2
    }
}

/// The presets' names: a decoder of one of these shapes is that preset.
const GPT2_PRESETS: [&str; 2] = ["gpt2-124m", "gpt2-355m"];

impl Decoder {
    pub fn gpt2_124m() -> Self {
        Self::gpt2_style("gpt2-124m", 12, 768, 12, 1024, GPT2_VOCAB)
    }
    pub fn gpt2_355m() -> Self {
        Self::gpt2_style("gpt2-355m", 24, 1024, 16, 1024, GPT2_VOCAB)
    }

    /// A GPT-2-style decoder (tied embeddings, 4x MLP, one key/value head per head).
    pub fn gpt2_style(
        name: &str,
        layers: u32,
        width: u32,
        heads: u32,
        seq: u32,
        vocab: u32,
    ) -> Self {
        Decoder {
            name: name.into(),
            layers,
            width,
            heads,
            seq,
            vocab,
            arch: DecoderArch::Gpt2,
            ffn: None,
            kv_heads: None,
            untied: false,
        }
    }

    /// The name a decoder gets from its shape: `decoder-LxW` (GPT-2 style), `llama-LxW`.
    pub fn shape_name(arch: DecoderArch, layers: u32, width: u32) -> String {
        match arch {
            DecoderArch::Gpt2 => format!("decoder-{layers}x{width}"),
            DecoderArch::Llama => format!("llama-{layers}x{width}"),
        }
    }

    /// Whether this is one of the GPT-2 presets (`gpt2-124m`, `gpt2-355m`).
    pub fn is_preset(&self) -> bool {
        GPT2_PRESETS.contains(&self.name.as_str())
    }

    /// The GPT-2 preset of this shape, whatever its name, so that results and profiles name it as
    /// `--model` would; else the decoder as it is.
    pub fn as_preset(self) -> Self {
        [Decoder::gpt2_124m(), Decoder::gpt2_355m()]
            .into_iter()
            .find(|preset| {
                Decoder {
                    name: preset.name.clone(),
                    ..self.clone()
                } == *preset
            })
            .unwrap_or(self)
    }

    /// The defaults are not stored, so that a decoder reads back equal to itself: an `ffn` of
    /// 4 x width and as many key/value heads as heads are `None`.
    pub fn without_defaults(mut self) -> Self {
        self.ffn = self
            .ffn
            .filter(|f| u64::from(*f) != 4 * u64::from(self.width));
        self.kv_heads = self.kv_heads.filter(|kv| *kv != self.heads);
        self
    }

    /// The bounds the benchmark script builds within; the error says which field is out.
    pub fn validate(&self) -> Result<(), ShapeError> {
        let Decoder {
            layers,
            width,
            heads,
            seq,
            vocab,
            ..
        } = *self;
        if !(1..=256).contains(&layers) {
            return Err(ShapeError::Layers(layers));
        }
        if !(8..=32768).contains(&width) || !(1..=256).contains(&heads) || width % heads != 0 {
            return Err(ShapeError::WidthHeads { width, heads });
        }
        if !(8..=131072).contains(&seq) || !(2..=1_000_000).contains(&vocab) {
            return Err(ShapeError::SeqVocab { seq, vocab });
        }
        if let Some(f) = self.ffn.filter(|f| !(8..=262_144).contains(f)) {
            return Err(ShapeError::Ffn(f));
        }
        if let Some(kv) = self.kv_heads.filter(|kv| *kv == 0 || heads % kv != 0) {
            return Err(ShapeError::KvHeads { kv, heads });
        }
        if self.arch == DecoderArch::Llama && (width / heads) % 2 != 0 {
            return Err(ShapeError::OddHeadWidth { width, heads });
        }
        let printable = |c: char| c.is_ascii_graphic();
        if self.name.is_empty() || self.name.len() > 128 || !self.name.chars().all(printable) {
            return Err(ShapeError::DecoderName);
        }
        Ok(())
    }
}
