//! The physical capacity of a path, from its parts.

/// One direction's data rate of a PCIe link after line encoding, bytes/s: GT/s per lane
/// (gen1 2.5, gen2 5, gen3 8, gen4 16, gen5 32) × encoding (8b/10b for gen1-2, 128b/130b for
/// gen3-5) × lanes / 8 (gen3 x16 = 15.75e9, gen4 x16 = 31.5e9, gen5 x16 = 63.0e9).
pub fn pcie_bytes_per_s(gen: u32, width: u32) -> Option<f64> {
    let (gts, efficiency) = match gen {
        1 => (2.5, 0.8),
        2 => (5.0, 0.8),
        3 => (8.0, 128.0 / 130.0),
        4 => (16.0, 128.0 / 130.0),
        5 => (32.0, 128.0 / 130.0),
        _ => return None,
    };
    (width > 0).then(|| gts * 1e9 * efficiency * f64::from(width) / 8.0)
}
