//! `nvidia-smi topo -m`: the GPU pair matrix (X, NV#, PIX, PXB, PHB, NODE, SYS), NIC rows and
//! columns (`NIC0` with its `NIC Legend`, or `mlx5_0` as older drivers name them), and each
//! GPU's CPU and NUMA affinity.

use std::str::FromStr;

use ddpcheck_core::topology::LinkClass;
use serde::{Deserialize, Serialize};

use crate::text::clean;
use crate::{ArtifactError, Format};

/// What `nvidia-smi topo -m` showed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopoMatrix {
    /// GPU indices, as the rows name them (`GPU3` → 3).
    pub gpus: Vec<u32>,
    /// `links[i][j]` between the i-th and j-th GPU.
    pub links: Vec<Vec<LinkClass>>,
    pub nics: Vec<NicRow>,
    pub cpu_affinity: Vec<Option<String>>,
    pub numa_affinity: Vec<Option<u32>>,
}

/// A NIC and its path to each GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicRow {
    /// `NIC0`, or the device (`mlx5_0`) where the legend or the header names it.
    pub name: String,
    /// The device the `NIC Legend` gives (`mlx5_0`), where there is one.
    pub device: Option<String>,
    /// Path to each GPU, in `gpus` order.
    pub to_gpus: Vec<LinkClass>,
}

const F: Format = Format::TopoMatrix;

/// The header: device columns, and which affinity columns follow.
struct Header {
    devices: Vec<String>,
    cpu: bool,
    numa: bool,
}

fn header(line: &str) -> Option<Header> {
    let t = line.trim();
    if !t.starts_with("GPU0") {
        return None;
    }
    let (devs, rest) = match t.find("CPU Affinity") {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, ""),
    };
    let devices: Vec<String> = devs.split_whitespace().map(str::to_string).collect();
    if devices.iter().any(|d| matches!(d.as_str(), "X" | "OK")) {
        return None;
    }
    Some(Header {
        devices,
        cpu: rest.contains("CPU Affinity"),
        numa: rest.contains("NUMA Affinity"),
    })
}

/// A GPU's index from its label (`GPU12` → 12).
pub(crate) fn gpu_index(label: &str) -> Option<u32> {
    label.strip_prefix("GPU")?.parse().ok()
}

/// Parses the matrix; a header without all its GPU rows, or a row without all its cells, is
/// truncated.
pub fn parse(text: &str) -> Result<TopoMatrix, ArtifactError> {
    let text = clean(text);
    let lines: Vec<&str> = text.lines().collect();
    let (at, h) = lines
        .iter()
        .enumerate()
        .find_map(|(i, l)| header(l).map(|h| (i, h)))
        .ok_or_else(|| ArtifactError::malformed(F, "no header row starting with GPU0"))?;
    let gpu_cols: Vec<u32> = h.devices.iter().map_while(|d| gpu_index(d)).collect();
    if gpu_cols.is_empty() {
        return Err(ArtifactError::malformed(F, "no GPU column"));
    }
    let nic_names: Vec<String> = h.devices[gpu_cols.len()..].to_vec();
    let mut out = TopoMatrix {
        gpus: gpu_cols.clone(),
        links: Vec::new(),
        nics: Vec::new(),
        cpu_affinity: Vec::new(),
        numa_affinity: Vec::new(),
    };
    let ncols = h.devices.len();
    for line in &lines[at + 1..] {
        let toks: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = toks.first() else { continue };
        if *first == "Legend:" {
            break;
        }
        if gpu_index(first).is_some() {
            gpu_row(&mut out, &h, &toks, ncols)?;
        } else if nic_names.iter().any(|n| n == first) {
            let cells = cells(&toks[1..], ncols, first)?;
            out.nics.push(NicRow {
                name: first.to_string(),
                device: None,
                to_gpus: cells[..gpu_cols.len()].to_vec(),
            });
        }
    }
    if out.links.len() != gpu_cols.len() {
        return Err(ArtifactError::truncated(
            F,
            format!(
                "{} GPU columns, {} GPU rows",
                gpu_cols.len(),
                out.links.len()
            ),
        ));
    }
    nic_legend(&mut out, &lines);
    check_shape(&out)?;
    Ok(out)
}

/// The link cells of a row: `ncols` of them, each a link class.
fn cells(toks: &[&str], ncols: usize, row: &str) -> Result<Vec<LinkClass>, ArtifactError> {
    if toks.len() < ncols {
        return Err(ArtifactError::truncated(
            F,
            format!("row {row} has {} of its {ncols} cells", toks.len()),
        ));
    }
    toks[..ncols]
        .iter()
        .map(|t| {
            // Drivers before 2017 named the cross-socket path SOC.
            let t = if *t == "SOC" { "SYS" } else { t };
            LinkClass::from_str(t).map_err(|_| {
                ArtifactError::malformed(F, format!("row {row}: {t:?} is not a link class"))
            })
        })
        .collect()
}

fn gpu_row(
    out: &mut TopoMatrix,
    h: &Header,
    toks: &[&str],
    ncols: usize,
) -> Result<(), ArtifactError> {
    let row = toks[0];
    let all = cells(&toks[1..], ncols, row)?;
    let n = out.gpus.len();
    out.links.push(all[..n].to_vec());
    let mut rest = toks[1 + ncols..].iter();
    let cpu = if h.cpu { rest.next() } else { None };
    let numa = if h.numa { rest.next() } else { None };
    out.cpu_affinity
        .push(cpu.filter(|c| **c != "N/A").map(|c| (*c).to_string()));
    out.numa_affinity.push(numa.and_then(|n| n.parse().ok()));
    Ok(())
}

/// `NIC Legend:` lines (`  NIC0: mlx5_0`) name each NIC's device.
fn nic_legend(out: &mut TopoMatrix, lines: &[&str]) {
    for l in lines {
        let Some((name, dev)) = l.trim().split_once(':') else {
            continue;
        };
        if let Some(nic) = out.nics.iter_mut().find(|n| n.name == name.trim()) {
            let dev = dev.trim();
            if !dev.is_empty() && !dev.contains(' ') {
                nic.device = Some(dev.to_string());
            }
        }
    }
}

/// The diagonal is X and the matrix symmetric: anything else is not a reading to judge.
fn check_shape(m: &TopoMatrix) -> Result<(), ArtifactError> {
    for (i, row) in m.links.iter().enumerate() {
        if row[i] != LinkClass::X {
            return Err(ArtifactError::malformed(
                F,
                format!("GPU{}'s own cell is {}, not X", m.gpus[i], row[i]),
            ));
        }
        for (j, cell) in row.iter().enumerate().take(i) {
            if *cell != m.links[j][i] {
                return Err(ArtifactError::malformed(
                    F,
                    format!("not symmetric at GPU{}–GPU{}", m.gpus[j], m.gpus[i]),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TWO: &str = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n\
GPU0\t X \tNV12\tPIX\t0-31\t0\t\tN/A\n\
GPU1\tNV12\t X \tSYS\t32-63\t1\t\tN/A\n\
NIC0\tPIX\tSYS\t X \n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n";

    #[test]
    fn reads_links_nics_and_affinity() {
        let m = parse(TWO).unwrap();
        assert_eq!(m.gpus, vec![0, 1]);
        assert_eq!(m.links[0][1], LinkClass::Nv(12));
        assert_eq!(m.cpu_affinity[1].as_deref(), Some("32-63"));
        assert_eq!(m.numa_affinity, vec![Some(0), Some(1)]);
        assert_eq!(m.nics[0].device.as_deref(), Some("mlx5_0"));
        assert_eq!(m.nics[0].to_gpus, vec![LinkClass::Pix, LinkClass::Sys]);
    }

    #[test]
    fn a_missing_row_is_truncated() {
        let cut: String = TWO.lines().take(2).collect::<Vec<_>>().join("\n");
        let e = parse(&cut).unwrap_err();
        assert!(matches!(e, ArtifactError::Truncated { .. }), "{e}");
    }

    #[test]
    fn a_short_row_is_truncated_and_asymmetry_malformed() {
        let short = "GPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\n";
        assert!(matches!(parse(short), Err(ArtifactError::Truncated { .. })));
        let odd = "GPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tSYS\t X \n";
        assert!(matches!(parse(odd), Err(ArtifactError::Malformed { .. })));
    }
}
