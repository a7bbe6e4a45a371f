//! Tests on a real node (ignored without torch's CUDA and GPUs): a DDP smoke run, and a deadline
//! that stops every rank.

use std::fs;
use std::time::{Duration, Instant};

use ddpcheck_core::ddp::{DdpRequest, DdpVariant, ModelSpec};
use ddpcheck_core::ProbeError;

use super::super::*;
use super::is_gone;
use crate::RealConfig;

/// The real thing, on a node with torch and GPUs:
/// `DDPCHECK_PYTHON=/opt/torch/.venv/bin/python3 cargo test -p ddpcheck-gpu real_ddp -- --ignored --nocapture`
#[test]
#[ignore = "needs torch ≥ 2.4 with CUDA and GPUs"]
fn real_ddp_smoke_on_this_node() {
    let worlds: Vec<u32> = std::env::var("DDPCHECK_TEST_WORLDS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .map(|w| w.trim().parse().unwrap())
        .collect();
    let req = DdpRequest {
        models: vec![ModelSpec::gpt2_124m(), ModelSpec::square_mlp(4096, 4)],
        variants: std::env::var("DDPCHECK_TEST_VARIANTS")
            .unwrap_or_else(|_| "base,bf16,fp16,powersgd,bf16+accum2,bucket100,fsdp".into())
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect(),
        world_sizes: worlds,
        micro_batch: 8,
        warmup_steps: 3,
        steps: 6,
        min_timed_s: 0.0,
        price_per_gpu_hour: Some(3.0),
        env: vec![],
        deadline_s: 180.0,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        reference: ddpcheck_core::ddp::Reference::Ddp,
    };
    let opts = DdpOptions {
        measure_nocomm: true,
        keep_going: true,
    };
    let run = run_ddp_report(&RealConfig::default(), &req, &opts, &mut |p| {
        eprintln!("[{}/{}] {}", p.done, p.total, p.message)
    })
    .unwrap();
    println!("{}", serde_json::to_string_pretty(&run).unwrap());
    let failed: Vec<String> = run
        .launches
        .iter()
        .filter_map(|l| l.error.as_ref().map(|e| e.to_string()))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(run.results.iter().all(|r| r.speedup.is_some()));
}

/// Processes whose command line mentions the benchmark script.
fn bench_processes() -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(SCRIPT_DIR_NAME) && !is_gone(pid) {
                found.push(format!("{pid}: {cmd}"));
            }
        }
    }
    found
}

/// A real torchrun with NCCL ranks mid-run is stopped at the deadline, every rank with it.
#[test]
#[ignore = "needs torch ≥ 2.4 with CUDA and 2 GPUs"]
fn real_ddp_deadline_stops_every_rank() {
    let req = DdpRequest {
        models: vec![ModelSpec::gpt2_355m()],
        variants: vec![DdpVariant::default()],
        world_sizes: vec![2],
        micro_batch: 8,
        warmup_steps: 0,
        steps: 10_000,
        min_timed_s: 0.0,
        price_per_gpu_hour: None,
        env: vec![],
        deadline_s: 30.0,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        reference: ddpcheck_core::ddp::Reference::Ddp,
    };
    // Timed from the launch's own start: the torch check before it takes a few seconds.
    let mut launched: Option<Instant> = None;
    let mut last = String::new();
    let err = run_ddp(&RealConfig::default(), &req, &mut |p| {
        if p.message.ends_with(": starting") {
            launched = Some(Instant::now());
        }
        last = p.message;
    })
    .unwrap_err();
    let took = launched.unwrap().elapsed();
    eprintln!("{err} after {took:?} from the launch; last progress: {last}");
    assert!(matches!(err, ProbeError::Timeout { .. }), "{err:?}");
    assert!(last.contains("step"), "{last}");
    // TERM grace, then up to 3 s for killed CUDA processes to close their pipes.
    assert!(
        took < Duration::from_secs(30) + TERM_GRACE + Duration::from_secs(4),
        "{took:?}"
    );
    // SIGKILLed ranks can take a moment to leave while the driver tears their context down.
    let until = Instant::now() + Duration::from_secs(5);
    while !bench_processes().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(bench_processes(), Vec::<String>::new());
}
