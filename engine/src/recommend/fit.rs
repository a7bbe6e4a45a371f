//! Memory first, before any launch: where DDP does not fit one of the node's GPUs, no 1-GPU
//! launch is started (it would run out of memory) and the answer is the least sharding that
//! fits ([`ddpcheck_core::recommend::sharded_answer`]).

use std::time::Instant;

use ddpcheck_core::ddp::{DdpVariant, RunDevice};
use ddpcheck_core::memory;
use ddpcheck_core::memory::check::MeasuredPeak;
use ddpcheck_core::memory::PhaseRun;
use ddpcheck_core::num::len_u32;
use ddpcheck_core::recommend::{memory_model, sharded_answer, ModelInput};
use ddpcheck_core::report::{Header, ReportKind};

use super::measurements::Measurements;
use super::{Gathering, RecommendReport};

impl Gathering<'_> {
    /// The answer from memory alone where DDP does not fit one GPU of this node (its memory
    /// from the topology or a saved preflight); `None` where it fits, where the GPUs' memory is
    /// unknown, or on CPU ranks.
    pub(super) fn memory_first(
        &mut self,
        model: &ModelInput,
        started: Instant,
    ) -> Option<RecommendReport> {
        let a = self.req;
        if a.device == RunDevice::Cpu {
            return None;
        }
        let (_, gpu_bytes) = self.links();
        let gpu_bytes = gpu_bytes.filter(|b| *b > 0)?;
        let gpus = a.gpus.unwrap_or_else(|| self.node_gpu_count().max(1));
        let m = memory::with_phases(
            &memory_model(model, model.params(), a.micro_batch, a.recipe.amp),
            &measured_phases(&self.m, model),
        );
        let plan = memory::plan(&m, gpus, Some(gpu_bytes));
        if plan.ddp_fits != Some(false) {
            return None;
        }
        let h = self.node_header()?;
        let header = Header::new(
            ReportKind::Recommend,
            h.backend,
            h.backend_label.clone(),
            h.provenance.clone(),
        );
        let mut recommendation = sharded_answer(model, plan, &a.recipe, a.device);
        self.wrapper_step(model, &mut recommendation);
        Some(RecommendReport {
            header,
            recommendation,
            verify: Vec::new(),
            verify_gain: None,
            verify_network: None,
            verify_compute: Vec::new(),
            verify_powersgd: None,
            own_measurements: (!self.own.is_empty()).then(|| self.own.clone()),
            seconds: started.elapsed().as_secs_f64(),
            cpu_ranks: false,
            compile: None,
        })
    }

    /// The node's GPUs as its preflight or topology listed them (0 where neither did).
    fn node_gpu_count(&self) -> u32 {
        match (&self.m.preflight, &self.m.topo) {
            (Some(p), _) => len_u32(p.gpus.len()),
            (None, Some(t)) => len_u32(t.gpus.len()),
            (None, None) => 0,
        }
    }

    /// The header of what told the node's GPUs: its preflight or topology.
    fn node_header(&self) -> Option<&Header> {
        match (&self.m.preflight, &self.m.topo) {
            (Some(p), _) => Some(&p.header),
            (None, Some(t)) => Some(&t.header),
            (None, None) => None,
        }
    }
}

/// torch's peak of this node's 1-GPU run of `model` at `micro_batch` on GPUs: its unhooked DDP
/// run where there is one, else any 1-GPU run that reported one.
pub(super) fn measured_peak(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
) -> Option<MeasuredPeak> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    let runs = m.ddp.iter().map(|(r, _)| r).filter(|r| {
        r.model == name
            && r.world_size == 1
            && r.micro_batch == micro_batch
            && r.device == RunDevice::Cuda
            && r.max_memory_bytes.is_some()
    });
    let (mut best, mut rank) = (None, u8::MAX);
    for r in runs {
        let Ok(v) = r.variant.parse::<DdpVariant>() else {
            continue;
        };
        let this = match (
            v.wrapper().is_fsdp2(),
            v.plain_ddp_with(ddpcheck_core::ddp::CommHook::None),
        ) {
            (false, true) => 0,
            (false, false) => 1,
            (true, _) => 2,
        };
        if this < rank {
            rank = this;
            best = r.measured_peak();
        }
    }
    best
}

/// The node's 1-GPU runs of `model` on GPUs read at their phases, at any micro-batch (each
/// wrapper's activations scale linearly from the one its run measured at), in the order the
/// measurements hold them.
pub(super) fn measured_phases(m: &Measurements, model: &ModelInput) -> Vec<PhaseRun> {
    let name = model.name();
    m.ddp
        .iter()
        .map(|(r, _)| r)
        .filter(|r| {
            let same = match model {
                ModelInput::Spec { .. } => r.model == name,
                ModelInput::Params { params } => r.params == *params,
            };
            same && r.world_size == 1 && r.device == RunDevice::Cuda
        })
        .filter_map(|r| r.phase_run())
        .collect()
}
