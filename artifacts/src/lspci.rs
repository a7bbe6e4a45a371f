//! `lspci -vvv`: every device's class, bus range (bridges' `Bus: primary=, secondary=,
//! subordinate=`), NUMA node, link capability and status (`LnkCap`, `LnkSta`) and ACS control
//! (`ACSCtl`). The output is flat; the bridges above each NVIDIA GPU are the bridges whose
//! secondary..=subordinate range holds the GPU's bus, outermost (widest range) first.

use ddpcheck_core::explain::platform::AcsState;
use serde::{Deserialize, Serialize};

use crate::text::clean;
use crate::{ArtifactError, Format};

const F: Format = Format::Lspci;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lspci {
    pub devices: Vec<PciDevice>,
}

/// A PCIe link as `LnkCap` (most) or `LnkSta` (now) states it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PciLink {
    pub gts: f64,
    pub width: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PciDevice {
    /// `0000:18:00.0` (the domain added where lspci printed none).
    pub bdf: String,
    /// `PCI bridge`, `3D controller`, ...
    pub class: String,
    pub description: String,
    /// (secondary, subordinate) bus numbers of a bridge.
    pub bus_range: Option<(u32, u32)>,
    pub numa_node: Option<i32>,
    pub lnk_cap: Option<PciLink>,
    pub lnk_sta: Option<PciLink>,
    /// ACS control, where the bridge has the capability; `NeedsRoot` where lspci ran without
    /// root (`Capabilities: <access denied>`).
    pub acs: Option<AcsState>,
    /// Lines under the header, to tell a cut block.
    #[serde(skip)]
    lines: usize,
}

impl PciDevice {
    pub fn is_nvidia_gpu(&self) -> bool {
        matches!(
            self.class.as_str(),
            "3D controller" | "VGA compatible controller"
        ) && self.description.contains("NVIDIA")
    }

    /// An NVSwitch (class Bridge, NVIDIA's).
    pub fn is_nvswitch(&self) -> bool {
        self.class == "Bridge" && self.description.contains("NVIDIA")
    }

    pub fn is_bridge(&self) -> bool {
        self.class == "PCI bridge"
    }

    pub fn domain(&self) -> &str {
        self.bdf.split(':').next().unwrap_or("")
    }

    pub fn bus(&self) -> Option<u32> {
        u32::from_str_radix(self.bdf.split(':').nth(1)?, 16).ok()
    }
}

impl Lspci {
    /// The bridges above a device, outermost first; `None` where the output has neither a PCI
    /// bridge nor a host bridge (a filtered `lspci -s`), or where a PCI bridge of the device's
    /// domain gives no bus range (an excerpt: that bridge may be above it), so that none seen
    /// is never read as none there. A whole listing of a VM's flat tree has its host bridge.
    pub fn bridges_above(&self, dev: &PciDevice) -> Option<Vec<&PciDevice>> {
        let whole = self
            .devices
            .iter()
            .any(|d| d.is_bridge() || d.class == "Host bridge");
        if !whole || !self.unplaced_bridges(dev.domain()).is_empty() {
            return None;
        }
        let bus = dev.bus()?;
        let mut up: Vec<&PciDevice> = self
            .devices
            .iter()
            .filter(|b| b.is_bridge() && b.domain() == dev.domain())
            .filter(|b| b.bus_range.is_some_and(|(s, e)| s <= bus && bus <= e))
            .collect();
        up.sort_by_key(|b| b.bus_range.map(|(s, e)| (std::cmp::Reverse(e - s), s)));
        Some(up)
    }

    /// PCI bridges of this domain whose bus range the output does not give (no `Bus:` line).
    pub fn unplaced_bridges(&self, domain: &str) -> Vec<&PciDevice> {
        self.devices
            .iter()
            .filter(|b| b.is_bridge() && b.domain() == domain && b.bus_range.is_none())
            .collect()
    }

    pub fn nvidia_gpus(&self) -> impl Iterator<Item = &PciDevice> {
        self.devices.iter().filter(|d| d.is_nvidia_gpu())
    }
}

/// `18:00.0` or `0000:18:00.0` at the start of a header line.
fn bdf(word: &str) -> Option<String> {
    let parts: Vec<&str> = word.split(':').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let (dom, bus, devfn) = match parts.as_slice() {
        [b, df] => ("0000", *b, *df),
        [d, b, df] if hex(d, 4) => (*d, *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    (hex(bus, 2)
        && hex(dev, 2)
        && func.len() == 1
        && func.chars().all(|c| ('0'..='7').contains(&c)))
    .then(|| format!("{dom}:{bus}:{devfn}").to_ascii_lowercase())
}

fn link(rest: &str) -> Option<PciLink> {
    let speed = rest.split("Speed ").nth(1)?.split_whitespace().next()?;
    let width = rest.split("Width x").nth(1)?;
    let width: String = width.chars().take_while(char::is_ascii_digit).collect();
    Some(PciLink {
        gts: speed
            .trim_end_matches(',')
            .trim_end_matches("GT/s")
            .parse()
            .ok()?,
        width: width.parse().ok()?,
    })
}

fn acs(rest: &str) -> AcsState {
    let on = |name: &str| rest.split_whitespace().any(|w| w == format!("{name}+"));
    AcsState::Read {
        source_validation: on("SrcValid"),
        p2p_request_redirect: on("ReqRedir"),
        p2p_completion_redirect: on("CmpltRedir"),
        upstream_forwarding: on("UpstreamFwd"),
    }
}

fn bus_range(rest: &str) -> Option<(u32, u32)> {
    let field = |k: &str| {
        rest.split(k)
            .nth(1)?
            .split(|c: char| c == ',' || c.is_whitespace())
            .next()
            .and_then(|v| u32::from_str_radix(v, 16).ok())
    };
    Some((field("secondary=")?, field("subordinate=")?))
}

fn detail(d: &mut PciDevice, line: &str) {
    let t = line.trim();
    d.lines += 1;
    if let Some(r) = t.strip_prefix("Bus:") {
        d.bus_range = bus_range(r);
    } else if let Some(r) = t.strip_prefix("NUMA node:") {
        d.numa_node = r.trim().parse().ok();
    } else if let Some(r) = t.strip_prefix("LnkCap:") {
        d.lnk_cap = link(r);
    } else if let Some(r) = t.strip_prefix("LnkSta:") {
        d.lnk_sta = link(r);
    } else if let Some(r) = t.strip_prefix("ACSCtl:") {
        d.acs = Some(acs(r));
    } else if t.contains("<access denied>") && d.acs.is_none() {
        d.acs = Some(AcsState::NeedsRoot);
    }
}

pub fn parse(text: &str) -> Result<Lspci, ArtifactError> {
    let text = clean(text);
    let mut devices: Vec<PciDevice> = Vec::new();
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some(d) = devices.last_mut() {
                detail(d, line);
            }
            continue;
        }
        let Some((head, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some(bdf) = bdf(head) else { continue };
        let (class, description) = rest.split_once(": ").unwrap_or((rest, ""));
        // `lspci -nn` adds the class code: `3D controller [0302]`.
        let class = class.split(" [").next().unwrap_or(class);
        devices.push(PciDevice {
            bdf,
            class: class.trim().to_string(),
            description: description.trim().to_string(),
            bus_range: None,
            numa_node: None,
            lnk_cap: None,
            lnk_sta: None,
            acs: None,
            lines: 0,
        });
    }
    check(devices)
}

fn check(devices: Vec<PciDevice>) -> Result<Lspci, ArtifactError> {
    if devices.is_empty() {
        return Err(ArtifactError::malformed(
            F,
            "no device line (`18:00.0 3D controller: …`)",
        ));
    }
    if devices.iter().all(|d| d.lines == 0) {
        return Err(ArtifactError::malformed(
            F,
            "device lines without their details: run lspci -vvv",
        ));
    }
    if devices.last().is_some_and(|d| d.lines == 0) {
        return Err(ArtifactError::truncated(
            F,
            "the last device has no details",
        ));
    }
    let out = Lspci { devices };
    if out.nvidia_gpus().next().is_none() {
        return Err(ArtifactError::malformed(F, "no NVIDIA GPU in the output"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const T: &str = "\
00:01.0 PCI bridge: Intel Corporation Root Port (rev 04) (prog-if 00 [Normal decode])
\tBus: primary=00, secondary=01, subordinate=03, sec-latency=0
\tCapabilities: [40] Express (v2) Root Port (Slot+), MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L1
\t\tLnkSta:\tSpeed 16GT/s (ok), Width x16 (ok)
01:00.0 PCI bridge: PLX Technology, Inc. PEX 8747 (rev ca)
\tBus: primary=01, secondary=02, subordinate=03, sec-latency=0
\tCapabilities: [f24 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
02:00.0 3D controller: NVIDIA Corporation GH100 [H100 PCIe] (rev a1)
\tNUMA node: 1
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)
";

    #[test]
    fn bridges_above_a_gpu_with_acs_and_links() {
        let l = parse(T).unwrap();
        let gpu = l.nvidia_gpus().next().unwrap();
        assert_eq!(gpu.bdf, "0000:02:00.0");
        assert_eq!(gpu.numa_node, Some(1));
        assert_eq!(
            gpu.lnk_sta,
            Some(PciLink {
                gts: 16.0,
                width: 8
            })
        );
        let up: Vec<&str> = l
            .bridges_above(gpu)
            .unwrap()
            .iter()
            .map(|b| b.bdf.as_str())
            .collect();
        assert_eq!(up, vec!["0000:00:01.0", "0000:01:00.0"]);
        let plx = &l.devices[1];
        assert!(plx.acs.as_ref().unwrap().redirects_p2p());
        assert_eq!(l.devices[0].acs, None);
    }

    #[test]
    fn numeric_class_codes_of_lspci_nn_are_read() {
        let t = "17:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 PCIe] [10de:2331] (rev a1)\n\tNUMA node: 0\n";
        let l = parse(t).unwrap();
        assert!(l.devices[0].is_nvidia_gpu(), "{:?}", l.devices[0].class);
    }

    #[test]
    fn plain_lspci_and_cut_blocks_are_refused() {
        let plain = "00:01.0 PCI bridge: Intel\n02:00.0 3D controller: NVIDIA Corporation GH100\n";
        assert!(matches!(parse(plain), Err(ArtifactError::Malformed { .. })));
        let cut = format!("{T}03:00.0 3D controller: NVIDIA Corporation GH100\n");
        assert!(matches!(parse(&cut), Err(ArtifactError::Truncated { .. })));
    }
}
