//! `bench ddp`'s lines of FSDP2's step model at one GPU: each wrapper's step predicted from
//! another wrapper of the same launch that gathers as often (its own work against the plain
//! step), beside the step measured, so a launch of several wrappers checks the model itself.

use ddpcheck_core::ddp::{DdpResult, DdpVariant, Wrapper};
use ddpcheck_core::step_time::fsdp::{predict_fsdp2, Fsdp2Curves, Fsdp2Inputs, Fsdp2Units};
use ddpcheck_core::step_time::fsdp_own::one_gpu_own;

/// The FSDP2 rows of one GPU with a plain reference and a parameter layout.
fn one_gpu_rows(results: &[DdpResult]) -> Vec<(Wrapper, &DdpResult, f64)> {
    results
        .iter()
        .filter(|x| x.world_size == 1 && x.accum == 1)
        .filter_map(|x| {
            let w = x.variant.parse::<DdpVariant>().ok()?.wrapper();
            let plain = x.plain_reference.as_ref()?.step_time_median_s;
            (w.is_fsdp2() && x.param_layout.is_some()).then_some((w, x, plain))
        })
        .collect()
}

/// One line per FSDP2 row whose step another row of its model predicts.
pub fn fsdp2_lines(results: &[DdpResult]) -> Vec<String> {
    let rows = one_gpu_rows(results);
    rows.iter()
        .filter_map(|(w, x, plain)| {
            let others: Vec<(Wrapper, f64)> = rows
                .iter()
                .filter(|(k, y, _)| k != w && y.model == x.model && y.micro_batch == x.micro_batch)
                .map(|(k, y, p)| (*k, y.step_time_median_s - p))
                .collect();
            let units = Fsdp2Units::from_layout(x.param_layout.as_ref()?);
            let own = one_gpu_own(*w, &others, &units, 2.0, None)?;
            let mut i = Fsdp2Inputs::new(*w, 1, units, *plain);
            i.own_one_gpu_s = own.seconds;
            let p = predict_fsdp2(&i, &Fsdp2Curves::default()).ok()?;
            Some(format!(
                "{} {w} at 1 GPU: FSDP2's step model predicts {:.2} ms from {}; measured {:.2} ms ({:+.1}%)",
                x.model,
                p.step_s * 1e3,
                own.how,
                x.step_time_median_s * 1e3,
                (p.step_s / x.step_time_median_s - 1.0) * 100.0
            ))
        })
        .collect()
}
