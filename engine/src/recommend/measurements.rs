//! What a recommendation rests on: the reports read from files (`--from`) or the daemon's
//! history, and the runs recommend made itself, sorted by what each gives the model.

use ddpcheck_core::collective::{Collective, Sweep};
use ddpcheck_core::ddp::{fill_scaling, DdpResult, Recipe};
use ddpcheck_core::recommend::ModelInput;
use ddpcheck_core::report::{
    BenchCollectivesReport, DdpReport, Header, PreflightReport, TopoReport,
};
use ddpcheck_core::saved;

use crate::runner::{RunError, Runner};

/// What the recommendation rests on, gathered from files, history or runs.
#[derive(Default)]
pub(super) struct Measurements {
    pub sweep: Option<(Sweep, Header)>,
    /// The runs of the newest `bench ddp` report that timed all-reduces alone in DDP's own
    /// process group before their steps, with its header.
    pub probed: Option<(Vec<DdpResult>, Header)>,
    pub preflight: Option<PreflightReport>,
    /// `topo --json`: the GPU links and memory, where no preflight gives them.
    pub topo: Option<TopoReport>,
    pub ddp: Vec<(DdpResult, Header)>,
    /// The all-gather and reduce-scatter sweeps of `bench collectives` reports (FSDP2's
    /// collectives), the newest of each collective and rank count last.
    pub fsdp2_sweeps: Vec<(Sweep, Header)>,
}

impl Measurements {
    pub(super) fn add_json(&mut self, text: &str, origin: &str) -> Result<(), RunError> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| RunError::Usage(format!("{origin}: not a ddpcheck JSON report: {e}")))?;
        let out_of_range = |e: saved::SavedError| RunError::Usage(format!("{origin}: {e}"));
        saved::check_schema_version(&v).map_err(out_of_range)?;
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let bad = |e: serde_json::Error| {
            RunError::Usage(format!("{origin}: unreadable {kind} report: {e}"))
        };
        match kind.as_str() {
            "preflight" => {
                let r: PreflightReport = serde_json::from_value(v).map_err(bad)?;
                saved::check_preflight(&r).map_err(out_of_range)?;
                if self.sweep.is_none() {
                    if let Some(s) = &r.all_reduce {
                        self.sweep = Some((s.clone(), r.header.clone()));
                    }
                }
                self.preflight = Some(r);
            }
            "topo" => self.topo = Some(serde_json::from_value(v).map_err(bad)?),
            "bench_collectives" => {
                let r: BenchCollectivesReport = serde_json::from_value(v).map_err(bad)?;
                saved::check_collectives(&r).map_err(out_of_range)?;
                // A full sweep (from small messages) beats the preflight's large-message one.
                if let Some(s) = r.all_reduce() {
                    self.sweep = Some((s.clone(), r.header.clone()));
                }
                let fsdp2 = [Collective::AllGather, Collective::ReduceScatter];
                for run in r.runs.iter().take(1) {
                    self.fsdp2_sweeps.extend(
                        run.run
                            .sweeps
                            .iter()
                            .filter(|s| fsdp2.contains(&s.op))
                            .map(|s| (s.clone(), r.header.clone())),
                    );
                }
            }
            "bench_ddp" => {
                let mut r: DdpReport = serde_json::from_value(v).map_err(bad)?;
                saved::check_ddp(&r).map_err(out_of_range)?;
                // The report's own pairing again (same speedups, no price: costs stay as
                // written), so reports written before `speedup_uncertainty` existed carry it too.
                fill_scaling(&mut r.results, None);
                self.add_ddp(r);
            }
            other => {
                return Err(RunError::Usage(format!(
                    "{origin}: report kind {other:?} carries no measurements for recommend (use check, topo, bench collectives or bench ddp --json)"
                )))
            }
        }
        Ok(())
    }

    /// Sets aside the runs of the model that ran another recipe than `recipe` (a run without
    /// one ran bf16 and DDP's defaults): they measured another training. Other models' runs
    /// stay (the network's curve and the calibration rest on them). Says what it set aside.
    pub(super) fn set_aside_other_recipes(
        &mut self,
        model: &ModelInput,
        recipe: &Recipe,
    ) -> Option<String> {
        let ModelInput::Spec { spec } = model else {
            return None;
        };
        let name = spec.name();
        let default = Recipe::default();
        let ran = |r: &DdpResult| r.recipe.as_ref().unwrap_or(&default).clone();
        let (kept, other): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ddp)
            .into_iter()
            .partition(|(r, _)| r.model != name || ran(r) == *recipe);
        self.ddp = kept;
        let (first, _) = other.first()?;
        Some(format!(
            "{} saved run(s) of {name} ran another recipe ({})",
            other.len(),
            ran(first).describe()
        ))
    }

    /// A `bench ddp` report's runs; those that timed the network before their steps replace
    /// the probes held so far (the newest report's count).
    pub(super) fn add_ddp(&mut self, r: DdpReport) {
        let probed: Vec<DdpResult> = r
            .results
            .iter()
            .filter(|x| x.all_reduce_probe.is_some())
            .cloned()
            .collect();
        if !probed.is_empty() {
            self.probed = Some((probed, r.header.clone()));
        }
        self.ddp
            .extend(r.results.into_iter().map(|x| (x, r.header.clone())));
    }
}

/// The node's stored measurements, newest last so they win where one kind replaces another.
pub(super) fn daemon_history(target: &dyn Runner, m: &mut Measurements) -> Result<(), RunError> {
    for kind in ["preflight", "bench_collectives", "bench_ddp"] {
        for json in target.history(kind, 5)? {
            m.add_json(&json, "daemon history")?;
        }
    }
    Ok(())
}
