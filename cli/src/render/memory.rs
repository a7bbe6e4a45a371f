//! Memory first, as text: each wrapper's bytes per GPU (parameters, gradients, optimizer states,
//! parameters as computed, activations) against the GPU's memory.

use std::fmt::Write as _;

use ddpcheck_core::memory::{ActivationSource, MemoryPlan, MemoryRow, Moment, FIT_SHARE};
use ddpcheck_core::num::ToF64;
use ddpcheck_core::units::fmt_bytes;

fn gib(b: u64) -> String {
    format!("{:.1}", b.to_f64() / f64::from(1u32 << 30))
}

/// One row's cells: wrapper, GPUs, shard group, the six parts and the total (GiB; `e` where the
/// peak is the backward's end), and the fit.
fn cells(r: &MemoryRow) -> Vec<String> {
    vec![
        r.wrapper.to_string(),
        r.gpus.to_string(),
        r.shard_group.to_string(),
        gib(r.params_bytes),
        gib(r.grads_bytes),
        gib(r.optimizer_bytes),
        gib(r.compute_bytes),
        gib(r.activations_bytes),
        gib(r.other_bytes),
        format!(
            "{}{}",
            gib(r.total_bytes),
            if r.peak_at == Moment::BackwardEnd {
                "e"
            } else {
                ""
            }
        ),
        match r.fits {
            Some(true) => "yes".into(),
            Some(false) => "NO".into(),
            None => "?".into(),
        },
    ]
}

/// The plan's table and what it rests on; the fit found where DDP does not fit.
pub fn memory_plan(p: &MemoryPlan, width: crate::width::Width) -> String {
    let mut s = String::new();
    let gpu = p.gpu_bytes.map_or("unknown".to_string(), |b| {
        format!(
            "{} each, {:.0}% usable",
            fmt_bytes(b.to_f64()),
            FIT_SHARE * 100.0
        )
    });
    let _ = writeln!(
        s,
        "Memory per GPU at micro-batch {} (GiB; GPU memory {gpu}):",
        p.model.micro_batch
    );
    let mut table = vec![[
        "wrapper", "GPUs", "shard", "params", "grads", "optim", "computed", "activ.", "other",
        "total", "fits",
    ]
    .map(String::from)
    .to_vec()];
    table.extend(p.rows.iter().map(cells));
    if let Some(f) = p.fit.as_ref().or(p.fsdp_fits_at.as_ref()) {
        let mut row = cells(&f.row);
        row[0] = format!(
            "{} (mb {}{})",
            f.row.wrapper,
            f.micro_batch,
            if f.checkpointing { ", ckpt" } else { "" }
        );
        table.push(row);
    }
    s.push_str(&super::columns::layout(&table, width.tables));
    s.push_str(&super::fit(
        &format!(
            "total: the larger of the backward's start (every activation; FSDP2's gradients not \
             yet there) and its end (every gradient, no activation; marked e); other: DDP's \
             unidentified bytes, FSDP2's reduce of the last block\n{}\n",
            activations_line(p)
        ),
        width,
    ));
    s
}

/// Where the table's activations come from, in one line: DDP's, and FSDP2's where they differ.
fn activations_line(p: &MemoryPlan) -> String {
    let m = &p.model;
    if !m.measured.is_empty() {
        let each: Vec<String> = p
            .rows
            .iter()
            .map(|r| {
                let w = r.wrapper;
                format!("  {w}: {}", source_words(m.activations_for(w)))
            })
            .collect();
        return format!("activations, each wrapper its own:\n{}", each.join("\n"));
    }
    let ddp = source_words(&m.activations);
    match &m.fsdp2_activations {
        Some(f) if f != &m.activations => {
            format!(
                "activations of DDP {ddp}; of FSDP2's wrappers {}",
                source_words(f)
            )
        }
        _ => format!("activations {ddp}"),
    }
}

fn source_words(a: &ActivationSource) -> String {
    match a {
        ActivationSource::Measured { what, .. } => format!("measured: {what}"),
        ActivationSource::Estimated { .. } => "ESTIMATED from the tensors each block saves for \
                                               backward (docs/recommend.md, \"Memory first\")"
            .to_string(),
        ActivationSource::Unknown => "unknown: left out of the totals".to_string(),
    }
}
