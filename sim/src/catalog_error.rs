//! Why the embedded profile data (`data/profiles.json`) is unusable: a build defect, never user
//! input, named down to the profile, regime and curve at fault.

use ddpcheck_core::collective::Collective;

/// The catalog does not parse, or breaks a rule the simulation relies on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CatalogError {
    #[error("data/profiles.json does not parse: {0}")]
    Parse(String),
    #[error("no derive rule for {0}")]
    NoDeriveRule(Collective),
    #[error("derive rule for {0} has a non-positive scale")]
    DeriveScale(Collective),
    /// A GPU model (by key) with a zero bandwidth, memory or PCIe generation.
    #[error("GPU model {0} has a zero field")]
    GpuModelZero(String),
    #[error("profile {profile}: {problem}")]
    Profile {
        profile: String,
        problem: ProfileProblem,
    },
}

/// What is wrong with one profile.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProfileProblem {
    #[error("duplicate name")]
    DuplicateName,
    #[error("unknown gpu_model {0:?}")]
    UnknownGpuModel(String),
    #[error("needs at least two GPUs")]
    TooFewGpus,
    #[error("UUID {0} used twice")]
    UuidTwice(String),
    #[error("{0} is not a GPU-<uuid>")]
    NotUuid(String),
    #[error("pair_link {0:?} is not a pair class")]
    PairLink(String),
    #[error("p2p_status disagrees with p2p or has no source")]
    P2pStatus,
    #[error("vm without vm_source")]
    VmSource,
    #[error("nccl_init_seconds must be > 0")]
    NcclInit,
    #[error("the first regime must be the unconditional default")]
    FirstRegime,
    #[error("regime {regime}: {problem}")]
    Regime {
        regime: String,
        problem: RegimeProblem,
    },
    #[error("compute rates must be positive")]
    ComputeRates,
    #[error("unknown model {0:?}")]
    UnknownModel(String),
    #[error("model {0} has a non-positive time")]
    ModelTime(String),
}

/// What is wrong with one regime of a profile, or one of its curves.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RegimeProblem {
    #[error("overlap_rate outside 0..=1")]
    Overlap,
    #[error("no all_reduce curve")]
    NoAllReduce,
    #[error("{op} at {ranks} ranks")]
    Ranks { op: Collective, ranks: u32 },
    #[error("{0} curve is empty")]
    EmptyCurve(Collective),
    #[error("{0} points not ascending")]
    NotAscending(Collective),
    #[error("{op} point ({bytes} B, {busbw} GB/s) is faster than its alpha allows")]
    FasterThanAlpha {
        op: Collective,
        bytes: u64,
        busbw: f64,
    },
}
