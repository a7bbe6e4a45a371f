//! NCCL collectives: the parent side starts `EXE worker` under [`crate::supervise`] with the
//! request on stdin, forwards its progress and maps its events to a result or a `ProbeError`.
//! The worker side (FFI, loader, sweep) lives in the submodules and runs only in the child.

pub mod bench;
pub mod ffi;
pub mod loader;
pub mod plan;
pub mod protocol;
pub mod transport;

use std::process::Command;

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun, Progress};
use ddpcheck_core::ProbeError;

use crate::supervise::{self, Options, SuperviseError};
use crate::RealConfig;
pub use protocol::{FailKind, WorkerEvent};

/// Runs the request's sweep in a supervised `worker` child of `cfg.worker_exe`.
pub fn run_collectives(
    cfg: &RealConfig,
    req: &CollectiveRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<CollectiveRun, ProbeError> {
    req.validate()?;
    let mut cmd = Command::new(&cfg.worker_exe);
    cmd.arg("worker");
    if let Some(p) = &cfg.nccl_lib {
        cmd.env(loader::NCCL_ENV, p);
    }
    supervise::keep_multicast_off(&mut cmd);
    run_worker(cmd, req, &Options::new(req.deadline), progress)
}

/// Supervises an already built worker command (tests use another executable).
pub fn run_worker(
    cmd: Command,
    req: &CollectiveRequest,
    opts: &Options,
    progress: &mut dyn FnMut(Progress),
) -> Result<CollectiveRun, ProbeError> {
    let input = serde_json::to_vec(req)
        .map_err(|e| ProbeError::Worker(format!("encoding the worker request: {e}")))?;
    let mut st = ParentState::default();
    let res = supervise::run_json_lines_with(cmd, Some(input), opts, |v| st.on_value(v, progress));
    st.conclude(res, req.deadline, WorkerKind::Collectives, |s| {
        s.done.take()
    })
}

/// Which run a worker child was started for: names its stage and itself in errors.
#[derive(Clone, Copy)]
pub(crate) enum WorkerKind {
    Collectives,
    HostCopies,
}

impl WorkerKind {
    fn stage(self) -> &'static str {
        match self {
            WorkerKind::Collectives => "NCCL collectives",
            WorkerKind::HostCopies => "host copies",
        }
    }
    fn worker(self) -> &'static str {
        match self {
            WorkerKind::Collectives => "NCCL worker",
            WorkerKind::HostCopies => "host-copy worker",
        }
    }
}

/// What the parent has read from a worker child's events.
#[derive(Default)]
pub(crate) struct ParentState {
    init: Option<WorkerEvent>,
    done: Option<CollectiveRun>,
    pub(crate) copies: Option<ddpcheck_core::hostcopy::HostCopyRun>,
    error: Option<(FailKind, String, Option<String>)>,
    /// The first event we could not read.
    protocol: Option<String>,
    /// The worker's last reported stage, for timeouts.
    stage: Option<String>,
}

impl ParentState {
    pub(crate) fn on_value(&mut self, v: serde_json::Value, progress: &mut dyn FnMut(Progress)) {
        let ev: WorkerEvent = match serde_json::from_value(v.clone()) {
            Ok(ev) => ev,
            Err(e) => {
                if self.protocol.is_none() {
                    self.protocol = Some(format!(
                        "worker printed an event we do not understand ({e}): {}",
                        supervise::truncate(&v.to_string(), 200)
                    ));
                }
                return;
            }
        };
        match ev {
            WorkerEvent::Progress {
                stage,
                done,
                total,
                message,
            } => {
                self.stage = Some(message.clone());
                progress(Progress {
                    stage: if stage.starts_with("host") {
                        stage
                    } else {
                        format!("nccl {stage}")
                    },
                    done,
                    total,
                    message,
                });
            }
            WorkerEvent::Init {
                seconds,
                ref nccl_version,
                ranks,
                ..
            } => {
                tracing::info!(seconds, nccl_version, ranks, "NCCL communicators ready");
                self.init = Some(ev);
            }
            WorkerEvent::Sample { .. } => {}
            WorkerEvent::Done { run } => self.done = Some(run),
            WorkerEvent::HostCopies { run } => self.copies = Some(run),
            WorkerEvent::Error {
                kind,
                message,
                stage,
            } => {
                if self.error.is_none() {
                    self.error = Some((kind, message, stage));
                }
            }
        }
    }

    /// The worker's result (what `take` finds), else its error as a `ProbeError`.
    pub(crate) fn conclude<T>(
        mut self,
        res: Result<supervise::Outcome, SuperviseError>,
        deadline: std::time::Duration,
        kind: WorkerKind,
        take: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Result<T, ProbeError> {
        let tail = match &res {
            Ok(o) => o.stderr_tail.clone(),
            Err(e) => e.stderr_tail().to_string(),
        };
        // A result that made it out stands, whatever happened during teardown.
        if let Some(run) = take(&mut self) {
            if let Err(e) = &res {
                tracing::warn!(error = %e, worker = kind.worker(), "worker misbehaved after reporting its result");
            }
            return Ok(run);
        }
        if !tail.trim().is_empty() {
            tracing::warn!(stderr = %tail, worker = kind.worker(), "worker stderr");
        }
        let with_tail = |m: String| -> String {
            let t = tail.trim();
            if t.is_empty() {
                m
            } else {
                let t: String = {
                    let n = t.chars().count();
                    t.chars().skip(n.saturating_sub(1500)).collect()
                };
                format!("{m}; worker stderr ends with: {t}")
            }
        };
        if let Some((fail, message, stage)) = self.error {
            return Err(match fail {
                FailKind::Timeout => ProbeError::Timeout {
                    stage: format!(
                        "{} ({})",
                        kind.stage(),
                        stage.unwrap_or_else(|| "worker".into())
                    ),
                    seconds: deadline.as_secs_f64(),
                },
                FailKind::Unavailable => ProbeError::Unavailable(message),
                FailKind::Busy => ProbeError::Busy(message),
                FailKind::Invalid => ProbeError::Invalid(message),
                FailKind::GpuFailed => ProbeError::GpuFailed(with_tail(message)),
                FailKind::Worker => ProbeError::Worker(with_tail(message)),
            });
        }
        match res {
            Err(SuperviseError::Timeout { deadline, .. }) => Err(ProbeError::Timeout {
                stage: format!(
                    "{} (last progress: {})",
                    kind.stage(),
                    self.stage.as_deref().unwrap_or("none")
                ),
                seconds: deadline.as_secs_f64(),
            }),
            Err(e) => Err(ProbeError::Worker(format!("{}: {e}", kind.worker()))),
            Ok(o) => Err(ProbeError::Worker(with_tail(self.protocol.unwrap_or_else(
                || {
                    format!(
                        "{} exited ({}) after {} lines without a result",
                        kind.worker(),
                        o.status,
                        o.lines
                    )
                },
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::collective::Collective;
    use ddpcheck_core::num::{len_u32, ToF64};
    use ddpcheck_core::topology::GpuRef;
    use std::time::{Duration, Instant};

    const CHILD_VAR: &str = "DDPCHECK_TEST_WORKER_CHILD";

    /// Not a test on its own: the body of the worker child in the tests below, which run this
    /// test binary again with only this test selected.
    #[test]
    fn worker_child_entry() {
        if std::env::var_os(CHILD_VAR).is_none() {
            return;
        }
        let code = crate::worker::main_from_args(&[]);
        // SAFETY: ends the child test process with the worker's code.
        unsafe { libc::_exit(code) }
    }

    fn child() -> Command {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([
            "--exact",
            "nccl::tests::worker_child_entry",
            "--nocapture",
            "--quiet",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1");
        c
    }

    fn request(deadline: Duration, inject_hang: bool) -> CollectiveRequest {
        CollectiveRequest {
            ops: vec![Collective::AllReduce],
            gpus: vec![GpuRef {
                index: 0,
                uuid: "GPU-0".into(),
                pci_bus_id: "00000000:1B:00.0".into(),
            }],
            min_bytes: 1024,
            max_bytes: 1 << 20,
            step_factor: 2,
            warmup_iters: 1,
            iters: 2,
            in_place: true,
            check: true,
            env: vec![],
            deadline,
            inject_hang,
            group: None,
            record_transport: false,
        }
    }

    fn opts(deadline: Duration) -> Options {
        Options::test_binary_child(deadline)
    }

    #[test]
    fn worker_without_gpu_libraries_is_unavailable() {
        let req = request(Duration::from_secs(20), false);
        let mut notes = Vec::new();
        let r = run_worker(child(), &req, &opts(req.deadline), &mut |p| notes.push(p));
        match r {
            Err(ProbeError::Unavailable(m)) => {
                assert!(
                    m.contains("libcuda.so.1") || m.contains("libnccl.so.2"),
                    "{m}"
                );
                assert!(!m.contains('\n'), "one line: {m}");
            }
            // A machine with a driver and NCCL gets further; that is fine here.
            Ok(_) | Err(ProbeError::GpuFailed(_)) | Err(ProbeError::Busy(_)) => {}
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn injected_hang_is_stopped_by_the_worker_watchdog() {
        let deadline = Duration::from_millis(1500);
        let req = request(deadline, true);
        let t = Instant::now();
        let r = run_worker(child(), &req, &opts(deadline), &mut |_| {});
        let took = t.elapsed();
        match r {
            Err(ProbeError::Timeout { stage, seconds }) => {
                // The worker's own timeout event, not the parent's kill: it names the stage.
                assert!(stage.contains("injected hang"), "{stage}");
                assert_eq!(seconds, 1.5);
            }
            other => panic!("{other:?}"),
        }
        assert!(took < deadline + Duration::from_millis(1500), "{took:?}");
    }

    #[test]
    fn invalid_request_is_refused_before_any_work() {
        let mut req = request(Duration::from_secs(5), false);
        req.ops.clear();
        let cfg = RealConfig {
            worker_exe: "/nonexistent/never-started".into(),
            ..RealConfig::default()
        };
        let r = run_collectives(&cfg, &req, &mut |_| {});
        assert!(matches!(r, Err(ProbeError::Invalid(_))), "{r:?}");
    }

    #[test]
    fn garbage_from_the_worker_is_a_worker_error() {
        let req = request(Duration::from_secs(5), false);
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "cat >/dev/null; echo 'Segmentation fault (core dumped)'; exit 139",
        ]);
        let r = run_worker(cmd, &req, &Options::new(req.deadline), &mut |_| {});
        match r {
            Err(ProbeError::Worker(m)) => assert!(m.contains("Segmentation fault"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn worker_events_map_to_results() {
        let req = request(Duration::from_secs(5), false);
        let run = CollectiveRun {
            sweeps: vec![],
            nccl_version: Some("2.28.9".into()),
            nccl_library: None,
            transport: None,
            cuda_runtime_version: Some("13.0".into()),
            init_seconds: 0.5,
            env: vec![],
        };
        let done = serde_json::to_string(&WorkerEvent::Done { run: run.clone() }).unwrap();
        let script = format!(
            "cat >/dev/null; echo '{}'; echo '{}'",
            r#"{"event":"progress","stage":"collectives","done":1,"total":1,"message":"m"}"#, done
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]);
        let mut notes = Vec::new();
        let got = run_worker(cmd, &req, &Options::new(req.deadline), &mut |p| {
            notes.push(p)
        });
        assert_eq!(got, Ok(run));
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].stage, "nccl collectives");

        for (kind, want) in [
            ("unavailable", "Unavailable"),
            ("busy", "Busy"),
            ("gpu_failed", "GpuFailed"),
            ("worker", "Worker"),
        ] {
            let line = format!(r#"{{"event":"error","kind":"{kind}","message":"boom"}}"#);
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &format!("cat >/dev/null; echo '{line}'; exit 2")]);
            let got = run_worker(cmd, &req, &Options::new(req.deadline), &mut |_| {});
            let dbg = format!("{got:?}");
            assert!(
                dbg.starts_with(&format!("Err({want}(\"boom")),
                "{kind}: {dbg}"
            );
        }
    }

    #[test]
    fn parent_deadline_kills_a_silent_worker() {
        let req = request(Duration::from_millis(800), false);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat >/dev/null; sleep 1000"]);
        let opts = Options {
            grace: Duration::from_millis(200),
            ..Options::new(req.deadline)
        };
        let r = run_worker(cmd, &req, &opts, &mut |_| {});
        assert!(matches!(r, Err(ProbeError::Timeout { .. })), "{r:?}");
    }

    // ---- the whole worker against a fake libcuda/libnccl (testdata/fake_gpu.c) ----

    /// Builds the fake GPU libraries; `None` (and a note) where no C compiler is installed.
    fn fake_libs() -> Option<tempfile::TempDir> {
        let dir = tempfile::tempdir().unwrap();
        let so = dir.path().join("libfake.so");
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/nccl/testdata/fake_gpu.c");
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-pthread", "-O1", "-o"])
            .arg(&so)
            .arg(src)
            .status()
            .is_ok_and(|s| s.success());
        if !built {
            eprintln!("no C compiler: skipping the fake-GPU worker test");
            return None;
        }
        std::fs::copy(&so, dir.path().join("libcuda.so.1")).unwrap();
        std::fs::copy(&so, dir.path().join("libnccl.so.2")).unwrap();
        Some(dir)
    }

    fn fake_child(libs: &std::path::Path) -> Command {
        let mut c = child();
        c.env(loader::CUDA_ENV, libs.join("libcuda.so.1"))
            .env(loader::NCCL_ENV, libs.join("libnccl.so.2"))
            .env("FAKE_GPUS", "2")
            .env_remove("NCCL_NVLS_ENABLE");
        c
    }

    fn fake_request(ops: Vec<Collective>) -> CollectiveRequest {
        let gpu = |i: u32| GpuRef {
            index: i,
            uuid: format!("GPU-{i}"),
            // NVML's spelling; the fake answers to CUDA's 0000:1x:00.0.
            pci_bus_id: format!("00000000:1{i}:00.0"),
        };
        CollectiveRequest {
            ops,
            gpus: vec![gpu(0), gpu(1)],
            min_bytes: 1024,
            max_bytes: 65536,
            step_factor: 4,
            warmup_iters: 1,
            iters: 3,
            in_place: true,
            check: true,
            env: vec![("NCCL_P2P_DISABLE".into(), "1".into())],
            deadline: Duration::from_secs(30),
            inject_hang: false,
            group: None,
            record_transport: false,
        }
    }

    #[test]
    fn fake_gpus_as_ranks_of_a_group_report_their_transport() {
        let Some(libs) = fake_libs() else { return };
        let mut req = fake_request(vec![Collective::AllReduce]);
        req.gpus.clear();
        req.in_place = false;
        req.group = Some(ddpcheck_core::backend::RankGroup {
            first_rank: 0,
            local_ranks: 2,
            world_ranks: 2,
            // The fake meets the ranks in a file named by the port: one of this process's own.
            comm_id: format!("127.0.0.1:{}", 1024 + std::process::id() % 60000),
        });
        let run = run_worker(
            fake_child(libs.path()),
            &req,
            &opts(req.deadline),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(run.transport.as_deref(), Some("NET/Socket"));
        assert_eq!(run.sweeps[0].ranks, 2);
        assert!(run.sweeps[0]
            .samples
            .iter()
            .all(|s| s.out_of_place.wrong == Some(0)));

        // More ranks for this node than GPUs it has: refused before NCCL init.
        let mut one = fake_child(libs.path());
        one.env("FAKE_GPUS", "1");
        let r = run_worker(one, &req, &opts(req.deadline), &mut |_| {});
        match r {
            Err(ProbeError::Unavailable(m)) => {
                assert!(m.contains("1 GPU(s) visible to CUDA, 2 needed"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fake_gpus_run_every_collective_correctly() {
        let Some(libs) = fake_libs() else { return };
        let req = fake_request(Collective::ALL.to_vec());
        let mut notes = Vec::new();
        let run = run_worker(
            fake_child(libs.path()),
            &req,
            &opts(req.deadline),
            &mut |p| notes.push(p),
        )
        .unwrap();
        assert_eq!(run.nccl_version.as_deref(), Some("2.28.9"));
        assert_eq!(run.cuda_runtime_version.as_deref(), Some("13.0"));
        assert!(
            run.env.contains(&("NCCL_NVLS_ENABLE".into(), "0".into())),
            "{:?}",
            run.env
        );
        assert!(
            run.env.contains(&("NCCL_P2P_DISABLE".into(), "1".into())),
            "{:?}",
            run.env
        );
        assert_eq!(run.sweeps.len(), 6);
        let sizes = ddpcheck_core::collective::size_ladder(1024, 65536, 4);
        for (sweep, op) in run.sweeps.iter().zip(Collective::ALL) {
            assert_eq!((sweep.op, sweep.ranks), (op, 2));
            assert_eq!(sweep.root, if op.has_root() { 0 } else { -1 });
            assert_eq!(sweep.samples.len(), sizes.len(), "{op}");
            for (s, &size) in sweep.samples.iter().zip(&sizes) {
                let g = plan::geometry(op, size, 2);
                assert_eq!((s.bytes, s.count), (g.bytes, g.count), "{op} {size}");
                assert_eq!(s.out_of_place.wrong, Some(0), "{op} {size}");
                let ip = s.in_place.expect("in-place requested");
                let want = if op == Collective::AllToAll {
                    None
                } else {
                    Some(0)
                };
                assert_eq!(ip.wrong, want, "{op} {size}");
                assert!(s.out_of_place.time_us > 0.0 && s.out_of_place.busbw_gbps > 0.0);
            }
        }
        // One note when communicators start, one per op and size.
        assert_eq!(notes.len(), 1 + 6 * sizes.len(), "{notes:?}");
        assert_eq!(notes.last().unwrap().done, 6 * len_u32(sizes.len()));
    }

    /// The fake's times come from its model (latency plus bus bytes over its bandwidth), not
    /// from the CPU work it does, so every size and collective reads the model's busbw exactly.
    #[test]
    fn fake_gpus_report_the_modelled_time_whatever_the_cpu() {
        let Some(libs) = fake_libs() else { return };
        let req = fake_request(Collective::ALL.to_vec());
        let mut cmd = fake_child(libs.path());
        cmd.env("FAKE_NCCL_BUSBW_GBPS", "4")
            .env("FAKE_NCCL_LATENCY_US", "5");
        let run = run_worker(cmd, &req, &opts(req.deadline), &mut |_| {}).unwrap();
        for sweep in &run.sweeps {
            for s in &sweep.samples {
                let bus_bytes = s.bytes.to_f64() * sweep.op.busbw_factor(2);
                // 4 GB/s is 4000 bytes a microsecond.
                let want_us = 5.0 + bus_bytes / 4000.0;
                for t in std::iter::once(&s.out_of_place).chain(s.in_place.as_ref()) {
                    let err = (t.time_us - want_us).abs() / want_us;
                    assert!(
                        err < 1e-3,
                        "{} {} B: {} us, model {want_us}",
                        sweep.op,
                        s.bytes,
                        t.time_us
                    );
                }
            }
        }
    }

    #[test]
    fn fake_gpus_wrong_results_are_counted() {
        let Some(libs) = fake_libs() else { return };
        let req = fake_request(vec![Collective::AllReduce]);
        let mut cmd = fake_child(libs.path());
        cmd.env("FAKE_NCCL_WRONG", "1");
        let run = run_worker(cmd, &req, &opts(req.deadline), &mut |_| {}).unwrap();
        // The fake corrupts one element of each rank's result: two per check, both variants.
        for s in &run.sweeps[0].samples {
            assert_eq!(s.out_of_place.wrong, Some(2), "{}", s.bytes);
            assert_eq!(s.in_place.unwrap().wrong, Some(2), "{}", s.bytes);
        }
        assert_eq!(run.sweeps[0].wrong_total(), Some(2 * 2 * 4));
    }

    #[test]
    fn fake_gpus_hang_is_stopped_with_its_stage() {
        let Some(libs) = fake_libs() else { return };
        let mut req = fake_request(vec![Collective::AllReduce]);
        req.inject_hang = true;
        req.deadline = Duration::from_millis(2000);
        let t = Instant::now();
        let r = run_worker(
            fake_child(libs.path()),
            &req,
            &opts(req.deadline),
            &mut |_| {},
        );
        match r {
            Err(ProbeError::Timeout { stage, .. }) => {
                assert!(stage.contains("rank 0 waits in an all-reduce"), "{stage}")
            }
            other => panic!("{other:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_millis(3500),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn fake_gpus_setup_failures_are_unavailable() {
        let Some(libs) = fake_libs() else { return };
        // The driver refuses.
        let req = fake_request(vec![Collective::AllReduce]);
        let mut cmd = fake_child(libs.path());
        cmd.env("FAKE_CUINIT_ERR", "100");
        match run_worker(cmd, &req, &opts(req.deadline), &mut |_| {}) {
            Err(ProbeError::Unavailable(m)) => assert!(m.contains("cuInit failed"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A GPU CUDA does not see.
        let mut req = fake_request(vec![Collective::AllReduce]);
        req.gpus[1].pci_bus_id = "00000000:99:00.0".into();
        match run_worker(
            fake_child(libs.path()),
            &req,
            &opts(req.deadline),
            &mut |_| {},
        ) {
            Err(ProbeError::Unavailable(m)) => {
                assert!(
                    m.contains("00000000:99:00.0") && m.contains("not visible"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        // A library without NCCL's symbols.
        let req = fake_request(vec![Collective::AllReduce]);
        let mut cmd = fake_child(libs.path());
        cmd.env(loader::NCCL_ENV, libs.path().join("libfake-empty.so"));
        std::fs::write(libs.path().join("libfake-empty.so"), b"").unwrap();
        match run_worker(cmd, &req, &opts(req.deadline), &mut |_| {}) {
            Err(ProbeError::Unavailable(m)) => {
                assert!(
                    m.contains("libfake-empty.so") && m.contains(loader::NCCL_ENV),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
