//! The collective timing model: time = α + bytes·factor / B(size), with B read from a profile's
//! regime and bent by faults. Deterministic; no wall time involved.

use ddpcheck_core::collective::Collective;
use ddpcheck_core::num::{len_u32, ToF64};
use ddpcheck_core::topology::LinkClass;

use crate::fault::{self, Fault};
use crate::profile::{Catalog, Path, Profile, Regime};

/// One rank "collective": a device-local copy (read and write) after a launch.
const LOCAL_ALPHA_US: f64 = 5.0;

/// The interconnect as a communicator of `ranks` GPUs sees it under one environment.
pub struct Fabric<'a> {
    catalog: &'a Catalog,
    pub regime: &'a Regime,
    pub ranks: u32,
    /// Multiplies every bandwidth (slow-link).
    bw_scale: f64,
    /// Upper bound on bandwidth over PCIe paths (degraded-pcie), GB/s.
    pcie_cap_gbps: Option<f64>,
    mem_bw_gbps: f64,
}

impl<'a> Fabric<'a> {
    /// `gpus` are the profile indices of the communicator's GPUs.
    pub fn new(
        catalog: &'a Catalog,
        profile: &'a Profile,
        faults: &[Fault],
        env: &[(String, String)],
        gpus: &[usize],
    ) -> Self {
        let model = catalog.gpu_model(&profile.gpu_model);
        let gen_max = model.map(|m| m.pcie_gen).unwrap_or(3);
        let regime = profile.regime(env);
        let bw_scale = if faults.contains(&Fault::SlowLink) {
            fault::SLOW_LINK_FACTOR
        } else {
            1.0
        } * platform_scale(profile, regime, faults, gpus);
        // The ring is as fast as its narrowest link: the degraded GPU caps the whole communicator.
        let pcie_cap_gbps = (faults.contains(&Fault::DegradedPcie)
            && gpus.contains(&fault::DEGRADED_GPU))
        .then(|| fault::pcie_usable_gbps(degraded_gen(gen_max), fault::DEGRADED_WIDTH));
        Fabric {
            catalog,
            regime,
            ranks: len_u32(gpus.len()),
            bw_scale,
            pcie_cap_gbps,
            mem_bw_gbps: model.map(|m| m.mem_bw_gbps).unwrap_or(500.0),
        }
    }

    /// Mean time of one collective of `bytes` (nccl-tests' size), microseconds.
    pub fn time_us(&self, op: Collective, bytes: u64) -> f64 {
        let b = bytes.to_f64();
        if self.ranks < 2 {
            return LOCAL_ALPHA_US + 2.0 * b / (self.mem_bw_gbps * 1e3);
        }
        let (alpha_us, busbw) = self.curve_at(op, bytes);
        alpha_us + b * op.busbw_factor(self.ranks) / (busbw * 1e3)
    }

    /// α and the bandwidth term B at a size, after derivation and faults.
    fn curve_at(&self, op: Collective, bytes: u64) -> (f64, f64) {
        let (spec, busbw_scale, alpha_scale) = match self.regime.curve(op, self.ranks) {
            Some(c) => (Some(c), 1.0, 1.0),
            None => {
                let rule = self.catalog.derive_rule(op);
                (
                    self.regime.curve(Collective::AllReduce, self.ranks),
                    rule.map(|r| r.busbw_scale).unwrap_or(1.0),
                    rule.map(|r| r.alpha_scale).unwrap_or(1.0),
                )
            }
        };
        // Validation guarantees an all-reduce curve in every regime.
        let Some(spec) = spec else {
            return (LOCAL_ALPHA_US, 1.0);
        };
        let factor = spec.op.busbw_factor(spec.ranks);
        // Invert each observed point through α: the bandwidth term that reproduces it exactly.
        let knots: Vec<(f64, f64)> = spec
            .points
            .iter()
            .map(|&(s, obs)| {
                let s = s.to_f64();
                let t_bw_us = s * factor / (obs * 1e3) - spec.alpha_us;
                (s.ln(), s * factor / (t_bw_us * 1e3))
            })
            .collect();
        let mut bw = interp_log(&knots, bytes.max(1).to_f64().ln()) * busbw_scale * self.bw_scale;
        if self.regime.path == Path::Pcie {
            if let Some(cap) = self.pcie_cap_gbps {
                bw = bw.min(cap);
            }
        }
        (spec.alpha_us * alpha_scale, bw)
    }
}

/// What the platform faults leave of a regime's bandwidth: ACS and a translating IOMMU slow P2P
/// over PCIe (the unconditional regime of a PCIe pair: P2P where the link allows it); NVLinks
/// down slow an NVLink regime of the GPU that lost them.
fn platform_scale(profile: &Profile, regime: &Regime, faults: &[Fault], gpus: &[usize]) -> f64 {
    let link = profile.link_class();
    let pcie_p2p = regime.path == Path::Pcie && regime.when.is_empty() && !link.is_nvlink();
    let mut scale = 1.0;
    if faults.contains(&Fault::Acs) && pcie_p2p && matches!(link, LinkClass::Pix | LinkClass::Pxb) {
        scale *= fault::ACS_FACTOR;
    }
    if faults.contains(&Fault::IommuTranslated) && pcie_p2p {
        scale *= fault::IOMMU_FACTOR;
    }
    if faults.contains(&Fault::NvlinkDown)
        && regime.path == Path::Nvlink
        && gpus.contains(&fault::NVLINK_DOWN_GPU)
        && profile.nvlinks_active > 0
    {
        scale *= f64::from(fault::nvlinks_left(profile.nvlinks_active))
            / f64::from(profile.nvlinks_active);
    }
    scale
}

/// degraded-pcie: the link also trained one generation down (not below gen1).
pub fn degraded_gen(gen_max: u32) -> u32 {
    gen_max.saturating_sub(1).max(1)
}

/// Linear in ln(size) between knots, flat beyond the ends.
fn interp_log(knots: &[(f64, f64)], x: f64) -> f64 {
    let (Some(first), Some(last)) = (knots.first(), knots.last()) else {
        return 1.0;
    };
    if x <= first.0 {
        return first.1;
    }
    if x >= last.0 {
        return last.1;
    }
    knots
        .windows(2)
        .find(|w| x <= w[1].0)
        .map(|w| w[0].1 + (x - w[0].0) / (w[1].0 - w[0].0) * (w[1].1 - w[0].1))
        .unwrap_or(last.1)
}

/// A small deterministic spread (±0.4%) so tables look measured without making tests flaky.
pub fn jitter(key: &str) -> f64 {
    // FNV-1a: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ((h % 10_001).to_f64() / 10_000.0 * 2.0 - 1.0) * 0.004
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::catalog;

    fn busbw(f: &Fabric<'_>, op: Collective, bytes: u64) -> f64 {
        bytes.to_f64() / f.time_us(op, bytes) / 1e3 * op.busbw_factor(f.ranks)
    }

    #[test]
    fn reproduces_points_and_falls_at_small_sizes() {
        let c = catalog().unwrap();
        let p = c.profile("h200x2-nvlink").unwrap();
        let f = Fabric::new(c, p, &[], &[], &[0, 1]);
        assert!((busbw(&f, Collective::AllReduce, 8 << 20) - 173.0).abs() < 1e-6);
        assert!((busbw(&f, Collective::AllReduce, 1 << 30) - 327.0).abs() < 1e-6);
        let small = busbw(&f, Collective::AllReduce, 64 << 10);
        assert!(small < 20.0, "{small}");
        // Above the last point the bandwidth term is flat, so busbw only creeps up.
        let big = busbw(&f, Collective::AllReduce, 4 << 30);
        assert!(big > 327.0 && big < 330.0, "{big}");
    }

    #[test]
    fn derived_ops_follow_all_reduce() {
        let c = catalog().unwrap();
        let p = c.profile("h200x2-nvlink").unwrap();
        let f = Fabric::new(c, p, &[], &[], &[0, 1]);
        let ar = busbw(&f, Collective::AllReduce, 1 << 30);
        let ag = busbw(&f, Collective::AllGather, 1 << 30);
        let a2a = busbw(&f, Collective::AllToAll, 1 << 30);
        assert!((ag / ar - 1.0).abs() < 0.01, "{ag} {ar}");
        assert!((a2a / ar - 0.75).abs() < 0.01, "{a2a} {ar}");
    }

    #[test]
    fn faults_bend_the_curve() {
        let c = catalog().unwrap();
        let a = c.profile("a6000x4-phb").unwrap();
        let all = [0, 1, 2, 3];
        let base = busbw(
            &Fabric::new(c, a, &[], &[], &all),
            Collective::AllReduce,
            1 << 30,
        );
        let slow = busbw(
            &Fabric::new(c, a, &[Fault::SlowLink], &[], &all),
            Collective::AllReduce,
            1 << 30,
        );
        assert!((slow / base - 0.3).abs() < 0.01);
        // gen2 x8 carries 4 GB/s raw, 3.2 usable: below the 4.3 the ring reaches.
        let deg = busbw(
            &Fabric::new(c, a, &[Fault::DegradedPcie], &[], &all),
            Collective::AllReduce,
            1 << 30,
        );
        assert!((deg - 3.2).abs() < 0.05, "{deg}");
        // Without GPU 1 in the communicator the degraded link is not on the path.
        let without = busbw(
            &Fabric::new(c, a, &[Fault::DegradedPcie], &[], &[0, 2]),
            Collective::AllReduce,
            1 << 30,
        );
        assert!((without - 3.9).abs() < 0.05, "{without}");
        // NVLink traffic does not cross the degraded PCIe link.
        let h = c.profile("h200x2-nvlink").unwrap();
        let nv = busbw(
            &Fabric::new(c, h, &[Fault::DegradedPcie], &[], &[0, 1]),
            Collective::AllReduce,
            1 << 30,
        );
        assert!((nv - 327.0).abs() < 0.1, "{nv}");
    }

    #[test]
    fn jitter_is_small_and_stable() {
        for k in ["a", "b", "all_reduce|8388608"] {
            assert!(jitter(k).abs() <= 0.004);
            assert_eq!(jitter(k), jitter(k));
        }
    }
}
