//! `nvidia-smi -q`: per GPU the product, UUID, bus id, PCIe generation and width (current and
//! max), MIG, virtualization mode, clocks and their event (throttle) reasons, ECC, retired pages
//! and remapped rows, temperature and power; the driver and CUDA versions. Read as a tree by
//! indentation, so that sections added by newer drivers are passed over.

use serde::{Deserialize, Serialize};

use crate::text::{clean, key_value};
use crate::{ArtifactError, Format};

const F: Format = Format::SmiQuery;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SmiQuery {
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub gpus: Vec<SmiGpu>,
}

/// One GPU's section; `None` where the section has no such line or says N/A.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SmiGpu {
    /// The section's bus id (`00000000:18:00.0`).
    pub bus_id: String,
    pub product_name: Option<String>,
    pub uuid: Option<String>,
    pub pcie_gen_current: Option<u32>,
    pub pcie_gen_max: Option<u32>,
    pub pcie_width_current: Option<u32>,
    pub pcie_width_max: Option<u32>,
    pub mig_current: Option<bool>,
    /// `GPU Virtualization Mode`: `None`, `Pass-Through`, `VGPU`, ...
    pub virtualization_mode: Option<String>,
    /// Active clock event (throttle) reasons, as NVML names them (`hw_slowdown`).
    pub clock_event_reasons: Vec<String>,
    pub sm_clock_mhz: Option<u32>,
    pub ecc_enabled: Option<bool>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_volatile: Option<u64>,
    pub retired_pages_pending: Option<bool>,
    pub remapped_rows_pending: Option<bool>,
    pub remapped_rows_failure: Option<bool>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    pub persistence_mode: Option<bool>,
    pub compute_mode: Option<String>,
    pub memory_total_mib: Option<u64>,
    /// `Fabric > State` (`Completed`, `In Progress`, `N/A`).
    pub fabric_state: Option<String>,
    /// `Fabric > Status` (`Success`, an error, `N/A`).
    pub fabric_status: Option<String>,
}

/// A line of the tree: its key, its value (empty for a section) and the lines under it.
#[derive(Debug, Default)]
struct Node {
    key: String,
    value: String,
    children: Vec<Node>,
}

impl Node {
    fn get(&self, path: &[&str]) -> Option<&Node> {
        let (first, rest) = path.split_first()?;
        let child = self.children.iter().find(|c| c.key == *first)?;
        if rest.is_empty() {
            Some(child)
        } else {
            child.get(rest)
        }
    }

    /// The value at `path`, without N/A.
    fn val(&self, path: &[&str]) -> Option<&str> {
        self.get(path)
            .map(|n| n.value.as_str())
            .filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("N/A"))
    }

    fn first_val(&self, paths: &[&[&str]]) -> Option<&str> {
        paths.iter().find_map(|p| self.val(p))
    }
}

/// The lines as a tree by their indentation.
fn tree(text: &str) -> Node {
    let mut stack: Vec<(usize, Node)> = vec![(0, Node::default())];
    for line in text.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with("====") {
            continue;
        }
        let indent = line.len() - line.trim_start().len() + 1;
        let (key, value) = key_value(line).unwrap_or((line.trim(), ""));
        while stack.len() > 1 && stack.last().is_some_and(|(i, _)| *i >= indent) {
            fold(&mut stack);
        }
        stack.push((
            indent,
            Node {
                key: key.to_string(),
                value: value.to_string(),
                children: Vec::new(),
            },
        ));
    }
    while stack.len() > 1 {
        fold(&mut stack);
    }
    stack.pop().map(|(_, n)| n).unwrap_or_default()
}

fn fold(stack: &mut Vec<(usize, Node)>) {
    if let Some((_, n)) = stack.pop() {
        if let Some((_, parent)) = stack.last_mut() {
            parent.children.push(n);
        }
    }
}

fn number<T: std::str::FromStr>(v: Option<&str>) -> Option<T> {
    v?.split_whitespace()
        .next()?
        .trim_end_matches('x')
        .parse()
        .ok()
}

fn yes(v: Option<&str>) -> Option<bool> {
    match v?.to_ascii_lowercase().as_str() {
        "yes" | "enabled" | "active" => Some(true),
        "no" | "disabled" | "not active" => Some(false),
        _ => None,
    }
}

/// `nvidia-smi -q`'s reason lines as NVML's names (gpu/src/nvml/convert.rs' table).
fn reason_name(key: &str) -> Option<&'static str> {
    Some(match key {
        "Idle" | "GPU Idle" => "gpu_idle",
        "Applications Clocks Setting" => "applications_clocks_setting",
        "SW Power Cap" => "sw_power_cap",
        "HW Slowdown" => "hw_slowdown",
        "Sync Boost" => "sync_boost",
        "SW Thermal Slowdown" => "sw_thermal_slowdown",
        "HW Thermal Slowdown" => "hw_thermal_slowdown",
        "HW Power Brake Slowdown" => "hw_power_brake_slowdown",
        "Display Clock Setting" => "display_clock_setting",
        _ => return None,
    })
}

fn reasons(g: &Node) -> Vec<String> {
    let sec = g
        .get(&["Clocks Event Reasons"])
        .or_else(|| g.get(&["Clocks Throttle Reasons"]))
        .or_else(|| g.get(&["Clocks Event Reasons Counters"]));
    let mut out = Vec::new();
    if let Some(s) = sec {
        active_reasons(s, &mut out);
    }
    out
}

/// The active reasons of a section and the lines nested under its lines (drivers 535 and newer
/// put `HW Thermal Slowdown` and `HW Power Brake Slowdown` under `HW Slowdown`).
fn active_reasons(n: &Node, out: &mut Vec<String>) {
    for c in &n.children {
        if c.value.eq_ignore_ascii_case("Active") {
            if let Some(name) = reason_name(&c.key) {
                out.push(name.to_string());
            }
        }
        active_reasons(c, out);
    }
}

/// Volatile ECC errors of one kind (`Uncorrectable` or `Correctable`), in every driver's layout:
/// SRAM/DRAM lines (470 and newer), or `Double Bit`/`Single Bit` with a `Total` (older).
fn ecc(g: &Node, uncorrectable: bool) -> Option<u64> {
    let vol = g.get(&["ECC Errors", "Volatile"])?;
    let old = if uncorrectable {
        "Double Bit"
    } else {
        "Single Bit"
    };
    if let Some(total) = vol.val(&[old, "Total"]) {
        return total.parse().ok();
    }
    let lines: Vec<u64> = vol
        .children
        .iter()
        .filter(|c| {
            let unc = c.key.contains("Uncorrectable");
            c.key.contains("orrectable") && unc == uncorrectable
        })
        .filter_map(|c| c.value.parse().ok())
        .collect();
    (!lines.is_empty()).then(|| lines.iter().sum())
}

fn gpu(bus_id: &str, g: &Node) -> SmiGpu {
    let link = |what: &str, which: &str| -> Option<u32> {
        number(g.val(&["PCI", "GPU Link Info", what, which]))
    };
    SmiGpu {
        bus_id: bus_id.to_string(),
        product_name: g.val(&["Product Name"]).map(str::to_string),
        uuid: g.val(&["GPU UUID"]).map(str::to_string),
        pcie_gen_current: link("PCIe Generation", "Current"),
        pcie_gen_max: link("PCIe Generation", "Max"),
        pcie_width_current: link("Link Width", "Current"),
        pcie_width_max: link("Link Width", "Max"),
        mig_current: yes(g.val(&["MIG Mode", "Current"])),
        virtualization_mode: g
            .val(&["GPU Virtualization Mode", "Virtualization Mode"])
            .map(str::to_string),
        clock_event_reasons: reasons(g),
        sm_clock_mhz: number(g.val(&["Clocks", "SM"])),
        ecc_enabled: yes(g.val(&["ECC Mode", "Current"])),
        ecc_uncorrected_volatile: ecc(g, true),
        ecc_corrected_volatile: ecc(g, false),
        retired_pages_pending: yes(g.first_val(&[
            &["Retired Pages", "Pending Page Blacklist"],
            &["Retired Pages", "Pending Page Retirement"],
        ])),
        remapped_rows_pending: yes(g.val(&["Remapped Rows", "Pending"])),
        remapped_rows_failure: yes(g.val(&["Remapped Rows", "Remapping Failure Occurred"])),
        temperature_c: number(g.val(&["Temperature", "GPU Current Temp"])),
        power_w: number(g.first_val(&[
            &["GPU Power Readings", "Power Draw"],
            &["GPU Power Readings", "Instantaneous Power Draw"],
            &["Power Readings", "Power Draw"],
        ])),
        persistence_mode: yes(g.val(&["Persistence Mode"])),
        compute_mode: g.val(&["Compute Mode"]).map(str::to_string),
        memory_total_mib: number(g.val(&["FB Memory Usage", "Total"])),
        fabric_state: g.val(&["Fabric", "State"]).map(str::to_string),
        fabric_status: g.val(&["Fabric", "Status"]).map(str::to_string),
    }
}

/// Parses the whole output; fewer GPU sections than `Attached GPUs` says, or a section without
/// its product and PCI lines, is truncated.
pub fn parse(text: &str) -> Result<SmiQuery, ArtifactError> {
    let text = clean(text);
    let root = tree(&text);
    let attached: usize = number(root.val(&["Attached GPUs"])).ok_or_else(|| {
        ArtifactError::truncated(
            F,
            "no `Attached GPUs` line: the head of the output is missing",
        )
    })?;
    let sections: Vec<(&str, &Node)> = root
        .children
        .iter()
        .filter_map(|c| Some((c.key.strip_prefix("GPU ")?, c)))
        .filter(|(id, _)| id.contains(':'))
        .collect();
    if sections.len() != attached {
        return Err(ArtifactError::truncated(
            F,
            format!("{attached} GPUs attached, {} GPU sections", sections.len()),
        ));
    }
    // The sections of one output have the same parts, give or take one (a MIG block): a last
    // one with under nine tenths of the first's was cut.
    if let (Some((_, first)), Some((id, last))) = (sections.first(), sections.last()) {
        if last.children.len() * 10 < first.children.len() * 9 {
            return Err(ArtifactError::truncated(
                F,
                format!(
                    "GPU {id}'s section has {} of the {} parts the first has",
                    last.children.len(),
                    first.children.len()
                ),
            ));
        }
    }
    let gpus: Vec<SmiGpu> = sections.iter().map(|(id, g)| gpu(id, g)).collect();
    if let Some(g) = gpus.iter().find(|g| g.product_name.is_none()) {
        return Err(ArtifactError::truncated(
            F,
            format!("GPU {}'s section has no Product Name", g.bus_id),
        ));
    }
    if let Some((id, _)) = sections.iter().find(|(_, g)| g.get(&["PCI"]).is_none()) {
        return Err(ArtifactError::truncated(
            F,
            format!("GPU {id}'s section has no PCI part"),
        ));
    }
    Ok(SmiQuery {
        driver_version: root.val(&["Driver Version"]).map(str::to_string),
        cuda_version: root.val(&["CUDA Version"]).map(str::to_string),
        gpus,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TWO: &str = "Driver Version : 550.1\nAttached GPUs : 2\nGPU 00000000:17:00.0\n    Product Name : NVIDIA H100 PCIe\n    PCI\n        Bus Id : 00000000:17:00.0\n    ECC Mode\n        Current : Enabled\n    Processes : None\nGPU 00000000:65:00.0\n    Product Name : NVIDIA H100 PCIe\n    PCI\n        Bus Id : 00000000:65:00.0\n    ECC Mode\n        Current : Enabled\n    Processes : None\n";

    #[test]
    fn a_last_section_cut_short_is_truncated() {
        assert_eq!(parse(TWO).unwrap().gpus[1].ecc_enabled, Some(true));
        let cut: String = TWO.lines().take(14).map(|l| format!("{l}\n")).collect();
        let e = parse(&cut).unwrap_err();
        assert!(matches!(e, ArtifactError::Truncated { .. }), "{e}");
    }
}
