//! The node's GPUs against the operator's count for its machine type: fewer GPUs than the machine
//! type has is a GPU missing (off the bus, or failing the driver's probe), which no bandwidth
//! figure shows and which stops every job that needs them all.

use super::{Action, Cause, CauseKind};
use crate::finding::{Evidence, Severity};

/// `gpu_missing` where the inventory lists fewer GPUs than `expected`; `None` otherwise (as
/// many, or more: a larger node is no GPU missing). `seen`: the GPUs the driver lists (NVML's
/// count, `nvidia-smi -q`'s `Attached GPUs`, the rows of `topo -m`); `listed_by` names that
/// inventory; `expected_from` where the count comes from (`--expect-gpus`).
pub fn missing(
    seen: usize,
    expected: usize,
    listed_by: &str,
    expected_from: &str,
) -> Option<Cause> {
    if seen >= expected {
        return None;
    }
    let mut c = Cause::new(
        CauseKind::GpuMissing,
        Severity::Critical,
        Action::Drain,
        Vec::new(),
    );
    let gone = expected - seen;
    c.message = format!(
        "{seen} GPUs on the node where its machine type has {expected}: {gone} missing (off the \
         bus, or failing the driver's probe), so jobs that need all {expected} cannot run here"
    );
    c.short = format!("{gone} of {expected} GPUs missing");
    c.fix = "drain the node; find the missing GPU (lspci for NVIDIA devices the driver does not \
             list, the kernel log for the driver's probe or an Xid 79), then reseat or replace it"
        .into();
    c.evidence = vec![Evidence::new("GPUs", seen.to_string())
        .expected(expected.to_string())
        .source(listed_by.to_string())];
    c.source = format!("the operator's count for the machine type ({expected_from})");
    Some(c)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn fewer_gpus_than_the_machine_type_is_a_gpu_missing_and_as_many_is_nothing() {
        let c = missing(7, 8, "nvidia-smi -q", "--expect-gpus 8").unwrap();
        assert_eq!(
            (c.kind, c.severity, c.action),
            (CauseKind::GpuMissing, Severity::Critical, Action::Drain)
        );
        assert!(
            c.message
                .starts_with("7 GPUs on the node where its machine type has 8: 1 missing"),
            "{}",
            c.message
        );
        assert_eq!(c.evidence[0].expected.as_deref(), Some("8"));
        assert_eq!(c.evidence[0].source.as_deref(), Some("nvidia-smi -q"));
        assert!(!c.kind.is_platform_limit());
        assert_eq!(missing(8, 8, "nvidia-smi -q", "x"), None);
        assert_eq!(missing(2, 1, "topo -m", "x"), None);
    }
}
