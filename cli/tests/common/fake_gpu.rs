//! The fake GPU libraries for real-backend tests: gpu's `fake_gpu.c` built as libcuda.so.1 and
//! libnccl.so.2 and `fake_nvml.c` as libnvidia-ml.so.1, in a temporary folder, with the
//! environment that makes ddpcheck load them.

use std::path::Path;
use std::process::Command;

pub struct FakeGpuLibs {
    dir: tempfile::TempDir,
}

impl FakeGpuLibs {
    /// Builds the libraries with `cc`; `None` (after saying so) where there is no C compiler and
    /// CI did not ask for every service test to run.
    pub fn build() -> Option<FakeGpuLibs> {
        let dir = tempfile::tempdir().unwrap();
        let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpu/src");
        let gpu = dir.path().join("libfakegpu.so");
        let cc = |out: &Path, src: &str| {
            Command::new("cc")
                .args(["-shared", "-fPIC", "-pthread", "-O1", "-o"])
                .arg(out)
                .arg(testdata.join(src))
                .status()
                .is_ok_and(|s| s.success())
        };
        let built = cc(&gpu, "nccl/testdata/fake_gpu.c")
            && cc(
                &dir.path().join("libnvidia-ml.so.1"),
                "nvml/testdata/fake_nvml.c",
            );
        if !built {
            assert!(
                !super::services_must_run(),
                "no C compiler to build the fake GPU libraries"
            );
            eprintln!("no C compiler: skipping a real-backend test");
            return None;
        }
        for name in ["libcuda.so.1", "libnccl.so.2"] {
            std::fs::copy(&gpu, dir.path().join(name)).unwrap();
        }
        Some(FakeGpuLibs { dir })
    }

    /// The worker's CUDA and NCCL; without `with_nvml` no NVML is found (the loader path is
    /// left alone), as on a node without a driver.
    pub fn env(&self, with_nvml: bool) -> Vec<(&'static str, String)> {
        let lib = |name: &str| self.dir.path().join(name).display().to_string();
        let mut e = vec![
            ("DDPCHECK_CUDA_LIB", lib("libcuda.so.1")),
            ("DDPCHECK_NCCL_LIB", lib("libnccl.so.2")),
        ];
        if with_nvml {
            e.push(("LD_LIBRARY_PATH", self.dir.path().display().to_string()));
        }
        e
    }
}
