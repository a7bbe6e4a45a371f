//! PowerSGD as PyTorch's `powerSGD_hook` runs it, bucket by bucket: which gradients it
//! compresses, what each bucket then sends, and in how many all-reduces.
//!
//! The hook views each gradient in a bucket as a matrix `n × m` (`tensor.view(shape[0], -1)`),
//! takes the rank `r' = min(n, m, r)` and compresses it only where `(n + m)·r'` times
//! `min_compression_rate` is still less than `n·m` (`_should_compress`): vectors (biases, norms'
//! weights, `m = 1`) never pass, nor do small or thin matrices. A compressed matrix sends
//! `P` (`n × r'`) and `Q` (`m × r'`); the rest go as they are. The bucket then runs three
//! all-reduces one after another, each waiting for the one before: the uncompressed gradients
//! (issued even when there are none), then every `P`, then every `Q` (the hook computes `Q`
//! from the reduced `P`). The elements travel in the bucket's dtype.

use serde::{Deserialize, Serialize};

use super::grad_tensor::GradTensor;

/// `PowerSGDState`'s default `min_compression_rate`: compress only where the matrix shrinks
/// more than twofold.
pub const MIN_COMPRESSION_RATE: u64 = 2;
/// `PowerSGDState`'s default `start_powerSGD_iter` (torch 1.13 to 2.x): the hook runs plain
/// all-reduce for the first 1,000 optimizer steps, so a short run never compresses.
pub const TORCH_DEFAULT_START_ITER: u32 = 1_000;
/// The ranks `recommend` tries, smallest first.
pub const RANKS: [u32; 4] = [1, 2, 4, 8];

/// What one bucket (or a whole model) sends under PowerSGD, in gradient elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    /// Elements all-reduced as they are (vectors and matrices not worth compressing).
    pub uncompressed: u64,
    /// Elements of every `P` (`n × r'` each).
    pub p: u64,
    /// Elements of every `Q` (`m × r'` each).
    pub q: u64,
    /// Elements before compression (the bucket's gradients).
    pub original: u64,
}

impl Split {
    /// The three all-reduces in the order the hook issues them: uncompressed, `P`, `Q`.
    pub fn all_reduces(&self) -> [u64; 3] {
        [self.uncompressed, self.p, self.q]
    }

    /// Elements on the wire in all.
    pub fn sent(&self) -> u64 {
        self.uncompressed + self.p + self.q
    }

    fn add(mut self, other: Split) -> Split {
        self.uncompressed += other.uncompressed;
        self.p += other.p;
        self.q += other.q;
        self.original += other.original;
        self
    }
}

/// One gradient as the hook treats it: compressed to `P` and `Q` where `_should_compress`
/// says so, else sent whole. A tensor whose shape is unknown counts as sent whole.
pub fn tensor_split(tensor: &GradTensor, rank: u32) -> Split {
    let whole = Split {
        uncompressed: tensor.params,
        original: tensor.params,
        ..Split::default()
    };
    let Some([n, m]) = tensor.matrix else {
        return whole;
    };
    let r = n.min(m).min(u64::from(rank.max(1)));
    let compressed = (n + m) * r;
    if compressed * MIN_COMPRESSION_RATE < n * m {
        Split {
            uncompressed: 0,
            p: n * r,
            q: m * r,
            original: tensor.params,
        }
    } else {
        whole
    }
}

/// The sum over a bucket's (or a model's) gradients.
pub fn split<'a>(tensors: impl IntoIterator<Item = &'a GradTensor>, rank: u32) -> Split {
    tensors
        .into_iter()
        .map(|t| tensor_split(t, rank))
        .fold(Split::default(), Split::add)
}
