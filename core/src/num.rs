//! Counts as floating point, for the statistics and the step-time model, with why the
//! conversion is sound: the cast lints stay strict everywhere else.

/// A count (bytes, parameters, elements, launches, indices) as `f64`.
pub trait ToF64 {
    /// Exact below 2^53 (about 9·10^15), beyond any count here; above it the nearest `f64`,
    /// which a ratio or a mean tolerates.
    fn to_f64(self) -> f64;
}

impl ToF64 for u64 {
    #[allow(clippy::cast_precision_loss)] // exact below 2^53, see the trait
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl ToF64 for usize {
    #[allow(clippy::cast_precision_loss)] // exact below 2^53, see the trait
    fn to_f64(self) -> f64 {
        self as f64
    }
}

/// A non-negative quantity rounded down to a whole count. Rust's float-to-integer casts
/// saturate: negative and NaN give 0, beyond `u64::MAX` gives `u64::MAX`.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // saturating, see above
pub fn floor_u64(x: f64) -> u64 {
    x as u64
}

/// A length as `u32`, saturating (no list here holds four billion entries).
pub fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
