//! How the recommendation names what its ranks run on: GPUs, or CPU ranks over gloo (`--device
//! cpu`), whose figures are never to read as GPU ones.

use crate::ddp::RunDevice;

/// The words for one device kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Words {
    cpu: bool,
}

impl Words {
    pub fn new(device: RunDevice) -> Self {
        Words {
            cpu: device == RunDevice::Cpu,
        }
    }

    /// `GPU` or `CPU rank`.
    pub fn one_unit(&self) -> &'static str {
        if self.cpu {
            "CPU rank"
        } else {
            "GPU"
        }
    }

    /// `one GPU` or `one CPU rank`.
    pub fn one(&self) -> String {
        format!("one {}", self.one_unit())
    }

    /// `2 GPUs`, `1 GPU`, `2 CPU ranks`.
    pub fn n(&self, n: u32) -> String {
        format!("{n} {}{}", self.one_unit(), if n == 1 { "" } else { "s" })
    }

    /// `GPU time` or `CPU-rank time`.
    pub fn time(&self) -> &'static str {
        if self.cpu {
            "CPU-rank time"
        } else {
            "GPU time"
        }
    }

    /// A span of device time: `2.94 GPU-seconds`, `4.1 GPU-minutes`, `1.20 GPU-hours`.
    pub fn device_time(&self, seconds: f64) -> String {
        let who = if self.cpu { "CPU-rank" } else { "GPU" };
        if seconds >= 7200.0 {
            format!("{:.2} {who}-hours", seconds / 3600.0)
        } else if seconds >= 120.0 {
            format!("{:.1} {who}-minutes", seconds / 60.0)
        } else {
            format!("{seconds:.2} {who}-seconds")
        }
    }

    /// `GPU-hour` or `CPU-rank-hour`: what a price is per.
    pub fn hour(&self) -> &'static str {
        if self.cpu {
            "CPU-rank-hour"
        } else {
            "GPU-hour"
        }
    }

    pub fn is_cpu(&self) -> bool {
        self.cpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ranks_are_never_called_gpus() {
        let cpu = Words::new(RunDevice::Cpu);
        for s in [
            cpu.one(),
            cpu.n(2),
            cpu.time().into(),
            cpu.device_time(3.0),
            cpu.hour().into(),
        ] {
            assert!(!s.contains("GPU"), "{s}");
        }
        let gpu = Words::new(RunDevice::Cuda);
        assert_eq!((gpu.n(1), gpu.n(4)), ("1 GPU".into(), "4 GPUs".into()));
        assert_eq!(gpu.device_time(2.941), "2.94 GPU-seconds");
        assert_eq!(gpu.device_time(300.0), "5.0 GPU-minutes");
        assert_eq!(gpu.device_time(9000.0), "2.50 GPU-hours");
    }
}
