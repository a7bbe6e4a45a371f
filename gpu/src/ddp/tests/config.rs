//! Tests of the launch's config JSON as the embedded script reads it: every field the Rust side
//! writes (hooks, the timed stretch, the plain reference, the budget's counts, compile) reaches
//! the script.

use ddpcheck_core::ddp::{
    CommHook, DdpVariant, ModelSpec, ALL_REDUCE_PROBE_BYTES, POWERSGD_DEFAULT_RANK,
    POWERSGD_MAX_RANK,
};

use super::super::*;
use super::{embedded_script, request, with_script_module};

#[test]
fn rust_config_is_what_the_script_reads() {
    // Every hook as serde spells it must be accepted by the script's parser.
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let req = request(DdpVariant::default(), vec![1], 100.0);
    let mlp = ModelSpec::square_mlp(256, 3);
    // The script's reading of a config, or its Fatal message as a JSON string.
    let read = |json: &str| {
        with_script_module(
            py,
            &script,
            "try:\n    print(json.dumps(config.load_config(sys.argv[2])))\nexcept errors.Fatal as e:\n    print(json.dumps(str(e)))",
            &[json],
            &[],
        )
    };
    for (hook, expect) in [
        (CommHook::None, "none"),
        (CommHook::Fp16, "fp16"),
        (CommHook::Bf16, "bf16"),
        (CommHook::PowerSgd, "powersgd"),
    ] {
        let v = DdpVariant {
            hook,
            accum: 2,
            bucket_cap_mb: Some(50.0),
            ..DdpVariant::default()
        };
        let c = read(&script_config(&req, &[(&mlp, &v)], 1, false));
        assert_eq!(c["runs"][0][1]["hook"], expect);
        assert_eq!(c["runs"][0][1]["bucket_cap_mb"], 50.0);
        assert_eq!(c["runs"][0][1]["nocomm"], false);
        assert_eq!(c["runs"][0][0]["name"], "mlp:256x3");
        assert_eq!(c["steps"], 3);
        assert_eq!(c["nccl_timeout_s"], 50);
        assert_eq!(
            c["all_reduce_probe_bytes"],
            serde_json::json!(ALL_REDUCE_PROBE_BYTES)
        );
    }
    // PowerSGD's rank reaches the script: the one the variant names, else torch's default.
    for (name, rank) in [("powersgd4", 4), ("powersgd", POWERSGD_DEFAULT_RANK)] {
        let v: DdpVariant = name.parse().unwrap();
        let c = read(&script_config(&req, &[(&mlp, &v)], 1, false));
        assert_eq!(c["runs"][0][1]["powersgd_rank"], rank, "{name}");
    }
    // The script refuses a rank core would refuse.
    let v: DdpVariant = "powersgd4".parse().unwrap();
    let json = script_config(&req, &[(&mlp, &v)], 1, false);
    let over = json.replace(
        "\"powersgd_rank\":4",
        &format!("\"powersgd_rank\":{}", POWERSGD_MAX_RANK + 1),
    );
    assert_ne!(over, json);
    assert!(read(&over).as_str().unwrap_or("").contains("powersgd_rank"));
    // Probe sizes the script cannot all-reduce as whole float32 buffers are refused.
    let json = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let odd = json.replace("[4096,", "[4097,");
    assert_ne!(odd, json);
    let c = read(&odd);
    assert!(
        c.as_str().unwrap_or("").contains("all_reduce_probe_bytes"),
        "{c}"
    );
    // nocomm reaches the script, which refuses it with a hook as core does.
    let nocomm: DdpVariant = "nocomm+accum8".parse().unwrap();
    let json = script_config(&req, &[(&mlp, &nocomm)], 1, false);
    let c = read(&json);
    assert_eq!(c["runs"][0][1]["nocomm"], true);
    assert_eq!(c["runs"][0][1]["accum"], 8);
    let bad = json.replace("\"hook\":\"none\"", "\"hook\":\"bf16\"");
    assert_ne!(bad, json);
    let c = read(&bad);
    assert!(c.as_str().unwrap_or("").contains("nocomm"), "{c}");
}

/// A request's minimum timed seconds reach the script, which then times more steps where they are
/// short and exactly `steps` where they are long; none asked, none taken.
#[test]
fn a_minimum_timed_stretch_reaches_the_script_and_sizes_short_runs() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1], 100.0);
    let plain = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    assert!(!plain.contains("min_timed_s"), "{plain}");
    req.min_timed_s = 2.0;
    let sized = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let code = "cfg = config.load_config(sys.argv[2])\n\
                print(json.dumps({'plain': config.load_config(sys.argv[3])['min_timed_s'],\n\
                'sized': cfg['min_timed_s'], 'steps': cfg['steps'],\n\
                'short': timing.steps_for(2.0, 15, 0.002), 'long': timing.steps_for(2.0, 15, 0.2),\n\
                'tiny': timing.steps_for(2.0, 15, 1e-7), 'off': timing.steps_for(0.0, 15, 0.002)}))";
    let v = with_script_module(py, &script, code, &[&sized, &plain], &[]);
    assert_eq!(
        (v["plain"].as_f64(), v["sized"].as_f64()),
        (Some(0.0), Some(2.0))
    );
    // 2 s of 2 ms steps is 1000; 15 steps of 200 ms already time 3 s; never past the cap.
    assert_eq!(v["short"], 1000);
    assert_eq!(v["long"], 15);
    assert_eq!(v["tiny"], 10_000);
    assert_eq!(v["off"], 15);
    // Out of range is refused by the script as by core.
    let bad = sized.replace("\"min_timed_s\":2.0", "\"min_timed_s\":-1");
    assert_ne!(bad, sized);
    let code = "try:\n    config.load_config(sys.argv[2]); print(json.dumps('ok'))\nexcept errors.Fatal as e:\n    print(json.dumps(str(e)))";
    let v = with_script_module(py, &script, code, &[&bad], &[]);
    assert!(v.as_str().unwrap_or("").contains("min_timed_s"), "{v}");
}

/// The plain reference's rounds: every step of both sides in `rounds` blocks as even as can be,
/// in A B B A order (a drift along the launch then weighs on both sides alike), the warm-up in
/// each side's first block only; the flag reaches the script when asked.
#[test]
fn the_plain_reference_interleaves_blocks_in_abba_order_and_reaches_the_script() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1], 100.0);
    req.reference = ddpcheck_core::ddp::Reference::Plain;
    let config = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let code = "calls = []\n\
                def block(plain, n, first):\n\
                \x20   calls.append(['plain' if plain else 'ddp', n, first])\n\
                \x20   return [2.0 if plain else 3.0] * n\n\
                ddp, plain, pairs = timing.interleave_plain(3, 7, block)\n\
                print(json.dumps({'on': config.load_config(sys.argv[2])['plain_reference'],\n\
                'calls': calls, 'ddp': len(ddp), 'plain': len(plain), 'pairs': pairs}))";
    let v = with_script_module(py, &script, code, &[&config], &[]);
    assert_eq!(v["on"], true);
    assert_eq!(
        v["calls"],
        serde_json::json!([
            ["ddp", 3, true],
            ["plain", 3, true],
            ["plain", 2, false],
            ["ddp", 2, false],
            ["ddp", 2, false],
            ["plain", 2, false]
        ])
    );
    assert_eq!((v["ddp"].as_u64(), v["plain"].as_u64()), (Some(7), Some(7)));
    assert_eq!(
        v["pairs"],
        serde_json::json!([[3.0, 2.0], [3.0, 2.0], [3.0, 2.0]])
    );
}

/// The plain blocks are the 1-GPU launch's: an N-GPU launch's config leaves the key out.
#[test]
fn the_plain_reference_reaches_only_the_one_gpu_launch() {
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1, 2], 100.0);
    req.reference = ddpcheck_core::ddp::Reference::Plain;
    let config = |world: u32| -> serde_json::Value {
        let text = script_config(&req, &[(&mlp, &DdpVariant::default())], world, false);
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(config(1)["plain_reference"], true);
    assert!(config(2).get("plain_reference").is_none(), "{}", config(2));
}

/// The counts the launch budget relies on (sizing steps, rounds alone and of the plain reference)
/// reach the benchmark in its config, which runs what it is sent; its own defaults, for a run by
/// hand without them, are core's too, and so is its bound on steps.
#[test]
fn the_counts_the_budget_relies_on_travel_in_the_config() {
    use ddpcheck_core::ddp::{MAX_STEPS, PLAIN_ROUNDS, SIZING_STEPS, SOLO_ROUNDS};
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let req = request(DdpVariant::default(), vec![1], 100.0);
    let mlp = ModelSpec::square_mlp(256, 3);
    let json = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let sent: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(sent["sizing_steps"], SIZING_STEPS);
    assert_eq!(sent["solo_rounds"], SOLO_ROUNDS);
    assert_eq!(sent["plain_rounds"], PLAIN_ROUNDS);
    let other = json
        .replace(
            &format!("\"solo_rounds\":{SOLO_ROUNDS}"),
            "\"solo_rounds\":5",
        )
        .replace(
            &format!("\"plain_rounds\":{PLAIN_ROUNDS}"),
            "\"plain_rounds\":6",
        )
        .replace(
            &format!("\"sizing_steps\":{SIZING_STEPS}"),
            "\"sizing_steps\":7",
        );
    let without: serde_json::Value = serde_json::json!({"model": {"kind": "mlp", "width": 64}});
    let code = "read = lambda text: {k: config.load_config(text)[k] for k in\n\
                \x20   ('sizing_steps', 'solo_rounds', 'plain_rounds')}\n\
                print(json.dumps({'sent': read(sys.argv[2]), 'other': read(sys.argv[3]),\n\
                'default': read(sys.argv[4]), 'max_steps': timing.MAX_STEPS}))";
    let v = with_script_module(
        py,
        &script,
        code,
        &[&json, &other, &without.to_string()],
        &[],
    );
    let counts = serde_json::json!({
        "sizing_steps": SIZING_STEPS, "solo_rounds": SOLO_ROUNDS, "plain_rounds": PLAIN_ROUNDS
    });
    assert_eq!(v["sent"], counts);
    assert_eq!(
        v["other"],
        serde_json::json!({"sizing_steps": 7, "solo_rounds": 5, "plain_rounds": 6})
    );
    assert_eq!(v["default"], counts);
    assert_eq!(v["max_steps"], MAX_STEPS);
}

/// --compile reaches the script: the recipe carries torch.compile's mode as the script reads it
/// (the Python side's stand-in tests, gpu/tests/python/test_compile.py, take it from there: this
/// machine's torch has no torch.compile); an eager config leaves the key out.
#[test]
fn the_config_carries_compile_and_its_mode() {
    use ddpcheck_core::ddp::CompileMode;
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1], 100.0);
    let eager = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    assert!(!eager.contains("compile"), "{eager}");
    req.recipe.compile = Some(CompileMode::ReduceOverhead);
    let compiled = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let code =
        "print(json.dumps([config.load_config(a)['recipe'].get('compile') for a in sys.argv[2:]]))";
    let v = with_script_module(py, &script, code, &[&compiled, &eager], &[]);
    assert_eq!(v, serde_json::json!(["reduce-overhead", null]));
}
