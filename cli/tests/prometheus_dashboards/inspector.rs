//! NCCL Inspector's Prometheus textfile (docs/operations.md, "Running jobs beside the
//! preflight") beside the fleet, and the oracle the rules are checked against.

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
