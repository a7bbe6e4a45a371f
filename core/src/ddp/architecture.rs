//! The parameter tensors a model spec stands for, exactly as the DDP benchmark script builds
//! them (gpu/src/ddp/bench_ddp/presets.py): their sizes, and the order in which a backward pass
//! completes their gradients.

use super::decoder::{Decoder, DecoderArch};
use super::layout::{ParamLayout, ParamTensor};
use super::spec::ModelSpec;

/// A decoder's parameters, tensor by tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderTensors {
    pub layers: u64,
    /// One block's tensors in the order their gradients are computed: the reverse of the
    /// forward (MLP output first, the first norm last).
    pub block: Vec<u64>,
    pub final_norm: u64,
    /// Learned positions (GPT-2); rotary positions have no parameters.
    pub positions: u64,
    pub token_embedding: u64,
    /// The output projection when it is its own matrix; 0 when it is the token embedding.
    pub untied_head: u64,
}

impl DecoderTensors {
    pub fn params(&self) -> u64 {
        self.layers * self.block.iter().sum::<u64>()
            + self.final_norm
            + self.positions
            + self.token_embedding
            + self.untied_head
    }
}

impl Decoder {
    /// The decoder's tensors.
    pub fn tensors(&self) -> DecoderTensors {
        let w = u64::from(self.width);
        let f = self.ffn.map_or(4 * w, u64::from);
        let h = u64::from(self.heads.max(1));
        let kv = self.kv_heads.map_or(h, u64::from);
        // Queries, keys and values in one matrix: a head's width per query and key/value head.
        let qkv = (h + 2 * kv) * (w / h);
        let block = match self.arch {
            // fc_proj, fc, ln_2, proj, qkv, ln_1: weights after their biases.
            DecoderArch::Gpt2 => vec![w, f * w, f, w * f, 2 * w, w, w * w, qkv, w * qkv, 2 * w],
            // down, gate and up in one matrix, norm, proj, qkv, norm: no biases.
            DecoderArch::Llama => vec![f * w, 2 * w * f, w, w * w, w * qkv, w],
        };
        let (final_norm, positions) = match self.arch {
            DecoderArch::Gpt2 => (2 * w, u64::from(self.seq) * w),
            DecoderArch::Llama => (w, 0),
        };
        let embedding = u64::from(self.vocab) * w;
        DecoderTensors {
            layers: u64::from(self.layers),
            block,
            final_norm,
            positions,
            token_embedding: embedding,
            untied_head: if self.untied { embedding } else { 0 },
        }
    }

    /// wte, wpe (GPT-2), the blocks (ln1, qkv, proj, ln2, fc, fc_proj), ln_f, lm_head (untied).
    fn layout(&self) -> ParamLayout {
        let t = self.tensors();
        let (w, v) = (u64::from(self.width), u64::from(self.vocab));
        let gpt2 = self.arch == DecoderArch::Gpt2;
        let mut wte = ParamTensor::new("wte.weight", &[v, w]);
        wte.lookup = true;
        wte.tied_output = !self.untied;
        let mut tensors = vec![wte];
        if gpt2 {
            let mut wpe = ParamTensor::new("wpe.weight", &[u64::from(self.seq), w]);
            wpe.lookup = true;
            tensors.push(wpe);
        }
        // The block's tensors in registration order: the reverse of `DecoderTensors::block`.
        let block = block_shapes(&t, w, gpt2);
        for layer in 0..t.layers {
            for (name, shape) in &block {
                tensors.push(ParamTensor::new(format!("blocks.{layer}.{name}"), shape));
            }
        }
        tensors.push(ParamTensor::new("ln_f.weight", &[w]));
        if gpt2 {
            tensors.push(ParamTensor::new("ln_f.bias", &[w]));
        }
        if self.untied {
            tensors.push(ParamTensor::new("lm_head.weight", &[v, w]));
        }
        ParamLayout { tensors }
    }
}

impl ModelSpec {
    /// A decoder's tensors; `None` for an MLP.
    pub fn decoder_tensors(&self) -> Option<DecoderTensors> {
        self.decoder().map(Decoder::tensors)
    }

    /// An MLP's linear layers from input to output as (in, out) features; empty for a decoder.
    pub fn mlp_layers(&self) -> Vec<(u64, u64)> {
        let ModelSpec::Mlp {
            width,
            depth,
            input,
            output,
        } = self
        else {
            return Vec::new();
        };
        let w = u64::from(*width);
        let mut layers = Vec::new();
        if let Some(i) = input {
            layers.push((u64::from(*i), w));
        }
        layers.extend((0..*depth).map(|_| (w, w)));
        if let Some(o) = output {
            layers.push((w, u64::from(*o)));
        }
        layers
    }

    /// Trainable parameters, as `sum(p.numel() for p in model.parameters())` counts them in the
    /// benchmark script (a tied weight once): every tensor of [`Self::decoder_tensors`], or
    /// the weights and biases of every linear layer of an MLP.
    pub fn params(&self) -> u64 {
        match self.decoder_tensors() {
            Some(t) => t.params(),
            None => self.mlp_layers().iter().map(|(i, o)| i * o + o).sum(),
        }
    }
}

impl ModelSpec {
    /// The parameters the benchmark script registers for this spec, named and shaped as its
    /// `named_parameters()` yields them; `None` for a model built by code, whose parameters only
    /// a launch can report.
    pub fn param_layout(&self) -> Option<ParamLayout> {
        match self {
            ModelSpec::Decoder(d) => Some(d.layout()),
            ModelSpec::Mlp { .. } => Some(self.mlp_layout()),
            ModelSpec::External { .. } => None,
        }
    }

    fn mlp_layout(&self) -> ParamLayout {
        let mut tensors = Vec::new();
        for (i, (fan_in, fan_out)) in self.mlp_layers().into_iter().enumerate() {
            tensors.push(ParamTensor::new(
                format!("blocks.{i}.weight"),
                &[fan_out, fan_in],
            ));
            tensors.push(ParamTensor::new(format!("blocks.{i}.bias"), &[fan_out]));
        }
        ParamLayout { tensors }
    }
}

/// One block's (name, shape) in registration order; linear weights are (out, in).
fn block_shapes(t: &DecoderTensors, w: u64, gpt2: bool) -> Vec<(&'static str, Vec<u64>)> {
    // DecoderTensors::block holds the qkv weight as w·qkv and the fc weight as w·f (or 2·w·f).
    let sizes = &t.block;
    let (qkv_out, fc_out, ffn) = if gpt2 {
        (sizes[8] / w, sizes[3] / w, sizes[2])
    } else {
        (sizes[4] / w, sizes[1] / w, sizes[0] / w)
    };
    let mut out: Vec<(&'static str, Vec<u64>)> = vec![("ln1.weight", vec![w])];
    let linear = |out: &mut Vec<(&'static str, Vec<u64>)>,
                  name: (&'static str, &'static str),
                  o: u64,
                  i: u64| {
        out.push((name.0, vec![o, i]));
        if gpt2 {
            out.push((name.1, vec![o]));
        }
    };
    if gpt2 {
        out.push(("ln1.bias", vec![w]));
    }
    linear(&mut out, ("qkv.weight", "qkv.bias"), qkv_out, w);
    linear(&mut out, ("proj.weight", "proj.bias"), w, w);
    out.push(("ln2.weight", vec![w]));
    if gpt2 {
        out.push(("ln2.bias", vec![w]));
    }
    linear(&mut out, ("fc.weight", "fc.bias"), fc_out, w);
    linear(&mut out, ("fc_proj.weight", "fc_proj.bias"), w, ffn);
    out
}
