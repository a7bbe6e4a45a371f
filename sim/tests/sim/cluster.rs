//! The simulated cluster runs through the backend: the run's bottleneck is its slowest NIC,
//! a `hang` fault times out at the deadline, and a rendezvous entry that is not a sim peer is
//! refused.

use std::time::Duration;

use ddpcheck_core::cluster::{ClusterJob, ClusterMember};
use ddpcheck_core::ProbeError;
use ddpcheck_sim::cluster::nic_busbw;
use ddpcheck_sim::SimBackend;

fn job(rank: u32, n: u32) -> ClusterJob {
    ClusterJob {
        run_id: "t".into(),
        rank,
        world_nodes: n,
        gpus_per_node: 8,
        min_bytes: 1 << 20,
        max_bytes: 256 << 20,
        iters: 20,
        deadline: Duration::from_secs(5),
    }
}

#[test]
fn bottleneck_is_the_slowest_nic() {
    let good = SimBackend::parse("h200x8-nvswitch").unwrap();
    let slow = SimBackend::parse("h200x8-nvswitch+slow-nic").unwrap();
    let rdv = vec![
        good.cluster_prepare(&job(0, 3)).unwrap(),
        slow.cluster_prepare(&job(1, 3)).unwrap(),
        good.cluster_prepare(&job(2, 3)).unwrap(),
    ];
    let r = good.cluster_join(&job(0, 3), &rdv).unwrap();
    let big = r.busbw_large().unwrap();
    assert!(
        (big - nic_busbw(slow.faults())).abs() / nic_busbw(slow.faults()) < 0.05,
        "{big}"
    );
    let r2 = slow.cluster_join(&job(1, 3), &rdv).unwrap();
    assert_eq!(
        r.busbw_large(),
        r2.busbw_large(),
        "every rank sees one collective"
    );
    let healthy = vec![rdv[0].clone(), rdv[2].clone()];
    let h = good.cluster_join(&job(0, 2), &healthy).unwrap();
    assert!(h.busbw_large().unwrap() > 0.9 * nic_busbw(good.faults()));
}

#[test]
fn hang_sleeps_to_the_deadline_then_times_out() {
    let b = SimBackend::parse("h200x8-nvswitch+hang").unwrap();
    let mut j = job(0, 2);
    j.deadline = Duration::from_millis(50);
    let t0 = std::time::Instant::now();
    assert!(matches!(
        b.cluster_prepare(&j),
        Err(ProbeError::Timeout { .. })
    ));
    assert!(t0.elapsed() >= Duration::from_millis(50));
}

#[test]
fn bad_rendezvous_is_invalid() {
    let b = SimBackend::parse("h200x8-nvswitch").unwrap();
    assert!(matches!(
        b.cluster_join(&job(0, 2), &[b"x".to_vec()]),
        Err(ProbeError::Invalid(_))
    ));
    assert!(matches!(
        b.cluster_join(&job(0, 2), &[b"x".to_vec(), b"y".to_vec()]),
        Err(ProbeError::Invalid(_))
    ));
}
