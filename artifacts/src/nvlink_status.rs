//! `nvidia-smi nvlink -s`: each GPU's NVLinks, each with its speed or `<inactive>`. The links a
//! GPU lists are the links it has: the expectation of how many should be up comes from here,
//! not from the SKU.

use serde::{Deserialize, Serialize};

use crate::text::clean;
use crate::{ArtifactError, Format};

const F: Format = Format::NvlinkStatus;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvlinkStatus {
    pub gpus: Vec<NvlinkGpu>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvlinkGpu {
    pub index: u32,
    pub name: String,
    pub uuid: Option<String>,
    /// Each link listed: its number and speed in GB/s, `None` where `<inactive>`.
    pub links: Vec<(u32, Option<f64>)>,
    /// `NVML: Unable to retrieve NVLink information as all links are inActive`: no link listed,
    /// by the driver's own word.
    #[serde(default)]
    pub none_active: bool,
}

impl NvlinkGpu {
    pub fn active(&self) -> u32 {
        ddpcheck_core::num::len_u32(self.links.iter().filter(|(_, s)| s.is_some()).count())
    }

    pub fn present(&self) -> u32 {
        ddpcheck_core::num::len_u32(self.links.len())
    }
}

/// `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)`.
pub(crate) fn gpu_line(line: &str) -> Option<(u32, String, Option<String>)> {
    let rest = line.trim().strip_prefix("GPU ")?;
    let (idx, rest) = rest.split_once(": ")?;
    let index = idx.parse().ok()?;
    let (name, uuid) = match rest.split_once(" (UUID: ") {
        Some((n, u)) => (n, Some(u.trim_end_matches(')').to_string())),
        None => (rest, None),
    };
    Some((index, name.trim().to_string(), uuid))
}

/// `Link 3: 26.562 GB/s` or `Link 3: <inactive>`.
fn link_line(line: &str) -> Option<Result<(u32, Option<f64>), ArtifactError>> {
    let rest = line.trim().strip_prefix("Link ")?;
    let (n, v) = rest.split_once(':')?;
    let n: u32 = n.trim().parse().ok()?;
    let v = v.trim();
    if v.contains("inactive") {
        return Some(Ok((n, None)));
    }
    let speed = v
        .split_whitespace()
        .next()
        .and_then(|s| s.parse::<f64>().ok());
    Some(match speed {
        Some(s) if v.contains("GB/s") => Ok((n, Some(s))),
        _ => Err(ArtifactError::malformed(
            F,
            format!("link {n}: {v:?} is neither a speed nor <inactive>"),
        )),
    })
}

pub fn parse(text: &str) -> Result<NvlinkStatus, ArtifactError> {
    let text = clean(text);
    let mut gpus: Vec<NvlinkGpu> = Vec::new();
    for line in text.lines() {
        if let Some((index, name, uuid)) = gpu_line(line) {
            gpus.push(NvlinkGpu {
                index,
                name,
                uuid,
                links: Vec::new(),
                none_active: false,
            });
        } else if line.contains("Unable to retrieve NVLink information") {
            if let Some(g) = gpus.last_mut() {
                g.none_active = true;
            }
        } else if let Some(l) = link_line(line) {
            let l = l?;
            let g = gpus
                .last_mut()
                .ok_or_else(|| ArtifactError::truncated(F, "link lines before any GPU line"))?;
            g.links.push(l);
        }
    }
    if gpus.is_empty() {
        return Err(ArtifactError::malformed(
            F,
            "no `GPU n: NAME (UUID: …)` line",
        ));
    }
    let most = gpus.iter().map(|g| g.links.len()).max().unwrap_or(0);
    if let Some(last) = gpus.last() {
        if last.links.len() < most && !last.none_active {
            return Err(ArtifactError::truncated(
                F,
                format!(
                    "GPU {} lists {} links, the others up to {most}",
                    last.index,
                    last.links.len()
                ),
            ));
        }
    }
    Ok(NvlinkStatus { gpus })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn counts_links_listed_and_active() {
        let t = "GPU 0: Tesla V100-SXM2-32GB (UUID: GPU-a)\n\t Link 0: 25.781 GB/s\n\t Link 1: <inactive>\nGPU 1: Tesla V100-SXM2-32GB (UUID: GPU-b)\n\t Link 0: 25.781 GB/s\n\t Link 1: 25.781 GB/s\n";
        let s = parse(t).unwrap();
        assert_eq!((s.gpus[0].present(), s.gpus[0].active()), (2, 1));
        assert_eq!(s.gpus[1].uuid.as_deref(), Some("GPU-b"));
        let cut = "GPU 0: X (UUID: GPU-a)\n Link 0: 25.781 GB/s\n Link 1: 25.781 GB/s\nGPU 1: X (UUID: GPU-b)\n Link 0: 25.781 GB/s\n";
        assert!(matches!(parse(cut), Err(ArtifactError::Truncated { .. })));
        let none = "GPU 0: X (UUID: GPU-a)\n Link 0: 14.062 GB/s\nGPU 1: X (UUID: GPU-b)\nNVML: Unable to retrieve NVLink information as all links are inActive\n";
        assert_eq!(parse(none).unwrap().gpus[1].present(), 0);
    }
}
