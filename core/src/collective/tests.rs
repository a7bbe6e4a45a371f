//! Tests of the collectives: nccl-tests' busbw factors, timings from published numbers and the
//! judged average of a sweep.

use super::*;

#[test]
fn probe_times_become_a_sweep_and_fold_to_their_median() {
    // 64 MiB in 20 ms on 4 ranks: algbw 3.36 GB/s, busbw x1.5; a non-positive time is dropped.
    let s = Sweep::all_reduce_from_times(4, &[(4096, 30e-6), (64 << 20, 0.020), (1 << 20, 0.0)])
        .unwrap();
    assert_eq!(
        (s.op, s.ranks, s.samples.len()),
        (Collective::AllReduce, 4, 2)
    );
    let big = &s.samples[1].out_of_place;
    assert!((big.time_us - 20_000.0).abs() < 1e-9);
    assert!((big.busbw_gbps - 1.5 * (64u64 << 20).to_f64() / 0.020 / 1e9).abs() < 1e-9);
    assert_eq!(s.samples[1].count, 16 << 20);
    assert!(Sweep::all_reduce_from_times(4, &[(4096, f64::NAN)]).is_none());
    // Three launches: the middle time at each size all three measured; 4 KiB only twice
    // (the mean of the two), 1 MiB once in the first: left out.
    let a = Sweep::all_reduce_from_times(4, &[(4096, 10e-6), (1 << 20, 1e-3), (64 << 20, 0.020)])
        .unwrap();
    let b = Sweep::all_reduce_from_times(4, &[(4096, 30e-6), (64 << 20, 0.026)]).unwrap();
    let c = Sweep::all_reduce_from_times(4, &[(64 << 20, 0.021)]).unwrap();
    let m = Sweep::median_of(&[&a, &b, &c]).unwrap();
    assert_eq!(
        m.samples.iter().map(|s| s.bytes).collect::<Vec<_>>(),
        [64 << 20]
    );
    assert!((m.samples[0].out_of_place.time_us - 21_000.0).abs() < 1e-9);
    let m = Sweep::median_of(&[&a, &b]).unwrap();
    assert_eq!(
        m.samples.iter().map(|s| s.bytes).collect::<Vec<_>>(),
        [4096, 64 << 20]
    );
    assert!((m.samples[0].out_of_place.time_us - 20.0).abs() < 1e-9);
    // Sweeps of different rank counts do not fold; nothing folds from nothing.
    let two = Sweep::all_reduce_from_times(2, &[(64 << 20, 0.020)]).unwrap();
    assert!(Sweep::median_of(&[&a, &two]).is_none());
    assert!(Sweep::median_of(&[]).is_none());
}

#[test]
fn busbw_factors_match_nccl_tests() {
    assert_eq!(Collective::AllReduce.busbw_factor(2), 1.0);
    assert_eq!(Collective::AllReduce.busbw_factor(4), 1.5);
    assert_eq!(Collective::AllGather.busbw_factor(4), 0.75);
    assert_eq!(Collective::ReduceScatter.busbw_factor(8), 0.875);
    assert_eq!(Collective::AllToAll.busbw_factor(2), 0.5);
    assert_eq!(Collective::Broadcast.busbw_factor(8), 1.0);
    assert_eq!(Collective::Reduce.busbw_factor(8), 1.0);
}

#[test]
fn timing_from_seed_numbers() {
    // 1 GiB all-reduce on 4 GPUs at 4.3 GB/s busbw ⇒ algbw 2.87 GB/s (seed 000).
    let bytes = 1u64 << 30;
    let algbw = 4.3 / 1.5;
    let t_us = bytes.to_f64() / (algbw * 1e9) * 1e6;
    let t = Timing::from_time(Collective::AllReduce, 4, bytes, t_us, Some(0));
    assert!((t.busbw_gbps - 4.3).abs() < 1e-9);
    assert!((t.algbw_gbps - algbw).abs() < 1e-9);
}

use crate::testkit::two_size_sweep as sweep;

#[test]
fn average_of_out_of_place_busbw() {
    let s = sweep();
    assert!((s.avg_busbw() - 200.0).abs() < 1e-6);
}

#[test]
fn interpolates_in_log_size() {
    let s = sweep();
    let mid = s.busbw_at(1 << 25).unwrap();
    assert!((mid - 200.0).abs() < 1e-6, "{mid}");
    assert_eq!(s.busbw_at(1), Some(100.0));
    assert_eq!(s.busbw_at(u64::MAX), Some(300.0));
}

#[test]
fn ladder_and_parse() {
    assert_eq!(size_ladder(8, 64, 2), vec![8, 16, 32, 64]);
    assert_eq!(
        "all_reduce_perf".parse::<Collective>(),
        Ok(Collective::AllReduce)
    );
    assert!("allreduce2".parse::<Collective>().is_err());
}
