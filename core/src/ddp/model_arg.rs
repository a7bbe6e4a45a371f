//! A model spec's text form, as `--model`, the API and result names carry it: `gpt2-124m`,
//! `gpt2-355m`, `decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]][,OPTION...]`, `mlp:WIDTH[,DEPTH]`,
//! `mlp:WIDTHxDEPTH` and `mlp:IN->WIDTHxDEPTH->OUT`, and the forms of a model built by code
//! (`super::source`). Read once, where a command line or a test names a model; past that the
//! model travels as the `ModelSpec` this returns. Depends on `spec`, never the other way.

use std::str::FromStr;

use super::decoder::{Decoder, DecoderArch, GPT2_VOCAB};
use super::model_error::{FormError, ModelSpecError};
use super::source::{ModelSource, SOURCE_FORMS};
use super::spec::ModelSpec;

/// The forms `parse` accepts, for error messages.
pub const MODEL_FORMS: &str = "gpt2-124m, gpt2-355m, decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]][,llama][,ffn=N][,kv=N][,untied], mlp:WIDTH[,DEPTH], mlp:WIDTHxDEPTH or mlp:IN->WIDTHxDEPTH->OUT (DEPTH square layers between the input and output layers: 1024->4096x1->10 is 1024->4096->4096->10); or a model built by code: py:FILE.py:FUNCTION, py:MODULE:FUNCTION, torchvision:NAME, timm:NAME, hf:MODEL_TYPE[,KEY=VALUE...] or hf:PATH/config.json";

impl ModelSpec {
    /// The spec as `FromStr` reads it back (`gpt2-124m`, `decoder:L,W,H,S,V[,options]`,
    /// `mlp:W,D`, `mlp:IN->WxD->OUT`, a source's form): the command line's spelling of it.
    pub fn to_arg(&self) -> String {
        match self {
            ModelSpec::Decoder(d) if d.is_preset() => d.name.clone(),
            ModelSpec::Decoder(d) => decoder_arg(d),
            ModelSpec::Mlp {
                input: Some(_),
                output: Some(_),
                ..
            } => self.name(),
            ModelSpec::Mlp { width, depth, .. } => format!("mlp:{width},{depth}"),
            ModelSpec::External { source } => source.to_arg(),
        }
    }
}

impl FromStr for ModelSpec {
    type Err = ModelSpecError;
    /// See [`MODEL_FORMS`] for the accepted forms.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// `decoder:L,W,H,S,V` and the options that differ from the defaults.
fn decoder_arg(d: &Decoder) -> String {
    let mut arg = format!(
        "decoder:{},{},{},{},{}",
        d.layers, d.width, d.heads, d.seq, d.vocab
    );
    if d.arch == DecoderArch::Llama {
        arg.push_str(",llama");
    }
    if let Some(f) = d.ffn {
        arg.push_str(&format!(",ffn={f}"));
    }
    if let Some(kv) = d.kv_heads {
        arg.push_str(&format!(",kv={kv}"));
    }
    if d.untied {
        arg.push_str(",untied");
    }
    arg
}

/// Reads a model spec; the error says what is wrong and lists the accepted forms.
fn parse(s: &str) -> Result<ModelSpec, ModelSpecError> {
    let s = s.trim();
    // Sources before lower-casing: a factory's path keeps its case.
    if let Some(source) = ModelSource::parse(s) {
        return source
            .map(|source| ModelSpec::External { source })
            .map_err(|cause| ModelSpecError::Source {
                arg: s.to_string(),
                cause,
                expected: SOURCE_FORMS,
            });
    }
    let form = |cause| ModelSpecError::Form {
        arg: s.to_string(),
        cause,
        expected: MODEL_FORMS,
    };
    let lower = s.to_ascii_lowercase();
    let spec = match lower.as_str() {
        "gpt2-124m" | "gpt2" => ModelSpec::gpt2_124m(),
        "gpt2-355m" | "gpt2-medium" => ModelSpec::gpt2_355m(),
        other => if let Some(rest) = other.strip_prefix("mlp:") {
            parse_mlp(rest)
        } else if let Some(rest) = other.strip_prefix("decoder:") {
            parse_decoder(rest)
        } else {
            Err(FormError::Unknown)
        }
        .map_err(form)?,
    };
    spec.validate().map_err(|cause| ModelSpecError::Shape {
        arg: s.to_string(),
        cause,
    })?;
    Ok(spec)
}

fn number(p: &str) -> Result<u32, FormError> {
    p.trim()
        .parse::<u32>()
        .map_err(|_| FormError::NotANumber(p.trim().to_string()))
}

/// `W[,D]`, `WxD` or `IN->WxD->OUT`.
fn parse_mlp(rest: &str) -> Result<ModelSpec, FormError> {
    let width_depth = |p: &str| -> Result<(u32, u32), FormError> {
        let (w, d) = p
            .split_once('x')
            .ok_or_else(|| FormError::NotWidthByDepth(p.trim().to_string()))?;
        Ok((number(w)?, number(d)?))
    };
    if rest.contains("->") {
        let parts: Vec<&str> = rest.split("->").collect();
        let [input, body, output] = parts[..] else {
            return Err(FormError::MlpInOut);
        };
        let (width, depth) = width_depth(body)?;
        return Ok(ModelSpec::Mlp {
            width,
            depth,
            input: Some(number(input)?),
            output: Some(number(output)?),
        });
    }
    if rest.contains('x') {
        let (width, depth) = width_depth(rest)?;
        return Ok(ModelSpec::square_mlp(width, depth));
    }
    let v = rest.split(',').map(number).collect::<Result<Vec<_>, _>>()?;
    match v[..] {
        [width] => Ok(ModelSpec::square_mlp(width, 4)),
        [width, depth] => Ok(ModelSpec::square_mlp(width, depth)),
        _ => Err(FormError::MlpNumbers),
    }
}

/// `LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]]`, then options: `llama`, `ffn=N`, `kv=N`, `untied`.
fn parse_decoder(rest: &str) -> Result<ModelSpec, FormError> {
    let parts: Vec<&str> = rest.split(',').map(str::trim).collect();
    let numeric = parts
        .iter()
        .take_while(|p| p.starts_with(|c: char| c.is_ascii_digit()))
        .count();
    let v = parts[..numeric]
        .iter()
        .map(|p| number(p))
        .collect::<Result<Vec<_>, _>>()?;
    if !(3..=5).contains(&v.len()) {
        return Err(FormError::DecoderNumbers);
    }
    let (mut arch, mut ffn, mut kv_heads, mut untied) = (DecoderArch::Gpt2, None, None, false);
    for option in &parts[numeric..] {
        match option.split_once('=') {
            None if *option == "llama" => arch = DecoderArch::Llama,
            None if *option == "gpt2" => arch = DecoderArch::Gpt2,
            None if *option == "untied" => untied = true,
            Some(("ffn", n)) => ffn = Some(number(n)?),
            Some(("kv", n)) => kv_heads = Some(number(n)?),
            _ => return Err(FormError::DecoderOption(option.to_string())),
        }
    }
    let decoder = Decoder {
        name: Decoder::shape_name(arch, v[0], v[1]),
        layers: v[0],
        width: v[1],
        heads: v[2],
        seq: v.get(3).copied().unwrap_or(1024),
        vocab: v.get(4).copied().unwrap_or(GPT2_VOCAB),
        arch,
        ffn,
        kv_heads,
        untied,
    };
    Ok(ModelSpec::Decoder(decoder.without_defaults()))
}
