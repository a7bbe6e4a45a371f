//! The host-side levers on reports built here: each appears only where its measured figure
//! supports it, and says the figure.

use super::tests::{a6000_input, codes, warning};
use super::*;
use crate::ddp::{Buffers, HostFacts, NoGrad};

fn no_grad(names: &[&str], same: bool) -> NoGrad {
    NoGrad {
        names: names.iter().map(|n| n.to_string()).collect(),
        count: u32::try_from(names.len()).unwrap(),
        params: 72 * u64::try_from(names.len()).unwrap(),
        micro_batches: 2,
        same_each_micro_batch: same,
    }
}

/// The a6000 input (4 GPUs) with these host facts from a 4-GPU run of 200 ms a step.
fn with_host(no_grad: Option<NoGrad>, broadcast_s: Option<f64>) -> RecommendInput {
    let mut input = a6000_input();
    input.host = Some(HostMeasured {
        facts: HostFacts {
            no_grad,
            buffers: broadcast_s.map(|t| Buffers {
                count: 159,
                bytes: 4 << 20,
                broadcast_s: Some(t),
            }),
        },
        step_s: 0.200,
        world: 4,
        rests_on: "the base run on 4 GPUs".into(),
    });
    input
}

fn lever_codes(input: &RecommendInput) -> Vec<String> {
    let r = recommend(input).unwrap();
    let levers = [
        "unused_parameters",
        "find_unused_parameters_unneeded",
        "broadcast_buffers",
        "static_graph",
    ];
    codes(&r)
        .into_iter()
        .filter(|c| levers.contains(c))
        .map(String::from)
        .collect()
}

#[test]
fn no_host_facts_no_levers() {
    assert!(lever_codes(&a6000_input()).is_empty());
}

#[test]
fn unused_parameters_are_named_with_their_count_and_the_choice_they_leave() {
    let mut input = with_host(
        Some(no_grad(&["aux.weight", "aux.bias", "x.w", "y.w"], true)),
        None,
    );
    input.recipe.find_unused_parameters = true;
    let r = recommend(&input).unwrap();
    let w = warning(&r, "unused_parameters");
    assert!(
        w.text.starts_with("4 trainable parameter tensors"),
        "{}",
        w.text
    );
    assert!(
        w.text.contains("aux.weight, aux.bias, x.w and 1 more"),
        "{}",
        w.text
    );
    assert!(w.text.contains("remove them"), "{}", w.text);
    assert!(w.text.contains("static_graph=True copes"), "{}", w.text);
    assert_eq!(w.rests_on, "the base run on 4 GPUs");
    // Not the same ones each micro-batch: no static_graph suggestion.
    let mut input = with_host(Some(no_grad(&["aux.weight"], false)), None);
    input.recipe.find_unused_parameters = true;
    let r = recommend(&input).unwrap();
    assert!(!warning(&r, "unused_parameters")
        .text
        .contains("static_graph"));
}

#[test]
fn find_unused_parameters_without_unused_ones_is_said_to_be_unneeded_only_where_set() {
    let mut input = with_host(Some(no_grad(&[], true)), None);
    assert!(lever_codes(&input).is_empty(), "not set: nothing to say");
    input.recipe.find_unused_parameters = true;
    let r = recommend(&input).unwrap();
    let w = warning(&r, "find_unused_parameters_unneeded");
    assert!(w.text.contains("each of 2 micro-batches"), "{}", w.text);
}

#[test]
fn broadcast_buffers_false_from_two_percent_of_a_step_with_its_caveat() {
    // 5 ms of a 200 ms step: 2.5%.
    let r = recommend(&with_host(None, Some(0.005))).unwrap();
    let w = warning(&r, "broadcast_buffers");
    assert!(w.text.contains("2.5% of the"), "{}", w.text);
    assert!(w.text.contains("159 buffers"), "{}", w.text);
    assert!(w.text.contains("broadcast_buffers=False"), "{}", w.text);
    assert!(w.text.contains("BatchNorm"), "{}", w.text);
    // 3 ms: 1.5%, below the line.
    assert!(lever_codes(&with_host(None, Some(0.003))).is_empty());
    // Already off: nothing to suggest.
    let mut off = with_host(None, Some(0.005));
    off.recipe.broadcast_buffers = false;
    assert!(lever_codes(&off).is_empty());
}

fn own(ratio: f64) -> DdpOwnWork {
    DdpOwnWork {
        ddp_step_s: 0.100 * ratio,
        plain_step_s: 0.100,
        ratio,
        noise_bound: Some(0.01),
        rests_on: "1-GPU base run and the model without DDP".into(),
    }
}

#[test]
fn no_static_graph_on_ddps_own_work_within_its_rounds_noise() {
    // +9.4% from one launch whose rounds spread ±15%: within their noise (repeated launches of
    // the same model read +1.6 to +2.0%).
    let mut input = with_host(Some(no_grad(&[], true)), None);
    input.ddp_own_work = Some(DdpOwnWork {
        noise_bound: Some(0.15),
        ..own(1.094)
    });
    assert!(lever_codes(&input).is_empty(), "{:?}", lever_codes(&input));
    // The same reading from rounds that agree to ±2%: suggested, with the bound it clears.
    input.ddp_own_work = Some(DdpOwnWork {
        noise_bound: Some(0.02),
        ..own(1.094)
    });
    let r = recommend(&input).unwrap();
    let w = warning(&r, "static_graph");
    assert!(w.text.contains("+9.4% of a step"), "{}", w.text);
    assert!(
        w.text.contains("beyond its rounds' noise (±2.0%)"),
        "{}",
        w.text
    );
    // One round: nothing measured its spread, and one launch's figure may be 20% off.
    input.ddp_own_work = Some(DdpOwnWork {
        noise_bound: None,
        ..own(1.094)
    });
    assert!(lever_codes(&input).is_empty());
}

#[test]
fn static_graph_from_three_percent_of_ddps_own_work_on_a_static_graph() {
    let mut input = with_host(Some(no_grad(&[], true)), None);
    input.ddp_own_work = Some(own(1.05));
    let r = recommend(&input).unwrap();
    let w = warning(&r, "static_graph");
    assert!(w.text.contains("+5.0% of a step"), "{}", w.text);
    assert!(w.text.contains("static_graph=True"), "{}", w.text);
    assert!(w.rests_on.contains("without DDP") && w.rests_on.contains("4 GPUs"));
    // 2% own work: below the line.
    input.ddp_own_work = Some(own(1.02));
    assert!(lever_codes(&input).is_empty());
    // A graph that used other parameters in another micro-batch: not static.
    let mut input = with_host(Some(no_grad(&["gate.w"], false)), None);
    input.recipe.find_unused_parameters = true;
    input.ddp_own_work = Some(own(1.05));
    assert_eq!(lever_codes(&input), vec!["unused_parameters"]);
    // Already set.
    let mut input = with_host(Some(no_grad(&[], true)), None);
    input.recipe.static_graph = true;
    input.ddp_own_work = Some(own(1.05));
    assert!(lever_codes(&input).is_empty());
}

#[test]
fn one_gpu_gets_no_levers() {
    let mut input = with_host(Some(no_grad(&[], true)), Some(0.05));
    input.ddp_own_work = Some(own(1.10));
    input.gpus = 1;
    assert!(lever_codes(&input).is_empty());
}
