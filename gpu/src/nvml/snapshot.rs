//! What a caller sees while the NVML thread is stuck: the last readings with the hung GPUs marked (pure).

use ddpcheck_core::node_gpus::{GpuHealth, GpuInfo, NodeInventory, ProbeState};

/// The GPUs an NVML step touches: all of them (driver-wide calls) or these indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Involved {
    All,
    Gpus(Vec<u32>),
}

impl Involved {
    /// `GPU 1`, `GPUs 0,1` or `all GPUs`, for messages.
    pub fn describe(&self) -> String {
        match self {
            Involved::All => "all GPUs".into(),
            Involved::Gpus(v) if v.len() == 1 => format!("GPU {}", v[0]),
            Involved::Gpus(v) => {
                let s: Vec<String> = v.iter().map(|i| i.to_string()).collect();
                format!("GPUs {}", s.join(","))
            }
        }
    }
}

/// An inventory being read right now, published GPU by GPU, so that a call that hangs on GPU k
/// still answers with fresh readings of the GPUs before it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Partial {
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub device_count: Option<u32>,
    pub gpus: Vec<GpuInfo>,
}

/// A GPU we cannot name because NVML hung before it answered for it.
pub fn placeholder(index: u32, state: ProbeState, why: &str) -> GpuInfo {
    GpuInfo {
        index,
        uuid: String::new(),
        pci_bus_id: String::new(),
        name: format!("unknown ({why})"),
        memory_total_bytes: 0,
        pcie: None,
        health: GpuHealth::default(),
        processes: vec![],
        state,
    }
}

fn upsert(gpus: &mut Vec<GpuInfo>, g: GpuInfo) {
    match gpus.iter_mut().find(|x| x.index == g.index) {
        Some(slot) => *slot = g,
        None => gpus.push(g),
    }
}

/// The inventory answered while NVML is stuck on `involved`.
///
/// Rules: readings of the hung call so far (`partial`) replace the last snapshot's; the GPUs the
/// hung step touches are `Stuck`; GPUs NVML counted but we never read are `Stuck` placeholders
/// (they cannot be read while the thread hangs); other GPUs keep their last reading and state.
/// `None` when nothing at all is known (the caller answers with a timeout instead).
pub fn stuck_inventory(
    hostname: &str,
    snapshot: Option<&NodeInventory>,
    partial: Option<&Partial>,
    involved: &Involved,
) -> Option<NodeInventory> {
    let mut inv = snapshot.cloned().unwrap_or(NodeInventory {
        hostname: String::new(),
        driver_version: None,
        cuda_driver_version: None,
        gpus: vec![],
    });
    inv.hostname = hostname.to_string();
    let mut count: Option<u32> = None;
    if let Some(p) = partial {
        if p.driver_version.is_some() {
            inv.driver_version = p.driver_version.clone();
        }
        if p.cuda_driver_version.is_some() {
            inv.cuda_driver_version = p.cuda_driver_version.clone();
        }
        count = p.device_count;
        for g in &p.gpus {
            upsert(&mut inv.gpus, g.clone());
        }
    }
    let why = "NVML did not answer";
    let stuck: Vec<u32> = match involved {
        Involved::All => inv.gpus.iter().map(|g| g.index).collect(),
        Involved::Gpus(v) => v.clone(),
    };
    for i in stuck {
        match inv.gpus.iter_mut().find(|g| g.index == i) {
            Some(g) => g.state = ProbeState::Stuck,
            None => inv.gpus.push(placeholder(i, ProbeState::Stuck, why)),
        }
    }
    for i in 0..count.unwrap_or(0) {
        if !inv.gpus.iter().any(|g| g.index == i) {
            inv.gpus.push(placeholder(i, ProbeState::Stuck, why));
        }
    }
    inv.gpus.sort_by_key(|g| g.index);
    inv.gpus
        .iter()
        .any(|g| g.state == ProbeState::Stuck)
        .then_some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(i: u32, temp: u32) -> GpuInfo {
        GpuInfo {
            index: i,
            uuid: format!("GPU-{i}"),
            pci_bus_id: format!("00000000:1{i}:00.0"),
            name: "NVIDIA H200".into(),
            memory_total_bytes: 1 << 30,
            pcie: None,
            health: GpuHealth {
                temperature_c: Some(temp),
                ..GpuHealth::default()
            },
            processes: vec![],
            state: ProbeState::Ok,
        }
    }

    fn snap(gpus: Vec<GpuInfo>) -> NodeInventory {
        NodeInventory {
            hostname: "old".into(),
            driver_version: Some("580.1".into()),
            cuda_driver_version: Some("13.0".into()),
            gpus,
        }
    }

    fn states(inv: &NodeInventory) -> Vec<(u32, ProbeState)> {
        inv.gpus.iter().map(|g| (g.index, g.state)).collect()
    }

    #[test]
    fn only_the_hung_gpu_is_stuck() {
        let s = snap(vec![gpu(0, 30), gpu(1, 31), gpu(2, 32)]);
        let inv = stuck_inventory("h", Some(&s), None, &Involved::Gpus(vec![1])).unwrap();
        assert_eq!(inv.hostname, "h");
        assert_eq!(
            states(&inv),
            vec![
                (0, ProbeState::Ok),
                (1, ProbeState::Stuck),
                (2, ProbeState::Ok)
            ]
        );
        // The stuck GPU keeps its identity, so findings name it by UUID.
        assert_eq!(inv.gpus[1].uuid, "GPU-1");
    }

    #[test]
    fn partial_readings_replace_the_snapshot() {
        let s = snap(vec![gpu(0, 30), gpu(1, 31)]);
        let p = Partial {
            driver_version: Some("580.2".into()),
            cuda_driver_version: None,
            device_count: Some(3),
            gpus: vec![gpu(0, 70)],
        };
        let inv = stuck_inventory("h", Some(&s), Some(&p), &Involved::Gpus(vec![1])).unwrap();
        assert_eq!(inv.driver_version.as_deref(), Some("580.2"));
        assert_eq!(inv.cuda_driver_version.as_deref(), Some("13.0"));
        assert_eq!(inv.gpus[0].health.temperature_c, Some(70));
        // GPU 2 was counted but never read: it cannot be read now either.
        assert_eq!(
            states(&inv),
            vec![
                (0, ProbeState::Ok),
                (1, ProbeState::Stuck),
                (2, ProbeState::Stuck)
            ]
        );
        assert!(inv.gpus[2].uuid.is_empty());
    }

    #[test]
    fn driver_wide_hang_marks_every_gpu() {
        let s = snap(vec![gpu(0, 30), gpu(1, 31)]);
        let inv = stuck_inventory("h", Some(&s), None, &Involved::All).unwrap();
        assert!(inv.gpus.iter().all(|g| g.state == ProbeState::Stuck));
    }

    #[test]
    fn first_call_hanging_in_the_middle() {
        let p = Partial {
            device_count: Some(2),
            gpus: vec![gpu(0, 30)],
            ..Partial::default()
        };
        let inv = stuck_inventory("h", None, Some(&p), &Involved::Gpus(vec![1])).unwrap();
        assert_eq!(
            states(&inv),
            vec![(0, ProbeState::Ok), (1, ProbeState::Stuck)]
        );
    }

    #[test]
    fn nothing_known_gives_none() {
        assert_eq!(stuck_inventory("h", None, None, &Involved::All), None);
        let empty = snap(vec![]);
        assert_eq!(
            stuck_inventory("h", Some(&empty), None, &Involved::All),
            None
        );
    }

    #[test]
    fn describes_involved_gpus() {
        assert_eq!(Involved::All.describe(), "all GPUs");
        assert_eq!(Involved::Gpus(vec![3]).describe(), "GPU 3");
        assert_eq!(Involved::Gpus(vec![0, 1]).describe(), "GPUs 0,1");
    }
}
