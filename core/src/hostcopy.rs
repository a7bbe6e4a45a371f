//! Host↔device copies over each GPU's own PCIe link: what to time, what was timed, and the
//! judgement of it against the link's capacity and a reference for the GPU's class.
//!
//! A node of one GPU has no interconnect to test, yet its GPU's own link is what a downtrained
//! slot, a wrong riser or a virtual machine's passthrough slows; this is its bandwidth figure.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::Progress;
use crate::capacity::pcie_bytes_per_s;
use crate::finding::{Evidence, Finding, Severity, Subject};
use crate::node_gpus::{GpuInfo, PcieLink};
use crate::probe_error::ProbeError;
use crate::topology::GpuRef;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyDirection {
    HostToDevice,
    DeviceToHost,
}

impl CopyDirection {
    pub const BOTH: [CopyDirection; 2] = [CopyDirection::HostToDevice, CopyDirection::DeviceToHost];

    /// The JSON and metric label spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CopyDirection::HostToDevice => "host_to_device",
            CopyDirection::DeviceToHost => "device_to_host",
        }
    }

    /// How a message says it.
    pub fn describe(self) -> &'static str {
        match self {
            CopyDirection::HostToDevice => "host-to-device",
            CopyDirection::DeviceToHost => "device-to-host",
        }
    }
}

/// Copies to time on each GPU, one GPU at a time (so each link is measured alone).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyRequest {
    /// GPUs by PCI bus id (as collectives); empty for every visible one.
    pub gpus: Vec<GpuRef>,
    /// Copy sizes, bytes; the best size's bandwidth is judged.
    pub sizes: Vec<u64>,
    pub warmup_iters: u32,
    pub iters: u32,
    pub deadline: Duration,
}

impl CopyRequest {
    /// 1, 16 and 256 MiB: 256 MiB is past the size where a copy engine reaches its rate, the
    /// smaller ones show a link that only small copies fill.
    pub const DEFAULT_SIZES: [u64; 3] = [1 << 20, 16 << 20, 256 << 20];
    pub const MAX_BYTES: u64 = 1 << 30;
    const MAX_SIZES: usize = 16;

    /// The preflight's copies: the default sizes, one warm-up and five timed copies each (at
    /// 256 MiB and 50 GB/s about 30 ms a direction).
    pub fn preflight(gpus: Vec<GpuRef>, deadline: Duration) -> Self {
        CopyRequest {
            gpus,
            sizes: Self::DEFAULT_SIZES.to_vec(),
            warmup_iters: 1,
            iters: 5,
            deadline,
        }
    }

    /// Bounds every field: a request from the outside world is checked before any work.
    pub fn validate(&self) -> Result<(), ProbeError> {
        let bad = |m: String| Err(ProbeError::Invalid(m));
        if self.sizes.is_empty() || self.sizes.len() > Self::MAX_SIZES {
            return bad(format!(
                "{} copy sizes; 1..={} expected",
                self.sizes.len(),
                Self::MAX_SIZES
            ));
        }
        if let Some(s) = self
            .sizes
            .iter()
            .find(|s| **s == 0 || **s > Self::MAX_BYTES)
        {
            return bad(format!("copy size {s} bytes outside 1..=1 GiB"));
        }
        if self.iters == 0 || self.iters > 1000 || self.warmup_iters > 1000 {
            return bad(format!(
                "copy iterations {} (warm-up {}) outside 1..=1000",
                self.iters, self.warmup_iters
            ));
        }
        if self.deadline.is_zero() || self.deadline > Duration::from_secs(3600) {
            return bad(format!("deadline {:?} outside (0, 1 h]", self.deadline));
        }
        Ok(())
    }

    /// The largest size: the buffers each GPU needs.
    pub fn max_bytes(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }
}

/// One size of one direction on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopySample {
    pub direction: CopyDirection,
    pub bytes: u64,
    /// Timed copies (after the warm-up), back to back on one stream between two events.
    pub iters: u32,
    /// Mean time of one copy, µs.
    pub time_us: f64,
    /// bytes / time, GB/s (10^9 bytes a second).
    pub gbps: f64,
}

/// What one GPU's copies measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuCopies {
    pub gpu: GpuRef,
    pub samples: Vec<CopySample>,
}

impl GpuCopies {
    /// `host-to-device 55.2 GB/s, device-to-host 54.0 GB/s`: each direction's best size.
    pub fn figures(&self) -> String {
        CopyDirection::BOTH
            .iter()
            .filter_map(|&d| {
                self.best(d)
                    .map(|s| format!("{} {:.1} GB/s", d.describe(), s.gbps))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The best size of one direction: the figure judged and exported.
    pub fn best(&self, d: CopyDirection) -> Option<&CopySample> {
        self.samples
            .iter()
            .filter(|s| s.direction == d && s.gbps.is_finite())
            .max_by(|a, b| a.gbps.total_cmp(&b.gbps))
    }
}

/// A host-copy run: every GPU's samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCopyRun {
    pub gpus: Vec<GpuCopies>,
    /// The CUDA driver library the copies ran through (absent for simulated nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_library: Option<String>,
}

impl HostCopyRun {
    /// The copies of the GPU with this UUID.
    pub fn of(&self, uuid: &str) -> Option<&GpuCopies> {
        self.gpus.iter().find(|g| g.gpu.uuid == uuid)
    }
}

/// Below this share of its link's capacity a copy direction is a finding. Copy engines reach
/// 0.8–0.9 of the after-encoding rate on a healthy link (the rest is TLP framing); a link at
/// half its width or one generation down gives at most half of what its maximum would, 0.45.
pub const CAPACITY_WARN_RATIO: f64 = 0.6;

/// The class reference: a floor per direction that a healthy GPU of this class reaches.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyReference {
    pub class: &'static str,
    pub min_gbps: f64,
    pub source: &'static str,
}

/// The reference for a GPU on the link its maximum states; `None` for classes not covered.
/// Both rows are Azure's node health checks (azurehpc-health-checks): the floor each VM size's
/// configuration passes to its copy test, which fails a GPU below it in either direction.
pub fn reference(g: &GpuInfo) -> Option<CopyReference> {
    let p = g.pcie?;
    let m = g.name.to_ascii_uppercase();
    let is = |s: &str| m.contains(s);
    if (is("H100") || is("H200") || is("H800")) && p.gen_max >= 5 && p.width_max >= 16 {
        Some(CopyReference {
            class: "H100/H200 on PCIe gen5 x16",
            min_gbps: 48.0,
            source: "azurehpc-health-checks conf/nd96isr_h100_v5.conf and nd96isr_h200_v5.conf: `check_gpu_bw 48` (nvbandwidth host_to_device_memcpy_ce and device_to_host_memcpy_ce, GB/s per GPU)",
        })
    } else if (is("A100") || is("A800")) && p.gen_max >= 4 && p.width_max >= 16 {
        Some(CopyReference {
            class: "A100 on PCIe gen4 x16",
            min_gbps: 24.0,
            source: "azurehpc-health-checks conf/nd96amsr_a100_v4.conf: `check_cuda_bw 24` (128 MiB pinned copies each way, GB/s per GPU)",
        })
    } else {
        None
    }
}

/// A published measurement of a class's host copies: the range over the GPUs measured, per
/// direction, with its source: a reference to read figures by, not a floor (each comes from one
/// machine).
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedCopies {
    pub class: &'static str,
    /// Host-to-device, lowest and highest GB/s.
    pub h2d_gbps: (f64, f64),
    /// Device-to-host, lowest and highest GB/s.
    pub d2h_gbps: (f64, f64),
    pub source: &'static str,
}

/// Consumer cards' published copy-engine figures (nvbandwidth's memcpy_ce tests).
pub const PUBLISHED_COPIES: [(&str, u32, PublishedCopies); 2] = [
    (
        "RTX 4090",
        4,
        PublishedCopies {
            class: "GeForce RTX 4090 on PCIe gen4 x16",
            h2d_gbps: (23.90, 26.38),
            d2h_gbps: (26.25, 27.11),
            source: "https://github.com/NVIDIA/nvbandwidth/issues/15: eight RTX 4090s, nvbandwidth host_to_device_memcpy_ce and device_to_host_memcpy_ce, driver 545.29.06",
        },
    ),
    (
        "RTX 5090",
        5,
        PublishedCopies {
            class: "GeForce RTX 5090 on PCIe gen5 x16",
            h2d_gbps: (56.30, 56.41),
            d2h_gbps: (57.29, 57.35),
            source: "https://github.com/tinygrad/open-gpu-kernel-modules/issues/29: eight RTX 5090s on Xeon 8458P, nvbandwidth host_to_device_memcpy_ce and device_to_host_memcpy_ce, driver 570.148.08",
        },
    ),
];

/// The published copy figures for a GPU of this name at its maximum PCIe generation.
pub fn published(g: &GpuInfo) -> Option<&'static PublishedCopies> {
    let p = g.pcie?;
    let name = g.name.to_ascii_uppercase();
    PUBLISHED_COPIES
        .iter()
        .find(|(card, gen, _)| name.contains(card) && p.gen_max == *gen && p.width_max >= 16)
        .map(|(_, _, r)| r)
}

/// What the GPU's link can carry in one direction at its maximum generation and width,
/// bytes/s; `None` without a link reading.
pub fn link_capacity(g: &GpuInfo) -> Option<(f64, PcieLink)> {
    let p = g.pcie?;
    pcie_bytes_per_s(p.gen_max, p.width_max).map(|c| (c, p))
}

/// A direction's best bandwidth over its link's capacity, for the GPU with this UUID.
pub fn capacity_ratio(g: &GpuInfo, best_gbps: f64) -> Option<f64> {
    link_capacity(g).map(|(c, _)| best_gbps * 1e9 / c)
}

fn subject(g: &GpuInfo) -> Subject {
    Subject::Gpu {
        uuid: g.uuid.clone(),
        pci_bus_id: g.pci_bus_id.clone(),
    }
}

/// Judges each GPU's copies: a direction far below its link's capacity or below its class's
/// reference is a warning; a GPU with neither gets one note with its figures.
pub fn judge(gpus: &[GpuInfo], run: &HostCopyRun) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in gpus {
        let Some(c) = run.of(&g.uuid) else { continue };
        let mut bad = Vec::new();
        for s in CopyDirection::BOTH.iter().filter_map(|&d| c.best(d)) {
            bad.extend(below_capacity(g, s));
            bad.extend(below_reference(g, s));
        }
        let figures = c.figures();
        if figures.is_empty() {
            continue;
        }
        // A consumer card's published figures go with every finding of its GPU: the
        // reference its copies are read by, with where each number comes from.
        let start = out.len();
        if bad.is_empty() {
            let link = link_capacity(g)
                .map(|(cap, p)| {
                    format!(
                        " on its gen{} x{} link ({:.1} GB/s each way)",
                        p.gen_max,
                        p.width_max,
                        cap / 1e9
                    )
                })
                .unwrap_or_default();
            out.push(Finding::new(
                "host_copy_ok",
                Severity::Info,
                subject(g),
                format!("GPU {}: copies {figures}{link}", g.uuid),
            ));
        }
        out.extend(bad);
        for f in &mut out[start..] {
            f.evidence.extend(published_evidence(g));
        }
    }
    out
}

/// The published figures of the GPU's class, one evidence per direction, with their source.
pub fn published_evidence(g: &GpuInfo) -> Vec<Evidence> {
    let Some(r) = published(g) else {
        return Vec::new();
    };
    [
        (CopyDirection::HostToDevice, r.h2d_gbps),
        (CopyDirection::DeviceToHost, r.d2h_gbps),
    ]
    .into_iter()
    .map(|(d, (lo, hi))| {
        Evidence::new(
            format!("published {} copies, {}", d.describe(), r.class),
            format!("{lo:.2}–{hi:.2} GB/s"),
        )
        .source(r.source)
    })
    .collect()
}

/// `; NVML reads gen4 x8 now` where the link runs below its maximum, else nothing.
fn link_now(g: &GpuInfo) -> String {
    match g.pcie {
        Some(p) if p.gen_current < p.gen_max || p.width_current < p.width_max => {
            format!("; NVML reads gen{} x{} now", p.gen_current, p.width_current)
        }
        _ => String::new(),
    }
}

fn measured(s: &CopySample) -> Evidence {
    Evidence::new(
        format!(
            "{} copy bandwidth at {} MiB",
            s.direction.describe(),
            s.bytes >> 20
        ),
        format!("{:.2} GB/s", s.gbps),
    )
}

fn below_capacity(g: &GpuInfo, s: &CopySample) -> Option<Finding> {
    let (cap, p) = link_capacity(g)?;
    let ratio = s.gbps * 1e9 / cap;
    (ratio < CAPACITY_WARN_RATIO).then(|| {
        Finding::new(
            "host_copy_below_capacity",
            Severity::Warning,
            subject(g),
            format!(
                "GPU {} ({}): {} copies reach {:.1} GB/s, {:.0}% of its gen{} x{} link's {:.1} GB/s{}: check the slot, riser and link width",
                g.uuid, g.pci_bus_id, s.direction.describe(), s.gbps, ratio * 100.0,
                p.gen_max, p.width_max, cap / 1e9, link_now(g)
            ),
        )
        .with(
            measured(s)
                .expected(format!(
                    "≥ {:.0}% of {:.2} GB/s",
                    CAPACITY_WARN_RATIO * 100.0,
                    cap / 1e9
                ))
                .source(
                    "PCIe gen × width after line encoding (8b/10b gen1-2, 128b/130b gen3-5), NVML's maximum link",
                ),
        )
    })
}

fn below_reference(g: &GpuInfo, s: &CopySample) -> Option<Finding> {
    let r = reference(g)?;
    (s.gbps < r.min_gbps).then(|| {
        Finding::new(
            "host_copy_below_reference",
            Severity::Warning,
            subject(g),
            format!(
                "GPU {} ({}): {} copies reach {:.1} GB/s, below the {:.0} GB/s a healthy {} reaches{}",
                g.uuid,
                g.pci_bus_id,
                s.direction.describe(),
                s.gbps,
                r.min_gbps,
                r.class,
                link_now(g)
            ),
        )
        .with(
            measured(s)
                .expected(format!("≥ {:.0} GB/s ({})", r.min_gbps, r.class))
                .source(r.source),
        )
    })
}

/// A backend that times host↔device copies (the capability beside `crate::backend::NodeBackend`).
pub trait HostCopier {
    /// Times host→device and device→host copies over each GPU's own link, one GPU at a time
    /// (pinned host memory, the copy engines). Default: not measured by this backend.
    fn host_copies(
        &self,
        req: &CopyRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HostCopyRun, ProbeError> {
        let _ = (req, progress);
        Err(ProbeError::Unavailable(
            "host copies are not measured by this backend".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_gpus::{GpuHealth, ProbeState};

    fn gpu(name: &str, gen: u32, width: u32) -> GpuInfo {
        GpuInfo {
            index: 0,
            uuid: "GPU-a".into(),
            pci_bus_id: "00000000:1B:00.0".into(),
            name: name.into(),
            memory_total_bytes: 1,
            pcie: Some(PcieLink {
                gen_current: gen,
                gen_max: gen,
                width_current: width,
                width_max: width,
            }),
            health: GpuHealth::default(),
            processes: Vec::new(),
            state: ProbeState::Ok,
        }
    }

    fn run(h2d: f64, d2h: f64) -> HostCopyRun {
        let s = |direction, bytes: u64, gbps| CopySample {
            direction,
            bytes,
            iters: 5,
            time_us: crate::num::ToF64::to_f64(bytes) / gbps / 1e3,
            gbps,
        };
        HostCopyRun {
            gpus: vec![GpuCopies {
                gpu: gpu("x", 5, 16).gpu_ref(),
                samples: vec![
                    s(CopyDirection::HostToDevice, 1 << 20, h2d / 2.0),
                    s(CopyDirection::HostToDevice, 256 << 20, h2d),
                    s(CopyDirection::DeviceToHost, 1 << 20, d2h / 3.0),
                    s(CopyDirection::DeviceToHost, 256 << 20, d2h),
                ],
            }],
            cuda_library: None,
        }
    }

    fn codes(f: &[Finding]) -> Vec<(&str, Severity)> {
        f.iter().map(|x| (x.code.as_str(), x.severity)).collect()
    }

    #[test]
    fn best_size_per_direction() {
        let r = run(55.0, 53.0);
        let c = &r.gpus[0];
        assert_eq!(c.best(CopyDirection::HostToDevice).unwrap().gbps, 55.0);
        assert_eq!(
            c.best(CopyDirection::DeviceToHost).unwrap().bytes,
            256 << 20
        );
    }

    #[test]
    fn a_healthy_h200_is_one_note_with_its_figures() {
        let f = judge(&[gpu("NVIDIA H200", 5, 16)], &run(55.2, 54.0));
        assert_eq!(codes(&f), [("host_copy_ok", Severity::Info)]);
        assert!(
            f[0].message.contains("host-to-device 55.2 GB/s"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("gen5 x16 link (63.0 GB/s"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn below_the_class_reference_warns_with_its_source() {
        // 45 GB/s is 71% of gen5 x16: above the capacity bound, below Azure's 48.
        let f = judge(&[gpu("NVIDIA H200", 5, 16)], &run(45.0, 54.0));
        assert_eq!(
            codes(&f),
            [("host_copy_below_reference", Severity::Warning)]
        );
        let ev = &f[0].evidence[0];
        assert!(ev.source.as_deref().unwrap().contains("check_gpu_bw 48"));
        assert!(f[0].message.contains("host-to-device"), "{}", f[0].message);
    }

    #[test]
    fn a_halved_link_is_far_below_capacity() {
        // A T4 (no class reference) on gen3 x16: 15.75 GB/s capacity; 6 GB/s is 38%.
        let f = judge(&[gpu("Tesla T4", 3, 16)], &run(12.0, 6.0));
        assert_eq!(codes(&f), [("host_copy_below_capacity", Severity::Warning)]);
        assert!(
            f[0].message.contains("38% of its gen3 x16"),
            "{}",
            f[0].message
        );
        // Both bounds broken on an H200: two warnings.
        let f = judge(&[gpu("NVIDIA H200", 5, 16)], &run(20.0, 54.0));
        assert_eq!(
            codes(&f),
            [
                ("host_copy_below_capacity", Severity::Warning),
                ("host_copy_below_reference", Severity::Warning)
            ]
        );
    }

    #[test]
    fn gpus_without_copies_or_links_are_not_judged() {
        let mut g = gpu("NVIDIA H200", 5, 16);
        g.uuid = "GPU-other".into();
        assert!(judge(&[g], &run(1.0, 1.0)).is_empty());
        let mut g = gpu("NVIDIA H200", 5, 16);
        g.pcie = None;
        // No link: no capacity and no reference (its class is read from the link), only the note.
        assert_eq!(
            codes(&judge(&[g], &run(1.0, 1.0))),
            [("host_copy_ok", Severity::Info)]
        );
    }

    #[test]
    fn references_need_the_class_link() {
        assert_eq!(
            reference(&gpu("NVIDIA H100 80GB HBM3", 5, 16))
                .unwrap()
                .min_gbps,
            48.0
        );
        assert_eq!(
            reference(&gpu("NVIDIA A100-SXM4-80GB", 4, 16))
                .unwrap()
                .min_gbps,
            24.0
        );
        assert!(reference(&gpu("NVIDIA H200", 4, 16)).is_none());
        assert!(reference(&gpu("NVIDIA RTX A6000", 3, 16)).is_none());
        let r = capacity_ratio(&gpu("x", 5, 16), 63.0).unwrap();
        assert!((r - 63.0 / 63.015).abs() < 1e-3, "{r}");
    }

    #[test]
    fn consumer_cards_have_their_published_copies_at_their_generation() {
        let r = published(&gpu("NVIDIA GeForce RTX 4090", 4, 16)).unwrap();
        assert_eq!(r.h2d_gbps, (23.90, 26.38));
        assert!(r.source.contains("nvbandwidth/issues/15"));
        assert!(published(&gpu("NVIDIA GeForce RTX 5090", 5, 16)).is_some());
        // A 4090 in a gen3 slot is not the class measured; datacenter cards have floors instead.
        assert!(published(&gpu("NVIDIA GeForce RTX 4090", 3, 16)).is_none());
        assert!(published(&gpu("NVIDIA H200", 5, 16)).is_none());
    }

    #[test]
    fn requests_are_bounded() {
        let ok = CopyRequest::preflight(Vec::new(), Duration::from_secs(30));
        assert!(ok.validate().is_ok());
        assert_eq!(ok.max_bytes(), 256 << 20);
        for bad in [
            CopyRequest {
                sizes: vec![],
                ..ok.clone()
            },
            CopyRequest {
                sizes: vec![0],
                ..ok.clone()
            },
            CopyRequest {
                sizes: vec![2 << 30],
                ..ok.clone()
            },
            CopyRequest {
                iters: 0,
                ..ok.clone()
            },
            CopyRequest {
                deadline: Duration::ZERO,
                ..ok.clone()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(ProbeError::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}
