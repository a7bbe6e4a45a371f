//! Profiles as data: the embedded `data/profiles.json`, its types, and its validation.
//!
//! The file is parsed once. Every number in it says where it comes from (a fact from a published
//! field report, NVIDIA's published figures or the H200 validation machines, or a sim
//! assumption); this module only checks that the data is coherent, it adds no numbers of its own.

use std::sync::OnceLock;

use ddpcheck_core::collective::Collective;
use ddpcheck_core::ddp::ModelSpec;
use ddpcheck_core::num::ToF64;
use ddpcheck_core::topology::{LinkClass, P2pCaps, P2pReason, P2pStatus};
use serde::Deserialize;

use crate::catalog_error::{CatalogError, ProfileProblem, RegimeProblem};

const PROFILES_JSON: &str = include_str!("../data/profiles.json");

/// The whole data file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    #[serde(default)]
    pub note: String,
    /// How collectives without their own curve follow the all-reduce curve.
    pub derive: Vec<DeriveRule>,
    pub gpu_models: Vec<GpuModel>,
    pub profiles: Vec<Profile>,
}

/// An op without its own curve takes the all-reduce curve scaled by these factors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeriveRule {
    pub op: Collective,
    pub busbw_scale: f64,
    pub alpha_scale: f64,
    #[serde(default)]
    pub note: String,
}

/// One GPU product: what NVML would report of it at idle.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    pub key: String,
    pub name: String,
    pub memory_total_bytes: u64,
    pub mem_bw_gbps: f64,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    pub ecc_enabled: bool,
    pub row_remapping: bool,
    pub mig_capable: bool,
    pub idle_temperature_c: u32,
    pub idle_power_w: f64,
    pub idle_sm_clock_mhz: u32,
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSlot {
    pub uuid: String,
    pub pci_bus_id: String,
    pub numa: u32,
    pub cpus: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2p {
    Ok,
    NotSupported,
}

/// NVML's peer-to-peer status of every pair for each capability, with where it comes from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pStatusSpec {
    pub read: P2pReason,
    pub write: P2pReason,
    pub atomics: P2pReason,
    pub nvlink: P2pReason,
    pub source: String,
}

impl P2pStatusSpec {
    pub fn caps(&self) -> P2pCaps {
        P2pCaps {
            read: self.read,
            write: self.write,
            atomics: self.atomics,
            nvlink: self.nvlink,
        }
    }
}

/// Which fabric a regime's traffic crosses: a degraded PCIe link slows only `pcie` regimes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    Nvlink,
    Pcie,
}

/// An environment condition: `var` is set to one of `any_of` (compared case-insensitively).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvCond {
    pub var: String,
    pub any_of: Vec<String>,
}

impl EnvCond {
    pub fn holds(&self, env: &[(String, String)]) -> bool {
        // The last setting of a variable wins, as in a shell.
        env.iter()
            .rev()
            .find(|(k, _)| *k == self.var)
            .map(|(_, v)| self.any_of.iter().any(|a| a.eq_ignore_ascii_case(v.trim())))
            .unwrap_or(false)
    }
}

/// One collective's curve at one communicator size.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurveSpec {
    pub op: Collective,
    pub ranks: u32,
    pub alpha_us: f64,
    /// (message bytes, observed busbw GB/s), ascending in bytes.
    pub points: Vec<(u64, f64)>,
    #[serde(default)]
    pub source: String,
}

/// An interconnect regime: the curves NCCL reaches under some environment.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regime {
    pub name: String,
    #[serde(default)]
    pub when: Vec<EnvCond>,
    #[serde(default)]
    pub unless: Vec<EnvCond>,
    pub path: Path,
    /// Rate at which gradient all-reduces progress while the backward pass runs, relative to
    /// an idle GPU (DDP overlap): 1 is perfect overlap, 0 none.
    pub overlap_rate: f64,
    #[serde(default)]
    pub overlap_source: String,
    pub collectives: Vec<CurveSpec>,
}

impl Regime {
    /// How many conditions this regime matches; `None` if it does not apply.
    pub fn matches(&self, env: &[(String, String)]) -> Option<usize> {
        if self.when.iter().all(|c| c.holds(env)) && !self.unless.iter().any(|c| c.holds(env)) {
            Some(self.when.len())
        } else {
            None
        }
    }

    /// The curve for `op` at the communicator size nearest `ranks` (ties go to the smaller).
    pub fn curve(&self, op: Collective, ranks: u32) -> Option<&CurveSpec> {
        self.collectives
            .iter()
            .filter(|c| c.op == op)
            .min_by_key(|c| (c.ranks.abs_diff(ranks), c.ranks))
    }
}

/// A preset's measured (or derived) compute time on one GPU.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTime {
    pub model: String,
    pub micro_batch: u32,
    /// Forward + backward of one micro-batch, ms.
    pub micro_ms: f64,
    /// Once per optimizer step (optimizer, zero_grad), ms.
    pub step_overhead_ms: f64,
    #[serde(default)]
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compute {
    /// Achieved training rate for decoders not in `models`.
    pub decoder_tflops: f64,
    /// Achieved rate for MLPs.
    pub mlp_tflops: f64,
    /// Launch overhead per micro-batch for models not in `models`, ms.
    pub fixed_ms_per_micro: f64,
    /// Optimizer step cost per parameter for models not in `models`, ns.
    pub optimizer_ns_per_param: f64,
    #[serde(default)]
    pub note: String,
    #[serde(default)]
    pub models: Vec<ModelTime>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub gpu_model: String,
    pub gpus: Vec<GpuSlot>,
    /// Class of every GPU pair, `nvidia-smi topo -m` vocabulary.
    pub pair_link: String,
    pub p2p: P2p,
    /// Every capability's status with its reason, where the profile's source gives them.
    #[serde(default)]
    pub p2p_status: Option<P2pStatusSpec>,
    pub nvlinks_active: u32,
    /// NVSwitch chips of the node (0: none), and where the count comes from.
    #[serde(default)]
    pub nvswitches: u32,
    #[serde(default)]
    pub nvswitches_source: String,
    /// The node is a virtual machine (the hypervisor flag, GPUs on the virtual root bus, no NUMA
    /// node), as the `vm` fault makes any profile; `vm_source` says where that comes from.
    #[serde(default)]
    pub vm: bool,
    #[serde(default)]
    pub vm_source: String,
    pub driver_version: String,
    pub cuda_driver_version: String,
    pub cuda_runtime_version: String,
    pub nccl_version: String,
    /// Reported communicator creation time, seconds (reported, never slept).
    pub nccl_init_seconds: f64,
    /// The first regime is the default (no environment); others are chosen by environment.
    pub regimes: Vec<Regime>,
    pub compute: Compute,
}

impl Profile {
    /// The regime an environment selects: the applicable one with the most matched conditions,
    /// the first listed on a tie.
    pub fn regime(&self, env: &[(String, String)]) -> &Regime {
        let mut best: Option<(&Regime, usize)> = None;
        for r in &self.regimes {
            if let Some(n) = r.matches(env) {
                if best.map(|(_, b)| n > b).unwrap_or(true) {
                    best = Some((r, n));
                }
            }
        }
        // Validation guarantees a first regime without conditions, so `best` is always set.
        best.map(|(r, _)| r).unwrap_or(&self.regimes[0])
    }

    pub fn link_class(&self) -> LinkClass {
        self.pair_link.parse().unwrap_or(LinkClass::Sys)
    }
}

impl Catalog {
    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    pub fn gpu_model(&self, key: &str) -> Option<&GpuModel> {
        self.gpu_models.iter().find(|m| m.key == key)
    }

    pub fn derive_rule(&self, op: Collective) -> Option<&DeriveRule> {
        self.derive.iter().find(|d| d.op == op)
    }

    /// Checks everything the simulation relies on, so that no lookup can fail later.
    pub fn validate(&self) -> Result<(), CatalogError> {
        for op in Collective::ALL {
            if op != Collective::AllReduce && self.derive_rule(op).is_none() {
                return Err(CatalogError::NoDeriveRule(op));
            }
        }
        for d in &self.derive {
            if !pos(d.busbw_scale) || !pos(d.alpha_scale) {
                return Err(CatalogError::DeriveScale(d.op));
            }
        }
        for m in &self.gpu_models {
            if !pos(m.mem_bw_gbps) || m.memory_total_bytes == 0 || m.pcie_gen == 0 {
                return Err(CatalogError::GpuModelZero(m.key.clone()));
            }
        }
        let mut uuids = std::collections::BTreeSet::new();
        for (i, p) in self.profiles.iter().enumerate() {
            let at = |problem| CatalogError::Profile {
                profile: p.name.clone(),
                problem,
            };
            if self.profiles[..i].iter().any(|q| q.name == p.name) {
                return Err(at(ProfileProblem::DuplicateName));
            }
            if self.gpu_model(&p.gpu_model).is_none() {
                return Err(at(ProfileProblem::UnknownGpuModel(p.gpu_model.clone())));
            }
            check_profile(p, &mut uuids).map_err(at)?;
        }
        Ok(())
    }
}

fn pos(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// One profile's GPUs, links, regimes and compute rates; `uuids` holds every profile's GPUs
/// seen so far (a UUID names one GPU in the whole catalog).
fn check_profile(
    p: &Profile,
    uuids: &mut std::collections::BTreeSet<String>,
) -> Result<(), ProfileProblem> {
    if p.gpus.len() < 2 {
        return Err(ProfileProblem::TooFewGpus);
    }
    for g in &p.gpus {
        if !uuids.insert(g.uuid.clone()) {
            return Err(ProfileProblem::UuidTwice(g.uuid.clone()));
        }
        if !is_uuid(&g.uuid) {
            return Err(ProfileProblem::NotUuid(g.uuid.clone()));
        }
    }
    match p.pair_link.parse::<LinkClass>() {
        Ok(LinkClass::X) | Err(_) => return Err(ProfileProblem::PairLink(p.pair_link.clone())),
        Ok(_) => {}
    }
    if let Some(st) = &p.p2p_status {
        let read_ok = st.read.summary() == P2pStatus::Ok;
        if read_ok != (p.p2p == P2p::Ok) || st.source.is_empty() {
            return Err(ProfileProblem::P2pStatus);
        }
    }
    if p.vm && p.vm_source.is_empty() {
        return Err(ProfileProblem::VmSource);
    }
    if !pos(p.nccl_init_seconds) {
        return Err(ProfileProblem::NcclInit);
    }
    match p.regimes.first() {
        Some(r) if r.when.is_empty() && r.unless.is_empty() => {}
        _ => return Err(ProfileProblem::FirstRegime),
    }
    for r in &p.regimes {
        check_regime(r, p.gpus.len()).map_err(|problem| ProfileProblem::Regime {
            regime: r.name.clone(),
            problem,
        })?;
    }
    check_compute(&p.compute)
}

/// One regime's overlap and curves, on a node of `gpus` GPUs.
fn check_regime(r: &Regime, gpus: usize) -> Result<(), RegimeProblem> {
    if !(r.overlap_rate.is_finite() && (0.0..=1.0).contains(&r.overlap_rate)) {
        return Err(RegimeProblem::Overlap);
    }
    if !r.collectives.iter().any(|c| c.op == Collective::AllReduce) {
        return Err(RegimeProblem::NoAllReduce);
    }
    for c in &r.collectives {
        if c.ranks < 2 || c.ranks as usize > gpus {
            return Err(RegimeProblem::Ranks {
                op: c.op,
                ranks: c.ranks,
            });
        }
        if !pos(c.alpha_us) || c.points.is_empty() {
            return Err(RegimeProblem::EmptyCurve(c.op));
        }
        let factor = c.op.busbw_factor(c.ranks);
        if c.points.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(RegimeProblem::NotAscending(c.op));
        }
        for (bytes, busbw) in &c.points {
            let t_us = bytes.to_f64() * factor / (busbw * 1e3);
            if !pos(*busbw) || t_us <= c.alpha_us {
                return Err(RegimeProblem::FasterThanAlpha {
                    op: c.op,
                    bytes: *bytes,
                    busbw: *busbw,
                });
            }
        }
    }
    Ok(())
}

/// The compute rates and every model timed on the profile.
fn check_compute(cp: &Compute) -> Result<(), ProfileProblem> {
    if !pos(cp.decoder_tflops)
        || !pos(cp.mlp_tflops)
        || cp.fixed_ms_per_micro < 0.0
        || !pos(cp.optimizer_ns_per_param)
    {
        return Err(ProfileProblem::ComputeRates);
    }
    for m in &cp.models {
        if m.model.parse::<ModelSpec>().is_err() {
            return Err(ProfileProblem::UnknownModel(m.model.clone()));
        }
        if m.micro_batch == 0 || !pos(m.micro_ms) || m.step_overhead_ms < 0.0 {
            return Err(ProfileProblem::ModelTime(m.model.clone()));
        }
    }
    Ok(())
}

/// `GPU-` then 8-4-4-4-12 hex digits, as NVML prints a UUID.
fn is_uuid(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("GPU-") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The parsed, validated catalog; `Err` carries why the embedded data is unusable.
pub fn catalog() -> Result<&'static Catalog, CatalogError> {
    static CATALOG: OnceLock<Result<Catalog, CatalogError>> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            let c: Catalog = serde_json::from_str(PROFILES_JSON)
                .map_err(|e| CatalogError::Parse(e.to_string()))?;
            c.validate()?;
            Ok(c)
        })
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_data_parses_and_validates() {
        let c = catalog().unwrap();
        assert_eq!(c.profiles.len(), 13);
        assert!(!c.note.is_empty());
        for p in &c.profiles {
            assert!(p.driver_version.ends_with("(sim)"), "{}", p.name);
            assert!(p.nccl_version.ends_with("(sim)"), "{}", p.name);
            assert!(p.cuda_driver_version.ends_with("(sim)"), "{}", p.name);
        }
    }

    /// A fresh copy of the embedded catalog, to break.
    fn fresh() -> Catalog {
        serde_json::from_str(PROFILES_JSON).unwrap()
    }

    #[test]
    fn a_broken_catalog_names_the_profile_the_regime_and_the_curve() {
        let mut c = fresh();
        let name = c.profiles[0].name.clone();
        c.profiles[1].name = name.clone();
        assert_eq!(
            c.validate(),
            Err(CatalogError::Profile {
                profile: name,
                problem: ProfileProblem::DuplicateName
            })
        );
        let mut c = fresh();
        let regime = &mut c.profiles[0].regimes[0];
        let curve = &mut regime.collectives[0];
        curve.points.reverse();
        let (op, regime_name) = (curve.op, regime.name.clone());
        let e = c.validate().unwrap_err();
        assert!(
            matches!(&e, CatalogError::Profile { problem: ProfileProblem::Regime { regime, problem: RegimeProblem::NotAscending(o) }, .. } if *regime == regime_name && *o == op),
            "{e:?}"
        );
        assert!(e.to_string().ends_with("points not ascending"), "{e}");
    }

    #[test]
    fn uuid_shape() {
        assert!(is_uuid("GPU-5a1b0001-0000-4000-8000-000000000003"));
        assert!(!is_uuid("GPU-5a1b0001-0000-4000-8000-00000000003"));
        assert!(!is_uuid("5a1b0001-0000-4000-8000-000000000003"));
    }

    #[test]
    fn regime_selection_by_environment() {
        let c = catalog().unwrap();
        let env = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let h = c.profile("h200x2-nvlink").unwrap();
        assert_eq!(h.regime(&[]).name, "nvlink");
        assert_eq!(
            h.regime(&env(&[("NCCL_P2P_DISABLE", "1")])).name,
            "shared-memory"
        );
        assert_eq!(
            h.regime(&env(&[
                ("NCCL_SHM_DISABLE", "1"),
                ("NCCL_P2P_DISABLE", "1")
            ]))
            .name,
            "host-network"
        );
        assert_eq!(h.regime(&env(&[("NCCL_SHM_DISABLE", "1")])).name, "nvlink");
        let a = c.profile("a6000x4-phb").unwrap();
        assert_eq!(
            a.regime(&env(&[("NCCL_P2P_LEVEL", "sys")])).name,
            "p2p-forced-across-host-bridge"
        );
        // P2P disabled wins over a forced level; a later setting overrides an earlier one.
        assert_eq!(
            a.regime(&env(&[
                ("NCCL_P2P_LEVEL", "SYS"),
                ("NCCL_P2P_DISABLE", "1")
            ]))
            .name,
            "pcie-host-bridge"
        );
        assert_eq!(
            a.regime(&env(&[
                ("NCCL_P2P_LEVEL", "SYS"),
                ("NCCL_P2P_LEVEL", "LOC")
            ]))
            .name,
            "pcie-host-bridge"
        );
    }

    #[test]
    fn nearest_curve_by_ranks() {
        let c = catalog().unwrap();
        let r = c.profile("h200x8-nvswitch").unwrap().regime(&[]);
        assert_eq!(r.curve(Collective::AllReduce, 8).unwrap().ranks, 8);
        assert_eq!(r.curve(Collective::AllReduce, 3).unwrap().ranks, 2);
        assert_eq!(r.curve(Collective::AllReduce, 6).unwrap().ranks, 4);
        assert!(r.curve(Collective::AllGather, 8).is_none());
    }
}
