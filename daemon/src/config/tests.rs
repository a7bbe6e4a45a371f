//! Tests of the configuration: precedence, parsing, environment overrides, validation and
//! rendering.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::ratelimit::WorkRate;

fn file(text: &str) -> FileLayer {
    let path = PathBuf::from("/test/ddpcheck.toml");
    FileLayer {
        layer: Layer::from_toml(text, &path).unwrap(),
        path,
        present: true,
    }
}

fn env(pairs: &[(&str, &str)]) -> Layer {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Layer::from_env(|k| map.get(k).cloned()).unwrap()
}

#[test]
fn precedence_is_flags_env_file_defaults() {
    let f = file("collect_interval = 10\nmetrics_listen = \"127.0.0.1:9999\"\nsim = \"t4x2-pcie\"\nstate_dir = \"/srv/state\"\n");
    let e = env(&[
        ("DDPCHECK_COLLECT_INTERVAL", "20"),
        ("DDPCHECK_SIM", "a6000x4-phb"),
    ]);
    let flags = Layer {
        sim: Some("h200x2-nvlink".into()),
        ..Layer::default()
    };
    let eff = merge(flags, e, f);
    let s = eff.settings().unwrap();
    assert_eq!(s.sim.as_deref(), Some("h200x2-nvlink"));
    assert_eq!(eff.sources["sim"], Source::Flag);
    assert_eq!(s.collect_interval, Duration::from_secs(20));
    assert_eq!(
        eff.sources["collect_interval"],
        Source::Env("DDPCHECK_COLLECT_INTERVAL")
    );
    assert_eq!(s.metrics_listen, Some("127.0.0.1:9999".parse().unwrap()));
    assert_eq!(
        eff.sources["metrics_listen"],
        Source::File(PathBuf::from("/test/ddpcheck.toml"))
    );
    assert_eq!(s.state_dir, Some(PathBuf::from("/srv/state")));
    assert_eq!(s.listen, PathBuf::from(ddpcheck_proto::DEFAULT_SOCKET));
    assert_eq!(eff.sources["listen"], Source::Default);
    assert!(!eff.sources.contains_key("runtime_dir"));
    assert_eq!(s.runtime_dir, None);
}

#[test]
fn unknown_keys_and_wrong_types_are_errors() {
    let p = Path::new("/x.toml");
    let e = Layer::from_toml("colect_interval = 5\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("colect_interval"), "{e}");
    assert!(e.starts_with("config file /x.toml"), "{e}");
    let e = Layer::from_toml("collect_interval = \"fast\"\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("collect_interval"), "{e}");
    // A table where a key is expected is unknown too.
    assert!(Layer::from_toml("[daemon]\nlisten = \"/x\"\n", p).is_err());
}

#[test]
fn integer_and_float_seconds_both_parse() {
    let p = Path::new("/x.toml");
    assert_eq!(
        Layer::from_toml("collect_interval = 30\n", p)
            .unwrap()
            .collect_interval,
        Some(30.0)
    );
    assert_eq!(
        Layer::from_toml("collect_interval = 0.5\n", p)
            .unwrap()
            .collect_interval,
        Some(0.5)
    );
}

#[test]
fn missing_default_file_is_fine_missing_explicit_file_is_not() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope.toml");
    let e = read_file(Some(&missing)).unwrap_err();
    assert!(matches!(e, ConfigError::Missing { .. }), "{e}");
    let ok = d.path().join("ok.toml");
    std::fs::write(&ok, "listen = \"/tmp/x.sock\"\n").unwrap();
    let f = read_file(Some(&ok)).unwrap();
    assert!(f.present);
    assert_eq!(f.layer.listen, Some(PathBuf::from("/tmp/x.sock")));
    // The default path: absent on a development machine, and then simply empty.
    if !Path::new(DEFAULT_CONFIG_FILE).exists() {
        let f = read_file(None).unwrap();
        assert!(!f.present);
        assert_eq!(f.layer, Layer::default());
    }
}

#[test]
fn invalid_values_name_key_and_source() {
    let eff = merge(
        Layer::default(),
        env(&[("DDPCHECK_COLLECT_INTERVAL", "0.001")]),
        file(""),
    );
    let e = eff.settings().unwrap_err().to_string();
    assert!(
        e.contains("collect_interval") && e.contains("env DDPCHECK_COLLECT_INTERVAL"),
        "{e}"
    );
    let eff = merge(
        Layer::default(),
        Layer::default(),
        file("metrics_listen = \"nine-four-oh-two\"\n"),
    );
    let e = eff.settings().unwrap_err().to_string();
    assert!(
        e.contains("metrics_listen") && e.contains("file /test/ddpcheck.toml"),
        "{e}"
    );
    let eff = merge(
        Layer::default(),
        Layer::default(),
        file("tcp = \"0.0.0.0:9403\"\n"),
    );
    assert!(eff
        .settings()
        .unwrap_err()
        .to_string()
        .contains("mutual TLS"));
    let eff = merge(
        Layer::default(),
        Layer::default(),
        file("tls_cert = \"/c.pem\"\n"),
    );
    assert!(eff
        .settings()
        .unwrap_err()
        .to_string()
        .contains("go together"));
    let eff = merge(
        Layer::default(),
        Layer::default(),
        file("sim = \"no-such-profile\"\n"),
    );
    assert!(eff
        .settings()
        .unwrap_err()
        .to_string()
        .starts_with("sim = "));
    assert!(
        Layer::from_env(|k| (k == "DDPCHECK_COLLECT_INTERVAL").then(|| "soon".to_string()))
            .is_err()
    );
}

#[test]
fn metrics_none_disables_and_empty_env_is_unset() {
    let eff = merge(
        Layer::default(),
        env(&[("DDPCHECK_METRICS_LISTEN", "none"), ("DDPCHECK_SIM", "")]),
        file(""),
    );
    let s = eff.settings().unwrap();
    assert_eq!(s.metrics_listen, None);
    assert_eq!(s.sim, None);
}

#[test]
fn rendered_toml_parses_back_to_the_same_values() {
    let f = file("collect_interval = 12.5\nsim = \"h200x2-nvlink+ecc\"\nruntime_dir = \"/run/x \\\"q\\\"\"\n");
    let eff = merge(Layer::default(), Layer::default(), f);
    let text = eff.render_toml();
    let back = Layer::from_toml(&text, Path::new("rendered")).unwrap();
    assert_eq!(back, eff.values, "{text}");
    assert!(text.contains("# tcp (unset)"), "{text}");
    assert!(
        text.contains("collect_interval = 12.5  # file /test/ddpcheck.toml"),
        "{text}"
    );
    let j = eff.to_json();
    assert_eq!(j["values"]["collect_interval"], 12.5);
    assert_eq!(j["values"]["tcp"], serde_json::Value::Null);
    assert_eq!(j["sources"]["listen"], "default");
}

#[test]
fn split_off_moves_only_the_chosen_keys() {
    let mut all = Layer {
        sim: Some("t4x2-pcie".into()),
        collect_interval: Some(5.0),
        ..Layer::default()
    };
    let flags = all.split_off(|k| k == "sim");
    assert_eq!(flags.sim.as_deref(), Some("t4x2-pcie"));
    assert_eq!(all.sim, None);
    assert_eq!(all.collect_interval, Some(5.0));
    assert!(KEYS
        .iter()
        .all(|k| key(k.name).is_some() && k.env == format!("DDPCHECK_{}", k.name.to_uppercase())));
}

#[test]
fn history_max_runs_defaults_zero_and_bounds() {
    let none = || merge(Layer::default(), Layer::default(), file(""));
    assert_eq!(
        none().settings().unwrap().history_max_runs,
        Some(DEFAULT_HISTORY_MAX_RUNS)
    );
    let s = merge(
        Layer::default(),
        env(&[("DDPCHECK_HISTORY_MAX_RUNS", "500")]),
        file("history_max_runs = 0\n"),
    );
    assert_eq!(s.settings().unwrap().history_max_runs, Some(500));
    let s = merge(
        Layer::default(),
        Layer::default(),
        file("history_max_runs = 0\n"),
    );
    assert_eq!(s.settings().unwrap().history_max_runs, None, "0 keeps all");
    for text in ["history_max_runs = -1\n", "history_max_runs = 100000001\n"] {
        let e = merge(Layer::default(), Layer::default(), file(text))
            .settings()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("history_max_runs = "), "{text}: {e}");
    }
    assert!(
        Layer::from_env(|k| (k == "DDPCHECK_HISTORY_MAX_RUNS").then(|| "many".into())).is_err()
    );
}

#[test]
fn work_rate_defaults_layers_and_bounds() {
    // Default: 30 a minute, burst 10.
    let s = merge(Layer::default(), Layer::default(), file(""))
        .settings()
        .unwrap();
    assert_eq!(
        s.work_rate,
        WorkRate {
            per_minute: 30.0,
            burst: 10
        }
    );
    // File, environment and flag, with the usual precedence; integers and floats parse.
    let eff = merge(
        Layer {
            work_burst: Some(3),
            ..Layer::default()
        },
        env(&[
            ("DDPCHECK_WORK_RATE_PER_MINUTE", "6.5"),
            ("DDPCHECK_WORK_BURST", "4"),
        ]),
        file("work_rate_per_minute = 12\nwork_burst = 5\n"),
    );
    let s = eff.settings().unwrap();
    assert_eq!(
        s.work_rate,
        WorkRate {
            per_minute: 6.5,
            burst: 3
        }
    );
    assert_eq!(eff.sources["work_burst"], Source::Flag);
    assert_eq!(
        eff.sources["work_rate_per_minute"],
        Source::Env("DDPCHECK_WORK_RATE_PER_MINUTE")
    );
    // 0 turns it off.
    let s = merge(
        Layer::default(),
        Layer::default(),
        file("work_rate_per_minute = 0\n"),
    )
    .settings()
    .unwrap();
    assert!(s.work_rate.is_off());
    // Out of bounds or of the wrong type: an error naming the key and its source.
    for (text, key) in [
        ("work_rate_per_minute = -1\n", "work_rate_per_minute"),
        ("work_rate_per_minute = nan\n", "work_rate_per_minute"),
        ("work_rate_per_minute = 1e9\n", "work_rate_per_minute"),
        ("work_burst = 0\n", "work_burst"),
        ("work_burst = -3\n", "work_burst"),
        ("work_burst = 4294967297\n", "work_burst"),
    ] {
        let e = merge(Layer::default(), Layer::default(), file(text))
            .settings()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{key} = ")) && e.contains("file /test/ddpcheck.toml"),
            "{text}: {e}"
        );
    }
    assert!(Layer::from_toml("work_burst = 2.5\n", Path::new("/x.toml")).is_err());
    assert!(Layer::from_toml("work_burst = \"10\"\n", Path::new("/x.toml")).is_err());
    assert!(Layer::from_env(|k| (k == "DDPCHECK_WORK_BURST").then(|| "ten".into())).is_err());
    assert!(
        Layer::from_env(|k| (k == "DDPCHECK_WORK_RATE_PER_MINUTE").then(|| "fast".into())).is_err()
    );
    // Rendered back as TOML that parses to the same values (the burst stays an integer).
    let eff = merge(Layer::default(), Layer::default(), file("work_burst = 7\n"));
    let text = eff.render_toml();
    assert!(text.contains("work_burst = 7  # file"), "{text}");
    assert!(
        text.contains("work_rate_per_minute = 30.0  # default"),
        "{text}"
    );
    let back = Layer::from_toml(&text, Path::new("rendered")).unwrap();
    assert_eq!(back, eff.values);
    assert_eq!(eff.to_json()["values"]["work_burst"], 7);
}

#[test]
fn cluster_address_takes_a_host_or_an_ip_without_a_port() {
    let settings = |text: &str| merge(Layer::default(), Layer::default(), file(text)).settings();
    for (text, want) in [
        ("", None),
        ("cluster_address = \"10.0.0.11\"\n", Some("10.0.0.11")),
        (
            "cluster_address = \"node-07.cluster\"\n",
            Some("node-07.cluster"),
        ),
        ("cluster_address = \"[fd00::7]\"\n", Some("fd00::7")),
        ("cluster_address = \"fd00::7\"\n", Some("fd00::7")),
    ] {
        let s = settings(text).unwrap();
        assert_eq!(s.cluster_address.as_deref(), want, "{text}");
    }
    for bad in ["10.0.0.11:29500", "a b", "node_07", "-", "x..y"] {
        let e = settings(&format!("cluster_address = {bad:?}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cluster_address = ") && e.contains("not a host name or IP"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn web_config_file_is_read_and_checked() {
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("web.yml");
    let h = bcrypt::hash("pw", 4).unwrap();
    std::fs::write(&good, format!("basic_auth_users:\n  prom: '{h}'\n")).unwrap();
    let eff = merge(
        Layer::default(),
        env(&[("DDPCHECK_WEB_CONFIG_FILE", good.to_str().unwrap())]),
        file(""),
    );
    let s = eff.settings().unwrap();
    assert!(s.web_config.unwrap().auth_required());
    assert_eq!(
        eff.sources["web_config_file"],
        Source::Env("DDPCHECK_WEB_CONFIG_FILE")
    );
    // Unset: plain HTTP.
    let s = merge(Layer::default(), Layer::default(), file(""))
        .settings()
        .unwrap();
    assert!(s.web_config.is_none());
    let bad = d.path().join("bad.yml");
    std::fs::write(&bad, "basic_auth_users:\n  prom: plaintext\n").unwrap();
    let f = file(&format!("web_config_file = {:?}\n", bad.to_str().unwrap()));
    let e = merge(Layer::default(), Layer::default(), f)
        .settings()
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("web_config_file = ") && e.contains("file /test/ddpcheck.toml"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn allow_env_takes_nccl_and_cuda_names_only() {
    let s = merge(
        Layer::default(),
        env(&[("DDPCHECK_ALLOW_ENV", "NCCL_TOPO_FILE, NCCL_GRAPH_FILE")]),
        file(""),
    )
    .settings()
    .unwrap();
    assert_eq!(s.allow_env, ["NCCL_TOPO_FILE", "NCCL_GRAPH_FILE"]);
    let unset = merge(Layer::default(), Layer::default(), file(""));
    assert!(unset.settings().unwrap().allow_env.is_empty());
    let e = merge(
        Layer::default(),
        Layer::default(),
        file("allow_env = \"NCCL_TOPO_FILE,LD_PRELOAD\"\n"),
    )
    .settings()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("allow_env = ") && e.contains("\"LD_PRELOAD\" is not the name"),
        "{e}"
    );
}
