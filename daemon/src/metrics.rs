//! Prometheus metrics: the catalogue of docs/metrics.md, updated when the snapshot or a report
//! changes, encoded once per change and served from that cached text (a scrape never touches a
//! GPU, and only the live snapshot age is formatted per scrape).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use ddpcheck_core::collective::judged_peak;
use ddpcheck_core::ddp::DdpResult;
use ddpcheck_core::explain::Explanation;
use ddpcheck_core::hostcopy::{self, CopyDirection};
use ddpcheck_core::node_gpus::{GpuInfo, NodeInventory, ProbeState};
use ddpcheck_core::report::PreflightReport;
use ddpcheck_core::topology::TopologyMatrix;
use ddpcheck_core::{Severity, Verdict};
use prometheus::{
    Encoder, Gauge, GaugeVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// GPU labels, as dcgm-exporter names its join keys (`gpu`, `UUID`, `pci_bus_id`), so PromQL can
/// join the two. The model name is `model_name`, not dcgm-exporter's `modelName`: promtool rejects
/// camelCase label names, and nobody joins on a model name (docs/metrics.md shows the mapping).
pub const GPU_LABELS: [&str; 5] = ["gpu", "UUID", "pci_bus_id", "model_name", "hostname"];

/// Labels of `ddpcheck_bandwidth_cause`: the cause, its action and severity, the GPUs it
/// concerns (indices, `0,1` for a pair, empty for the whole node) and the host.
pub const CAUSE_LABELS: [&str; 5] = ["cause", "action", "severity", "gpus", "hostname"];

/// Labels of `ddpcheck_bandwidth_reference_ratio`: the GPUs measured together (`0,1` a pair,
/// `0,1,2,3` the node's all-reduce), the reference (`class`: what healthy machines of the class
/// measure; `capacity`: what the path physically carries), the reference's path or class in words,
/// and the host.
pub const FRACTION_LABELS: [&str; 4] = ["gpus", "reference", "path", "hostname"];
/// Labels of the host-copy gauges: the GPU's, and the copy's direction (`host_to_device`,
/// `device_to_host`).
pub const HOST_COPY_LABELS: [&str; 6] = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "model_name",
    "hostname",
    "direction",
];

/// Labels of `ddpcheck_node_info`: what a node-level series joins on to get its host name.
pub const NODE_LABELS: [&str; 3] = ["hostname", "driver_version", "cuda_driver_version"];

/// The exposition text of one generation of the values, cut around the value of
/// `ddpcheck_snapshot_age_seconds`, which every scrape fills in live.
struct Encoded {
    generation: u64,
    /// Up to and including the space before the age's value (or the whole text, if not found).
    head: Vec<u8>,
    /// From the newline after the age's value on (empty if not found).
    tail: Vec<u8>,
    /// False when the age line was not found: then every scrape encodes in full.
    split: bool,
}

pub struct Metrics {
    registry: Registry,
    snapshot_age_seconds: Gauge,
    /// Bumped after every change of a value (other than the snapshot age); a cached encoding
    /// of an older generation is stale.
    generation: AtomicU64,
    encoded: RwLock<Option<Arc<Encoded>>>,
    work_rate_limited: IntCounterVec,
    history_write_failures: prometheus::IntCounter,
    history_unsaved: IntGauge,
    collector_success: IntGaugeVec,
    collector_duration: GaugeVec,
    node_info: IntGaugeVec,
    gpu_info: IntGaugeVec,
    gpu_pcie_gen: IntGaugeVec,
    gpu_pcie_gen_max: IntGaugeVec,
    gpu_pcie_width: IntGaugeVec,
    gpu_pcie_width_max: IntGaugeVec,
    gpu_probe_stuck: IntGaugeVec,
    gpu_lost: IntGaugeVec,
    gpu_foreign_processes: IntGaugeVec,
    gpu_ecc_uncorrected: IntGaugeVec,
    gpu_nvlinks_active: IntGaugeVec,
    topology_link: IntGaugeVec,
    preflight_verdict: IntGaugeVec,
    preflight_exit_code: IntGauge,
    preflight_timestamp: Gauge,
    preflight_duration: Gauge,
    preflight_step_duration: GaugeVec,
    preflight_findings: IntGaugeVec,
    preflight_runs: IntCounterVec,
    allreduce_busbw: Gauge,
    allreduce_size_busbw: GaugeVec,
    allreduce_expected: Gauge,
    allreduce_ratio: Gauge,
    allreduce_wrong: IntGauge,
    host_copy_bandwidth: GaugeVec,
    host_copy_ratio: GaugeVec,
    bandwidth_cause: IntGaugeVec,
    bandwidth_reference_ratio: GaugeVec,
    work_runs: IntCounterVec,
    work_rejected: IntCounterVec,
    ddp_speedup: GaugeVec,
    ddp_efficiency: GaugeVec,
    ddp_exposed: GaugeVec,
    ddp_throughput: GaugeVec,
    ddp_allreduce_busbw: GaugeVec,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    // Registration fails only on duplicate names, a programming error caught by the golden test.
    if let Err(e) = r.register(Box::new(c.clone())) {
        tracing::error!("metric registration: {e}");
    }
    c
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help)
}

macro_rules! gauge_vec {
    ($r:expr, $kind:ident, $name:expr, $help:expr, $labels:expr) => {
        reg(
            $r,
            $kind::new(opts($name, $help), $labels).expect("valid metric definition"),
        )
    };
}

pub const COLLECTORS: [&str; 2] = ["inventory", "topology"];
pub const WORK_CALLS: [&str; 4] = ["preflight", "bench_collectives", "bench_ddp", "explain"];

impl Metrics {
    /// Every series without per-GPU labels exists from here on, so the first scrape shows them.
    #[allow(clippy::expect_used)] // metric definitions are constants; a bad one is a bug
    pub fn new(backend: &str, backend_label: &str) -> Metrics {
        let mut common = HashMap::new();
        common.insert("backend".to_string(), backend.to_string());
        let registry = Registry::new_custom(None, Some(common)).expect("valid common labels");
        let r = &registry;
        let build = gauge_vec!(
            r,
            IntGaugeVec,
            "ddpcheck_build_info",
            "ddpcheck version and backend; always 1",
            &["version", "backend_label"]
        );
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), backend_label])
            .set(1);
        let m = Metrics {
            generation: AtomicU64::new(0),
            encoded: RwLock::new(None),
            snapshot_age_seconds: reg(r, Gauge::new("ddpcheck_snapshot_age_seconds", "Age of the inventory snapshot served to readers").expect("valid")),
            history_write_failures: reg(r, prometheus::IntCounter::new("ddpcheck_history_write_failures_total", "Writes of a finished run to the history that failed, retries included (the run is kept in memory and the write retried)").expect("valid")),
            history_unsaved: reg(r, IntGauge::new("ddpcheck_history_unsaved_reports", "Finished runs delivered to their caller but not stored in the history yet (kept in memory, retried)").expect("valid")),
            collector_success: gauge_vec!(r, IntGaugeVec, "ddpcheck_collector_success", "1 if the collector's last run succeeded", &["collector"]),
            collector_duration: gauge_vec!(r, GaugeVec, "ddpcheck_collector_duration_seconds", "Duration of the collector's last run", &["collector"]),
            node_info: gauge_vec!(r, IntGaugeVec, "ddpcheck_node_info", "Host name and driver versions of the last good inventory; always 1", &NODE_LABELS),
            gpu_info: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_info", "One series per GPU; always 1", &GPU_LABELS),
            gpu_pcie_gen: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_pcie_link_gen", "Current PCIe link generation", &GPU_LABELS),
            gpu_pcie_gen_max: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_pcie_link_gen_max", "Maximum PCIe link generation", &GPU_LABELS),
            gpu_pcie_width: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_pcie_link_width", "Current PCIe link width (lanes)", &GPU_LABELS),
            gpu_pcie_width_max: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_pcie_link_width_max", "Maximum PCIe link width (lanes)", &GPU_LABELS),
            gpu_probe_stuck: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_probe_stuck", "1 if an NVML call on this GPU ran past its deadline", &GPU_LABELS),
            gpu_lost: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_lost", "1 if the GPU is lost (fell off the bus)", &GPU_LABELS),
            gpu_foreign_processes: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_foreign_processes", "Compute processes of others on the GPU", &GPU_LABELS),
            gpu_ecc_uncorrected: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_ecc_uncorrected_errors", "Volatile uncorrected ECC errors since the last reset", &GPU_LABELS),
            gpu_nvlinks_active: gauge_vec!(r, IntGaugeVec, "ddpcheck_gpu_nvlinks_active", "Active NVLinks of the GPU", &GPU_LABELS),
            topology_link: gauge_vec!(r, IntGaugeVec, "ddpcheck_topology_link_info", "Pair link class (nvidia-smi topo -m); always 1", &["gpu_a", "gpu_b", "UUID_a", "UUID_b", "link"]),
            preflight_verdict: gauge_vec!(r, IntGaugeVec, "ddpcheck_preflight_verdict", "1 for the verdict of the last preflight, 0 for the others", &["verdict"]),
            preflight_exit_code: reg(r, IntGauge::new("ddpcheck_preflight_exit_code", "Exit code of the last preflight (-1 before the first)").expect("valid")),
            preflight_timestamp: reg(r, Gauge::new("ddpcheck_preflight_last_run_timestamp_seconds", "Unix time the last preflight finished (0 before the first)").expect("valid")),
            preflight_duration: reg(r, Gauge::new("ddpcheck_preflight_duration_seconds", "Wall time of the last preflight").expect("valid")),
            preflight_step_duration: gauge_vec!(r, GaugeVec, "ddpcheck_preflight_step_duration_seconds", "Wall time of each step of the last preflight", &["step"]),
            preflight_findings: gauge_vec!(r, IntGaugeVec, "ddpcheck_preflight_findings", "Findings of the last preflight by severity", &["severity"]),
            preflight_runs: gauge_vec!(r, IntCounterVec, "ddpcheck_preflight_runs_total", "Preflights run, by verdict", &["verdict"]),
            allreduce_busbw: reg(r, Gauge::new("ddpcheck_allreduce_busbw_bytes_per_second", "Best large-message (>= 64 MiB) all-reduce bus bandwidth of the last preflight").expect("valid")),
            allreduce_size_busbw: gauge_vec!(r, GaugeVec, "ddpcheck_allreduce_size_busbw_bytes_per_second", "All-reduce bus bandwidth of the last preflight at each message size it measured (out-of-place)", &["size_bytes"]),
            allreduce_expected: reg(r, Gauge::new("ddpcheck_allreduce_expected_busbw_bytes_per_second", "Expected all-reduce bus bandwidth for the node's topology class (0 if unknown)").expect("valid")),
            allreduce_ratio: reg(r, Gauge::new("ddpcheck_allreduce_busbw_ratio", "Measured over expected all-reduce bus bandwidth (0 if unknown)").expect("valid")),
            allreduce_wrong: reg(r, IntGauge::new("ddpcheck_allreduce_wrong_elements", "Wrong elements in the last preflight's all-reduce check").expect("valid")),
            host_copy_bandwidth: gauge_vec!(r, GaugeVec, "ddpcheck_gpu_host_copy_bytes_per_second", "Best-size host-to-device or device-to-host copy bandwidth of the GPU's own link in the last preflight (pinned memory, copy engines)", &HOST_COPY_LABELS),
            host_copy_ratio: gauge_vec!(r, GaugeVec, "ddpcheck_gpu_host_copy_capacity_ratio", "Host copy bandwidth over the link's capacity (PCIe generation x width at its maximum, after line encoding)", &HOST_COPY_LABELS),
            bandwidth_cause: gauge_vec!(r, IntGaugeVec, "ddpcheck_bandwidth_cause", "Causes of low GPU bandwidth found by the last preflight or explain (ddpcheck explain's judgement); always 1", &CAUSE_LABELS),
            bandwidth_reference_ratio: gauge_vec!(r, GaugeVec, "ddpcheck_bandwidth_reference_ratio", "Measured all-reduce busbw of each pair (and of the node's all-reduce) over its two references: the class's (reference=class) and the path's physical capacity (reference=capacity)", &FRACTION_LABELS),
            work_runs: gauge_vec!(r, IntCounterVec, "ddpcheck_work_runs_total", "Work-starting calls run, by call and outcome", &["call", "outcome"]),
            work_rejected: gauge_vec!(r, IntCounterVec, "ddpcheck_work_rejected_total", "Work-starting calls refused as BUSY", &["call"]),
            work_rate_limited: gauge_vec!(r, IntCounterVec, "ddpcheck_work_rate_limited_total", "Work-starting calls refused by the rate limit (work_rate_per_minute)", &["call"]),
            ddp_speedup: gauge_vec!(r, GaugeVec, "ddpcheck_ddp_speedup_ratio", "Measured DDP speedup over one GPU of the same recipe without DDP and without a comm hook (with --reference ddp, or a 1-GPU run without a plain step: one GPU in DDP); below 1 at one GPU by DDP's own work", &["model", "variant", "world_size"]),
            ddp_efficiency: gauge_vec!(r, GaugeVec, "ddpcheck_ddp_scaling_efficiency_ratio", "Speedup divided by GPUs", &["model", "variant", "world_size"]),
            ddp_exposed: gauge_vec!(r, GaugeVec, "ddpcheck_ddp_exposed_comm_ratio", "Share of the step not spent in the 1-GPU reference step: communication not hidden by compute, and DDP's own work", &["model", "variant", "world_size"]),
            ddp_throughput: gauge_vec!(r, GaugeVec, "ddpcheck_ddp_throughput_per_second", "Tokens (decoders) or samples (MLP) per second over all GPUs", &["model", "variant", "world_size", "unit"]),
            ddp_allreduce_busbw: gauge_vec!(r, GaugeVec, "ddpcheck_ddp_allreduce_busbw_bytes_per_second", "All-reduce bus bandwidth at the largest probed size, timed alone in the DDP run's own process group before its steps", &["model", "variant", "world_size"]),
            registry,
        };
        for c in COLLECTORS {
            m.collector_success.with_label_values(&[c]).set(0);
            m.collector_duration.with_label_values(&[c]).set(0.0);
        }
        for v in Verdict::ALL {
            m.preflight_verdict.with_label_values(&[v.as_str()]).set(0);
            m.preflight_runs.with_label_values(&[v.as_str()]);
        }
        for s in ["info", "warning", "critical"] {
            m.preflight_findings.with_label_values(&[s]).set(0);
        }
        for c in WORK_CALLS {
            m.work_rejected.with_label_values(&[c]);
            m.work_rate_limited.with_label_values(&[c]);
            for o in ["ok", "error"] {
                m.work_runs.with_label_values(&[c, o]);
            }
        }
        m.preflight_exit_code.set(-1);
        m
    }

    pub fn collector_ran(&self, name: &str, ok: bool, seconds: f64) {
        self.collector_success
            .with_label_values(&[name])
            .set(i64::from(ok));
        self.collector_duration
            .with_label_values(&[name])
            .set(seconds);
        self.changed();
    }

    pub fn work_ran(&self, call: &str, ok: bool) {
        self.work_runs
            .with_label_values(&[call, if ok { "ok" } else { "error" }])
            .inc();
        self.changed();
    }

    /// A work call refused as BUSY (another test held the node).
    pub fn work_rejected(&self, call: &str) {
        self.work_rejected.with_label_values(&[call]).inc();
        self.changed();
    }

    /// A history write failed; `unsaved` runs wait in memory.
    pub fn history_write_failed(&self, unsaved: usize) {
        self.history_write_failures.inc();
        self.set_unsaved(unsaved);
    }

    /// How many finished runs wait in memory for the history.
    pub fn set_unsaved(&self, unsaved: usize) {
        self.history_unsaved.set(gauge_int(unsaved));
        self.changed();
    }

    /// A work call refused by the rate limit.
    pub fn work_rate_limited(&self, call: &str) {
        self.work_rate_limited.with_label_values(&[call]).inc();
        self.changed();
    }

    /// Marks the cached exposition stale. Called after a change (never before: a scrape that
    /// encodes between the change and this call is then re-done by the next scrape).
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn gpu_labels(inv: &NodeInventory, g: &GpuInfo) -> [String; 5] {
        [
            g.index.to_string(),
            g.uuid.clone(),
            g.pci_bus_id.clone(),
            g.name.clone(),
            inv.hostname.clone(),
        ]
    }

    pub fn set_inventory(&self, inv: &NodeInventory) {
        self.node_info.reset();
        self.node_info
            .with_label_values(&[
                inv.hostname.as_str(),
                inv.driver_version.as_deref().unwrap_or(""),
                inv.cuda_driver_version.as_deref().unwrap_or(""),
            ])
            .set(1);
        for v in [
            &self.gpu_info,
            &self.gpu_pcie_gen,
            &self.gpu_pcie_gen_max,
            &self.gpu_pcie_width,
            &self.gpu_pcie_width_max,
            &self.gpu_probe_stuck,
            &self.gpu_lost,
            &self.gpu_foreign_processes,
            &self.gpu_ecc_uncorrected,
            &self.gpu_nvlinks_active,
        ] {
            v.reset();
        }
        for g in &inv.gpus {
            let l = Self::gpu_labels(inv, g);
            let l: Vec<&str> = l.iter().map(String::as_str).collect();
            self.gpu_info.with_label_values(&l).set(1);
            if let Some(p) = g.pcie {
                self.gpu_pcie_gen
                    .with_label_values(&l)
                    .set(i64::from(p.gen_current));
                self.gpu_pcie_gen_max
                    .with_label_values(&l)
                    .set(i64::from(p.gen_max));
                self.gpu_pcie_width
                    .with_label_values(&l)
                    .set(i64::from(p.width_current));
                self.gpu_pcie_width_max
                    .with_label_values(&l)
                    .set(i64::from(p.width_max));
            }
            self.gpu_probe_stuck
                .with_label_values(&l)
                .set(i64::from(g.state == ProbeState::Stuck));
            self.gpu_lost
                .with_label_values(&l)
                .set(i64::from(g.state == ProbeState::Lost));
            self.gpu_foreign_processes
                .with_label_values(&l)
                .set(gauge_int(g.processes.len()));
            self.gpu_ecc_uncorrected
                .with_label_values(&l)
                .set(gauge_int(g.health.ecc_uncorrected_volatile.unwrap_or(0)));
            self.gpu_nvlinks_active
                .with_label_values(&l)
                .set(i64::from(g.health.nvlinks_active.unwrap_or(0)));
        }
        self.changed();
    }

    pub fn set_topology(&self, t: &TopologyMatrix) {
        self.topology_link.reset();
        for p in t.pairs() {
            self.topology_link
                .with_label_values(&[
                    &p.a.index.to_string(),
                    &p.b.index.to_string(),
                    &p.a.uuid,
                    &p.b.uuid,
                    &p.link.to_string(),
                ])
                .set(1);
        }
        self.changed();
    }

    /// A preflight that just finished: its gauges, and one more run counted.
    pub fn set_preflight(&self, r: &PreflightReport, finished_unix: f64) {
        self.preflight_runs
            .with_label_values(&[r.verdict.as_str()])
            .inc();
        self.show_preflight(r, finished_unix);
    }

    /// The gauges of a preflight (also a stored one, after a restart); counts nothing.
    pub fn show_preflight(&self, r: &PreflightReport, finished_unix: f64) {
        for v in Verdict::ALL {
            self.preflight_verdict
                .with_label_values(&[v.as_str()])
                .set(i64::from(v == r.verdict));
        }
        self.preflight_exit_code.set(i64::from(r.exit_code));
        self.preflight_timestamp.set(finished_unix);
        self.preflight_duration.set(r.wall_seconds);
        self.preflight_step_duration.reset();
        for s in &r.steps {
            self.preflight_step_duration
                .with_label_values(&[&s.name])
                .set(s.seconds);
        }
        for (sev, name) in [
            (Severity::Info, "info"),
            (Severity::Warning, "warning"),
            (Severity::Critical, "critical"),
        ] {
            let n = r.findings.iter().filter(|f| f.severity == sev).count();
            self.preflight_findings
                .with_label_values(&[name])
                .set(gauge_int(n));
        }
        let peak = r.all_reduce.as_ref().and_then(judged_peak).map(|(_, b)| b);
        self.allreduce_busbw.set(peak.unwrap_or(0.0) * 1e9);
        // The curve a running job's all-reduce is set beside (NCCL Inspector's bandwidth at
        // the same size: docs/operations.md).
        self.allreduce_size_busbw.reset();
        for s in r.all_reduce.iter().flat_map(|a| &a.samples) {
            self.allreduce_size_busbw
                .with_label_values(&[&s.bytes.to_string()])
                .set(s.out_of_place.busbw_gbps * 1e9);
        }
        let exp = r.expected.as_ref().map(|e| e.busbw_gbps);
        self.allreduce_expected.set(exp.unwrap_or(0.0) * 1e9);
        self.allreduce_ratio.set(match (peak, exp) {
            (Some(p), Some(e)) if e > 0.0 => p / e,
            _ => 0.0,
        });
        self.allreduce_wrong.set(gauge_int(
            r.all_reduce
                .as_ref()
                .and_then(|s| s.wrong_total())
                .unwrap_or(0),
        ));
        self.show_host_copies(r);
        self.changed();
    }

    /// Each GPU's best copy per direction, and its share of the link; cleared when the last
    /// preflight timed none.
    fn show_host_copies(&self, r: &PreflightReport) {
        self.host_copy_bandwidth.reset();
        self.host_copy_ratio.reset();
        let Some(run) = &r.host_copies else { return };
        for c in &run.gpus {
            let Some(g) = r.gpus.iter().find(|g| g.uuid == c.gpu.uuid) else {
                continue;
            };
            for d in CopyDirection::BOTH {
                let Some(best) = c.best(d) else { continue };
                let l = [
                    g.index.to_string(),
                    g.uuid.clone(),
                    g.pci_bus_id.clone(),
                    g.name.clone(),
                    r.header.provenance.hostname.clone(),
                    d.as_str().to_string(),
                ];
                let l: Vec<&str> = l.iter().map(String::as_str).collect();
                self.host_copy_bandwidth
                    .with_label_values(&l)
                    .set(best.gbps * 1e9);
                if let Some(ratio) = hostcopy::capacity_ratio(g, best.gbps) {
                    self.host_copy_ratio.with_label_values(&l).set(ratio);
                }
            }
        }
    }

    /// The causes of low bandwidth on `hostname` after a preflight or an explain: the last set is
    /// cleared.
    pub fn set_causes(&self, hostname: &str, e: &Explanation) {
        self.bandwidth_cause.reset();
        for c in e.all_causes() {
            let gpus: Vec<String> = c.gpus.iter().map(|g| g.index.to_string()).collect();
            let severity = c.severity.label().to_ascii_lowercase();
            self.bandwidth_cause
                .with_label_values(&[
                    c.kind.as_str(),
                    c.action.as_str(),
                    severity.as_str(),
                    gpus.join(",").as_str(),
                    hostname,
                ])
                .set(1);
        }
        self.set_fractions(hostname, e);
        self.changed();
    }

    /// Each measured pair's and the node's busbw over the class reference and over the capacity.
    fn set_fractions(&self, hostname: &str, e: &Explanation) {
        self.bandwidth_reference_ratio.reset();
        let pairs = e.pairs.iter().map(|p| {
            let gpus = format!("{},{}", p.a.index, p.b.index);
            (gpus, p.ratio, p.expected.as_ref(), p.capacity.as_ref())
        });
        let node = e.node.iter().map(|n| {
            let gpus: Vec<String> = n.gpus.iter().map(|g| g.index.to_string()).collect();
            (
                gpus.join(","),
                n.ratio,
                n.expected.as_ref(),
                n.capacity.as_ref(),
            )
        });
        for (gpus, ratio, expected, capacity) in pairs.chain(node) {
            if let (Some(r), Some(x)) = (ratio, expected) {
                self.bandwidth_reference_ratio
                    .with_label_values(&[gpus.as_str(), "class", x.class.as_str(), hostname])
                    .set(r);
            }
            if let Some((f, c)) = capacity.and_then(|c| c.fraction.map(|f| (f, c))) {
                self.bandwidth_reference_ratio
                    .with_label_values(&[gpus.as_str(), "capacity", c.path.as_str(), hostname])
                    .set(f);
            }
        }
    }

    pub fn set_ddp(&self, results: &[DdpResult]) {
        for r in results {
            let n = r.world_size.to_string();
            let l = [r.model.as_str(), r.variant.as_str(), n.as_str()];
            if let Some(s) = r.speedup {
                self.ddp_speedup.with_label_values(&l).set(s);
            }
            if let Some(e) = r.efficiency {
                self.ddp_efficiency.with_label_values(&l).set(e);
            }
            if let Some(x) = r.exposed_comm_fraction {
                self.ddp_exposed.with_label_values(&l).set(x);
            }
            if let Some(last) = r.all_reduce_probe.as_ref().and_then(|p| p.samples.last()) {
                self.ddp_allreduce_busbw
                    .with_label_values(&l)
                    .set(last.out_of_place.busbw_gbps * 1e9);
            }
            let unit = r.throughput_unit.replace("/s", "");
            self.ddp_throughput
                .with_label_values(&[l[0], l[1], l[2], unit.as_str()])
                .set(r.throughput);
        }
        self.changed();
    }

    /// The text exposition format, encoded now from the registry (the snapshot age as last set).
    pub fn encode(&self) -> String {
        String::from_utf8(self.encode_bytes()).unwrap_or_default()
    }

    fn encode_bytes(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(16 << 10);
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            return format!("# encoding error: {e}\n").into_bytes();
        }
        buf
    }

    /// The exposition for a scrape, with `snapshot_age_seconds` as the age. Gathering and
    /// encoding the registry clones every label of every series (most of a scrape's CPU under
    /// load), so it is done once per change of the values; a scrape copies the cached text and
    /// formats the age into it, exactly as the encoder would.
    pub fn scrape(&self, snapshot_age_seconds: f64) -> Vec<u8> {
        let e = self.encoded();
        if !e.split {
            // Not expected (the age series always exists); stay correct, if slower.
            self.snapshot_age_seconds.set(snapshot_age_seconds);
            return self.encode_bytes();
        }
        let age = snapshot_age_seconds.to_string();
        let mut out = Vec::with_capacity(e.head.len() + age.len() + e.tail.len());
        out.extend_from_slice(&e.head);
        out.extend_from_slice(age.as_bytes());
        out.extend_from_slice(&e.tail);
        out
    }

    /// The cached encoding of the current generation, made if stale.
    fn encoded(&self) -> Arc<Encoded> {
        // Read before gathering: a change during the encoding makes the next scrape re-encode.
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(e) = self.cache().as_ref().filter(|e| e.generation == generation) {
            return e.clone();
        }
        let text = self.encode_bytes();
        let fresh = Arc::new(split_at_age(generation, text));
        let mut slot = match self.encoded.write() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        // Two scrapes may encode at once; keep the newer generation.
        if slot.as_ref().is_none_or(|e| e.generation <= generation) {
            *slot = Some(fresh.clone());
        }
        fresh
    }

    fn cache(&self) -> Option<Arc<Encoded>> {
        match self.encoded.read() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// Cuts the exposition around the value of the `ddpcheck_snapshot_age_seconds` sample.
fn split_at_age(generation: u64, text: Vec<u8>) -> Encoded {
    const NAME: &[u8] = b"ddpcheck_snapshot_age_seconds";
    let mut at = 0;
    for line in text.split_inclusive(|b| *b == b'\n') {
        let start = at;
        at += line.len();
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let named =
            body.starts_with(NAME) && matches!(body.get(NAME.len()), Some(b'{') | Some(b' '));
        if !named {
            continue;
        }
        // The value is the last space-separated field (label values may hold spaces, the
        // encoder writes no timestamp for a gauge).
        if let Some(sp) = body.iter().rposition(|b| *b == b' ') {
            let head = text[..start + sp + 1].to_vec();
            let tail = text[start + body.len()..].to_vec();
            return Encoded {
                generation,
                head,
                tail,
                split: true,
            };
        }
    }
    Encoded {
        generation,
        head: text,
        tail: Vec::new(),
        split: false,
    }
}

/// A count as an integer gauge's value, saturating (no count here nears 2^63).
fn gauge_int<T: TryInto<i64>>(n: T) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::NodeBackend;

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    /// What a scrape serves is byte for byte what encoding the registry now gives.
    fn assert_same(m: &Metrics, age: f64) {
        let cached = text(m.scrape(age));
        m.snapshot_age_seconds.set(age);
        assert_eq!(cached, m.encode());
    }

    #[test]
    fn cached_scrape_is_the_encoding_with_the_live_age() {
        let m = Metrics::new("sim", "h200x2-nvlink");
        for age in [0.0, 1.5, 1_234.000_001, 3e-7, 86_400.25] {
            assert_same(&m, age);
        }
        let age_line = |t: &str| {
            t.lines()
                .find(|l| l.starts_with("ddpcheck_snapshot_age_seconds{"))
                .unwrap()
                .to_string()
        };
        assert_eq!(
            age_line(&text(m.scrape(7.5))),
            "ddpcheck_snapshot_age_seconds{backend=\"sim\"} 7.5"
        );
        // Every kind of change is seen by the next scrape.
        let sim = ddpcheck_sim::SimBackend::parse("h200x2-nvlink+degraded-pcie").unwrap();
        let inv = sim.inventory().unwrap();
        m.set_inventory(&inv);
        assert!(text(m.scrape(1.0)).contains("ddpcheck_gpu_info{"));
        assert_same(&m, 1.0);
        m.set_topology(&sim.topology(&inv.gpus).unwrap());
        assert!(text(m.scrape(1.0)).contains("ddpcheck_topology_link_info{"));
        assert_same(&m, 1.0);
        m.collector_ran("inventory", true, 0.25);
        assert!(text(m.scrape(1.0)).contains(
            "ddpcheck_collector_duration_seconds{collector=\"inventory\",backend=\"sim\"} 0.25"
        ));
        m.work_rejected("preflight");
        assert!(text(m.scrape(1.0))
            .contains("ddpcheck_work_rejected_total{call=\"preflight\",backend=\"sim\"} 1"));
        m.work_rate_limited("bench_ddp");
        m.work_rate_limited("bench_ddp");
        assert!(text(m.scrape(1.0))
            .contains("ddpcheck_work_rate_limited_total{call=\"bench_ddp\",backend=\"sim\"} 2"));
        m.work_ran("preflight", true);
        assert!(text(m.scrape(1.0)).contains(
            "ddpcheck_work_runs_total{call=\"preflight\",outcome=\"ok\",backend=\"sim\"} 1"
        ));
        assert_same(&m, 2.0);
        // No change: the same cached text, only the age differs.
        let a = text(m.scrape(3.0));
        let b = text(m.scrape(4.0));
        assert_eq!(a.replace("} 3\n", "} 4\n"), b);
    }

    #[test]
    fn split_finds_the_age_value_and_nothing_else() {
        let t = b"# HELP ddpcheck_snapshot_age_seconds Age\n# TYPE ddpcheck_snapshot_age_seconds gauge\nddpcheck_snapshot_age_seconds_other 3\nddpcheck_snapshot_age_seconds{backend=\"a b\"} 12.5\nz 1\n".to_vec();
        let e = split_at_age(4, t);
        assert!(e.split);
        assert!(e.head.ends_with(b"{backend=\"a b\"} "));
        assert_eq!(e.tail, b"\nz 1\n");
        let e = split_at_age(4, b"x 1\n".to_vec());
        assert!(!e.split);
    }
}
