//! A word that names none of a closed set's members (`--amp`, `--reference`, a cluster phase):
//! the one error of every `FromStr` over such a set, a usage error wherever it is read.

/// `what` was given `got`, which is none of `expected`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {got:?}: expected {expected}")]
pub struct UnknownName {
    /// The flag or field read (`--amp`, `phase`).
    pub what: &'static str,
    pub got: String,
    /// The accepted names, as a sentence (`bf16, fp16 or none`).
    pub expected: &'static str,
}

impl UnknownName {
    pub fn new(what: &'static str, got: &str, expected: &'static str) -> UnknownName {
        UnknownName {
            what,
            got: got.to_string(),
            expected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_flag_the_word_and_what_it_accepts() {
        let e = UnknownName::new("--amp", "fp8", "bf16, fp16 or none");
        assert_eq!(e.to_string(), "--amp \"fp8\": expected bf16, fp16 or none");
    }
}
