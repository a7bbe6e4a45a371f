//! A real Prometheus for the tests: found as a service program, started on a free loopback port,
//! queried through its HTTP API.

use super::*;

/// Finds a program for a service test; `None` means skip (after saying so), unless CI requires
/// the services, when a missing program fails the test.
pub(super) fn service(program: &str, what: &str) -> Option<PathBuf> {
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
pub(super) struct Prometheus {
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
    pub(super) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Starts `prometheus` and waits for `/-/ready`; takes another port if the first was taken.
    pub(super) fn start(program: &Path, config: &Path, dir: &Path) -> Prometheus {
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
    pub(super) fn query(&self, expr: &str) -> Result<Value, String> {
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
    pub(super) fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = http_request(&self.addr, path).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("HTTP {status}: {} {}", v["errorType"], v["error"]));
        }
        Ok(v["data"].clone())
    }

    pub(super) fn label_values(&self, label: &str, matcher: &str) -> Result<Vec<String>, String> {
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
pub(super) fn result_count(data: &Value) -> usize {
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => data["result"].as_array().map_or(0, Vec::len),
        Some(_) => 1,
        None => 0,
    }
}

pub(super) struct Query {
    pub(super) what: String,
    pub(super) expr: String,
}
