//! Which wrapper where DDP fits: each FSDP2 wrapper the memory plan fits at the job's GPUs (on
//! CPU ranks every wrapper), predicted on the all-gather and reduce-scatter curves the reports
//! gave (none is swept for it: DDP's answer stands without them) with its own work at one GPU
//! where the node measured one, and its step where the node measured it
//! ([`ddpcheck_core::recommend::weigh_wrappers`]).

use ddpcheck_core::ddp::{DdpResult, DdpVariant, RunDevice, Wrapper};
use ddpcheck_core::recommend::{weigh_wrappers, ModelInput, Recommendation, WrapperRow};
use ddpcheck_core::step_time::fsdp::{predict_fsdp2, Fsdp2Inputs, Fsdp2Units, Overlap};
use ddpcheck_core::step_time::fsdp_own::one_gpu_own;

use super::Gathering;

const WEIGHED: [Wrapper; 4] = [
    Wrapper::Replicate,
    Wrapper::FsdpNoReshard,
    Wrapper::Hsdp,
    Wrapper::Fsdp,
];

impl Gathering<'_> {
    /// The FSDP2 runs of `model` at `world` GPUs the node measured, with their wrapper.
    pub(super) fn fsdp2_runs(&self, model: &ModelInput, world: u32) -> Vec<(Wrapper, &DdpResult)> {
        let name = model.name();
        self.m
            .ddp
            .iter()
            .filter(|(r, _)| r.model == name && r.world_size == world)
            .filter_map(|(r, _)| {
                let w = r.variant.parse::<DdpVariant>().ok()?.wrapper();
                w.is_fsdp2().then_some((w, r))
            })
            .collect()
    }

    /// Each wrapper's own work at one GPU the node measured: its step less its plain step.
    pub(super) fn fsdp2_own_measured(&self, model: &ModelInput) -> Vec<(Wrapper, f64)> {
        self.fsdp2_runs(model, 1)
            .into_iter()
            .filter_map(|(w, r)| {
                let plain = r.plain_reference.as_ref()?.step_time_median_s;
                Some((w, r.step_time_median_s - plain))
            })
            .collect()
    }

    /// Weighs the FSDP2 wrappers beside DDP's answer: on GPUs those the memory plan fits, on
    /// CPU ranks (no GPU memory to fit) all, their units read from a measured run's layout.
    pub(super) fn weigh_wrappers(&mut self, model: &ModelInput, rec: &mut Recommendation) {
        if rec.single_gpu.step_s <= 0.0 {
            return;
        }
        let Some((units, fitting)) = self.wrapper_units(model, rec) else {
            return;
        };
        let (curves, _) = self.fsdp2_curves_given(rec.gpus);
        let own_measured = self.fsdp2_own_measured(model);
        let copy = self.fsdp2_one_gpu_copy();
        let at_n = self.fsdp2_runs(model, rec.gpus);
        let plain = rec.single_gpu.step_s;
        let side_by_side = self.side_by_side_counted(model, rec.micro_batch, rec.gpus);
        // FSDP2 gathers the parameters in the dtype it computes in.
        let param_bytes = self.req.recipe.amp.compute_bytes();
        let mut rows = Vec::new();
        for w in fitting
            .into_iter()
            .filter(|w| w.refuses(rec.gpus).is_none())
        {
            let own = one_gpu_own(w, &own_measured, &units, param_bytes, copy.as_ref());
            let mut i = Fsdp2Inputs::new(w, rec.gpus, units.clone(), plain);
            i.param_bytes = param_bytes;
            i.own_one_gpu_s = own.as_ref().map_or(0.0, |o| o.seconds);
            i.overlap = Overlap::on(rec.device);
            i.side_by_side = side_by_side;
            let predicted = predict_fsdp2(&i, &curves).ok().map(|p| p.step_s);
            let measured = at_n
                .iter()
                .find(|(k, r)| *k == w && r.micro_batch == rec.micro_batch && r.accum == 1)
                .map(|(_, r)| r.step_time_median_s);
            let Some(step) = measured.or(predicted) else {
                continue;
            };
            rows.push(WrapperRow {
                wrapper: w,
                gpus: rec.gpus,
                predicted_step_s: predicted,
                measured_step_s: measured,
                speedup: f64::from(rec.gpus) * plain / step,
                measured: measured.is_some(),
                own_known: own.is_some(),
                own_how: own.map_or_else(|| "not measured (left out)".into(), |o| o.how),
            });
        }
        weigh_wrappers(rec, rows, self.req.recipe.amp);
    }

    /// FSDP2's units of the model and the wrappers that fit: on GPUs from the memory plan (its
    /// blocks, and the wrappers it fits at the job's GPUs); on CPU ranks every wrapper, the
    /// units from the parameters a measured run of the model registered.
    fn wrapper_units(
        &self,
        model: &ModelInput,
        rec: &Recommendation,
    ) -> Option<(Fsdp2Units, Vec<Wrapper>)> {
        if rec.device == RunDevice::Cpu {
            let name = model.name();
            let layout = self
                .m
                .ddp
                .iter()
                .filter(|(r, _)| r.model == name)
                .find_map(|(r, _)| r.param_layout.as_ref())?;
            return Some((Fsdp2Units::from_layout(layout), WEIGHED.to_vec()));
        }
        let plan = rec.memory.as_ref()?;
        let m = &plan.model;
        let layers = (m.params.saturating_sub(m.root))
            .checked_div(m.largest_block)
            .unwrap_or(0);
        let fits = WEIGHED
            .into_iter()
            .filter(|w| {
                plan.rows
                    .iter()
                    .any(|r| r.wrapper == *w && r.gpus == rec.gpus && r.fits != Some(false))
            })
            .collect();
        Some((Fsdp2Units::uniform(m.params, layers, m.largest_block), fits))
    }
}
