//! Pure pair-matrix assembly: NVLink far ends and PCIe common ancestors to `nvidia-smi topo -m` classes.

use ddpcheck_core::num::len_u32;
use ddpcheck_core::topology::LinkClass;

use super::convert::BusKey;

/// What sits at the far end of one active NVLink of a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FarEnd {
    /// A GPU at this PCI address (NVML's remote PCI info).
    Gpu(BusKey),
    /// An NVSwitch (NVML's remote device type; HGX baseboards).
    Switch,
    /// Anything else (an IBM NPU, or a remote NVML could not name).
    Other,
}

/// Classifies one active link from NVML's remote device type (0 GPU, 1 IBM NPU, 2 switch,
/// `None` when the driver cannot say) and remote PCI address.
///
/// A remote address that is one of our GPUs decides, whatever the type says; a switch is only
/// believed when NVML says so, since its PCI address is not one of ours either.
pub fn classify_far_end(
    remote_type: Option<u32>,
    remote_bus: Option<BusKey>,
    gpus: &[BusKey],
) -> FarEnd {
    const GPU: u32 = 0;
    const SWITCH: u32 = 2;
    match (remote_type, remote_bus) {
        (Some(SWITCH), _) => FarEnd::Switch,
        (_, Some(bus)) if gpus.contains(&bus) => FarEnd::Gpu(bus),
        (Some(GPU), Some(bus)) => FarEnd::Gpu(bus),
        _ => FarEnd::Other,
    }
}

/// NVLink counts between every pair of `gpus` (by PCI address), from each GPU's active links.
///
/// Direct links: links of GPU i whose far end is GPU j, taking the larger of the two sides' counts
/// (a link is one link seen from both ends; a side that could not read a link's far end must not
/// hide it). Switched links: on an NVSwitch baseboard every GPU reaches every other one through the
/// switches with all its switch links bonded, which `nvidia-smi topo -m` shows as NV18 for every
/// pair of an HGX H100/H200; the pair gets the smaller of the two GPUs' switch-link counts, since
/// traffic between them is bounded by the GPU with fewer working links.
pub fn nvlink_counts(gpus: &[BusKey], ends: &[Vec<FarEnd>]) -> Vec<Vec<u32>> {
    let n = gpus.len();
    let direct = |i: usize, j: usize| -> u32 {
        ends.get(i)
            .map(|e| e.iter().filter(|f| **f == FarEnd::Gpu(gpus[j])).count())
            .map(len_u32)
            .unwrap_or(0)
    };
    let switched = |i: usize| -> u32 {
        ends.get(i)
            .map(|e| e.iter().filter(|f| **f == FarEnd::Switch).count())
            .map(len_u32)
            .unwrap_or(0)
    };
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        0
                    } else {
                        direct(i, j).max(direct(j, i)) + switched(i).min(switched(j))
                    }
                })
                .collect()
        })
        .collect()
}

/// The class matrix: X on the diagonal, NV<n> where a pair shares NVLinks, else the PCIe class.
/// `pcie[i][j]` is needed only for pairs without NVLink; the first such pair without one is the
/// error (row, column).
pub fn assemble_matrix(
    nv: &[Vec<u32>],
    pcie: &[Vec<Option<LinkClass>>],
) -> Result<Vec<Vec<LinkClass>>, (usize, usize)> {
    let n = nv.len();
    let mut out = vec![vec![LinkClass::X; n]; n];
    for (i, row) in out.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            if i == j {
                continue;
            }
            let count = nv[i].get(j).copied().unwrap_or(0);
            *cell = if count > 0 {
                LinkClass::Nv(count)
            } else {
                // The ancestor is symmetric; take either side that was read.
                pcie.get(i)
                    .and_then(|r| r.get(j))
                    .copied()
                    .flatten()
                    .or_else(|| pcie.get(j).and_then(|r| r.get(i)).copied().flatten())
                    .ok_or((i, j))?
            };
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::topology::{GpuRef, TopologyMatrix};

    const A: BusKey = (0, 0x18, 0, 0);
    const B: BusKey = (0, 0x2a, 0, 0);
    const C: BusKey = (0, 0x3a, 0, 0);

    fn matrix(links: Vec<Vec<LinkClass>>) -> TopologyMatrix {
        let gpus = (0..len_u32(links.len()))
            .map(|i| GpuRef {
                index: i,
                uuid: format!("GPU-{i}"),
                pci_bus_id: String::new(),
            })
            .collect();
        TopologyMatrix {
            gpus,
            links,
            p2p: vec![],
            p2p_status: vec![],
            cpu_affinity: vec![],
            numa_affinity: vec![],
        }
    }

    #[test]
    fn far_end_classification() {
        let ours = [A, B];
        assert_eq!(classify_far_end(Some(2), Some(C), &ours), FarEnd::Switch);
        assert_eq!(classify_far_end(Some(0), Some(B), &ours), FarEnd::Gpu(B));
        // The type is unknown but the address is one of our GPUs.
        assert_eq!(classify_far_end(None, Some(B), &ours), FarEnd::Gpu(B));
        assert_eq!(classify_far_end(Some(255), Some(B), &ours), FarEnd::Gpu(B));
        assert_eq!(classify_far_end(None, Some(C), &ours), FarEnd::Other);
        assert_eq!(classify_far_end(Some(1), Some(C), &ours), FarEnd::Other);
        assert_eq!(classify_far_end(None, None, &ours), FarEnd::Other);
    }

    #[test]
    fn switched_pair_is_nv18_over_phb() {
        // Two H200s of an HGX board: 18 active links each, every one to an NVSwitch.
        let ends = vec![vec![FarEnd::Switch; 18], vec![FarEnd::Switch; 18]];
        let nv = nvlink_counts(&[A, B], &ends);
        assert_eq!(nv, vec![vec![0, 18], vec![18, 0]]);
        let phb = Some(LinkClass::Phb);
        let m = assemble_matrix(&nv, &[vec![None, phb], vec![phb, None]]).unwrap();
        let t = matrix(m);
        t.validate().unwrap();
        assert_eq!(t.links[0][1].to_string(), "NV18");
    }

    #[test]
    fn direct_links_count_per_peer_and_stay_symmetric() {
        // A-B by 4 bridge links, A-C by 2; C could read only one of its links to A.
        let ends = vec![
            [vec![FarEnd::Gpu(B); 4], vec![FarEnd::Gpu(C); 2]].concat(),
            vec![FarEnd::Gpu(A); 4],
            vec![FarEnd::Gpu(A), FarEnd::Other],
        ];
        let nv = nvlink_counts(&[A, B, C], &ends);
        assert_eq!(nv[0][1], 4);
        assert_eq!(nv[1][0], 4);
        assert_eq!(nv[0][2], 2);
        assert_eq!(nv[2][0], 2);
        assert_eq!(nv[1][2], 0);
        let sys = Some(LinkClass::Sys);
        let pcie = vec![
            vec![None, None, None],
            vec![None, None, sys],
            vec![None, sys, None],
        ];
        let t = matrix(assemble_matrix(&nv, &pcie).unwrap());
        t.validate().unwrap();
        assert_eq!(t.links[1][2], LinkClass::Sys);
        assert_eq!(t.links[0][2], LinkClass::Nv(2));
    }

    #[test]
    fn switch_pair_takes_the_weaker_gpu() {
        let ends = vec![vec![FarEnd::Switch; 18], vec![FarEnd::Switch; 17]];
        let nv = nvlink_counts(&[A, B], &ends);
        assert_eq!(nv[0][1], 17);
        assert_eq!(nv[1][0], 17);
        // One GPU on the switches, the other without NVLink: no NVLink path between them.
        let ends = vec![vec![FarEnd::Switch; 18], vec![]];
        assert_eq!(nvlink_counts(&[A, B], &ends)[0][1], 0);
    }

    #[test]
    fn pcie_only_pairs_need_an_ancestor() {
        let nv = vec![vec![0, 0], vec![0, 0]];
        // One side read is enough.
        let m =
            assemble_matrix(&nv, &[vec![None, Some(LinkClass::Phb)], vec![None, None]]).unwrap();
        assert_eq!(m[1][0], LinkClass::Phb);
        assert_eq!(m[0][0], LinkClass::X);
        assert_eq!(
            assemble_matrix(&nv, &[vec![None, None], vec![None, None]]),
            Err((0, 1))
        );
    }
}
