//! The measured facts a recommendation reads beside its step inputs, each with the run it rests
//! on: a launch's host-side facts, PowerSGD's compression compute at each rank, and what the
//! node's topology says about P2P over PCIe. Plain data every part of `recommend` reads, beneath
//! the input that carries them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ddp::HostFacts;
use crate::explain::consumer;
use crate::topology::{LinkClass, TopologyMatrix};

/// A launch's host-side facts and the run they come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostMeasured {
    pub facts: HostFacts,
    /// That run's median optimizer step, seconds, and its rank count.
    pub step_s: f64,
    pub world: u32,
    /// The run it comes from, for the citation.
    pub rests_on: String,
}

/// A PowerSGD rank's compression compute, as a 1-GPU launch measured it: its PowerSGD step
/// minus plain DDP's (the hook runs at world size one, with no bytes to save).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerSgdMeasured {
    pub rank: u32,
    pub compute_s: f64,
    /// The runs it comes from, for the citation.
    pub rests_on: String,
}

/// What the node's topology says about P2P over PCIe, in words.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct P2pRisk {
    /// NVML's refusal on the first PCIe pair that has one (`GPU0–GPU1 (PHB): NVML reports P2P
    /// read GPU_NOT_SUPPORTED on …, the GPU's product policy …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Why P2P over PCIe is a pair's transport under the measured environment on a card where it
    /// hangs or returns wrong values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspect: Option<String>,
}

impl P2pRisk {
    /// The risk on this topology of `model` GPUs under `env`; `None` where there is none.
    pub fn of(t: &TopologyMatrix, model: &str, env: &BTreeMap<String, String>) -> Option<P2pRisk> {
        let pairs = t.pairs();
        let refused = pairs
            .iter()
            .filter(|p| !p.link.is_nvlink() && p.link != LinkClass::X)
            .find_map(|p| {
                let (cap, r, k) = consumer::refusal_of(p.p2p_status)?;
                Some(format!(
                    "{}: NVML reports P2P {cap} {} on {model}, {}",
                    consumer::pair_name(p),
                    r.nvml_name(),
                    k.meaning(r)
                ))
            });
        let suspect =
            consumer::first_suspect(&pairs, model, env).map(|(pair, why)| format!("{pair}: {why}"));
        (refused.is_some() || suspect.is_some()).then_some(P2pRisk { refused, suspect })
    }
}
