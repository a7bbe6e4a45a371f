//! The pair topology matrix as `nvidia-smi topo -m` prints it, with the GPUs' UUIDs and bus ids.

use std::fmt::Write;

use ddpcheck_core::topology::{LinkClass, TopologyMatrix};

/// Renders the matrix and legend the way `nvidia-smi topo -m` does.
pub fn topo_m(t: &TopologyMatrix) -> String {
    let n = t.gpus.len();
    let mut s = String::from("\t");
    for g in &t.gpus {
        let _ = write!(s, "GPU{}\t", g.index);
    }
    s.push_str("CPU Affinity\tNUMA Affinity\n");
    for (i, (gpu, row)) in t.gpus.iter().zip(&t.links).enumerate() {
        let _ = write!(s, "GPU{}\t", gpu.index);
        for link in row.iter().take(n) {
            let _ = write!(s, " {link}\t");
        }
        let cpu = t
            .cpu_affinity
            .get(i)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "N/A".into());
        let numa = t
            .numa_affinity
            .get(i)
            .copied()
            .flatten()
            .map_or_else(|| "N/A".into(), |v| v.to_string());
        let _ = writeln!(s, "{cpu}\t{numa}");
    }
    s.push_str("\nLegend:\n\n");
    for class in LinkClass::LEGEND_ORDER {
        let tag = match class {
            LinkClass::Nv(_) => "NV#".to_string(),
            other => other.to_string(),
        };
        let _ = writeln!(s, "  {tag:<4} = {}", class.legend());
    }
    s.push_str("\nGPUs:\n");
    for g in &t.gpus {
        let _ = writeln!(s, "  GPU{}  {}  {}", g.index, g.uuid, g.pci_bus_id);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_testkit::two_gpus as two;

    #[test]
    fn renders_nv18_pair() {
        let t = two(LinkClass::Nv(18));
        t.validate().unwrap();
        let out = topo_m(&t);
        assert!(out.contains("GPU0\t X\t NV18\t"), "{out}");
        assert!(
            out.contains("NV#  = Connection traversing a bonded set"),
            "{out}"
        );
    }
}
