//! Which change brought another about (a new NCCL choosing another transport on the same
//! topology, a variable turning P2P off), each change's line, their ranking by what they
//! explain, and what stays unexplained in words.

use super::changes::{Found, Target};
use super::{Change, ChangeKind, SAME_WITHIN};

/// NCCL variables that choose or remove a transport (NCCL's environment documentation).
const TRANSPORT_VARS: [&str; 10] = [
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_P2P_USE_CUDA_MEMCPY",
    "NCCL_CUMEM_ENABLE",
    "NCCL_IGNORE_DISABLED_P2P",
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "NCCL_TOPO_FILE",
    "NCCL_NVLS_ENABLE",
];

fn words(c: &Change) -> String {
    match c.kind {
        ChangeKind::NcclVersion => format!("NCCL {} → {}", c.before, c.after),
        ChangeKind::Driver => format!("driver {} → {}", c.before, c.after),
        ChangeKind::Cuda => format!("CUDA {} → {}", c.before, c.after),
        _ => format!("{}: {} → {}", c.r#where.join(", "), c.before, c.after),
    }
}

fn shares_pair(x: &Found, y: &Found) -> bool {
    x.targets
        .iter()
        .any(|t| matches!(t, Target::Pair(..)) && y.targets.contains(t))
}

/// The index of the change that brought the transport change `i` about, and whether it is
/// only a candidate (a driver or CUDA change, not shown to choose transports).
fn cause_of(found: &[Found], i: usize) -> Option<(usize, bool)> {
    let kind_at = |k: ChangeKind| found.iter().position(|f| f.change.kind == k);
    let env = found.iter().position(|f| {
        f.change.kind == ChangeKind::NcclEnv
            && f.change
                .r#where
                .iter()
                .any(|v| TRANSPORT_VARS.contains(&v.as_str()))
    });
    let path = found.iter().position(|f| {
        matches!(f.change.kind, ChangeKind::Topology | ChangeKind::P2pStatus)
            && shares_pair(f, &found[i])
    });
    env.or(path)
        .map(|j| (j, false))
        .or(kind_at(ChangeKind::NcclVersion).map(|j| (j, false)))
        .or(kind_at(ChangeKind::Driver)
            .or(kind_at(ChangeKind::Cuda))
            .map(|j| (j, true)))
}

/// Links each transport change to its cause and fills every change's line.
pub(crate) fn link(found: &mut [Found]) {
    for i in 0..found.len() {
        if found[i].change.kind != ChangeKind::Transport {
            continue;
        }
        let Some((j, candidate)) = cause_of(found, i) else {
            continue;
        };
        let cause = words(&found[j].change);
        found[i].change.cause = Some(if candidate {
            format!("possibly {cause} (no NCCL variable, link or NCCL version changed)")
        } else {
            cause
        });
        if !found[j].change.caused.contains(&ChangeKind::Transport) {
            found[j].change.caused.push(ChangeKind::Transport);
        }
    }
    let same_path = !found
        .iter()
        .any(|f| matches!(f.change.kind, ChangeKind::Topology | ChangeKind::P2pStatus));
    let same_env = !found.iter().any(|f| f.change.kind == ChangeKind::NcclEnv);
    let transports: Vec<Change> = found
        .iter()
        .filter(|f| f.change.kind == ChangeKind::Transport)
        .map(|f| f.change.clone())
        .collect();
    for f in found.iter_mut() {
        f.change.message = message(&f.change, &transports, same_path && same_env);
    }
}

/// Where the transport changes are: `on N pairs`, or the run's channels where a log named no
/// GPU pair (the change is the node's).
fn transport_places(transports: &[Change]) -> String {
    if transports.iter().all(|t| t.r#where == ["node"]) {
        return "for the run's channels (its log names no GPU pair)".to_string();
    }
    let pairs: usize = transports.iter().map(|t| t.r#where.len()).sum();
    format!("on {pairs} pair{}", if pairs == 1 { "" } else { "s" })
}

fn message(c: &Change, transports: &[Change], same_rest: bool) -> String {
    let base = words(c);
    let caused_transport = c.caused.contains(&ChangeKind::Transport);
    match c.kind {
        ChangeKind::Transport => match &c.cause {
            Some(cause) => format!("NCCL's transport changed on {}: {} → {}, because of {cause}", c.r#where.join(", "), c.before, c.after),
            None => format!("NCCL's transport changed on {}: {} → {}; no recorded change explains NCCL's choice", c.r#where.join(", "), c.before, c.after),
        },
        ChangeKind::NcclVersion if caused_transport => {
            format!(
                "{base}: the new NCCL chose another transport {}{}",
                transport_places(transports),
                if same_rest { " with the same topology and NCCL variables" } else { "" }
            )
        }
        ChangeKind::NcclEnv | ChangeKind::Topology | ChangeKind::P2pStatus if caused_transport => {
            format!("{base}: it changes the transport NCCL uses")
        }
        ChangeKind::PcieLink => match (pcie_rate(&c.before), pcie_rate(&c.after)) {
            (Some(x), Some(y)) if y < x => format!(
                "{base}: the link trained down (reseat the card, check the slot, riser and BIOS link settings)"
            ),
            (Some(x), Some(y)) if y > x => format!("{base}: the link trained up"),
            _ => base,
        },
        ChangeKind::Throttling => format!("{base}: throttling slows the GPU's clocks, and with them its copies and kernels"),
        ChangeKind::Clocks => format!("{base}: the clock bounds the kernels that move and reduce the data"),
        ChangeKind::AlgoProto => format!("{base}: NCCL's algorithm and protocol set how much of the path's capacity a collective reaches"),
        _ => base,
    }
}

/// A link's rate from its words (`PCIe gen4 x16`), bytes/s.
fn pcie_rate(words: &str) -> Option<f64> {
    let (gen, width) = words.strip_prefix("PCIe gen")?.split_once(" x")?;
    crate::capacity::pcie_bytes_per_s(gen.parse().ok()?, width.parse().ok()?)
}

/// The changes in order: those that explain most by capacity first, each cause right after
/// the first change it brought about, then the rest in the order; ranks from 1.
pub(crate) fn rank(found: Vec<Found>) -> Vec<Change> {
    let mut all: Vec<Change> = found.into_iter().map(|f| f.change).collect();
    let strength = |c: &Change| c.explains_ratio.map_or(-1.0, |r| r.ln().abs());
    all.sort_by(|x, y| {
        strength(y)
            .total_cmp(&strength(x))
            .then(x.kind.cmp(&y.kind))
    });
    let (sized, rest): (Vec<Change>, Vec<Change>) =
        all.into_iter().partition(|c| c.explains_ratio.is_some());
    let (mut causes, mut rest): (Vec<Change>, Vec<Change>) =
        rest.into_iter().partition(|c| !c.caused.is_empty());
    let mut out: Vec<Change> = Vec::new();
    for c in sized.into_iter().chain(std::mem::take(&mut rest)) {
        let kind = c.kind;
        out.push(c);
        while let Some(k) = causes.iter().position(|x| x.caused.contains(&kind)) {
            out.push(causes.remove(k));
        }
    }
    out.extend(causes);
    for (i, c) in out.iter_mut().enumerate() {
        c.rank = u32::try_from(i + 1).unwrap_or(u32::MAX);
    }
    out
}

/// What stays unexplained, in a line.
pub(crate) fn unexplained_words(
    noun: &str,
    measured: Option<f64>,
    explained: Option<f64>,
    changes: &[Change],
) -> String {
    let Some(m) = measured else {
        return "the runs do not both have a figure: nothing measured to explain; the changes are named".into();
    };
    let not_sized: Vec<String> = changes
        .iter()
        .filter(|c| c.explains_ratio.is_none() && c.cause.is_none() && c.caused.is_empty())
        .map(|c| c.kind.as_str().replace('_', " "))
        .collect();
    let candidates = if not_sized.is_empty() {
        "no change read between the runs accounts for it: other load, thermals, or something neither run recorded".to_string()
    } else {
        format!(
            "changes without capacity arithmetic may account for it ({})",
            not_sized.join(", ")
        )
    };
    let within = |x: f64| (x - 1.0).abs() <= SAME_WITHIN;
    if within(m) {
        return format!(
            "the {noun} is the same within {:.0}% (ratio {m:.2}): nothing to explain",
            SAME_WITHIN * 100.0
        );
    }
    let moved = if m < 1.0 { "fell" } else { "rose" };
    let Some(e) = explained else {
        return format!(
            "the {noun} {moved} to {m:.2}× run A's and no capacity arithmetic applies: unexplained; {candidates}"
        );
    };
    let u = m / e;
    if within(u) {
        return format!(
            "nothing: the {noun} {moved} to {m:.2}× run A's and capacity accounts for {e:.2}×"
        );
    }
    if (m < 1.0) == (u > 1.0) {
        return format!(
            "the {noun} {moved} to {m:.2}× run A's, a smaller move than capacity accounts for ({e:.2}×): the changed path did not bound the figures as the arithmetic assumes, or a reading of it is off"
        );
    }
    format!(
        "the {noun} {moved} to {m:.2}× run A's; capacity accounts for {e:.2}×, leaving {u:.2}× unexplained: {candidates}"
    )
}
