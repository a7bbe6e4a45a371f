//! A model spec's text form, as `--model`, the API and result names carry it: `gpt2-124m`,
//! `gpt2-355m`, `decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]][,OPTION...]`, `mlp:WIDTH[,DEPTH]`,
//! `mlp:WIDTHxDEPTH` and `mlp:IN->WIDTHxDEPTH->OUT`, and the forms of a model built by code
//! (`super::source`).

use super::source::ModelSource;
use super::spec::{DecoderArch, ModelSpec, GPT2_VOCAB};

/// The forms `parse` accepts, for error messages.
pub const MODEL_FORMS: &str = "gpt2-124m, gpt2-355m, decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]][,llama][,ffn=N][,kv=N][,untied], mlp:WIDTH[,DEPTH], mlp:WIDTHxDEPTH or mlp:IN->WIDTHxDEPTH->OUT (DEPTH square layers between the input and output layers: 1024->4096x1->10 is 1024->4096->4096->10); or a model built by code: py:FILE.py:FUNCTION, py:MODULE:FUNCTION, torchvision:NAME, timm:NAME, hf:MODEL_TYPE[,KEY=VALUE...] or hf:PATH/config.json";

impl ModelSpec {
    /// How results name the model: the preset's or decoder's name, `mlp:WxD` or `mlp:IN->WxD->OUT`.
    pub fn name(&self) -> String {
        match self {
            ModelSpec::Decoder { name, .. } => name.clone(),
            ModelSpec::Mlp {
                width,
                depth,
                input: Some(i),
                output: Some(o),
            } => format!("mlp:{i}->{width}x{depth}->{o}"),
            ModelSpec::Mlp { width, depth, .. } => format!("mlp:{width}x{depth}"),
            ModelSpec::External { source } => source.to_arg(),
        }
    }

    /// The spec as `FromStr` reads it back (`gpt2-124m`, `decoder:L,W,H,S,V[,options]`,
    /// `mlp:W,D`, `mlp:IN->WxD->OUT`): how a model travels in the API and on command lines.
    pub fn to_arg(&self) -> String {
        match self {
            ModelSpec::Decoder { name, .. } if name == "gpt2-124m" || name == "gpt2-355m" => {
                name.clone()
            }
            ModelSpec::Decoder {
                layers,
                width,
                heads,
                seq,
                vocab,
                arch,
                ffn,
                kv_heads,
                untied,
                ..
            } => {
                let mut arg = format!("decoder:{layers},{width},{heads},{seq},{vocab}");
                if *arch == DecoderArch::Llama {
                    arg.push_str(",llama");
                }
                if let Some(f) = ffn {
                    arg.push_str(&format!(",ffn={f}"));
                }
                if let Some(kv) = kv_heads {
                    arg.push_str(&format!(",kv={kv}"));
                }
                if *untied {
                    arg.push_str(",untied");
                }
                arg
            }
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

/// The name a decoder spec gets from its shape: `decoder-LxW` (GPT-2 style), `llama-LxW`.
pub(super) fn decoder_name(arch: DecoderArch, layers: u32, width: u32) -> String {
    match arch {
        DecoderArch::Gpt2 => format!("decoder-{layers}x{width}"),
        DecoderArch::Llama => format!("llama-{layers}x{width}"),
    }
}

/// Reads a model spec; the error says what is wrong and lists the accepted forms.
pub(super) fn parse(s: &str) -> Result<ModelSpec, String> {
    let s = s.trim();
    // Sources before lower-casing: a factory's path keeps its case.
    if let Some(source) = ModelSource::parse(s) {
        return source.map(|source| ModelSpec::External { source });
    }
    let lower = s.to_ascii_lowercase();
    let spec = match lower.as_str() {
        "gpt2-124m" | "gpt2" => ModelSpec::gpt2_124m(),
        "gpt2-355m" | "gpt2-medium" => ModelSpec::gpt2_355m(),
        other => if let Some(rest) = other.strip_prefix("mlp:") {
            parse_mlp(rest)
        } else if let Some(rest) = other.strip_prefix("decoder:") {
            parse_decoder(rest)
        } else {
            Err("unknown model".into())
        }
        .map_err(|e| format!("model {s:?}: {e}; expected {MODEL_FORMS}"))?,
    };
    spec.validate().map_err(|e| format!("model {s:?}: {e}"))?;
    Ok(spec)
}

fn number(p: &str) -> Result<u32, String> {
    p.trim()
        .parse::<u32>()
        .map_err(|_| format!("{:?} is not a number", p.trim()))
}

/// `W[,D]`, `WxD` or `IN->WxD->OUT`.
fn parse_mlp(rest: &str) -> Result<ModelSpec, String> {
    let width_depth = |p: &str| -> Result<(u32, u32), String> {
        let (w, d) = p
            .split_once('x')
            .ok_or_else(|| format!("{:?} is not WIDTHxDEPTH", p.trim()))?;
        Ok((number(w)?, number(d)?))
    };
    if rest.contains("->") {
        let parts: Vec<&str> = rest.split("->").collect();
        let [input, body, output] = parts[..] else {
            return Err("the in/out form is IN->WIDTHxDEPTH->OUT".into());
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
        _ => Err("mlp:WIDTH[,DEPTH] takes one or two numbers".into()),
    }
}

/// `LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]]`, then options: `llama`, `ffn=N`, `kv=N`, `untied`.
fn parse_decoder(rest: &str) -> Result<ModelSpec, String> {
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
        return Err(
            "a decoder needs three to five numbers: LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]]".into(),
        );
    }
    let (mut arch, mut ffn, mut kv_heads, mut untied) = (DecoderArch::Gpt2, None, None, false);
    for option in &parts[numeric..] {
        match option.split_once('=') {
            None if *option == "llama" => arch = DecoderArch::Llama,
            None if *option == "gpt2" => arch = DecoderArch::Gpt2,
            None if *option == "untied" => untied = true,
            Some(("ffn", n)) => ffn = Some(number(n)?),
            Some(("kv", n)) => kv_heads = Some(number(n)?),
            _ => {
                return Err(format!(
                    "unknown decoder option {option:?} (options: llama, gpt2, ffn=N, kv=N, untied)"
                ))
            }
        }
    }
    Ok(ModelSpec::Decoder {
        name: decoder_name(arch, v[0], v[1]),
        layers: v[0],
        width: v[1],
        heads: v[2],
        seq: v.get(3).copied().unwrap_or(1024),
        vocab: v.get(4).copied().unwrap_or(GPT2_VOCAB),
        arch,
        // The defaults are not stored, so that a spec reads back equal to itself.
        ffn: ffn.filter(|f| u64::from(*f) != 4 * u64::from(v[1])),
        kv_heads: kv_heads.filter(|kv| *kv != v[2]),
        untied,
    })
}
