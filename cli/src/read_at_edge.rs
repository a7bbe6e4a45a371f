//! A clap value parser that reads a flag's text into one of core's typed values, once, where
//! clap reads the command line; its refusal is the reader's own line (`ddpcheck: --amp "fp8":
//! expected bf16, fp16 or none`, exit 64), not clap's "invalid value" wrapped around it.

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

/// Why a flag's text gives no value: the error of the layer that read it (core's
/// `UnknownName`, `VariantError`, a model's), said as it words it.
pub type EdgeError = Box<dyn std::error::Error + Send + Sync>;

/// A flag's text that is not UTF-8; `0` is the flag and the text as far as it reads
/// (`--model X`).
#[derive(Debug, thiserror::Error)]
#[error("{0}: not UTF-8")]
pub struct NotUtf8(pub String);

#[derive(Clone)]
pub struct ReadAtEdge<T>(pub fn(&OsStr) -> Result<T, EdgeError>);

impl<T: Clone + Send + Sync + 'static> TypedValueParser for ReadAtEdge<T> {
    type Value = T;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        self.0(value).map_err(|e| clap::Error::raw(ErrorKind::ValueValidation, format!("{e}\n")))
    }
}

/// A value of core's read from its text form (`FromStr`), the flag named where the text is not
/// UTF-8.
pub fn typed<T>() -> ReadAtEdge<T>
where
    T: std::str::FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    ReadAtEdge(|v| {
        let text = v
            .to_str()
            .ok_or_else(|| NotUtf8(v.to_string_lossy().into_owned()))?;
        Ok(text.parse::<T>()?)
    })
}
