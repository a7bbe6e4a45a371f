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

/// `ddpcheck_bandwidth_cause` series of a scrape, as (cause, action, severity, gpus).
fn causes(scrape: &str) -> BTreeSet<(String, String, String, String)> {
    let label = |line: &str, name: &str| {
        let key = format!("{name}=\"");
        let start = line.find(&key)? + key.len();
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    };
    scrape
        .lines()
        .filter(|l| l.starts_with("ddpcheck_bandwidth_cause{") && l.ends_with(" 1"))
        .filter_map(|l| {
            Some((
                label(l, "cause")?,
                label(l, "action")?,
                label(l, "severity")?,
                label(l, "gpus")?,
            ))
        })
        .collect()
}

/// The cause metric names each node's causes after its preflight: none on the healthy node,
/// the downtrained GPU's link with its action, the VM as a node-wide cause.
fn assert_fleet_causes(scrapes: &[(&str, String)]) {
    let of = |inst: &str| {
        let (_, s) = scrapes.iter().find(|(i, _)| *i == inst).expect("scraped");
        causes(s)
    };
    let own = |c: &str, a: &str, s: &str, g: &str| {
        (c.to_string(), a.to_string(), s.to_string(), g.to_string())
    };
    assert_eq!(of("h200x2-nvlink"), BTreeSet::new());
    let a6000 = of("a6000x4-phb");
    assert!(
        a6000.contains(&own("pcie_downtrained", "check_link", "warning", "1")),
        "{a6000:?}"
    );
    let t4 = of("t4x2-pcie");
    assert!(
        t4.contains(&own("virtual_machine", "none", "info", "")),
        "{t4:?}"
    );
}

/// Values of one family of a scrape by its (`gpu`, `direction`) labels.
fn by_gpu_direction(scrape: &str, family: &str) -> BTreeMap<(String, String), f64> {
    let label = |line: &str, name: &str| {
        let key = format!("{name}=\"");
        let start = line.find(&key)? + key.len();
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    };
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| {
            let value = l.rsplit_once(' ')?.1.parse().ok()?;
            Some(((label(l, "gpu")?, label(l, "direction")?), value))
        })
        .collect()
}

/// Each GPU's own link: both directions of every GPU where the preflight timed copies, the
/// A6000 node's degraded GPU 1 under 60% of its link and slower than its GPU 0, and nothing on
/// the T4 node, whose stuck GPU starts no copies.
fn assert_fleet_host_copies(scrapes: &[(&str, String)]) {
    let of = |inst: &str, family: &str| {
        let (_, s) = scrapes.iter().find(|(i, _)| *i == inst).expect("scraped");
        by_gpu_direction(s, family)
    };
    let bw = "ddpcheck_gpu_host_copy_bytes_per_second";
    let ratio = "ddpcheck_gpu_host_copy_capacity_ratio";
    let key = |g: &str, d: &str| (g.to_string(), d.to_string());
    for (inst, gpus) in [("h200x2-nvlink", 2), ("a6000x4-phb", 4)] {
        let (b, r) = (of(inst, bw), of(inst, ratio));
        assert_eq!(b.len(), 2 * gpus, "{inst}: {b:?}");
        assert_eq!(r.len(), 2 * gpus, "{inst}: {r:?}");
    }
    let h200 = of("h200x2-nvlink", ratio);
    assert!(h200.values().all(|v| (0.6..1.0).contains(v)), "{h200:?}");
    let (b, r) = (of("a6000x4-phb", bw), of("a6000x4-phb", ratio));
    for d in ["host_to_device", "device_to_host"] {
        assert!(r[&key("1", d)] < 0.6, "{r:?}");
        assert!(r[&key("0", d)] >= 0.6, "{r:?}");
        assert!(b[&key("1", d)] < b[&key("0", d)], "{b:?}");
    }
    assert!(of("t4x2-pcie", bw).is_empty());
}

/// Grafana's built-in interval variables and the values the queries run with.
const BUILTINS: [(&str, &str); 5] = [
    ("${__rate_interval}", "1m"),
    ("$__rate_interval", "1m"),
    ("${__interval}", "15s"),
    ("$__interval", "15s"),
    ("$__range", "5m"),
];

fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = common::repo_root().join("dashboards");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("dashboards/") {
        let path = entry.expect("dashboards/ entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("read dashboard");
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            out.push((path, v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        out.len() >= 3,
        "expected the three dashboards in {}",
        dir.display()
    );
    out
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Panels, with those nested in collapsed rows.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter());
        }
    }
    out
}

fn variables(d: &Value) -> Vec<&Value> {
    d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .collect()
}

fn var_query(v: &Value) -> Option<String> {
    match &v["query"] {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("query").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// Replaces Grafana variables as a query would see them with everything selected: template
/// variables become `.+` (a label that must exist), built-in intervals a fixed duration. A `$`
/// left over is an undefined variable and fails the test.
fn substitute(expr: &str, var_names: &[String]) -> String {
    let mut e = expr.to_string();
    for (k, v) in BUILTINS {
        e = e.replace(k, v);
    }
    let mut names: Vec<&String> = var_names.iter().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        e = e.replace(&format!("${{{n}}}"), ".+");
        e = e.replace(&format!("[[{n}]]"), ".+");
        e = e.replace(&format!("${n}"), ".+");
    }
    assert!(
        !e.contains('$'),
        "undefined variable in {expr:?} (after substitution: {e:?})"
    );
    e
}

/// Every `ddpcheck_[a-z_]+` in a text.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("ddpcheck_") {
        let tail = &rest[i..];
        let len = "ddpcheck_".len()
            + tail["ddpcheck_".len()..]
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
                .count();
        if len > "ddpcheck_".len() {
            out.insert(tail[..len].to_string());
        }
        rest = &tail[len..];
    }
    out
}

/// `# TYPE name kind` lines of a scrape: family name to type.
fn families(scrape: &str) -> BTreeMap<String, String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

/// Every `ddpcheck:name` (a recording rule's name) in a text.
fn recorded_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("ddpcheck:") {
        let tail = &rest[i..];
        let len = tail
            .bytes()
            .take_while(|b| b.is_ascii_lowercase() || matches!(b, b'_' | b':'))
            .count();
        out.insert(tail[..len].to_string());
        rest = &tail[len..];
    }
    out
}

#[test]
fn dashboards_are_well_formed() {
    let rules =
        std::fs::read_to_string(common::repo_root().join("deploy/prometheus/ddpcheck-alerts.yml"))
            .expect("alert rules");
    let recorded: BTreeSet<String> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .map(|n| n.trim().to_string())
        .collect();
    let mut uids = BTreeSet::new();
    for (path, d) in dashboards() {
        let f = name(&path);
        let uid = d["uid"].as_str().unwrap_or_else(|| panic!("{f}: no uid"));
        // The file name pins the uid, so links and provisioning survive re-exports.
        assert_eq!(
            format!("{uid}.json"),
            f,
            "{f}: uid {uid} does not match the file name"
        );
        assert!(uids.insert(uid.to_string()), "{f}: uid {uid} used twice");
        assert!(
            d["id"].is_null(),
            "{f}: id must be null so imports do not clash"
        );
        let sv = d["schemaVersion"].as_u64().unwrap_or(0);
        assert!((36..=41).contains(&sv), "{f}: schemaVersion {sv}");
        assert!(!d["title"].as_str().unwrap_or("").is_empty(), "{f}: title");

        let vars = variables(&d);
        let ds = vars
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap_or_else(|| panic!("{f}: no datasource variable"));
        assert_eq!(ds["type"], "datasource", "{f}");
        assert_eq!(ds["query"], "prometheus", "{f}");
        for want in ["instance", "hostname", "gpu"] {
            let v = vars
                .iter()
                .find(|v| v["name"] == want)
                .unwrap_or_else(|| panic!("{f}: no {want} variable"));
            assert_eq!(v["type"], "query", "{f}: {want}");
            assert_eq!(v["datasource"]["uid"], "${datasource}", "{f}: {want}");
            let q = var_query(v).unwrap_or_default();
            assert!(
                q.starts_with("label_values(") && q.ends_with(&format!(", {want})")),
                "{f}: {want} variable query {q:?} is not label_values(..., {want})"
            );
        }

        let mut ids = BTreeSet::new();
        let mut n = 0;
        for p in panels(&d) {
            let title = p["title"].as_str().unwrap_or("");
            let id = p["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("{f}: {title}: no id"));
            assert!(ids.insert(id), "{f}: panel id {id} used twice");
            assert!(
                p["gridPos"]["w"].as_u64().is_some(),
                "{f}: {title}: gridPos"
            );
            if p["type"] == "row" {
                continue;
            }
            n += 1;
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
            assert!(!unit.is_empty(), "{f}: panel {title:?} has no unit");
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{f}: {title}");
            assert!(
                !p["description"].as_str().unwrap_or("").is_empty(),
                "{f}: {title}: description"
            );
            let targets = p["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("{f}: {title}: no targets"));
            assert!(!targets.is_empty(), "{f}: {title}: no targets");
            for t in targets {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{f}: {title}");
                let expr = t["expr"].as_str().unwrap_or("");
                assert!(
                    expr.contains("ddpcheck_")
                        || expr.contains("ddpcheck:")
                        || expr.contains("up{"),
                    "{f}: {title}: {expr}"
                );
                // A recording rule a panel reads is one deploy/prometheus records.
                for rule in recorded_names(expr) {
                    assert!(
                        recorded.contains(&rule),
                        "{f}: {title}: {rule} is not recorded"
                    );
                }
            }
        }
        assert!(n >= 6, "{f}: only {n} panels");
    }
}

/// Finds a program for a service test; `None` means skip (after saying so), unless CI requires
/// the services, when a missing program fails the test.
fn service(program: &str, what: &str) -> Option<PathBuf> {
    match common::find_program(program) {
        Some(p) => Some(p),
        None if common::services_must_run() => {
            panic!(
                "{program} not on PATH but DDPCHECK_REQUIRE_SERVICES=1 (run .ci/install-services)"
            )
        }
        None => {
            println!("skipped: {what} not installed ({program} not on PATH)");
            None
        }
    }
}

/// A Prometheus server on a free loopback port, killed when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Starts `prometheus` and waits for `/-/ready`; takes another port if the first was taken.
    fn start(program: &Path, config: &Path, dir: &Path) -> Prometheus {
        for attempt in 0..5 {
            let port = common::free_loopback_port();
            let addr = format!("127.0.0.1:{port}");
            let log = dir.join(format!("prometheus-{attempt}.log"));
            let log_file = std::fs::File::create(&log).expect("create prometheus log");
            let child = Command::new(program)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join(format!("tsdb-{attempt}")).display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .stdout(Stdio::null())
                .stderr(log_file)
                .spawn()
                .expect("spawn prometheus");
            let mut p = Prometheus { child, addr, log };
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(status)) = p.child.try_wait() {
                    let tail = p.log_tail();
                    if tail.contains("address already in use") {
                        break; // someone took the port between our probe and its bind
                    }
                    panic!("prometheus exited ({status}) before it was ready:\n{tail}");
                }
                if let Ok((200, _)) = http_request(&p.addr, "/-/ready") {
                    return p;
                }
                assert!(
                    Instant::now() < deadline,
                    "prometheus not ready within 30 s:\n{}",
                    p.log_tail()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        panic!("prometheus found no free port in 5 attempts");
    }

    /// `/api/v1/query`: the parsed answer, or the error text for a rejected query.
    fn query(&self, expr: &str) -> Result<Value, String> {
        let path = format!("/api/v1/query?query={}", percent_encode(expr));
        let (status, body) = http_request(&self.addr, &path).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("HTTP {status}: {} {}", v["errorType"], v["error"]));
        }
        Ok(v["data"].clone())
    }

    /// A GET of the HTTP API (`/api/v1/...`): its `data`, or the error text.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = http_request(&self.addr, path).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("HTTP {status}: {} {}", v["errorType"], v["error"]));
        }
        Ok(v["data"].clone())
    }

    fn label_values(&self, label: &str, matcher: &str) -> Result<Vec<String>, String> {
        let path = format!(
            "/api/v1/label/{label}/values?match[]={}",
            percent_encode(matcher)
        );
        let (status, body) = http_request(&self.addr, &path).map_err(|e| e.to_string())?;
        let v: Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {status} ({e}): {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("HTTP {status}: {}", v["error"]));
        }
        Ok(v["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// Number of results of an instant query (a scalar or string counts as one).
fn result_count(data: &Value) -> usize {
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => data["result"].as_array().map_or(0, Vec::len),
        Some(_) => 1,
        None => 0,
    }
}

struct Query {
    what: String,
    expr: String,
}

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
        let o = d.cli(&[
            "bench",
            "ddp",
            "--model",
            "gpt2-124m",
            "--gpus",
            "1,2",
            "--steps",
            "4",
            "--warmup-steps",
            "1",
        ]);
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

/// NCCL Inspector's Prometheus textfile (docs/operations.md, "Running jobs beside the
/// preflight") beside the fleet, and the oracle the rules are checked against.
mod inspector {
    use super::*;

    const FIXTURES: &str = "cli/tests/fixtures/nccl-inspector";

    /// The committed textfiles (one per GPU, as the Inspector writes them), concatenated in
    /// their names' order (the captured ones first).
    pub fn fixture() -> String {
        let (captured, written) = fixture_files();
        assert!(
            !captured.is_empty() || !written.is_empty(),
            "no .prom file in {FIXTURES}"
        );
        captured.concat() + &written.concat()
    }

    /// The committed textfiles' texts: (captured from a job, written by hand).
    pub fn fixture_files() -> (Vec<String>, Vec<String>) {
        let dir = common::repo_root().join(FIXTURES);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("inspector fixtures")
            .map(|e| e.expect("fixture entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "prom"))
            .collect();
        files.sort();
        let (captured, written): (Vec<PathBuf>, Vec<PathBuf>) = files.into_iter().partition(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("captured-"))
        });
        let read = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|f| std::fs::read_to_string(f).expect("read fixture"))
                .collect()
        };
        (read(captured), read(written))
    }

    /// Each series' metric name with its label names in order.
    pub fn shape(text: &str) -> BTreeSet<(String, Vec<String>)> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let (name, rest) = l.split_once('{').expect("a series with labels");
                let labels = rest
                    .split("\",")
                    .filter_map(|kv| kv.split_once("=\"").map(|(k, _)| k.to_string()))
                    .collect();
                (name.to_string(), labels)
            })
            .collect()
    }

    pub fn label_of(line: &str, name: &str) -> Option<String> {
        label(line, name)
    }

    pub fn bytes_of(size: &str) -> Option<f64> {
        message_bytes(size)
    }

    /// The `hostname` label of a scrape's `ddpcheck_node_info`.
    pub fn hostname(scrape: &str) -> String {
        scrape
            .lines()
            .find(|l| l.starts_with("ddpcheck_node_info{"))
            .and_then(|l| label(l, "hostname"))
            .expect("ddpcheck_node_info with a hostname")
    }

    /// A label's value in one series line.
    fn label(line: &str, name: &str) -> Option<String> {
        let key = format!("{name}=\"");
        let start = line
            .find(&format!(",{key}"))
            .map(|i| i + 1)
            .or_else(|| line.find(&format!("{{{key}")).map(|i| i + 1))?
            + key.len();
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    }

    /// `text` with its host (`hostname`, NCCL 2.30's `node`) set to `host`.
    pub fn moved_to(text: &str, host: &str) -> String {
        let mut out = String::new();
        for line in text.lines() {
            let mut l = line.to_string();
            for name in ["hostname", "node"] {
                if let Some(old) = label(&l, name) {
                    l = l.replace(&format!("{name}=\"{old}\""), &format!("{name}=\"{host}\""));
                }
            }
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    /// Inspector's message size in bytes: NCCL 2.29 writes "24.50MB" (1024-based), 2.30 a range
    /// "24-25MB" (its lower bound counts).
    fn message_bytes(s: &str) -> Option<f64> {
        let unit_at = s.find(|c: char| c.is_ascii_alphabetic())?;
        let (num, unit) = s.split_at(unit_at);
        let lower: f64 = num.split('-').next()?.parse().ok()?;
        let scale = match unit {
            "B" => 1.0,
            "KB" => 1024.0,
            "MB" => 1024.0 * 1024.0,
            "GB" => 1024.0 * 1024.0 * 1024.0,
            "TB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => return None,
        };
        Some(lower * scale)
    }

    /// The preflight size a message is compared with: the power of two at or below it, 8 to
    /// 256 MiB; none under 8 MiB.
    fn size_class(bytes: f64) -> Option<u64> {
        (0..6)
            .rev()
            .map(|k| (8u64 << 20) << k)
            .find(|&c| bytes >= ddpcheck_core::num::ToF64::to_f64(c))
    }

    /// The fixture's single-node all-reduce busbw in bytes/s by (job, size), slowest rank.
    fn job_busbw(text: &str) -> BTreeMap<(String, u64), f64> {
        let mut out: BTreeMap<(String, u64), f64> = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("nccl_bus_bandwidth_gbs{"))
        {
            let single = label(line, "n_nodes").as_deref() == Some("1");
            let all_reduce = label(line, "collective").as_deref() == Some("AllReduce");
            let class = label(line, "message_size")
                .as_deref()
                .and_then(message_bytes)
                .and_then(size_class);
            let (Some(class), true, true) = (class, single, all_reduce) else {
                continue;
            };
            let job = label(line, "slurm_job_id").expect("slurm_job_id");
            let gbs: f64 = line.rsplit(' ').next().unwrap().parse().expect("value");
            let e = out.entry((job, class)).or_insert(f64::INFINITY);
            *e = e.min(gbs * 1e9);
        }
        out
    }

    /// `ddpcheck_allreduce_size_busbw_bytes_per_second` of a scrape, by size.
    fn baseline(scrape: &str) -> BTreeMap<u64, f64> {
        scrape
            .lines()
            .filter(|l| l.starts_with("ddpcheck_allreduce_size_busbw_bytes_per_second{"))
            .filter_map(|l| {
                let size = label(l, "size_bytes")?.parse().ok()?;
                Some((size, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    /// One series of an instant query: (its labels named in `keys`, its value).
    fn samples(data: &Value, keys: &[&str]) -> BTreeMap<Vec<String>, f64> {
        data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let k = keys
                    .iter()
                    .map(|n| r["metric"][*n].as_str().unwrap_or("").to_string())
                    .collect();
                let v = r["value"][1].as_str().unwrap().parse().unwrap();
                (k, v)
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    /// How the panel's series differ from the oracle's, if they do.
    fn panel_mismatch(
        want: &BTreeMap<Vec<String>, f64>,
        got: &BTreeMap<Vec<String>, f64>,
        what: &str,
    ) -> Option<String> {
        if want.keys().ne(got.keys()) {
            return Some(format!(
                "the panel's {what} series: {:?}, the oracle's {:?}",
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>()
            ));
        }
        want.iter()
            .find(|(k, v)| !close(**v, got[*k]))
            .map(|(k, v)| format!("{what} {k:?}: {} against {v}", got[k]))
    }

    pub fn check_panel_and_alert(
        prom: &Prometheus,
        dash: &[(PathBuf, Value)],
        fixture: &str,
        hosts: &[(&str, String)],
        scrapes: &[(&str, String)],
    ) {
        let jobs = job_busbw(fixture);
        assert!(!jobs.is_empty(), "the fixture has no comparable all-reduce");
        // The oracle: per host, each (job, size) beside the node's own preflight figure.
        let mut want_job = BTreeMap::new();
        let mut want_base = BTreeMap::new();
        let mut want_slow = BTreeSet::new();
        for (inst, host) in hosts {
            let (_, s) = scrapes.iter().find(|(i, _)| i == inst).expect("scraped");
            let base = baseline(s);
            let mut best: BTreeMap<&str, f64> = BTreeMap::new();
            for ((job, size), bw) in &jobs {
                let Some(b) = base.get(size) else { continue };
                want_job.insert(vec![host.clone(), job.clone(), size.to_string()], *bw);
                want_base.insert(vec![host.clone(), size.to_string()], *b);
                let r = best.entry(job.as_str()).or_insert(0.0);
                *r = r.max(bw / b);
            }
            for (job, ratio) in best {
                if ratio < 0.5 {
                    want_slow.insert((host.clone(), job.to_string()));
                }
            }
        }
        // The committed fixture is slow beside the H200 pair's preflight, fast beside the
        // A6000s' downtrained one: both sides of the alert are exercised.
        assert!(
            want_slow.iter().any(|(h, _)| *h == hosts[0].1)
                && want_slow.iter().all(|(h, _)| *h != hosts[1].1),
            "the fixture should be slow on {} only: {want_slow:?}",
            hosts[0].1
        );

        let fleet = &dash
            .iter()
            .find(|(p, _)| name(p) == "ddpcheck-fleet.json")
            .expect("fleet dashboard")
            .1;
        let panel = panels(fleet)
            .into_iter()
            .find(|p| {
                p["title"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Running jobs' all-reduce")
            })
            .expect("the running jobs panel");
        let var_names: Vec<String> = variables(fleet)
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect();
        let target = |id: &str| {
            let t = panel["targets"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["refId"] == id)
                .unwrap_or_else(|| panic!("panel target {id}"));
            substitute(t["expr"].as_str().unwrap(), &var_names)
        };
        let job_keys = ["hostname", "slurm_job_id", "size_bytes"];
        // A scrape that times out on a loaded machine marks its target's series stale until the
        // next one (each second): poll, bounded, until the panel matches the oracle.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got_job = samples(&prom.query(&target("A")).expect("A"), &job_keys);
            let got_base = samples(
                &prom.query(&target("B")).expect("B"),
                &["hostname", "size_bytes"],
            );
            let mismatch = [
                (&want_job, &got_job, "job"),
                (&want_base, &got_base, "preflight"),
            ]
            .into_iter()
            .find_map(|(want, got, what)| panel_mismatch(want, got, what));
            let Some(m) = mismatch else { break };
            assert!(Instant::now() < deadline, "after 20 s: {m}");
            std::thread::sleep(Duration::from_millis(250));
        }

        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let alerts = prom.api("/api/v1/alerts").expect("alerts");
            let slow: BTreeSet<(String, String)> = alerts["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| a["labels"]["alertname"] == "DdpcheckJobAllReduceSlow")
                .filter_map(|a| {
                    Some((
                        a["labels"]["hostname"].as_str()?.to_string(),
                        a["labels"]["slurm_job_id"].as_str()?.to_string(),
                    ))
                })
                .collect();
            if slow == want_slow {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "DdpcheckJobAllReduceSlow active for {slow:?}, want {want_slow:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// node_exporter with only its textfile collector, on a free loopback port; killed when
    /// dropped.
    pub struct NodeExporter {
        child: Child,
        pub addr: String,
    }

    impl Drop for NodeExporter {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl NodeExporter {
        pub fn start(program: &Path, textfiles: &Path) -> NodeExporter {
            let addr = format!("127.0.0.1:{}", common::free_loopback_port());
            let child = Command::new(program)
                .arg(format!("--web.listen-address={addr}"))
                .arg("--collector.disable-defaults")
                .arg("--collector.textfile")
                .arg(format!(
                    "--collector.textfile.directory={}",
                    textfiles.display()
                ))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn node_exporter");
            let mut ne = NodeExporter { child, addr };
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                if let Ok((200, body)) = http_request(&ne.addr, "/metrics") {
                    assert!(body.contains("nccl_bus_bandwidth_gbs{"), "{body}");
                    return ne;
                }
                assert!(
                    ne.child.try_wait().unwrap().is_none() && Instant::now() < deadline,
                    "node_exporter on {} not serving the textfiles within 15 s",
                    ne.addr
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
