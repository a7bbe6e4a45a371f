//! Property tests of everything that parses input from the outside world: the CLI/API parsers in
//! core, the daemon's TOML configuration, and prost decoding of the gRPC work requests. Each
//! property: no panic on arbitrary input, and every accepted value keeps the documented bounds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use ddpcheck_core::backend::CollectiveRequest;
use ddpcheck_core::collective::Collective;
use ddpcheck_core::ddp::{
    CommHook, DdpRequest, DdpVariant, Decoder, DecoderArch, ModelSource, ModelSpec, GPT2_VOCAB,
};
use ddpcheck_core::node_gpus::{select_gpus, GpuInfo};
use ddpcheck_core::params::ExplainParams;
use ddpcheck_core::topology::{GpuRef, LinkClass};
use ddpcheck_proto::v1::{
    self, model_choice, model_source::Kind as SourceKind, BenchCollectivesRequest, BenchDdpRequest,
    ConfigOverride, EnvCandidate, ExplainRequest, HuggingFace, ModelChoice, PreflightRequest,
};
use ddpcheckd::config::{self, FileLayer, Layer, COLLECT_INTERVAL_RANGE, KEYS};
use proptest::prelude::*;

/// Modest case counts: the whole file runs in a few seconds on the 2-core CI machine.
fn cfg(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Words of the parsers' vocabularies (and near misses), so that generated text is sometimes valid.
const WORDS: &[&str] = &[
    "gpt2",
    "gpt2-124m",
    "GPT2-355M",
    "gpt2-medium",
    "mlp:",
    "decoder:",
    "base",
    "baseline",
    "none",
    "bf16",
    "fp16",
    "powersgd",
    "fsdp",
    "nocomm",
    "nobucketview",
    "accum",
    "bucket",
    "X",
    "NV",
    "nv",
    "PIX",
    "pxb",
    "PHB",
    "node",
    "SYS",
    "all_reduce",
    "all-gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
    "_perf",
    "all",
    "GPU-",
    "MIG-",
    "+",
    ",",
    " ",
    ":",
];

/// Arbitrary text, weighted towards the parsers' own vocabulary so that accepted values occur.
fn texty() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        3 => proptest::sample::select(WORDS).prop_map(str::to_string),
        1 => "-?[0-9]{1,12}",
        1 => "[0-9]{0,4}\\.[0-9]{0,4}(e[+-]?[0-9]{1,3})?",
        1 => prop_oneof![Just("nan".to_string()), Just("inf".to_string())],
    ];
    prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9:,+._ -]{0,40}",
        (proptest::sample::select(WORDS), "[0-9]{0,3}", " {0,2}")
            .prop_map(|(w, n, pad)| format!("{pad}{w}{n}{pad}")),
        proptest::collection::vec(word, 0..8).prop_map(|v| v.concat()),
    ]
}

// ---------------------------------------------------------------------------------------------
// (a) core parsers

/// The bounds `ModelSpec::validate` documents, written out independently of it.
fn model_in_bounds(m: &ModelSpec) -> bool {
    match m {
        ModelSpec::Decoder(Decoder {
            layers,
            width,
            heads,
            seq,
            vocab,
            arch,
            ffn,
            kv_heads,
            ..
        }) => {
            (1..=256).contains(layers)
                && (8..=32768).contains(width)
                && (1..=256).contains(heads)
                && width % heads == 0
                && (8..=131_072).contains(seq)
                && (2..=1_000_000).contains(vocab)
                && ffn.is_none_or(|f| (8..=262_144).contains(&f))
                && kv_heads.is_none_or(|kv| kv > 0 && heads % kv == 0)
                && (*arch == DecoderArch::Gpt2 || (width / heads) % 2 == 0)
        }
        ModelSpec::Mlp {
            width,
            depth,
            input,
            output,
        } => {
            (8..=65536).contains(width)
                && (1..=64).contains(depth)
                && input.is_some() == output.is_some()
                && [input, output]
                    .into_iter()
                    .flatten()
                    .all(|n| (1..=1_048_576).contains(n))
        }
        // A model built by code has no bounds of its own: its launch reports its tensors.
        ModelSpec::External { .. } => true,
    }
}

/// A library model's documented bounds (docs: a name of letters, digits, `_`, `.`, `-`, at
/// most 128; a Hugging Face sequence of 8..=131072 tokens), written out independently.
fn source_in_bounds(m: &ModelSpec) -> bool {
    let name_ok = |n: &str| {
        (1..=128).contains(&n.len())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    };
    match m.source() {
        Some(ModelSource::Timm { name } | ModelSource::Torchvision { name }) => name_ok(name),
        Some(ModelSource::HuggingFace {
            model_type, seq, ..
        }) => (8..=131_072).contains(seq) && model_type.as_deref().is_none_or(name_ok),
        _ => true,
    }
}

fn variant_in_bounds(v: &DdpVariant) -> bool {
    (1..=1024).contains(&v.accum)
        && v.bucket_cap_mb
            .is_none_or(|mb| mb.is_finite() && (0.1..=4096.0).contains(&mb))
        && !(v.fsdp && v.hook != CommHook::None)
        && !(v.nocomm && (v.fsdp || v.hook != CommHook::None))
}

/// A request's model built by code from arbitrary text, for the wire tests: a timm name, or a
/// Hugging Face type with one override, as a caller could send them.
fn library_model(text: &str, n: u32) -> ModelChoice {
    let kind = if n.is_multiple_of(2) {
        SourceKind::Timm(text.to_string())
    } else {
        SourceKind::HuggingFace(HuggingFace {
            model_type: Some(text.to_string()),
            config_path: None,
            overrides: vec![ConfigOverride {
                key: text.to_string(),
                value: text.to_string(),
            }],
            seq: n,
        })
    };
    ModelChoice {
        kind: Some(model_choice::Kind::Source(v1::ModelSource {
            kind: Some(kind),
        })),
    }
}

proptest! {
    #![proptest_config(cfg(2000))]

    #[test]
    fn model_spec_never_panics_and_accepts_only_bounded_models(s in texty()) {
        if let Ok(m) = ModelSpec::from_str(&s) {
            prop_assert!(model_in_bounds(&m), "{s:?} accepted as {m:?}");
            prop_assert!(m.validate().is_ok());
            // The arithmetic on an accepted model stays finite (no overflow in u64 either).
            prop_assert!(m.params() > 0);
            prop_assert!(m.train_flops_per_sample().is_finite());
        }
    }

    #[test]
    fn variant_never_panics_and_accepts_only_bounded_variants(s in texty()) {
        if let Ok(v) = DdpVariant::from_str(&s) {
            prop_assert!(variant_in_bounds(&v), "{s:?} accepted as {v:?}");
        }
    }

    #[test]
    fn link_class_never_panics_and_round_trips(s in texty()) {
        if let Ok(c) = LinkClass::from_str(&s) {
            if let LinkClass::Nv(n) = c {
                prop_assert!(n > 0, "{s:?} accepted as NV0");
            }
            prop_assert_eq!(LinkClass::from_str(&c.to_string()), Ok(c));
        }
    }

    #[test]
    fn collective_never_panics_and_round_trips(s in texty()) {
        if let Ok(c) = Collective::from_str(&s) {
            prop_assert!(Collective::ALL.contains(&c));
            prop_assert_eq!(Collective::from_str(c.name()), Ok(c));
        }
    }
}

proptest! {
    #![proptest_config(cfg(1000))]

    /// Generated decoder and MLP specs: accepted exactly when the documented bounds hold.
    #[test]
    fn numeric_models_accepted_iff_in_bounds(
        nums in proptest::collection::vec(
            prop_oneof![0u32..300, 0u32..140_000, any::<u32>()], 1..=5),
        mlp in any::<bool>(),
    ) {
        let list = nums.iter().map(u32::to_string).collect::<Vec<_>>();
        if mlp {
            let take = nums.len().min(2);
            let s = format!("mlp:{}", list[..take].join(","));
            let want = ModelSpec::square_mlp(nums[0], nums.get(1).copied().unwrap_or(4));
            match ModelSpec::from_str(&s) {
                Ok(m) => { prop_assert_eq!(&m, &want); prop_assert!(model_in_bounds(&m)); }
                Err(_) => prop_assert!(!model_in_bounds(&want), "{s:?} rejected"),
            }
        } else {
            let s = format!("decoder:{}", list.join(","));
            match ModelSpec::from_str(&s) {
                Ok(m) => prop_assert!(model_in_bounds(&m), "{s:?} accepted as {m:?}"),
                Err(_) if nums.len() < 3 => {}
                Err(e) => {
                    let want = ModelSpec::gpt2_style(
                        "",
                        nums[0],
                        nums[1],
                        nums[2],
                        nums.get(3).copied().unwrap_or(1024),
                        nums.get(4).copied().unwrap_or(GPT2_VOCAB),
                    );
                    prop_assert!(!model_in_bounds(&want), "{s:?} rejected: {e}");
                }
            }
        }
    }

    /// Generated variants from the documented parts: accepted exactly when every part is in bounds
    /// and neither FSDP nor nocomm is combined with a hook, nor nocomm with FSDP.
    #[test]
    fn composed_variants_accepted_iff_in_bounds(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("base".to_string()), Just("bf16".to_string()), Just("fp16".to_string()),
                Just("powersgd".to_string()), Just("fsdp".to_string()),
                Just("nobucketview".to_string()), Just("nocomm".to_string()),
                (0u32..2000).prop_map(|k| format!("accum{k}")),
                (0.0f64..5000.0).prop_map(|mb| format!("bucket{mb}")),
            ],
            1..5),
    ) {
        let s = parts.join("+");
        let mut hook = false;
        let mut fsdp = false;
        let mut nocomm = false;
        let mut ok = true;
        for p in &parts {
            match p.as_str() {
                "bf16" | "fp16" | "powersgd" => hook = true,
                "fsdp" => fsdp = true,
                "nocomm" => nocomm = true,
                _ => {
                    if let Some(k) = p.strip_prefix("accum") {
                        ok &= (1..=1024).contains(&k.parse::<u32>().unwrap());
                    } else if let Some(mb) = p.strip_prefix("bucket") {
                        ok &= (0.1..=4096.0).contains(&mb.parse::<f64>().unwrap());
                    }
                }
            }
        }
        ok &= !(hook && fsdp) && !(nocomm && (hook || fsdp));
        let got = DdpVariant::from_str(&s);
        prop_assert_eq!(got.is_ok(), ok, "{:?} -> {:?}", s, got);
        if let Ok(v) = got {
            prop_assert!(variant_in_bounds(&v));
        }
    }

    #[test]
    fn nv_counts_accepted_iff_positive(n in any::<u32>()) {
        let got = LinkClass::from_str(&format!("nv{n}"));
        prop_assert_eq!(got.is_ok(), n > 0);
    }
}

/// Requests whose fields are each mostly in bounds, so that about a fifth pass validation.
fn collective_request() -> impl Strategy<Value = CollectiveRequest> {
    let ops = prop_oneof![
        9 => proptest::collection::vec(proptest::sample::select(Collective::ALL.to_vec()), 1..4),
        1 => Just(Vec::new()),
    ];
    let min = prop_oneof![8 => 1u64..(1 << 24), 1 => Just(0u64), 1 => any::<u64>()];
    let max = prop_oneof![8 => (1u64 << 20)..(17u64 << 30), 1 => Just(0u64), 1 => any::<u64>()];
    let step = prop_oneof![8 => 2u64..=1024, 1 => 0u64..2, 1 => any::<u64>()];
    let iters = prop_oneof![8 => 1u32..=10_000, 1 => Just(0u32), 1 => any::<u32>()];
    let warmup = prop_oneof![8 => 0u32..=10_000, 2 => any::<u32>()];
    let deadline = prop_oneof![
        8 => (0u64..=3600, 0u32..1_000_000_000),
        2 => (any::<u64>(), 0u32..1_000_000_000),
    ]
    .prop_map(|(s, ns)| Duration::new(s, ns));
    let env_key = prop_oneof![
        8 => "NCCL_[A-Z_]{0,12}",
        4 => "CUDA_[A-Z_]{0,12}",
        1 => "[A-Za-z_]{0,12}",
        1 => any::<String>(),
    ];
    (
        ops,
        min,
        max,
        step,
        iters,
        warmup,
        deadline,
        proptest::collection::vec((env_key, any::<String>()), 0..3),
        any::<bool>(),
    )
        .prop_map(
            |(ops, min_bytes, max_bytes, step_factor, iters, warmup_iters, deadline, env, b)| {
                CollectiveRequest {
                    ops,
                    gpus: Vec::<GpuRef>::new(),
                    min_bytes,
                    max_bytes,
                    step_factor,
                    warmup_iters,
                    iters,
                    in_place: b,
                    check: !b,
                    env,
                    deadline,
                    inject_hang: b,
                    group: None,
                    record_transport: false,
                }
            },
        )
}

fn gpu(i: u32) -> GpuInfo {
    let uuid = format!("GPU-{i:04x}beef-0000-4000-8000-{i:012x}");
    ddpcheck_testkit::healthy_gpu(i, uuid, "Prop GPU", 1 << 30)
}

fn gpu_spec(n: u32) -> impl Strategy<Value = String> {
    let item = prop_oneof![
        (0..n + 3).prop_map(|i| i.to_string()),
        (0..n + 1, 4usize..12).prop_map(|(i, len)| gpu(i).uuid[..len].to_string()),
        (0..n + 1).prop_map(|i| gpu(i).pci_bus_id.to_lowercase()),
        (0..n + 1).prop_map(|i| gpu(i).pci_bus_id[9..].to_string()),
        Just(String::new()),
        Just("all".to_string()),
        Just("MIG-".to_string()),
        "[ -~]{0,10}",
    ];
    prop_oneof![
        proptest::collection::vec(item, 0..6).prop_map(|v| v.join(",")),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(cfg(2000))]

    #[test]
    fn collective_request_validate_never_panics_and_accepts_only_bounded(req in collective_request()) {
        if req.validate().is_ok() {
            prop_assert!(!req.ops.is_empty());
            prop_assert!(req.min_bytes >= 1 && req.min_bytes <= req.max_bytes);
            prop_assert!(req.max_bytes <= 16 << 30);
            prop_assert!((2..=1024).contains(&req.step_factor));
            prop_assert!((1..=10_000).contains(&req.iters) && req.warmup_iters <= 10_000);
            prop_assert!(!req.deadline.is_zero() && req.deadline <= Duration::from_secs(3600));
            for (k, _) in &req.env {
                prop_assert!(k.starts_with("NCCL_") || k.starts_with("CUDA_"), "{k:?}");
            }
        }
    }

    #[test]
    fn select_gpus_never_panics_and_selects_only_known_gpus(n in 0u32..9, spec in gpu_spec(8)) {
        let inv: Vec<GpuInfo> = (0..n).map(gpu).collect();
        if let Ok(sel) = select_gpus(&inv, &spec) {
            for g in &sel {
                prop_assert!(inv.contains(g), "{spec:?} selected {g:?}, not in the inventory");
            }
            let mut uuids: Vec<&str> = sel.iter().map(|g| g.uuid.as_str()).collect();
            uuids.sort_unstable();
            uuids.dedup();
            prop_assert_eq!(uuids.len(), sel.len(), "{:?} selected a GPU twice", spec);
            let t = spec.trim();
            if t.is_empty() || t.eq_ignore_ascii_case("all") {
                prop_assert_eq!(sel.len(), inv.len());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (b) configuration

/// A TOML value of some type; `well_typed` says whether a key takes it.
#[derive(Clone, Debug)]
enum Val {
    Str(String),
    Float(f64),
    Int(i64),
    Bool(bool),
    Array,
}

impl Val {
    fn toml(&self) -> String {
        match self {
            Val::Str(s) => toml::Value::String(s.clone()).to_string(),
            Val::Float(f) if f.is_nan() => "nan".into(),
            Val::Float(f) if f.is_infinite() => (if *f > 0.0 { "inf" } else { "-inf" }).into(),
            // `{:?}` keeps a decimal point or exponent, so TOML reads a float.
            Val::Float(f) => format!("{f:?}"),
            Val::Int(i) => i.to_string(),
            Val::Bool(b) => b.to_string(),
            Val::Array => "[1, 2]".into(),
        }
    }
}

fn value() -> impl Strategy<Value = Val> {
    prop_oneof![
        3 => prop_oneof![
            any::<String>(),
            "[ -~]{0,30}",
            Just("127.0.0.1:9402".to_string()),
            Just("none".to_string()),
            Just("h200x2-nvlink+hang".to_string()),
        ].prop_map(Val::Str),
        2 => prop_oneof![any::<f64>(), 0.0f64..100_000.0, -10.0f64..10.0].prop_map(Val::Float),
        1 => prop_oneof![any::<i64>(), -5i64..100_000].prop_map(Val::Int),
        1 => any::<bool>().prop_map(Val::Bool),
        1 => Just(Val::Array),
    ]
}

/// Whether `v` has the type the key takes (`collect_interval` and `work_rate_per_minute` are
/// numbers, `work_burst` and `history_max_runs` integers, the rest strings).
fn well_typed(key: &str, v: &Val) -> bool {
    let number = ["collect_interval", "work_rate_per_minute"].contains(&key);
    let integer = ["work_burst", "history_max_runs"].contains(&key);
    match v {
        Val::Str(_) => !number && !integer,
        Val::Float(_) => number,
        Val::Int(_) => number || integer,
        Val::Bool(_) | Val::Array => false,
    }
}

fn toml_doc() -> impl Strategy<Value = (BTreeMap<String, Val>, String)> {
    let known = proptest::sample::select(KEYS.iter().map(|k| k.name).collect::<Vec<_>>());
    let name = prop_oneof![
        4 => known.prop_map(str::to_string),
        1 => "[a-z_]{1,16}",
    ];
    proptest::collection::btree_map(name, value(), 0..6).prop_map(|m| {
        let text = m
            .iter()
            .map(|(k, v)| format!("{k} = {}\n", v.toml()))
            .collect::<String>();
        (m, text)
    })
}

proptest! {
    #![proptest_config(cfg(1500))]

    #[test]
    fn config_from_arbitrary_text_never_panics(text in prop_oneof![any::<String>(), "[ -~\n]{0,200}"]) {
        let _ = Layer::from_toml(&text, Path::new("/prop/ddpcheck.toml"));
    }

    /// Generated files: parsed exactly when every key is known and of the right type; an unknown
    /// key is always rejected, naming it; and the settings from an accepted file never panic and
    /// keep the documented bounds.
    #[test]
    fn config_rejects_unknown_keys_and_bounds_accepted_values((m, text) in toml_doc()) {
        let path = PathBuf::from("/prop/ddpcheck.toml");
        let unknown: Vec<&String> = m.keys().filter(|k| config::key(k).is_none()).collect();
        let typed = m.iter().all(|(k, v)| config::key(k).is_none() || well_typed(k, v));
        match Layer::from_toml(&text, &path) {
            Ok(layer) => {
                prop_assert!(unknown.is_empty(), "unknown keys {unknown:?} accepted:\n{text}");
                prop_assert!(typed, "wrongly typed value accepted:\n{text}");
                let file = FileLayer { path: path.clone(), present: true, layer };
                let eff = config::merge(Layer::default(), Layer::default(), file);
                let _ = eff.render_toml();
                if let Ok(s) = eff.settings() {
                    let (lo, hi) = COLLECT_INTERVAL_RANGE;
                    let i = s.collect_interval.as_secs_f64();
                    prop_assert!(i >= lo * 0.999_999 && i <= hi * 1.000_001, "interval {i}");
                    prop_assert!(!s.listen.as_os_str().is_empty());
                    prop_assert!(s.tcp.is_none() || s.tls.is_some(), "TCP without mTLS accepted");
                    prop_assert!(
                        s.history_max_runs.is_none_or(|n| (1..=config::MAX_HISTORY_MAX_RUNS).contains(&n)),
                        "history_max_runs {:?}", s.history_max_runs
                    );
                }
            }
            Err(e) => {
                let msg = e.to_string();
                match unknown.first() {
                    // Serde stops at the first bad key in file order: with every known key well
                    // typed, that is the first unknown one.
                    Some(k) if typed => prop_assert!(
                        msg.contains(k.as_str()), "error does not name {k:?}: {msg}"),
                    Some(_) => {}
                    None => prop_assert!(!typed, "well-formed file rejected: {msg}\n{text}"),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (c) gRPC request decoding

/// Raw protobuf fields: valid tags with payloads of every wire type, mostly for fields 1..12 so
/// that the decoder reaches the real fields with the wrong or right wire type.
fn raw_fields() -> impl Strategy<Value = Vec<u8>> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    let field = (
        prop_oneof![1u64..26, any::<u32>().prop_map(u64::from)],
        0u64..8,
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..24),
        any::<bool>(),
    )
        .prop_map(|(num, wt, n, bytes, lie)| {
            let mut out = Vec::new();
            varint((num << 3) | wt, &mut out);
            match wt {
                0 => varint(n, &mut out),
                1 => out.extend_from_slice(&n.to_le_bytes()),
                2 => {
                    // Sometimes a length that does not match the payload.
                    let len = if lie { n % 64 } else { bytes.len() as u64 };
                    varint(len, &mut out);
                    out.extend_from_slice(&bytes);
                }
                // fixed32: the low four bytes.
                5 => out.extend_from_slice(&n.to_le_bytes()[..4]),
                _ => out.extend_from_slice(&bytes),
            }
            out
        });
    proptest::collection::vec(field, 0..10).prop_map(|v| v.concat())
}

/// Decoding any bytes fails cleanly or gives a message that survives encode and decode (floats
/// compared by bits, so a NaN from the wire counts as equal to itself).
fn decode_all(bytes: &[u8]) {
    use prost::Message;
    // Proto3 does not send a field equal to its default, so -0.0 comes back as 0.0.
    fn zero(f: &mut f64) -> u64 {
        let bits = if *f == 0.0 { 0 } else { f.to_bits() };
        *f = 0.0;
        bits
    }
    if let Ok(mut m) = PreflightRequest::decode(bytes) {
        let mut back = PreflightRequest::decode(&m.encode_to_vec()[..]).unwrap();
        assert_eq!(
            zero(&mut back.deadline_seconds),
            zero(&mut m.deadline_seconds)
        );
        assert_eq!(back, m);
    }
    if let Ok(mut m) = BenchCollectivesRequest::decode(bytes) {
        let mut back = BenchCollectivesRequest::decode(&m.encode_to_vec()[..]).unwrap();
        assert_eq!(
            zero(&mut back.deadline_seconds),
            zero(&mut m.deadline_seconds)
        );
        assert_eq!(back, m);
        // The handler's first step on a decoded request: parse the collective names.
        for op in &m.ops {
            let _ = op.parse::<Collective>();
        }
    }
    if let Ok(mut m) = BenchDdpRequest::decode(bytes) {
        let mut back = BenchDdpRequest::decode(&m.encode_to_vec()[..]).unwrap();
        assert_eq!(
            zero(&mut back.deadline_seconds),
            zero(&mut m.deadline_seconds)
        );
        assert_eq!(
            zero(&mut back.price_per_gpu_hour),
            zero(&mut m.price_per_gpu_hour)
        );
        assert_eq!(back, m);
        // The handler's first step: each model read from its fields, every bound checked.
        for choice in &m.models {
            if let Ok(spec) = ModelSpec::try_from(choice.clone()) {
                assert!(
                    model_in_bounds(&spec) && source_in_bounds(&spec),
                    "{choice:?} accepted as {spec:?}"
                );
            }
        }
        // Each variant read from its fields: accepted only within the text form's bounds.
        if let Ok(r) = DdpRequest::try_from(m.clone()) {
            assert!(r.variants.iter().all(variant_in_bounds), "{m:?}");
        }
    }
    if let Ok(mut m) = ExplainRequest::decode(bytes) {
        let mut back = ExplainRequest::decode(&m.encode_to_vec()[..]).unwrap();
        assert_eq!(
            zero(&mut back.deadline_seconds),
            zero(&mut m.deadline_seconds)
        );
        assert_eq!(back, m.clone());
        // The handler's first step: the parameters, or a refusal within the bounds.
        if let Ok(p) = ExplainParams::try_from(m) {
            assert!(p.max_bytes > 0 && p.max_bytes <= CollectiveRequest::MAX_BYTES);
            assert!(!p.deadline.is_zero() && p.deadline <= Duration::from_secs(3600));
        }
    }
}

proptest! {
    #![proptest_config(cfg(3000))]

    #[test]
    fn request_decoding_never_panics(
        bytes in prop_oneof![proptest::collection::vec(any::<u8>(), 0..256), raw_fields()]
    ) {
        decode_all(&bytes);
    }
}

proptest! {
    #![proptest_config(cfg(500))]

    /// Well-formed requests with arbitrary values survive encode/decode, and any truncation of
    /// their encoding decodes or fails cleanly.
    #[test]
    fn encoded_requests_round_trip_and_truncations_fail_cleanly(
        gpus in any::<String>(),
        ops in proptest::collection::vec(any::<String>(), 0..4),
        nums in (any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>()),
        deadline in any::<f64>(),
        env in proptest::collection::hash_map(any::<String>(), any::<String>(), 0..3),
        cut in any::<prop::sample::Index>(),
    ) {
        use prost::Message;
        let req = BenchCollectivesRequest {
            ops: ops.clone(),
            gpus: gpus.clone(),
            min_bytes: nums.0,
            max_bytes: nums.1,
            step_factor: nums.2,
            iters: nums.3,
            warmup_iters: nums.2,
            in_place: true,
            check: false,
            env_ab: vec![EnvCandidate { env: env.clone() }],
            deadline_seconds: deadline,
        };
        let bytes = req.encode_to_vec();
        let back = BenchCollectivesRequest::decode(&bytes[..]).unwrap();
        prop_assert_eq!(back.ops, ops.clone());
        // Bit for bit, except that proto3 does not send -0.0 (it equals the default).
        prop_assert!(
            back.deadline_seconds.to_bits() == deadline.to_bits()
                || (back.deadline_seconds == 0.0 && deadline == 0.0)
        );
        decode_all(&bytes[..cut.index(bytes.len() + 1)]);
        let ddp = BenchDdpRequest {
            models: ops.iter().map(|name| library_model(name, nums.2)).collect(),
            variants: ops.iter().map(|_| v1::Variant {
                hook: i32::from_ne_bytes(nums.2.to_ne_bytes()),
                accumulation: nums.3,
                bucket_cap_mb: deadline,
                ..Default::default()
            }).collect(),
            world_sizes: vec![nums.2, nums.3],
            micro_batch: nums.3,
            warmup_steps: nums.2,
            steps: nums.3,
            price_per_gpu_hour: deadline,
            env,
            deadline_seconds: deadline,
            repeats: nums.2,
            min_timed_seconds: deadline,
            ..Default::default()
        };
        let bytes = ddp.encode_to_vec();
        decode_all(&bytes);
        decode_all(&bytes[..cut.index(bytes.len() + 1)]);
        let pre = PreflightRequest {
            gpus,
            min_bytes: nums.0,
            max_bytes: nums.1,
            iters: nums.2,
            warmup_iters: nums.3,
            deadline_seconds: deadline,
            inject_hang: true,
            skip_host_copies: true,
            wait_if_busy_seconds: deadline,
        };
        let bytes = pre.encode_to_vec();
        decode_all(&bytes);
        decode_all(&bytes[..cut.index(bytes.len() + 1)]);
        let explain = ExplainRequest {
            gpus: pre.gpus,
            max_bytes: nums.1,
            deadline_seconds: deadline,
            ab: true,
        };
        let bytes = explain.encode_to_vec();
        decode_all(&bytes);
        decode_all(&bytes[..cut.index(bytes.len() + 1)]);
    }
}
