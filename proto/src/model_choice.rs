//! core's `ModelSpec` <-> the API's `ModelChoice`, field by field: a model crosses the wire as
//! the values the CLI read, never as text the daemon would read again. The way in checks every
//! field's bounds (`ModelSpec::validate`), since a request may come from anyone.

use ddpcheck_core::ddp::{Decoder, DecoderArch, ModelSource, ModelSpec};

use crate::convert::Invalid;
use crate::v1;
use crate::v1::model_choice::Kind;
use crate::v1::model_source::Kind as SourceKind;

impl From<&ModelSpec> for v1::ModelChoice {
    fn from(m: &ModelSpec) -> Self {
        let kind = match m {
            ModelSpec::Decoder(d) => Kind::Decoder(decoder_message(d)),
            ModelSpec::Mlp {
                width,
                depth,
                input,
                output,
            } => Kind::Mlp(v1::Mlp {
                width: *width,
                depth: *depth,
                input: *input,
                output: *output,
            }),
            ModelSpec::External { source } => Kind::Source(v1::ModelSource {
                kind: Some(source_kind(source)),
            }),
        };
        v1::ModelChoice { kind: Some(kind) }
    }
}

fn decoder_message(d: &Decoder) -> v1::Decoder {
    let arch = match d.arch {
        DecoderArch::Gpt2 => v1::decoder::Arch::Gpt2,
        DecoderArch::Llama => v1::decoder::Arch::Llama,
    };
    v1::Decoder {
        name: d.name.clone(),
        layers: d.layers,
        width: d.width,
        heads: d.heads,
        seq: d.seq,
        vocab: d.vocab,
        arch: arch.into(),
        ffn: d.ffn,
        kv_heads: d.kv_heads,
        untied: d.untied,
    }
}

fn source_kind(source: &ModelSource) -> SourceKind {
    match source {
        ModelSource::Python { target, function } => SourceKind::Python(v1::PythonFactory {
            target: target.clone(),
            function: function.clone(),
        }),
        ModelSource::Torchvision { name } => SourceKind::Torchvision(name.clone()),
        ModelSource::Timm { name } => SourceKind::Timm(name.clone()),
        ModelSource::HuggingFace {
            model_type,
            config_path,
            overrides,
            seq,
        } => SourceKind::HuggingFace(v1::HuggingFace {
            model_type: model_type.clone(),
            config_path: config_path.clone(),
            overrides: overrides
                .iter()
                .map(|(key, value)| v1::ConfigOverride {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            seq: *seq,
        }),
    }
}

/// The model a request names, its every field within the bounds the CLI reads by.
impl TryFrom<v1::ModelChoice> for ModelSpec {
    type Error = Invalid;

    fn try_from(m: v1::ModelChoice) -> Result<Self, Invalid> {
        let spec = match m.kind {
            Some(Kind::Decoder(d)) => ModelSpec::Decoder(decoder(d)?),
            Some(Kind::Mlp(v1::Mlp {
                width,
                depth,
                input,
                output,
            })) => ModelSpec::Mlp {
                width,
                depth,
                input,
                output,
            },
            Some(Kind::Source(v1::ModelSource { kind: Some(kind) })) => ModelSpec::External {
                source: source(kind),
            },
            Some(Kind::Source(v1::ModelSource { kind: None })) | None => {
                return Err(Invalid(
                    "a model names none of decoder, mlp or source".into(),
                ))
            }
        };
        spec.validate()
            .map_err(|e| Invalid(format!("model {:?}: {e}", spec.name())))?;
        Ok(spec)
    }
}

fn decoder(d: v1::Decoder) -> Result<Decoder, Invalid> {
    let arch = match v1::decoder::Arch::try_from(d.arch) {
        Ok(v1::decoder::Arch::Gpt2) => DecoderArch::Gpt2,
        Ok(v1::decoder::Arch::Llama) => DecoderArch::Llama,
        Err(_) => return Err(Invalid(format!("decoder arch {} is unknown", d.arch))),
    };
    Ok(Decoder {
        name: d.name,
        layers: d.layers,
        width: d.width,
        heads: d.heads,
        seq: d.seq,
        vocab: d.vocab,
        arch,
        ffn: d.ffn,
        kv_heads: d.kv_heads,
        untied: d.untied,
    })
}

fn source(kind: SourceKind) -> ModelSource {
    match kind {
        SourceKind::Python(f) => ModelSource::Python {
            target: f.target,
            function: f.function,
        },
        SourceKind::Torchvision(name) => ModelSource::Torchvision { name },
        SourceKind::Timm(name) => ModelSource::Timm { name },
        SourceKind::HuggingFace(h) => ModelSource::HuggingFace {
            model_type: h.model_type,
            config_path: h.config_path,
            overrides: h.overrides.into_iter().map(|o| (o.key, o.value)).collect(),
            seq: h.seq,
        },
    }
}
