//! Parsers of flag values (message sizes, seconds, lists) that several commands share.

use std::time::Duration;

use ddpcheck_engine::RunError;

/// A flag's value that is not what the flag takes (clap says it, exit 64).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagValueError {
    #[error("{0:?} is not a size (e.g. 4096, 4K, 8M, 1G)")]
    NotASize(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
    #[error("{0:?}: a message is at least 1 byte")]
    EmptyMessage(String),
    #[error("{0:?} is above the 16 GiB a sweep may ask for")]
    AboveSweep(String),
    #[error("{0:?} is not a number of seconds")]
    NotSeconds(String),
    #[error("{0} outside (0, 86400] seconds")]
    SecondsRange(String),
    #[error("{0:?} is not a whole number")]
    NotWhole(String),
    #[error("{0:?} is not a parameter count (e.g. 124M, 1.3B)")]
    NotACount(String),
    #[error("{0:?}: parameter count outside 1K..10T")]
    CountRange(String),
}

impl From<FlagValueError> for RunError {
    /// Always bad input: exit 64.
    fn from(e: FlagValueError) -> Self {
        RunError::Usage(e.to_string())
    }
}

/// Sizes like nccl-tests takes them: 4096, 4K, 8M, 1G (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, FlagValueError> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| FlagValueError::NotASize(s.to_string()))?;
    n.checked_mul(mult)
        .ok_or_else(|| FlagValueError::TooLarge(s.to_string()))
}

/// A message size of a sweep, as [`parse_size`]: at least 1 byte (0 would read as "the default"
/// once in a request) and at most the 16 GiB a sweep may ask for.
pub fn parse_message_size(s: &str) -> Result<u64, FlagValueError> {
    let max = ddpcheck_core::backend::CollectiveRequest::MAX_BYTES;
    match parse_size(s)? {
        0 => Err(FlagValueError::EmptyMessage(s.to_string())),
        n if n > max => Err(FlagValueError::AboveSweep(s.to_string())),
        n => Ok(n),
    }
}

/// Seconds of a budget or limit: above 0, at most a day.
pub fn parse_seconds_up_to_a_day(s: &str) -> Result<f64, FlagValueError> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| FlagValueError::NotSeconds(s.to_string()))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err(FlagValueError::SecondsRange(s.to_string()))
    }
}

/// `1,2,4` → [1, 2, 4].
pub fn parse_u32_list(s: &str) -> Result<Vec<u32>, FlagValueError> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<u32>()
                .map_err(|_| FlagValueError::NotWhole(x.to_string()))
        })
        .collect()
}

/// A deadline or interval in seconds: above 0, at most an hour.
pub fn secs(v: f64, what: &str) -> Result<Duration, RunError> {
    if v.is_finite() && v > 0.0 && v <= 3600.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(RunError::Usage(format!(
            "{what} {v} outside (0, 3600] seconds"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("123"), Ok(123));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }

    #[test]
    fn message_sizes_and_seconds_are_bounded() {
        assert_eq!(parse_message_size("8M"), Ok(8 << 20));
        assert_eq!(parse_message_size("16G"), Ok(16 << 30));
        assert!(parse_message_size("0")
            .unwrap_err()
            .to_string()
            .contains("at least 1 byte"));
        assert!(parse_message_size("17G")
            .unwrap_err()
            .to_string()
            .contains("16 GiB"));
        assert_eq!(parse_seconds_up_to_a_day("120"), Ok(120.0));
        for bad in ["0", "-1", "1e30", "inf", "NaN", "x"] {
            assert!(parse_seconds_up_to_a_day(bad).is_err(), "{bad}");
        }
    }
}
