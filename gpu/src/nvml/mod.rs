//! NVML probe: inventory, health, PCIe and pair topology on a dedicated thread with deadlines.
//!
//! [`NvmlProbe::start`] spawns the `nvml` thread, which opens libnvidia-ml.so.1 itself (through
//! nvml-wrapper, at run time) and owns the session; every reading runs there as a job with a
//! deadline per NVML step (invariant 2). A node without a driver answers every call with
//! `ProbeError::Unavailable` and one line. While NVML hangs, calls come back at once with the last
//! snapshot and the hung GPUs marked `ProbeState::Stuck`.
//!
//! Printing what the probe sees (this is what `examples/nvml_probe.rs` does):
//!
//! ```no_run
//! use std::time::Duration;
//! use ddpcheck_gpu::nvml::NvmlProbe;
//!
//! let probe = NvmlProbe::start(Duration::from_secs(5));
//! match probe.inventory() {
//!     Ok(inv) => {
//!         println!("{}", serde_json::to_string_pretty(&inv).unwrap_or_default());
//!         if let Ok(t) = probe.topology(&inv.gpus) {
//!             println!("{}", serde_json::to_string_pretty(&t).unwrap_or_default());
//!         }
//!     }
//!     Err(e) => eprintln!("{e}"),
//! }
//! ```

mod convert;
mod fabric;
mod ffi;
mod links;
mod procs;
mod session;
mod snapshot;
mod sysfs;
mod thread;

use std::time::Duration;

use ddpcheck_core::explain::platform::GpuFabricState;
use ddpcheck_core::node_gpus::{GpuInfo, NodeInventory, ProbeState};
use ddpcheck_core::topology::{LinkClass, TopologyMatrix};
use ddpcheck_core::ProbeError;
use serde::Serialize;

pub use snapshot::Involved;
pub use thread::StuckInfo;
use thread::{Outcome, Worker};

/// The pair topology with what `TopologyMatrix` has no room for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopologyDetail {
    pub matrix: TopologyMatrix,
    /// PCIe common ancestor of every pair, NVLink pairs included (an H200 pair is NV18 in the
    /// matrix over a PHB PCIe path here); X on the diagonal, `None` where NVML did not say.
    pub pcie: Vec<Vec<Option<LinkClass>>>,
    /// Active NVLinks per GPU (same order as `matrix.gpus`).
    pub nvlinks_active: Vec<u32>,
    /// Of those, the links whose far end is an NVSwitch.
    pub nvlinks_to_switch: Vec<u32>,
}

/// The NVML side of the real backend. Cheap to call from any thread; never blocks longer than
/// the deadline of the NVML step in flight.
pub struct NvmlProbe {
    worker: Worker,
}

impl NvmlProbe {
    /// Spawns the NVML thread; NVML is opened there, not here. `deadline` bounds each NVML step
    /// (one GPU's readings, one pair's topology).
    pub fn start(deadline: Duration) -> Self {
        Self::start_with(deadline, session::run_thread)
    }

    /// Spawns the thread with another body (tests serve fake readers).
    pub(crate) fn start_with(
        deadline: Duration,
        body: impl FnOnce(thread::Serve) + Send + 'static,
    ) -> Self {
        let deadline = deadline.max(Duration::from_millis(1));
        NvmlProbe {
            worker: Worker::spawn(deadline, body),
        }
    }

    pub fn deadline(&self) -> Duration {
        self.worker.deadline()
    }

    /// Hostname, driver and CUDA versions, and every GPU NVML sees with its health, PCIe link and
    /// foreign compute processes (our own process and its descendants left out).
    pub fn inventory(&self) -> Result<NodeInventory, ProbeError> {
        let host = hostname();
        let out = self.worker.call("NVML inventory", Involved::All, |r, t| {
            let res = r.inventory(t);
            if let Ok(inv) = &res {
                t.finish_inventory(inv);
            }
            res
        });
        match out {
            Outcome::Done(Ok(mut inv)) => {
                inv.hostname = host;
                Ok(inv)
            }
            Outcome::Done(Err(e)) => Err(e),
            Outcome::Unavailable(line) => Err(ProbeError::Unavailable(line)),
            Outcome::Stuck(s) => self.stuck_answer(&host, &s),
        }
    }

    /// The pair matrix in `nvidia-smi topo -m` vocabulary for `gpus`, with P2P status and CPU/NUMA
    /// affinity.
    pub fn topology(&self, gpus: &[GpuInfo]) -> Result<TopologyMatrix, ProbeError> {
        self.topology_detail(gpus).map(|d| d.matrix)
    }

    /// [`Self::topology`] plus every pair's PCIe path and each GPU's NVLink counts.
    pub fn topology_detail(&self, gpus: &[GpuInfo]) -> Result<TopologyDetail, ProbeError> {
        let owned = gpus.to_vec();
        let involved = Involved::Gpus(gpus.iter().map(|g| g.index).collect());
        match self
            .worker
            .call("NVML topology", involved, move |r, t| r.topology(t, &owned))
        {
            Outcome::Done(r) => r,
            Outcome::Unavailable(line) => Err(ProbeError::Unavailable(line)),
            // A matrix has no room for "stuck"; the inventory carries the marks.
            Outcome::Stuck(s) => Err(ProbeError::Timeout {
                stage: format!(
                    "NVML topology ({} hangs on {})",
                    s.label,
                    s.involved.describe()
                ),
                seconds: self.deadline().as_secs_f64(),
            }),
        }
    }

    /// Each of `gpus`' NVLink fabric registration (`nvidia-smi -q`'s Fabric State), left out
    /// where a GPU has none (PCIe GPUs, drivers without the call).
    pub fn fabric(&self, gpus: &[GpuInfo]) -> Result<Vec<GpuFabricState>, ProbeError> {
        let owned = gpus.to_vec();
        let involved = Involved::Gpus(gpus.iter().map(|g| g.index).collect());
        match self
            .worker
            .call("NVML fabric", involved, move |r, t| r.fabric(t, &owned))
        {
            Outcome::Done(r) => r,
            Outcome::Unavailable(line) => Err(ProbeError::Unavailable(line)),
            Outcome::Stuck(s) => Err(ProbeError::Timeout {
                stage: format!(
                    "NVML fabric ({} hangs on {})",
                    s.label,
                    s.involved.describe()
                ),
                seconds: self.deadline().as_secs_f64(),
            }),
        }
    }

    /// The last complete inventory and its age, without asking NVML (for `/metrics` and other
    /// readers, invariant 2); marked stuck as `inventory` would if NVML hangs now.
    pub fn last_inventory(&self) -> Option<(NodeInventory, Duration)> {
        let (inv, at) = self.worker.shared().lock().snapshot.clone()?;
        let age = at.elapsed();
        match self.stuck() {
            Some(s) => {
                let marked = self.stuck_answer(&inv.hostname, &s).ok()?;
                Some((marked, age))
            }
            None => Some((inv, age)),
        }
    }

    /// The NVML step hanging now (past its deadline), if any.
    pub fn stuck(&self) -> Option<StuckInfo> {
        self.worker.stuck_now()
    }

    /// Runs a closure on the NVML thread as a job touching `involved` (tests inject slow calls).
    #[cfg(test)]
    pub(crate) fn inject<R: Send + 'static>(
        &self,
        involved: Involved,
        f: impl FnOnce(&mut dyn thread::Reader, &thread::Tracker) -> R + Send + 'static,
    ) -> Outcome<R> {
        self.worker.call("injected", involved, f)
    }

    fn stuck_answer(&self, host: &str, s: &StuckInfo) -> Result<NodeInventory, ProbeError> {
        let st = self.worker.shared().lock();
        let snap = st.snapshot.as_ref().map(|(i, _)| i);
        match snapshot::stuck_inventory(host, snap, st.partial.as_ref(), &s.involved) {
            Some(inv) => {
                let stuck: Vec<u32> = inv
                    .gpus
                    .iter()
                    .filter(|g| g.state == ProbeState::Stuck)
                    .map(|g| g.index)
                    .collect();
                tracing::warn!(job = %s.label, ?stuck, secs = s.running_for.as_secs_f64(), "NVML is stuck");
                Ok(inv)
            }
            None => Err(ProbeError::Timeout {
                stage: s.label.clone(),
                seconds: self.deadline().as_secs_f64(),
            }),
        }
    }
}

/// This host's name; empty when it cannot be read.
pub(crate) fn hostname() -> String {
    hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
