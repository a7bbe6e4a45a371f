//! `ddpcheck demo`: starts an in-process daemon on a temporary socket with the simulated
//! `a6000x4-phb` node and runs the main flow through gRPC, as a user's tools would.

use std::time::Instant;

use ddpcheck_engine::{self as engine, PreflightParams};
use ddpcheck_gpu::RealConfig;
use ddpcheckd::run::{self, DaemonConfig};

use crate::daemon_runner::DaemonRunner;
use crate::{print_json, render};
use ddpcheck_engine::{RunError, Runner};

pub const DEMO_PROFILE: &str = "a6000x4-phb";

pub fn run(cli: &crate::Cli) -> Result<i32, RunError> {
    let json = cli.json;
    let started = Instant::now();
    let dir =
        tempfile::tempdir().map_err(|e| RunError::Daemon(format!("temporary folder: {e}")))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| RunError::Daemon(format!("runtime: {e}")))?;
    let backend = engine::make_backend(Some(DEMO_PROFILE), RealConfig::default())?;
    let cfg = DaemonConfig::in_dir(dir.path());
    let running = rt
        .block_on(run::start(cfg, backend))
        .map_err(|e| RunError::Daemon(format!("demo daemon: {e}")))?;
    let target = DaemonRunner {
        addr: running.socket.display().to_string(),
    };
    if !json {
        println!(
            "ddpcheck demo: an in-process ddpcheckd on {} serving a SIMULATED node ({DEMO_PROFILE}: 4x RTX A6000, every pair PHB, PCIe gen3).\n",
            running.socket.display()
        );
    }
    let outcome = (|| {
        let topo = target.topo("")?;
        let pre = target.preflight(&PreflightParams::default(), &mut |_| {})?;
        let rec = crate::recommend::demo_recommendation(&target)?;
        Ok::<_, RunError>((topo, pre, rec))
    })();
    rt.block_on(running.shutdown());
    let (topo, pre, rec) = outcome?;
    if json {
        print_json(&serde_json::json!({ "topo": topo, "preflight": pre, "recommend": rec }))?;
    } else {
        print!("{}", render::topo(&topo));
        println!();
        print!("{}", render::preflight(&pre));
        println!();
        print!("{}", crate::recommend::render(&rec));
        println!(
            "\n(demo finished in {:.2} s; every number above is SIMULATED)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(pre.exit_code)
}
