//! The committed raw reports the accuracy is computed from: which `bench ddp` report goes with
//! which all-reduce sweep, on which host, and whether that host is for fitting or for judging.

use std::path::{Path, PathBuf};

use ddpcheck_core::collective::Sweep;
use ddpcheck_core::ddp::{fill_scaling_against, DdpResult, Reference};
use ddpcheck_core::report::{BenchCollectivesReport, DdpReport};

/// The interconnect a dataset's runs used (NCCL settings of the validation script).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Regime {
    /// NVLink (NV18), NCCL's default.
    Nvlink,
    /// Shared memory through the host (`NCCL_P2P_DISABLE=1`).
    Shm,
    /// Host sockets (`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1`).
    Hostnet,
}

impl Regime {
    pub const ALL: [Regime; 3] = [Regime::Nvlink, Regime::Shm, Regime::Hostnet];

    pub fn name(self) -> &'static str {
        match self {
            Regime::Nvlink => "NVLink",
            Regime::Shm => "shared memory",
            Regime::Hostnet => "host sockets",
        }
    }

    fn file_word(self) -> &'static str {
        match self {
            Regime::Nvlink => "nvlink",
            Regime::Shm => "shm",
            Regime::Hostnet => "hostnet",
        }
    }
}

/// Constants may be fitted on these calls only (2026-11-30 07:13–16:16, before DDP's runs timed
/// their own all-reduces)...
pub const FIT_HOSTS: [&str; 6] = ["0713", "0847", "1031", "1213", "1404", "1616"];
/// ...and the accuracy is judged on these only (18:17, 19:49, 22:43: the calls whose runs carry
/// their own all-reduce probes).
pub const JUDGED_HOSTS: [&str; 3] = ["1817", "1949", "2243"];

/// One `bench ddp` report of one regime, with the sweep of the same call.
#[derive(Clone, Debug)]
pub struct DatasetSpec {
    /// The call's start time (HHMM), naming its folder `2026-11-30-h200x2-HHMM`.
    pub host: &'static str,
    pub regime: Regime,
    /// Folder and file prefix inside the call's folder (`mlprep8/mlprep8`).
    pub stem: &'static str,
    /// `mlp` or `gpt`: the report `STEM-KIND-REGIME.json`.
    pub kind: &'static str,
    /// The sweep when the call ran none of its own (`FOLDER/FILE` inside the fixtures).
    pub curve_from: Option<&'static str>,
}

const fn ds(host: &'static str, stem: &'static str, kind: &'static str, r: Regime) -> DatasetSpec {
    DatasetSpec {
        host,
        regime: r,
        stem,
        kind,
        curve_from: None,
    }
}

use Regime::{Hostnet, Nvlink, Shm};

/// Every multi-GPU DDP dataset of GPT-2 124M/355M and the MLPs, as the judged set has read them.
pub const DATASETS: &[DatasetSpec] = &[
    ds("0713", "model/model", "gpt", Nvlink),
    ds("0713", "model/model", "gpt", Shm),
    ds("0713", "model/model", "gpt", Hostnet),
    ds("0713", "model/model", "mlp", Nvlink),
    ds("0713", "model/model", "mlp", Shm),
    ds("0713", "model/model", "mlp", Hostnet),
    ds("0847", "model355/model355", "gpt", Nvlink),
    ds("0847", "model355/model355", "gpt", Shm),
    ds("0847", "model355/model355", "gpt", Hostnet),
    ds("0847", "mlprep/mlprep", "mlp", Nvlink),
    ds("0847", "mlprep/mlprep", "mlp", Shm),
    ds("1031", "model/model", "gpt", Nvlink),
    ds("1031", "model/model", "gpt", Shm),
    ds("1031", "model/model", "gpt", Hostnet),
    ds("1031", "model/model", "mlp", Nvlink),
    ds("1031", "model/model", "mlp", Shm),
    ds("1031", "model/model", "mlp", Hostnet),
    ds("1031", "model355/model355", "gpt", Nvlink),
    ds("1031", "model355/model355", "gpt", Shm),
    ds("1031", "model355/model355", "gpt", Hostnet),
    ds("1031", "mlprep/mlprep", "mlp", Nvlink),
    ds("1031", "mlprep/mlprep", "mlp", Shm),
    ds("1213", "mlprep5/mlprep5", "mlp", Nvlink),
    ds("1213", "mlprep5/mlprep5", "mlp", Shm),
    ds("1404", "mlprep10/mlprep10", "mlp", Nvlink),
    ds("1404", "mlprep10/mlprep10", "mlp", Shm),
    ds("1404", "mlprep8-hostnet/mlprep8", "mlp", Hostnet),
    ds("1616", "mlprep8/mlprep8", "mlp", Nvlink),
    ds("1616", "mlprep8/mlprep8", "mlp", Shm),
    ds("1616", "mlprep8/mlprep8", "mlp", Hostnet),
    ds("1817", "mlprep8/mlprep8", "mlp", Nvlink),
    ds("1817", "mlprep8/mlprep8", "mlp", Shm),
    ds("1817", "mlprep8/mlprep8", "mlp", Hostnet),
    ds("1817", "model3/model3", "gpt", Nvlink),
    ds("1817", "model3/model3", "gpt", Hostnet),
    ds("1949", "model3-shm/model3", "gpt", Shm),
    ds("1949", "model3-355/model3", "gpt", Nvlink),
    ds("1949", "model3-355/model3", "gpt", Hostnet),
    ds("1949", "model3-124/model3", "gpt", Nvlink),
    ds("1949", "model3-124/model3", "gpt", Hostnet),
    ds("2243", "mlprep8/mlprep8", "mlp", Nvlink),
    ds("2243", "mlprep8/mlprep8", "mlp", Shm),
    ds("2243", "mlprep8/mlprep8", "mlp", Hostnet),
    // The accumgap call (22:43's third host) ran no sweep: the call's NVLink sweep minutes
    // before on the same day's other host stands in (as the judged set has always read it).
    DatasetSpec {
        host: "2243",
        regime: Nvlink,
        stem: "accumgap/accumgap",
        kind: "mlp",
        curve_from: Some("mlprep8/mlprep8-curve-nvlink.json"),
    },
];

/// A dataset read from disk.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub spec: DatasetSpec,
    /// Every run of the report, speedups filled as `recommend` fills them.
    pub runs: Vec<DdpResult>,
    /// The call's `bench collectives` all-reduce sweep.
    pub sweep: Sweep,
}

impl Dataset {
    /// `HHMM folder/stem kind regime`, e.g. `1817 mlprep8 mlp shm`.
    pub fn label(&self) -> String {
        let folder = self.spec.stem.split('/').next().unwrap_or(self.spec.stem);
        format!(
            "{} {folder} {} {}",
            self.spec.host,
            self.spec.kind,
            self.spec.regime.file_word()
        )
    }

    pub fn judged(&self) -> bool {
        JUDGED_HOSTS.contains(&self.spec.host)
    }

    /// The most launches any of its runs was repeated over (0 for single launches).
    pub fn launches(&self) -> usize {
        self.runs
            .iter()
            .map(|r| r.launch_step_medians_s.len())
            .max()
            .unwrap_or(0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("{0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0}: {1}")]
    Parse(PathBuf, serde_json::Error),
    #[error("{0}: no all-reduce sweep")]
    NoSweep(PathBuf),
}

/// The fixtures folder of this repository (`bench/accuracy/fixtures`).
pub fn default_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, FixtureError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| FixtureError::Read(path.to_path_buf(), e))?;
    serde_json::from_str(&text).map_err(|e| FixtureError::Parse(path.to_path_buf(), e))
}

/// Reads one dataset under `root`.
pub fn load(root: &Path, spec: &DatasetSpec) -> Result<Dataset, FixtureError> {
    let call = root.join(format!("2026-11-30-h200x2-{}", spec.host));
    let word = spec.regime.file_word();
    let ddp_path = call.join(format!("{}-{}-{word}.json", spec.stem, spec.kind));
    let curve_path = match spec.curve_from {
        Some(f) => call.join(f),
        None => call.join(format!("{}-curve-{word}.json", spec.stem)),
    };
    let mut report: DdpReport = read_json(&ddp_path)?;
    // The reference of that date: the 1-GPU step in DDP (the fixtures carry no plain step, and
    // the published tables rest on it).
    fill_scaling_against(&mut report.results, None, Reference::Ddp);
    let coll: BenchCollectivesReport = read_json(&curve_path)?;
    let sweep = coll
        .all_reduce()
        .cloned()
        .ok_or(FixtureError::NoSweep(curve_path))?;
    Ok(Dataset {
        spec: spec.clone(),
        runs: report.results,
        sweep,
    })
}

/// Every dataset under `root`, in table order.
pub fn load_all(root: &Path) -> Result<Vec<Dataset>, FixtureError> {
    DATASETS.iter().map(|s| load(root, s)).collect()
}
