//! Tests of the probe's thread and deadlines with fake readers, and of the real probe without a driver.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use ddpcheck_core::node_gpus::{GpuInfo, NodeInventory, ProbeState};
use ddpcheck_core::num::len_u32;
use ddpcheck_core::topology::{LinkClass, TopologyMatrix};
use ddpcheck_core::ProbeError;

use super::links::{assemble_matrix, nvlink_counts, FarEnd};
use super::thread::{Outcome, Reader, Tracker};
use super::{Involved, NvmlProbe, TopologyDetail};

fn gpu(i: u32) -> GpuInfo {
    ddpcheck_testkit::healthy_gpu(i, format!("GPU-fake-{i}"), "Fake H200", 141 << 30)
}

/// A reader that takes `per_gpu` for each GPU, and `slow.1` more on GPU `slow.0`.
struct Fake {
    n: u32,
    per_gpu: Duration,
    slow: Arc<Mutex<Option<(u32, Duration)>>>,
    inventories: Arc<AtomicUsize>,
}

impl Fake {
    fn new(n: u32) -> Fake {
        Fake {
            n,
            per_gpu: Duration::ZERO,
            slow: Arc::new(Mutex::new(None)),
            inventories: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl Reader for Fake {
    fn inventory(&mut self, t: &Tracker) -> Result<NodeInventory, ProbeError> {
        self.inventories.fetch_add(1, Ordering::SeqCst);
        t.step(Involved::All);
        t.begin_inventory(Some("580.159.04".into()), Some("13.0".into()), self.n);
        let slow = *self.slow.lock().unwrap();
        let mut gpus = vec![];
        for i in 0..self.n {
            t.step(Involved::Gpus(vec![i]));
            sleep(self.per_gpu);
            if let Some((k, d)) = slow {
                if k == i {
                    sleep(d);
                }
            }
            let g = gpu(i);
            t.gpu_read(&g);
            gpus.push(g);
        }
        Ok(NodeInventory {
            hostname: String::new(),
            driver_version: Some("580.159.04".into()),
            cuda_driver_version: Some("13.0".into()),
            gpus,
        })
    }

    fn topology(&mut self, t: &Tracker, gpus: &[GpuInfo]) -> Result<TopologyDetail, ProbeError> {
        t.step(Involved::All);
        let n = gpus.len();
        let buses: Vec<_> = (0..len_u32(n)).map(|i| (0, i, 0, 0)).collect();
        let ends = vec![vec![FarEnd::Switch; 18]; n];
        let nv = nvlink_counts(&buses, &ends);
        let pcie = vec![vec![Some(LinkClass::Phb); n]; n];
        let links = assemble_matrix(&nv, &pcie).map_err(|_| ProbeError::Invalid("x".into()))?;
        Ok(TopologyDetail {
            matrix: TopologyMatrix {
                gpus: gpus.iter().map(GpuInfo::gpu_ref).collect(),
                links,
                p2p: vec![],
                p2p_status: vec![],
                cpu_affinity: vec![],
                numa_affinity: vec![],
            },
            pcie,
            nvlinks_active: vec![18; n],
            nvlinks_to_switch: vec![18; n],
        })
    }
}

fn probe_with(deadline: Duration, fake: Fake) -> NvmlProbe {
    NvmlProbe::start_with(deadline, move |serve| {
        let mut f = fake;
        serve.serve(&mut f);
    })
}

fn states(inv: &NodeInventory) -> Vec<ProbeState> {
    inv.gpus.iter().map(|g| g.state).collect()
}

fn nvml_loadable() -> bool {
    // SAFETY: only probing whether the driver's library exists; dropped at once.
    unsafe { libloading::Library::new("libnvidia-ml.so.1") }.is_ok()
}

#[test]
fn without_a_driver_every_call_is_unavailable_with_one_line() {
    let deadline = Duration::from_secs(5);
    let t0 = Instant::now();
    let probe = NvmlProbe::start(deadline);
    let inv = probe.inventory();
    let took = t0.elapsed();
    if nvml_loadable() {
        // A machine with a driver: the call must still answer, without panicking.
        assert!(
            matches!(&inv, Ok(_) | Err(ProbeError::Unavailable(_))),
            "{inv:?}"
        );
        return;
    }
    match inv {
        Err(ProbeError::Unavailable(line)) => {
            assert!(line.starts_with("NVML unavailable: "), "{line}");
            assert!(line.contains("libnvidia-ml.so.1"), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // Later calls, topology included, answer the same at once.
    let t1 = Instant::now();
    assert!(matches!(
        probe.topology(&[gpu(0)]),
        Err(ProbeError::Unavailable(_))
    ));
    assert!(matches!(probe.inventory(), Err(ProbeError::Unavailable(_))));
    assert!(t1.elapsed() < Duration::from_millis(500));
    assert!(probe.last_inventory().is_none());
    assert!(probe.stuck().is_none());
}

#[test]
fn injected_slow_call_marks_stuck_and_the_next_call_answers_at_once() {
    let deadline = Duration::from_millis(200);
    let probe = probe_with(deadline, Fake::new(2));
    let inv = probe.inventory().unwrap();
    assert_eq!(states(&inv), vec![ProbeState::Ok, ProbeState::Ok]);
    assert!(!inv.hostname.is_empty() || hostname::get().is_err());

    // A call that hangs on GPU 1 for far longer than the deadline.
    let t0 = Instant::now();
    let out = probe.inject(Involved::Gpus(vec![1]), |_, _| {
        sleep(Duration::from_millis(1500));
    });
    let waited = t0.elapsed();
    match out {
        Outcome::Stuck(s) => {
            assert_eq!(s.involved, Involved::Gpus(vec![1]));
            assert_eq!(s.label, "injected");
        }
        other => panic!("expected Stuck, got {other:?}"),
    }
    assert!(waited >= deadline, "gave up early: {waited:?}");
    assert!(waited < Duration::from_millis(1000), "waited {waited:?}");

    // While the thread hangs, calls return at once with the last snapshot, GPU 1 stuck.
    let t1 = Instant::now();
    let inv = probe.inventory().unwrap();
    let topo = probe.topology(&inv.gpus);
    let quick = t1.elapsed();
    assert!(quick < deadline, "answered in {quick:?}");
    assert_eq!(states(&inv), vec![ProbeState::Ok, ProbeState::Stuck]);
    assert_eq!(inv.gpus[1].uuid, "GPU-fake-1");
    assert!(matches!(topo, Err(ProbeError::Timeout { .. })), "{topo:?}");
    assert!(probe.stuck().is_some());
    let (last, _age) = probe.last_inventory().unwrap();
    assert_eq!(states(&last), vec![ProbeState::Ok, ProbeState::Stuck]);

    // Once the call returns, readings are fresh again.
    sleep(Duration::from_millis(1500).saturating_sub(t0.elapsed()) + Duration::from_millis(100));
    assert!(probe.stuck().is_none());
    let inv = probe.inventory().unwrap();
    assert_eq!(states(&inv), vec![ProbeState::Ok, ProbeState::Ok]);
    let topo = probe.topology(&inv.gpus).unwrap();
    assert_eq!(topo.links[0][1], LinkClass::Nv(18));
}

#[test]
fn a_hang_inside_the_inventory_pins_the_gpu_and_the_late_answer_refreshes_the_snapshot() {
    let deadline = Duration::from_millis(200);
    let fake = Fake::new(3);
    *fake.slow.lock().unwrap() = Some((1, Duration::from_millis(800)));
    let slow = fake.slow.clone();
    let probe = probe_with(deadline, fake);
    // First call ever: GPU 0 was read, NVML hangs on GPU 1, GPU 2 was never reached.
    let inv = probe.inventory().unwrap();
    assert_eq!(
        states(&inv),
        vec![ProbeState::Ok, ProbeState::Stuck, ProbeState::Stuck]
    );
    assert_eq!(inv.gpus[0].uuid, "GPU-fake-0");
    assert_eq!(inv.driver_version.as_deref(), Some("580.159.04"));
    let stuck = probe.stuck().unwrap();
    assert_eq!(stuck.involved, Involved::Gpus(vec![1]));
    assert_eq!(stuck.label, "NVML inventory");

    *slow.lock().unwrap() = None;
    sleep(Duration::from_millis(900));
    // The hung call finished after its caller left; its readings became the snapshot.
    let (last, _) = probe.last_inventory().unwrap();
    assert_eq!(states(&last), vec![ProbeState::Ok; 3]);
}

#[test]
fn a_slow_but_progressing_inventory_is_not_stuck() {
    let deadline = Duration::from_millis(300);
    let mut fake = Fake::new(4);
    fake.per_gpu = Duration::from_millis(120);
    let probe = probe_with(deadline, fake);
    let t0 = Instant::now();
    let inv = probe.inventory().unwrap();
    // Longer than one deadline in total, but every step within its own.
    assert!(t0.elapsed() > deadline);
    assert_eq!(states(&inv), vec![ProbeState::Ok; 4]);
}

#[test]
fn a_caller_that_gave_up_does_not_leave_its_job_queued() {
    let deadline = Duration::from_millis(200);
    let fake = Fake::new(1);
    let runs = fake.inventories.clone();
    let probe = Arc::new(probe_with(deadline, fake));
    let p2 = probe.clone();
    let hang = std::thread::spawn(move || {
        p2.inject(Involved::Gpus(vec![0]), |_, _| {
            sleep(Duration::from_millis(700))
        })
    });
    sleep(Duration::from_millis(50));
    // Queued behind the hanging job before it was past its deadline: waits, then gives up.
    let t0 = Instant::now();
    let inv = probe.inventory();
    assert!(t0.elapsed() < Duration::from_millis(500));
    // Nothing was ever read: GPU 0 is known only by the index the hung step names.
    let inv = inv.unwrap();
    assert_eq!(states(&inv), vec![ProbeState::Stuck]);
    assert!(inv.gpus[0].uuid.is_empty());
    assert!(matches!(hang.join().unwrap(), Outcome::Stuck(_)));
    sleep(Duration::from_millis(800));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "an abandoned job ran");
    assert!(probe.inventory().is_ok());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn init_failure_answers_with_its_line_also_to_early_callers() {
    let probe = NvmlProbe::start_with(Duration::from_secs(2), |serve| {
        sleep(Duration::from_millis(50));
        serve.unavailable("NVML unavailable: test reason".into());
    });
    // This call is queued before the thread knows; it must still get the line.
    match probe.inventory() {
        Err(ProbeError::Unavailable(l)) => assert_eq!(l, "NVML unavailable: test reason"),
        other => panic!("{other:?}"),
    }
    match probe.topology(&[]) {
        Err(ProbeError::Unavailable(l)) => assert_eq!(l, "NVML unavailable: test reason"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_hanging_init_times_out_and_then_answers_at_once() {
    let deadline = Duration::from_millis(150);
    let probe = NvmlProbe::start_with(deadline, |serve| {
        sleep(Duration::from_millis(600));
        serve.serve(&mut Fake::new(1));
    });
    let t0 = Instant::now();
    let first = probe.inventory();
    assert!(t0.elapsed() < Duration::from_millis(450));
    match first {
        Err(ProbeError::Timeout { stage, .. }) => assert_eq!(stage, "NVML init"),
        other => panic!("{other:?}"),
    }
    let t1 = Instant::now();
    assert!(matches!(probe.inventory(), Err(ProbeError::Timeout { .. })));
    assert!(t1.elapsed() < Duration::from_millis(100));
    sleep(Duration::from_millis(600));
    assert_eq!(states(&probe.inventory().unwrap()), vec![ProbeState::Ok]);
}

#[test]
fn a_panicking_job_does_not_end_the_thread() {
    let probe = probe_with(Duration::from_secs(2), Fake::new(1));
    let out: Outcome<()> = probe.inject(Involved::All, |_, _| panic!("injected panic"));
    assert!(matches!(out, Outcome::Unavailable(_)), "{out:?}");
    assert!(probe.inventory().is_ok());
}
