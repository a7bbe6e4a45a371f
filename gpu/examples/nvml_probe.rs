//! Prints what the NVML probe sees on this node: the inventory as JSON, then each pair's link
//! class (`nvidia-smi topo -m` vocabulary), PCIe path and NVLink counts.
//!
//! `cargo build --release -p ddpcheck-gpu --example nvml_probe`, then run
//! `target/release/examples/nvml_probe [deadline_seconds]` on the GPU machine. Exit 3 without NVML.

use std::time::{Duration, Instant};

use ddpcheck_gpu::nvml::NvmlProbe;

fn main() {
    let secs = std::env::args()
        .nth(1)
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(5.0);
    let probe = NvmlProbe::start(Duration::from_secs_f64(secs));
    let t0 = Instant::now();
    let inv = match probe.inventory() {
        Ok(inv) => inv,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(3);
        }
    };
    let took_inv = t0.elapsed();
    match serde_json::to_string_pretty(&inv) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("cannot print the inventory: {e}"),
    }
    let t1 = Instant::now();
    match probe.topology_detail(&inv.gpus) {
        Ok(d) => {
            let took_topo = t1.elapsed();
            // `ddpcheck topo` prints the full `nvidia-smi topo -m` form; the classes suffice here.
            println!("\nLink class per pair:");
            for (g, row) in d.matrix.gpus.iter().zip(&d.matrix.links) {
                let cells: Vec<String> = row.iter().map(ToString::to_string).collect();
                println!("  GPU{}\t{}\t{}", g.index, cells.join("\t"), g.uuid);
            }
            println!("\nPCIe common ancestor per pair (NVLink pairs included):");
            for (i, row) in d.pcie.iter().enumerate() {
                let cells: Vec<String> = row
                    .iter()
                    .map(|c| c.map(|c| c.to_string()).unwrap_or_else(|| "?".into()))
                    .collect();
                println!("  GPU{}\t{}", d.matrix.gpus[i].index, cells.join("\t"));
            }
            println!("active NVLinks per GPU: {:?}", d.nvlinks_active);
            println!("  of which to an NVSwitch: {:?}", d.nvlinks_to_switch);
            println!("P2P read status: {:?}", d.matrix.p2p);
            println!(
                "inventory took {:.3} s, topology {:.3} s",
                took_inv.as_secs_f64(),
                took_topo.as_secs_f64()
            );
        }
        Err(e) => eprintln!("topology: {e}"),
    }
}
