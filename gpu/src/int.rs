//! Integer conversions at the GPU libraries' boundary (C `int` ranks, `size_t` counts),
//! saturating where a value cannot fit: no count or rank here comes near those limits.

use std::ffi::c_int;

/// An element or byte count as `size_t`: lossless on the 64-bit targets CUDA supports.
pub fn size_t(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A rank, rank count or buffer length as C `int`, as NCCL and CUDA take them.
pub fn c_int_of<T: TryInto<c_int>>(n: T) -> c_int {
    n.try_into().unwrap_or(c_int::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_range_values_pass_through_and_others_saturate() {
        assert_eq!(size_t(1 << 40), 1usize << 40);
        assert_eq!(c_int_of(8u32), 8);
        assert_eq!(c_int_of(64usize), 64);
        assert_eq!(c_int_of(u32::MAX), c_int::MAX);
    }
}
