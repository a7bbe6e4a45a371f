//! Each wrapper's activations measured by its own step read at its phases, against torch's
//! peaks on one H100: the raw `bench ddp` reports of
//! docs/results/2026-12-06-h100-fsdp2-memory-phases/ (resnet50 at micro-batch 64, whose
//! activations nothing counts before a launch; llama-12x1024 at 8; the 8B decoder's 2- and
//! 4-layer slices at 1). Every run's peak is predicted within 10% from its wrapper's phases.
//! resnet50 at micro-batches 32, 64 and 128 (a later call on the same machine type) checks the
//! linear scaling: each wrapper's activations measured at one micro-batch predict its peak at
//! the others within 10%.

use super::check::{check_peaks, MeasuredPeak, PeakCheck, PEAK_TOLERANCE};
use super::*;
use crate::ddp::RunDevice;
use crate::report::DdpReport;

/// A raw report of docs/results/2026-12-06-h100-fsdp2-memory-phases/.
macro_rules! evening_report {
    ($file:literal) => {
        include_str!(concat!(
            "../../../docs/results/2026-12-06-h100-fsdp2-memory-phases/",
            $file
        ))
    };
}
const RESNET: &str = evening_report!("resnet50.json");
const SMALL: &str = evening_report!("llama-small.json");
const TWO: &str = evening_report!("llama8b-2layers.json");
const FOUR: &str = evening_report!("llama8b-4layers.json");
const SCALING: [&str; 3] = [
    evening_report!("resnet50-scaling-mb32.json"),
    evening_report!("resnet50-scaling-mb64.json"),
    evening_report!("resnet50-scaling-mb128.json"),
];

/// A report's 1-GPU runs: each peak, each step read at its phases, the parameters and the
/// micro-batch.
fn read(text: &str) -> (Vec<MeasuredPeak>, Vec<PhaseRun>, u64, u32) {
    let r: DdpReport = serde_json::from_str(text).unwrap();
    let rows: Vec<_> = r
        .results
        .iter()
        .filter(|x| x.device == RunDevice::Cuda && x.world_size == 1)
        .collect();
    let peaks = rows.iter().map(|x| x.measured_peak().unwrap()).collect();
    let phases = rows.iter().map(|x| x.phase_run().unwrap()).collect();
    (peaks, phases, rows[0].params, rows[0].micro_batch)
}

/// The report's runs checked before launch and from each wrapper's own phases; `model` `None`:
/// a model ddpcheck cannot count (its parameters from the report).
fn checked(model: Option<&str>, text: &str) -> (MemoryModel, Vec<PeakCheck>) {
    let (peaks, phases, params, mb) = read(text);
    let m = match model {
        Some(s) => MemoryModel::of_spec(&s.parse().unwrap(), mb, Amp::Bf16),
        None => MemoryModel::of_params(params, mb, Amp::Bf16),
    };
    assert_eq!(m.params, params, "{model:?}");
    let measured = with_phases(&m, &phases);
    let checks = check_peaks(&m, Some(&measured), &peaks);
    (measured, checks)
}

#[test]
fn every_h100_run_is_predicted_within_10_percent_from_its_own_wrappers_phases() {
    let all = [
        ("resnet50", checked(None, RESNET)),
        (
            "llama-12x1024",
            checked(Some("decoder:12,1024,16,1024,32000,llama"), SMALL),
        ),
        (
            "8b-2-layers",
            checked(Some("decoder:2,4096,32,2048,32000,llama"), TWO),
        ),
        (
            "8b-4-layers",
            checked(Some("decoder:4,4096,32,2048,32000,llama"), FOUR),
        ),
    ];
    let text: String = all
        .iter()
        .map(|(n, (_, c))| super::fixture_tests::table(n, c, "from its phases"))
        .collect();
    println!("{text}");
    for (_, (_, checks)) in &all {
        assert_eq!(
            checks.len(),
            4,
            "base, replicate, fsdp, fsdp-noreshard\n{text}"
        );
        for c in checks {
            let e = c.from_measured_error.expect("every run read its phases");
            assert!(e.abs() <= PEAK_TOLERANCE, "{text}");
        }
    }
    // resnet50 before any launch: its state alone, far under the peak.
    for c in &all[0].1 .1 {
        assert!(c.error < -0.8, "{text}");
    }
}

#[test]
fn each_wrapper_keeps_its_own_measurement() {
    let (m, _) = checked(None, RESNET);
    let bytes = |w| m.activations_for(w).bytes();
    // fsdp's forward kept less than replicate's (no gathered copy at the loss), and its own
    // figure stands, not replicate's; HSDP was not launched: still unknown.
    assert_eq!(m.measured.len(), 4);
    assert_ne!(bytes(Wrapper::Fsdp), bytes(Wrapper::Replicate));
    assert_ne!(bytes(Wrapper::Ddp), bytes(Wrapper::Replicate));
    assert_eq!(m.activations_for(Wrapper::Hsdp), &ActivationSource::Unknown);
    let ActivationSource::Measured { what, .. } = m.activations_for(Wrapper::Fsdp) else {
        panic!("fsdp measured");
    };
    assert!(what.starts_with("MEASURED at micro-batch 64"), "{what}");
    assert!(!what.contains("scaled"), "{what}");
}

#[test]
fn a_measurement_scales_linearly_to_another_micro_batch_and_says_so() {
    let (m, _) = checked(None, RESNET);
    let at_64 = m.activations_for(Wrapper::Replicate).bytes();
    let half = m.at_micro_batch(32);
    assert_eq!(half.activations_for(Wrapper::Replicate).bytes(), at_64 / 2);
    let ActivationSource::Measured { what, .. } = half.activations_for(Wrapper::Replicate) else {
        panic!("replicate measured");
    };
    assert!(what.contains("scaled linearly to micro-batch 32"), "{what}");
    // The decoder's loss gradients at backward's start scale with it: 4 bytes per token and
    // vocabulary entry are part of the measured figure.
    let (d, _) = checked(Some("decoder:2,4096,32,2048,32000,llama"), TWO);
    assert_eq!(d.backward_start_per_sample, 4 * 2048 * 32000);
    let fsdp = d.activations_for(Wrapper::Fsdp).bytes();
    assert_eq!(
        d.at_micro_batch(2).activations_for(Wrapper::Fsdp).bytes(),
        2 * fsdp
    );
}

#[test]
fn activations_measured_at_one_micro_batch_predict_the_peak_at_another_within_10_percent() {
    let mut text = String::new();
    let mut worst: f64 = 0.0;
    for from in SCALING {
        let (_, phases, params, measured_at) = read(from);
        for to in SCALING.iter().filter(|t| **t != from) {
            let (peaks, _, _, mb) = read(to);
            let m = MemoryModel::of_params(params, mb, Amp::Bf16);
            let checks = check_peaks(&m, Some(&with_phases(&m, &phases)), &peaks);
            assert_eq!(checks.len(), 4, "base, replicate, fsdp, fsdp-noreshard");
            let name = format!("resnet50 mb {measured_at} -> {mb}");
            text += &super::fixture_tests::table(&name, &checks, "from mb");
            for c in &checks {
                worst = worst.max(c.from_measured_error.expect("scaled").abs());
            }
        }
    }
    println!("{text}");
    assert!(worst <= PEAK_TOLERANCE, "{text}");
}
