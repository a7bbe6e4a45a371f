//! The metrics catalogue and the Grafana dashboards, proven against real services: simulated
//! nodes (healthy, degraded, stuck) are scraped by a real Prometheus, every query of every
//! dashboard panel must succeed and return data, promtool must accept every scrape, and
//! docs/metrics.md must name every exported family with its type. docs/metrics.md ("What the
//! tests check") describes the checks for operators.

// One test against one Prometheus: starting it is the slow part, so every check of the
// catalogue and the dashboards runs on the same scrape, in sequence.
#![allow(clippy::too_many_lines)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{code, http_request, percent_encode, stderr, stdout, Daemon};
use grafana::{dashboards, name, panels, substitute, var_query, variables};
use prometheus::{result_count, service, Prometheus, Query};
use scrape::{
    assert_fleet_causes, assert_fleet_host_copies, families, metric_names, recorded_names,
};
use serde_json::Value;

/// The simulated fleet: (instance label, sim spec). One healthy node; one whose interconnect is
/// slow and whose PCIe link is downtrained (its plain DDP loses to one GPU); one virtual machine
/// with a stuck NVML probe. Together they make every dashboard query, including the "what is
/// wrong" tables and the causes of low bandwidth, return rows.
const FLEET: [(&str, &str); 3] = [
    ("h200x2-nvlink", "h200x2-nvlink"),
    ("a6000x4-phb", "a6000x4-phb+degraded-pcie+slow-link"),
    ("t4x2-pcie", "t4x2-pcie+stuck-nvml+vm"),
];

#[test]
fn metrics_catalogue_promtool_and_dashboards_against_a_real_prometheus() {
    let started = Instant::now();
    // 1. The fleet: every daemon runs a preflight and a small DDP benchmark so every series exists.
    let nodes: Vec<(&str, &str, Daemon)> = FLEET
        .iter()
        .map(|(inst, spec)| (*inst, *spec, Daemon::start(Some(spec))))
        .collect();
    for (_, spec, d) in &nodes {
        let o = d.cli(&["check"]);
        let c = code(&o);
        if *spec == "h200x2-nvlink" {
            assert_eq!(c, 0, "{spec}: {}{}", stdout(&o), stderr(&o));
        } else {
            assert!(
                c == 1 || c == 2,
                "{spec}: exit {c}: {}{}",
                stdout(&o),
                stderr(&o)
            );
        }
        let o = d.cli(&common::words(
            "bench ddp --model gpt2-124m --gpus 1,2 --steps 4 --warmup-steps 1",
        ));
        // A stuck GPU refuses CUDA work: that node's DDP benchmark fails, the others must run.
        if !spec.contains("stuck-nvml") {
            assert_eq!(
                code(&o),
                0,
                "{spec}: bench ddp: {}{}",
                stdout(&o),
                stderr(&o)
            );
        }
    }
    let scrapes: Vec<(&str, String)> = nodes
        .iter()
        .map(|(inst, _, d)| (*inst, d.scrape()))
        .collect();

    assert_fleet_causes(&scrapes);
    assert_fleet_host_copies(&scrapes);

    // 2. The catalogue: docs/metrics.md names every exported family with its type, and names
    //    nothing that is not exported.
    let mut exported: BTreeMap<String, String> = BTreeMap::new();
    for (_, s) in &scrapes {
        exported.extend(families(s));
    }
    let doc = std::fs::read_to_string(common::repo_root().join("docs/metrics.md"))
        .expect("docs/metrics.md");
    for (fam, kind) in &exported {
        let row = doc
            .lines()
            .find(|l| l.starts_with("| `") && l.contains(&format!("`{fam}`")))
            .unwrap_or_else(|| panic!("docs/metrics.md has no catalogue row for {fam}"));
        assert!(
            row.contains(&format!("| {kind} |")),
            "docs/metrics.md gives {fam} another type than {kind}: {row}"
        );
    }
    for n in metric_names(&doc) {
        assert!(
            exported.contains_key(&n),
            "docs/metrics.md names {n}, which ddpcheckd does not export"
        );
    }

    // 3. Every metric a dashboard names is exported.
    let dash = dashboards();
    for (path, d) in &dash {
        for n in metric_names(&d.to_string()) {
            assert!(
                exported.contains_key(&n),
                "{} uses {n}, which ddpcheckd does not export",
                name(path)
            );
        }
    }

    // 4. promtool accepts every scrape without a single lint.
    if let Some(promtool) = service("promtool", "prometheus") {
        for (inst, s) in &scrapes {
            let mut child = Command::new(&promtool)
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn promtool");
            {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
            }
            let o = child.wait_with_output().unwrap();
            assert!(
                o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
                "promtool check metrics on {inst}'s scrape ({}):\n{}{}",
                o.status,
                stdout(&o),
                stderr(&o)
            );
        }
        // The alert rules: valid, and their unit tests pass.
        let rules = common::repo_root().join("deploy/prometheus/ddpcheck-alerts.yml");
        let tests = common::repo_root().join("deploy/prometheus/ddpcheck-alerts.test.yml");
        for args in [["check", "rules"], ["test", "rules"]] {
            let file = if args[0] == "check" { &rules } else { &tests };
            let o = Command::new(&promtool)
                .args(args)
                .arg(file)
                .output()
                .expect("run promtool");
            assert!(
                o.status.success(),
                "promtool {} {}: {}{}",
                args.join(" "),
                file.display(),
                stdout(&o),
                stderr(&o)
            );
        }
    } else {
        return;
    }

    // 5. A real Prometheus scrapes the fleet; every dashboard query must return data.
    let Some(prometheus) = service("prometheus", "prometheus") else {
        return;
    };
    // NCCL Inspector beside the fleet: a real node_exporter reads the committed textfile, moved
    // to two simulated hosts as the Inspector of a job on each would write it.
    let Some(node_exporter) = common::find_program("node_exporter")
        .or_else(|| service("prometheus-node-exporter", "node_exporter"))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let textfiles = dir.path().join("textfile");
    std::fs::create_dir_all(&textfiles).unwrap();
    let fixture = inspector::fixture();
    let job_hosts: Vec<(&str, String)> = ["h200x2-nvlink", "a6000x4-phb"]
        .into_iter()
        .map(|inst| {
            let (_, s) = scrapes.iter().find(|(i, _)| *i == inst).expect("scraped");
            (inst, inspector::hostname(s))
        })
        .collect();
    for (inst, host) in &job_hosts {
        let text = inspector::moved_to(&fixture, host);
        std::fs::write(textfiles.join(format!("{inst}.prom")), text).unwrap();
    }
    let ne = inspector::NodeExporter::start(&node_exporter, &textfiles);
    let mut cfg = String::from(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: ddpcheck\n    static_configs:\n",
    );
    let rules = common::repo_root().join("deploy/prometheus/ddpcheck-alerts.yml");
    for (inst, _, d) in &nodes {
        // The instance label names the node; `hostname` comes from the exposition, untouched.
        let addr = d.metrics.as_deref().expect("metrics address");
        cfg.push_str(&format!(
            "      - targets: ['{addr}']\n        labels:\n          instance: '{inst}'\n"
        ));
    }
    cfg.push_str(&format!(
        "  - job_name: node\n    static_configs:\n      - targets: ['{}']\n",
        ne.addr
    ));
    cfg.push_str(&format!("rule_files:\n  - '{}'\n", rules.display()));
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, &cfg).unwrap();
    let prom = Prometheus::start(&prometheus, &config, dir.path());

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = prom.query("up == 1").expect("query up");
        let ups: BTreeSet<String> = up["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["metric"]["instance"].as_str().map(str::to_string))
            .collect();
        if FLEET.iter().all(|(i, _)| ups.contains(*i)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "targets not up within 20 s (up: {ups:?}); config:\n{cfg}\n{}",
            prom.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let mut queries = Vec::new();
    let mut var_checks = Vec::new();
    for (path, d) in &dash {
        let f = name(path);
        let var_names: Vec<String> = variables(d)
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect();
        for v in variables(d) {
            let Some(q) = var_query(v).filter(|_| v["type"] == "query") else {
                continue;
            };
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{f}: variable query {q:?} is not label_values(...)"));
            let (matcher, label) = inner.rsplit_once(',').expect("label_values(metric, label)");
            var_checks.push((
                format!("{f}: variable {}", v["name"]),
                label.trim().to_string(),
                substitute(matcher.trim(), &var_names),
            ));
        }
        for p in panels(d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                queries.push(Query {
                    what: format!(
                        "{f}: panel {:?} target {}",
                        p["title"].as_str().unwrap_or(""),
                        t["refId"]
                    ),
                    expr: substitute(t["expr"].as_str().unwrap_or(""), &var_names),
                });
            }
        }
    }

    // Rate and increase need two samples; poll (bounded) until every query has its data.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut pending: Vec<&Query> = queries.iter().collect();
    let mut rejected = Vec::new();
    loop {
        let mut still = Vec::new();
        for q in pending {
            match prom.query(&q.expr) {
                Ok(data) if result_count(&data) > 0 => {}
                Ok(_) => still.push(q),
                Err(e) => rejected.push(format!("{}: {e}\n  {}", q.what, q.expr)),
            }
        }
        assert!(
            rejected.is_empty(),
            "Prometheus rejected dashboard queries:\n{}",
            rejected.join("\n")
        );
        pending = still;
        if pending.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let list: Vec<String> = pending
                .iter()
                .map(|q| format!("{}\n  {}", q.what, q.expr))
                .collect();
            panic!(
                "dashboard queries without data after 20 s:\n{}",
                list.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for (what, label, matcher) in &var_checks {
        let values = prom
            .label_values(label, matcher)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            !values.is_empty(),
            "{what}: no values for {label} from {matcher}"
        );
    }

    // 6. The alert rules on the fleet's own series: every rule evaluates without error, and the
    //    faulty nodes' alerts are active (pending: their `for:` has not run out) while the
    //    healthy node has none.
    let want: BTreeSet<(String, String)> = [
        // degraded-pcie + slow-link: CRITICAL (bandwidth under 40% of its class's).
        ("a6000x4-phb", "DdpcheckNodeUnhealthy"),
        ("a6000x4-phb", "DdpcheckPcieDowntrained"),
        ("t4x2-pcie", "DdpcheckNodeUnhealthy"),
        ("t4x2-pcie", "DdpcheckGpuProbeStuck"),
    ]
    .into_iter()
    .map(|(i, a)| (i.to_string(), a.to_string()))
    .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let active = loop {
        let alerts = prom.api("/api/v1/alerts").expect("alerts");
        let active: BTreeSet<(String, String)> = alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                Some((
                    a["labels"]["instance"].as_str()?.to_string(),
                    a["labels"]["alertname"].as_str()?.to_string(),
                ))
            })
            .collect();
        if want.is_subset(&active) || Instant::now() >= deadline {
            break active;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        want.is_subset(&active),
        "alerts active after 20 s: {active:?}, want at least {want:?}"
    );
    assert!(
        active.iter().all(|(i, _)| i != "h200x2-nvlink"),
        "the healthy node raised alerts: {active:?}"
    );
    let groups = prom.api("/api/v1/rules").expect("rules");
    let rules: Vec<&Value> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(rules.len(), 12, "rules loaded: {groups}");
    for r in &rules {
        assert_eq!(
            r["health"], "ok",
            "rule {} does not evaluate: {r}",
            r["name"]
        );
    }

    // 7. Running jobs beside the preflight: the fleet panel's queries give the Inspector's
    //    figures and the preflight's at the same size, and DdpcheckJobAllReduceSlow is pending
    //    for exactly the hosts where the job runs under half of its node's preflight.
    inspector::check_panel_and_alert(&prom, &dash, &fixture, &job_hosts, &scrapes);

    println!(
        "{} dashboard queries and {} variables answered by Prometheus from {} nodes in {:.1} s",
        queries.len(),
        var_checks.len(),
        nodes.len(),
        started.elapsed().as_secs_f64()
    );
    drop(prom);
    for (_, _, d) in nodes {
        d.stop();
    }
}

/// The committed Inspector textfiles: the hand-written one (single-node all-reduces, which the
/// rules judge and one GPU cannot produce) carries the same series with the same label names, in
/// the same order, as the ones captured from a real job; the captured figures are what that job
/// measured (two ranks on one H200 over sockets, docs/results/2026-12-02-h200-nccl-inspector-capture.md).
#[test]
fn the_hand_written_inspector_fixture_has_the_captured_textfiles_shape() {
    let (captured, written) = inspector::fixture_files();
    assert!(
        !captured.is_empty() && !written.is_empty(),
        "both kinds of fixture"
    );
    let written_shape = inspector::shape(&written.concat());
    for text in &captured {
        assert_eq!(inspector::shape(text), written_shape, "{text}");
        for line in text
            .lines()
            .filter(|l| l.starts_with("nccl_bus_bandwidth_gbs{"))
        {
            let gbs: f64 = line.rsplit(' ').next().unwrap().parse().expect("value");
            assert!(gbs > 0.0 && gbs < 10.0, "loopback sockets: {line}");
            assert_eq!(inspector::label_of(line, "n_nodes").as_deref(), Some("2"));
            assert_eq!(
                inspector::label_of(line, "collective").as_deref(),
                Some("AllReduce")
            );
            let size = inspector::label_of(line, "message_size").unwrap();
            assert_eq!(
                inspector::bytes_of(&size),
                Some(24.5 * 1024.0 * 1024.0),
                "{line}"
            );
        }
    }
}

#[path = "prometheus_dashboards/grafana.rs"]
mod grafana;
#[path = "prometheus_dashboards/inspector.rs"]
mod inspector;
#[path = "prometheus_dashboards/prometheus.rs"]
mod prometheus;
#[path = "prometheus_dashboards/scrape.rs"]
mod scrape;
