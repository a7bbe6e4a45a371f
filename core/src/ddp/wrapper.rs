//! The data-parallel wrapper a variant trains under: DDP, or the FSDP2 family as users write it
//! (`replicate()`, `fully_shard` resharding after forward or not, HSDP over a 2-D mesh).

use serde::{Deserialize, Serialize};

/// HSDP's replicas: two, each sharded over half the GPUs (the benchmark's `HSDP_REPLICAS`).
pub const HSDP_REPLICAS: u32 = 2;

/// What wraps the model (a variant's `replicate`, `fsdp`, `fsdp-noreshard`, `hsdp` part).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wrapper {
    /// `DistributedDataParallel`, gradients all-reduced in buckets.
    #[default]
    Ddp,
    /// FSDP2's `replicate()` (`torch.distributed._composable.replicate_with_fsdp`): every GPU
    /// holds the whole model; gradients all-reduced per block.
    Replicate,
    /// `fully_shard` per block and at the root, `reshard_after_forward=True` (ZeRO-3):
    /// parameters, gradients and optimizer states sharded.
    Fsdp,
    /// `fully_shard(..., reshard_after_forward=False)` (ZeRO-2-like): parameters stay gathered
    /// from forward to backward; gradients and optimizer states sharded. Spelt as variants and
    /// flags spell it; reports written before 2026-12-06 say `fsdp-no-reshard`, still read.
    #[serde(rename = "fsdp-noreshard", alias = "fsdp-no-reshard")]
    FsdpNoReshard,
    /// `fully_shard` over a 2-D mesh (replicate × shard): sharded within a shard group,
    /// replicated across groups.
    Hsdp,
}

impl Wrapper {
    /// Every wrapper, in the order recommend weighs them (least sharding first).
    pub const ALL: [Wrapper; 5] = [
        Wrapper::Ddp,
        Wrapper::Replicate,
        Wrapper::Hsdp,
        Wrapper::FsdpNoReshard,
        Wrapper::Fsdp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Wrapper::Ddp => "ddp",
            Wrapper::Replicate => "replicate",
            Wrapper::Fsdp => "fsdp",
            Wrapper::FsdpNoReshard => "fsdp-noreshard",
            Wrapper::Hsdp => "hsdp",
        }
    }

    /// The wrapper a variant part names (`fsdp_noreshard` and `fsdpnoreshard` too).
    pub fn from_part(part: &str) -> Option<Wrapper> {
        match part.replace('_', "-").as_str() {
            "replicate" => Some(Wrapper::Replicate),
            "fsdp" => Some(Wrapper::Fsdp),
            "fsdp-noreshard" | "fsdpnoreshard" => Some(Wrapper::FsdpNoReshard),
            "hsdp" => Some(Wrapper::Hsdp),
            _ => None,
        }
    }

    /// Built on FSDP2 (no DDP comm hook, no DDPOptimizer).
    pub fn is_fsdp2(self) -> bool {
        self != Wrapper::Ddp
    }

    /// The GPUs one copy of the sharded state spans at `world` GPUs: 1 for DDP and replicate,
    /// `world` for fsdp and fsdp-noreshard, `world / HSDP_REPLICAS` for hsdp.
    pub fn shard_group(self, world: u32) -> u32 {
        match self {
            Wrapper::Ddp | Wrapper::Replicate => 1,
            Wrapper::Fsdp | Wrapper::FsdpNoReshard => world.max(1),
            Wrapper::Hsdp => (world / HSDP_REPLICAS).max(1),
        }
    }

    /// Why the wrapper cannot run at `world` GPUs, or `None` where it can: HSDP needs two
    /// replicas of at least two shards.
    pub fn refuses(self, world: u32) -> Option<String> {
        let hsdp_ok = world >= 2 * HSDP_REPLICAS && world.is_multiple_of(HSDP_REPLICAS);
        (self == Wrapper::Hsdp && !hsdp_ok).then(|| {
            format!(
                "hsdp needs an even GPU count of at least {} ({HSDP_REPLICAS} replicas x at least \
                 2 shards), not {world}",
                2 * HSDP_REPLICAS
            )
        })
    }
}

impl std::fmt::Display for Wrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_name_wrappers_and_shard_groups_follow_the_mesh() {
        assert_eq!(
            Wrapper::from_part("fsdp_noreshard"),
            Some(Wrapper::FsdpNoReshard)
        );
        assert_eq!(Wrapper::from_part("ddp"), None);
        assert_eq!(Wrapper::Fsdp.shard_group(8), 8);
        assert_eq!(Wrapper::Hsdp.shard_group(8), 4);
        assert_eq!(Wrapper::Replicate.shard_group(8), 1);
        assert!(Wrapper::Hsdp.refuses(2).is_some() && Wrapper::Hsdp.refuses(6).is_none());
        assert!(Wrapper::Hsdp.refuses(5).is_some() && Wrapper::Fsdp.refuses(1).is_none());
    }

    #[test]
    fn json_spells_each_wrapper_as_its_variant_part_and_reads_the_old_spelling() {
        for w in Wrapper::ALL {
            let json = serde_json::to_string(&w).unwrap();
            assert_eq!(json, format!("\"{w}\""), "JSON and text say one name");
        }
        let old: Wrapper = serde_json::from_str("\"fsdp-no-reshard\"").unwrap();
        assert_eq!(old, Wrapper::FsdpNoReshard);
    }
}
