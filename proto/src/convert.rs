//! Protobuf <-> engine parameters, one conversion each way: the CLI's gRPC runner turns the
//! parameters into requests (`From`), the daemon turns requests back into parameters
//! (`TryFrom`), refusing what it must not run and filling the defaults an unset field means.
//!
//! The parameter types live in core (`core::params`, `core::cluster::PhaseCall`; a DDP
//! benchmark's `core::ddp::DdpRequest` converts in `ddp_request`), not in the engine, so that
//! proto can name them while dependencies keep pointing one way: core <- proto <- engine <-
//! daemon, cli.

use std::collections::HashMap;
use std::time::Duration;

use ddpcheck_core::backend::CollectiveRequest;
use ddpcheck_core::cluster::{ClusterJob, Phase, PhaseCall, MAX_RENDEZVOUS};
use ddpcheck_core::collective::Collective;
use ddpcheck_core::params::{or_default, CollectiveParams, ExplainParams, PreflightParams};
use ddpcheck_core::ProbeError;

use crate::v1;

/// A request the daemon refuses (gRPC INVALID_ARGUMENT), with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Upper bound of any deadline a caller may ask for.
pub const MAX_DEADLINE_S: f64 = 3600.0;

/// Longest GPU selection a preflight or explain request may carry.
const MAX_GPU_SELECTION: usize = 4096;

/// Most `env_ab` candidates one collective benchmark may measure.
const MAX_ENV_CANDIDATES: usize = 8;

/// A deadline in seconds; zero (unset) means `default`.
pub fn deadline(secs: f64, default: f64) -> Result<Duration, Invalid> {
    if secs == 0.0 {
        return Ok(Duration::from_secs_f64(default));
    }
    // Below a nanosecond a deadline rounds to zero, which no run can meet.
    if !(1e-9..=MAX_DEADLINE_S).contains(&secs) {
        return Err(Invalid(format!(
            "deadline_seconds {secs} outside (0, {MAX_DEADLINE_S}]"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// How long a preflight waits for a busy node: zero (unset) not at all, else within
/// (0, [`MAX_DEADLINE_S`]].
fn wait_if_busy(secs: f64) -> Result<Option<Duration>, Invalid> {
    if secs == 0.0 {
        return Ok(None);
    }
    deadline(secs, 0.0)
        .map(Some)
        .map_err(|e| Invalid(e.0.replace("deadline_seconds", "wait_if_busy_seconds")))
}

/// NCCL variables of a request, in a fixed (sorted) order.
pub(crate) fn env_pairs(m: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort();
    v
}

impl From<&PreflightParams> for v1::PreflightRequest {
    fn from(p: &PreflightParams) -> Self {
        v1::PreflightRequest {
            gpus: p.gpus.clone(),
            min_bytes: p.min_bytes,
            max_bytes: p.max_bytes,
            iters: p.iters,
            warmup_iters: p.warmup_iters,
            deadline_seconds: p.deadline.map(|d| d.as_secs_f64()).unwrap_or(0.0),
            inject_hang: p.inject_hang,
            skip_host_copies: p.skip_host_copies,
            wait_if_busy_seconds: p.wait_if_busy.map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

/// Sizes and counts stay zero (the engine's defaults); an unset deadline is 30 s.
impl TryFrom<v1::PreflightRequest> for PreflightParams {
    type Error = Invalid;

    fn try_from(req: v1::PreflightRequest) -> Result<Self, Invalid> {
        if req.gpus.len() > MAX_GPU_SELECTION {
            return Err(Invalid(format!(
                "gpus selection longer than {MAX_GPU_SELECTION} characters"
            )));
        }
        Ok(PreflightParams {
            gpus: req.gpus,
            min_bytes: req.min_bytes,
            max_bytes: req.max_bytes,
            iters: req.iters,
            warmup_iters: req.warmup_iters,
            deadline: Some(deadline(req.deadline_seconds, 30.0)?),
            inject_hang: req.inject_hang,
            skip_host_copies: req.skip_host_copies,
            wait_if_busy: wait_if_busy(req.wait_if_busy_seconds)?,
        })
    }
}

impl From<&CollectiveParams> for v1::BenchCollectivesRequest {
    fn from(p: &CollectiveParams) -> Self {
        v1::BenchCollectivesRequest {
            ops: p.ops.iter().map(|o| o.name().to_string()).collect(),
            gpus: p.gpus.clone(),
            min_bytes: p.min_bytes,
            max_bytes: p.max_bytes,
            step_factor: u32::try_from(p.step_factor).unwrap_or(u32::MAX),
            iters: p.iters,
            warmup_iters: p.warmup_iters,
            in_place: p.in_place,
            check: p.check,
            env_ab: p
                .env_ab
                .iter()
                .map(|c| v1::EnvCandidate {
                    env: c.iter().cloned().collect(),
                })
                .collect(),
            deadline_seconds: p.deadline.as_secs_f64(),
        }
    }
}

/// Unset (zero) fields take `CollectiveParams::default()`'s values; no ops means all-reduce.
impl TryFrom<v1::BenchCollectivesRequest> for CollectiveParams {
    type Error = Invalid;

    fn try_from(req: v1::BenchCollectivesRequest) -> Result<Self, Invalid> {
        let d = CollectiveParams::default();
        let ops = if req.ops.is_empty() {
            d.ops.clone()
        } else {
            req.ops
                .iter()
                .map(|o| o.parse::<Collective>().map_err(|e| Invalid(e.to_string())))
                .collect::<Result<Vec<_>, _>>()?
        };
        if req.env_ab.len() > MAX_ENV_CANDIDATES {
            return Err(Invalid(format!(
                "at most {MAX_ENV_CANDIDATES} env_ab candidates"
            )));
        }
        Ok(CollectiveParams {
            ops,
            gpus: req.gpus,
            min_bytes: or_default(req.min_bytes, d.min_bytes),
            max_bytes: or_default(req.max_bytes, d.max_bytes),
            step_factor: or_default(u64::from(req.step_factor), d.step_factor),
            iters: or_default(req.iters, d.iters),
            warmup_iters: or_default(req.warmup_iters, d.warmup_iters),
            in_place: req.in_place,
            check: req.check,
            deadline: deadline(req.deadline_seconds, d.deadline.as_secs_f64())?,
            env_ab: req.env_ab.iter().map(|c| env_pairs(&c.env)).collect(),
        })
    }
}

impl From<&ExplainParams> for v1::ExplainRequest {
    fn from(p: &ExplainParams) -> Self {
        v1::ExplainRequest {
            gpus: p.gpus.clone(),
            max_bytes: p.max_bytes,
            deadline_seconds: p.deadline.as_secs_f64(),
            ab: p.ab,
        }
    }
}

/// Unset (zero) fields take `ExplainParams::default()`'s values: 256 MiB, 60 s per pair.
impl TryFrom<v1::ExplainRequest> for ExplainParams {
    type Error = Invalid;

    fn try_from(req: v1::ExplainRequest) -> Result<Self, Invalid> {
        let d = ExplainParams::default();
        if req.gpus.len() > MAX_GPU_SELECTION {
            return Err(Invalid(format!(
                "gpus selection longer than {MAX_GPU_SELECTION} characters"
            )));
        }
        if req.max_bytes > CollectiveRequest::MAX_BYTES {
            return Err(Invalid(format!(
                "max_bytes {} above the {} byte bound",
                req.max_bytes,
                CollectiveRequest::MAX_BYTES
            )));
        }
        Ok(ExplainParams {
            gpus: req.gpus,
            max_bytes: or_default(req.max_bytes, d.max_bytes),
            deadline: deadline(req.deadline_seconds, d.deadline.as_secs_f64())?,
            ab: req.ab,
        })
    }
}

impl From<&PhaseCall> for v1::ClusterCollectiveRequest {
    fn from(c: &PhaseCall) -> Self {
        let j = &c.job;
        v1::ClusterCollectiveRequest {
            phase: c.phase.as_str().into(),
            run_id: j.run_id.clone(),
            rank: j.rank,
            world_nodes: j.world_nodes,
            gpus_per_node: j.gpus_per_node,
            rendezvous: c.rendezvous.clone(),
            min_bytes: j.min_bytes,
            max_bytes: j.max_bytes,
            iters: j.iters,
            deadline_seconds: j.deadline.as_secs_f64(),
        }
    }
}

/// An unset deadline is 30 s; the job must pass `ClusterJob::validate` (no other defaults: the
/// caller states every field of a cluster run).
impl TryFrom<v1::ClusterCollectiveRequest> for PhaseCall {
    type Error = Invalid;

    fn try_from(req: v1::ClusterCollectiveRequest) -> Result<Self, Invalid> {
        let phase = req
            .phase
            .parse::<Phase>()
            .map_err(|e| Invalid(e.to_string()))?;
        if req.rendezvous.len() > MAX_RENDEZVOUS
            || req.rendezvous.iter().any(|r| r.len() > MAX_RENDEZVOUS)
        {
            return Err(Invalid(format!(
                "rendezvous: at most {MAX_RENDEZVOUS} entries of at most {MAX_RENDEZVOUS} bytes"
            )));
        }
        let job = ClusterJob {
            run_id: req.run_id,
            rank: req.rank,
            world_nodes: req.world_nodes,
            gpus_per_node: req.gpus_per_node,
            min_bytes: req.min_bytes,
            max_bytes: req.max_bytes,
            iters: req.iters,
            deadline: deadline(req.deadline_seconds, 30.0)?,
        };
        job.validate().map_err(|e| match e {
            ProbeError::Invalid(m) => Invalid(m),
            other => Invalid(other.to_string()),
        })?;
        Ok(PhaseCall {
            phase,
            job,
            rendezvous: req.rendezvous,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ddpcheck_core::ddp::{ModelSource, ModelSpec};

    #[test]
    fn preflight_parameters_survive_the_round_trip() {
        let p = PreflightParams {
            gpus: "0,1".into(),
            min_bytes: 1 << 20,
            max_bytes: 1 << 28,
            iters: 7,
            warmup_iters: 2,
            deadline: Some(Duration::from_secs(45)),
            inject_hang: true,
            skip_host_copies: true,
            wait_if_busy: Some(Duration::from_secs(20)),
        };
        let back = PreflightParams::try_from(v1::PreflightRequest::from(&p)).unwrap();
        assert_eq!(back, p);
        // Unset, the deadline is the daemon's 30 s; sizes stay unset for the engine's defaults.
        let unset = PreflightParams::try_from(v1::PreflightRequest::default()).unwrap();
        assert_eq!(unset.deadline, Some(Duration::from_secs(30)));
        assert_eq!((unset.min_bytes, unset.iters), (0, 0));
        assert_eq!(unset.wait_if_busy, None);
        for secs in [-1.0, f64::NAN, MAX_DEADLINE_S + 1.0] {
            let r = v1::PreflightRequest {
                wait_if_busy_seconds: secs,
                ..Default::default()
            };
            let e = PreflightParams::try_from(r).unwrap_err();
            assert!(e.0.starts_with("wait_if_busy_seconds"), "{e}");
        }
    }

    #[test]
    fn bad_preflight_requests_are_refused() {
        let long = v1::PreflightRequest {
            gpus: "0".repeat(MAX_GPU_SELECTION + 1),
            ..Default::default()
        };
        assert!(PreflightParams::try_from(long)
            .unwrap_err()
            .0
            .contains("4096"));
        for secs in [-1.0, f64::NAN, MAX_DEADLINE_S + 1.0] {
            let r = v1::PreflightRequest {
                deadline_seconds: secs,
                ..Default::default()
            };
            let e = PreflightParams::try_from(r).unwrap_err();
            assert!(e.0.starts_with("deadline_seconds"), "{e}");
        }
    }

    #[test]
    fn collective_parameters_survive_the_round_trip() {
        let p = CollectiveParams {
            ops: vec![Collective::AllReduce, Collective::AllGather],
            gpus: "0,1".into(),
            min_bytes: 8 << 10,
            max_bytes: 64 << 20,
            step_factor: 4,
            iters: 9,
            warmup_iters: 1,
            in_place: false,
            check: false,
            deadline: Duration::from_secs(120),
            env_ab: vec![vec![
                ("NCCL_P2P_DISABLE".into(), "1".into()),
                ("NCCL_SHM_DISABLE".into(), "1".into()),
            ]],
        };
        let back = CollectiveParams::try_from(v1::BenchCollectivesRequest::from(&p)).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn an_unset_collective_request_takes_the_defaults_and_bad_ones_are_refused() {
        let d = CollectiveParams::default();
        let unset = CollectiveParams::try_from(v1::BenchCollectivesRequest::default()).unwrap();
        assert_eq!(unset.ops, d.ops);
        assert_eq!(
            (
                unset.min_bytes,
                unset.max_bytes,
                unset.iters,
                unset.deadline
            ),
            (d.min_bytes, d.max_bytes, d.iters, d.deadline)
        );
        let bad_op = v1::BenchCollectivesRequest {
            ops: vec!["all_sum".into()],
            ..Default::default()
        };
        assert!(CollectiveParams::try_from(bad_op).is_err());
        let many = v1::BenchCollectivesRequest {
            env_ab: vec![v1::EnvCandidate::default(); MAX_ENV_CANDIDATES + 1],
            ..Default::default()
        };
        let e = CollectiveParams::try_from(many).unwrap_err();
        assert!(e.0.contains("env_ab"), "{e}");
    }

    /// Every kind of model the CLI reads crosses the wire field by field and comes back equal.
    #[test]
    fn every_kind_of_model_survives_the_round_trip() {
        let dir = "/srv/models";
        for arg in [
            "gpt2-355m",
            "decoder:2,64,4,256,1000,llama,ffn=176,kv=2,untied",
            "decoder:4,256,8,512,1000",
            "mlp:784->2048x4->10",
            "mlp:1024,3",
            &format!("py:{dir}/factory.py:make"),
            "py:pkg.models:build",
            "torchvision:resnet50",
            "timm:vit_base_patch16_224.augreg_in21k",
            "hf:llama,hidden_size=1024,num_hidden_layers=2,seq=256",
            "hf:/data/cfg/config.json,vocab_size=1000",
        ] {
            let spec: ModelSpec = arg.parse().unwrap();
            let back = ModelSpec::try_from(v1::ModelChoice::from(&spec)).unwrap();
            assert_eq!(back, spec, "{arg}");
        }
    }

    /// A model the API carries field by field is held to the bounds its text form is read by:
    /// nothing the CLI would refuse reaches a launch through the daemon.
    #[test]
    fn models_out_of_bounds_are_refused_on_the_way_in() {
        let refused = |spec: ModelSpec| {
            ModelSpec::try_from(v1::ModelChoice::from(&spec))
                .unwrap_err()
                .0
        };
        assert!(refused(ModelSpec::square_mlp(4, 1)).contains("MLP width 4"));
        let mut grouped = ModelSpec::gpt2_124m();
        if let ModelSpec::Decoder(d) = &mut grouped {
            d.kv_heads = Some(5);
        }
        assert!(refused(grouped).contains("must divide"));
        let named = |name: &str| {
            let mut d = ModelSpec::gpt2_124m();
            if let ModelSpec::Decoder(d) = &mut d {
                d.name = name.into();
            }
            d
        };
        let said = refused(named("gpt2\n124m\u{1b}"));
        assert!(said.contains("printable ASCII"), "{said}");
        assert_eq!(said.lines().count(), 1, "one line: {said}");
        let source = |source: ModelSource| ModelSpec::External { source };
        let python = source(ModelSource::Python {
            target: "/srv/m.py".into(),
            function: "2make".into(),
        });
        assert!(refused(python).contains("not a Python function name"));
        let library = source(ModelSource::Timm {
            name: "../../etc".into(),
        });
        assert!(refused(library).contains("not a model name"));
        let hf = source(ModelSource::HuggingFace {
            model_type: Some("llama".into()),
            config_path: Some("/data/config.json".into()),
            overrides: Vec::new(),
            seq: 1024,
        });
        assert!(refused(hf).contains("neither a model type"));
        let short = source(ModelSource::HuggingFace {
            model_type: Some("llama".into()),
            config_path: None,
            overrides: vec![("hidden_size".into(), "1,2".into())],
            seq: 1024,
        });
        assert!(refused(short).contains("KEY=VALUE"));
        let choice = v1::ModelChoice {
            kind: Some(v1::model_choice::Kind::Source(v1::ModelSource {
                kind: None,
            })),
        };
        assert!(ModelSpec::try_from(choice).is_err());
    }

    #[test]
    fn explain_parameters_survive_the_round_trip() {
        let p = ExplainParams {
            gpus: "0,2".into(),
            max_bytes: 64 << 20,
            deadline: Duration::from_secs(20),
            ab: true,
        };
        let back = ExplainParams::try_from(v1::ExplainRequest::from(&p)).unwrap();
        assert_eq!(back, p);
        let unset = ExplainParams::try_from(v1::ExplainRequest::default()).unwrap();
        assert_eq!(unset, ExplainParams::default());
    }

    #[test]
    fn bad_explain_requests_are_refused() {
        let long = v1::ExplainRequest {
            gpus: "0".repeat(MAX_GPU_SELECTION + 1),
            ..Default::default()
        };
        let e = ExplainParams::try_from(long).unwrap_err();
        assert!(e.0.contains("gpus"), "{e}");
        let huge = v1::ExplainRequest {
            max_bytes: CollectiveRequest::MAX_BYTES + 1,
            ..Default::default()
        };
        let e = ExplainParams::try_from(huge).unwrap_err();
        assert!(e.0.starts_with("max_bytes"), "{e}");
        for secs in [-1.0, 1e-12, f64::INFINITY, MAX_DEADLINE_S + 1.0] {
            let r = v1::ExplainRequest {
                deadline_seconds: secs,
                ..Default::default()
            };
            let e = ExplainParams::try_from(r).unwrap_err();
            assert!(e.0.starts_with("deadline_seconds"), "{e}");
        }
    }

    fn a_join() -> PhaseCall {
        PhaseCall {
            phase: Phase::Join,
            job: ClusterJob {
                run_id: "cluster-1-r1-s0".into(),
                rank: 1,
                world_nodes: 2,
                gpus_per_node: 8,
                min_bytes: 8 << 20,
                max_bytes: 256 << 20,
                iters: 20,
                deadline: Duration::from_millis(2500),
            },
            rendezvous: vec![b"10.0.0.1:29500".to_vec(), b"node2".to_vec()],
        }
    }

    #[test]
    fn a_cluster_phase_survives_the_round_trip() {
        let c = a_join();
        let back = PhaseCall::try_from(v1::ClusterCollectiveRequest::from(&c)).unwrap();
        assert_eq!(back, c);
        let prepare = PhaseCall {
            phase: Phase::Prepare,
            rendezvous: Vec::new(),
            ..c
        };
        let req = v1::ClusterCollectiveRequest::from(&prepare);
        assert_eq!(req.phase, "prepare");
        assert_eq!(PhaseCall::try_from(req).unwrap(), prepare);
    }

    #[test]
    fn bad_cluster_phases_are_refused() {
        let good = v1::ClusterCollectiveRequest::from(&a_join());
        let unset = v1::ClusterCollectiveRequest {
            deadline_seconds: 0.0,
            ..good.clone()
        };
        let c = PhaseCall::try_from(unset).unwrap();
        assert_eq!(c.job.deadline, Duration::from_secs(30));
        let cases = [
            (
                v1::ClusterCollectiveRequest {
                    phase: "abort".into(),
                    ..good.clone()
                },
                "phase \"abort\": expected prepare or join",
            ),
            (
                v1::ClusterCollectiveRequest {
                    rendezvous: vec![Vec::new(); MAX_RENDEZVOUS + 1],
                    ..good.clone()
                },
                "rendezvous: at most 4096 entries",
            ),
            (
                v1::ClusterCollectiveRequest {
                    deadline_seconds: -2.0,
                    ..good.clone()
                },
                "deadline_seconds",
            ),
            (
                v1::ClusterCollectiveRequest {
                    rank: 2,
                    ..good.clone()
                },
                "rank 2 outside 0..2",
            ),
            (
                v1::ClusterCollectiveRequest {
                    run_id: String::new(),
                    ..good
                },
                "run id",
            ),
        ];
        for (req, want) in cases {
            let e = PhaseCall::try_from(req).unwrap_err();
            assert!(e.0.starts_with(want), "{e} should start with {want}");
        }
    }
}
