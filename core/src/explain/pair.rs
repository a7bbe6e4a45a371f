//! One pair's chain: its measurement, the transport against what the topology allows, the
//! environment, ACS and NUMA causes, the reference and history, and the fix.

use super::consumer;
use super::limit::{pair_limit, PairFacts};
use super::path_capacity::{pair_capacity, with_fractions};
use super::platform::{bridges_between, AcsState};
use super::transport::{self, Transport};
use super::{Action, Cause, CauseKind, ExplainInput, PairChain, PairMeasurement};
use crate::expect::{self, Expectation};
use crate::finding::{Evidence, Severity};
use crate::topology::{GpuRef, LinkClass, Pair};

const NCCL_ENV_DOCS: &str = "NCCL documentation, Environment Variables (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE)";

/// Causes that are the environment's doing: told together ("X=1 and Y=1 are set").
fn is_env(kind: CauseKind) -> bool {
    matches!(
        kind,
        CauseKind::P2pDisabled
            | CauseKind::ShmDisabled
            | CauseKind::P2pLevelTooLow
            | CauseKind::P2pForced
    )
}

/// Effects, not causes: they say how slow, the others say why.
fn is_effect(kind: CauseKind) -> bool {
    matches!(
        kind,
        CauseKind::TransportDowngraded | CauseKind::BelowExpected | CauseKind::BelowHistory
    )
}

pub(super) fn chain(input: &ExplainInput<'_>, p: &Pair<'_>, node_causes: &[Cause]) -> PairChain {
    let gpus = vec![p.a.clone(), p.b.clone()];
    let m = measurement(input.measurements, p.a.index, p.b.index);
    let allowed = transport::allowed(p.link, p.p2p);
    let measured = m
        .and_then(|m| m.transport.as_deref())
        .and_then(Transport::worst_of);
    let chosen = measured.unwrap_or_else(|| transport::predicted(p.link, p.p2p, input.nccl_env));
    let mut causes: Vec<Cause> = m
        .and_then(|m| p2p_broken(input, p, &gpus, m))
        .into_iter()
        .collect();
    causes.extend(env_causes(input, p, &gpus));
    causes.extend(acs(input, p, &gpus));
    causes.extend(cross_numa(p, &gpus));
    let related = related(node_causes, p);
    let explaining: Vec<&Cause> = causes
        .iter()
        .chain(node_causes.iter().filter(|c| bears_on(c, p)))
        .filter(|c| c.severity >= Severity::Warning && !is_effect(c.kind))
        .collect();
    let explaining_action = explaining.first().map(|c| c.action);
    // Where P2P over PCIe hung or corrupted, staging through host memory is the one thing to
    // try: the A/B measures it alone.
    let env_fix = match causes.iter().find(|c| c.kind == CauseKind::P2pBroken) {
        Some(broken) => broken.env_fix.clone(),
        None => union_env_fix(&explaining),
    };
    if chosen > allowed {
        causes.push(downgraded(
            p,
            &gpus,
            chosen,
            allowed,
            measured.is_some(),
            explaining_action,
            &env_fix,
        ));
    }
    let (busbw, expected, ratio) = judge_figure(input, p, m);
    if let (Some(b), Some(e), Some(r)) = (busbw, &expected, ratio) {
        causes.extend(below_expected(p, &gpus, b, e, r, explaining_action));
    }
    if let Some(b) = busbw.filter(|_| input.gpus.len() == 2) {
        causes.extend(below_history(p, &gpus, b, input.history_busbw));
    }
    let capacity = pair_capacity(input, p)
        .map(|c| with_fractions(c, busbw, expected.as_ref().map(|e| e.busbw_gbps)));
    let limit = pair_limit(
        input,
        &PairFacts {
            p,
            gpus: &gpus,
            chosen,
            allowed,
            busbw,
            capacity: capacity.as_ref(),
            env_driven: causes.iter().any(|c| is_env(c.kind)),
        },
    );
    let alternative = limit
        .as_ref()
        .map(|c| c.env_fix.clone())
        .unwrap_or_default();
    causes.extend(limit);
    let because = because(&causes, node_causes, p);
    let fix = fix_words(&causes, node_causes, p);
    PairChain {
        a: p.a.clone(),
        b: p.b.clone(),
        link: p.link,
        busbw_gbps: busbw,
        expected,
        ratio,
        measure_error: m.and_then(|m| m.error.clone()),
        transport: chosen,
        transport_measured: measured.is_some(),
        transport_raw: m.and_then(|m| m.transport.clone()),
        transport_allowed: allowed,
        capacity,
        causes,
        related,
        because,
        fix,
        env_fix,
        alternative,
        ab: None,
    }
}

fn measurement(ms: &[PairMeasurement], a: u32, b: u32) -> Option<&PairMeasurement> {
    ms.iter()
        .find(|m| (m.a, m.b) == (a, b) || (m.a, m.b) == (b, a))
}

fn new_cause(kind: CauseKind, severity: Severity, action: Action, gpus: &[GpuRef]) -> Cause {
    Cause {
        source: NCCL_ENV_DOCS.into(),
        ..Cause::new(kind, severity, action, gpus.to_vec())
    }
}

fn pair_name(p: &Pair<'_>) -> String {
    format!("GPU{}–GPU{} ({})", p.a.index, p.b.index, p.link)
}

/// The pair's all-reduce hung or returned wrong values while its transport was P2P over PCIe
/// that is forced, or on a GeForce card: the likely cause, with NCCL_P2P_DISABLE=1 to try.
fn p2p_broken(
    input: &ExplainInput<'_>,
    p: &Pair<'_>,
    gpus: &[GpuRef],
    m: &PairMeasurement,
) -> Option<Cause> {
    let wrong = m.wrong.filter(|w| *w > 0);
    if !m.timed_out && wrong.is_none() {
        return None;
    }
    let model = input
        .gpus
        .iter()
        .find(|g| g.uuid == p.a.uuid)
        .map_or("", |g| g.name.as_str());
    let why = consumer::p2p_over_pcie_suspect(p, model, input.nccl_env)?;
    let what = match wrong {
        Some(w) => format!("the all-reduce returned {w} wrong elements"),
        None => format!(
            "the all-reduce did not finish ({})",
            m.error.as_deref().unwrap_or("timed out")
        ),
    };
    let mut c = new_cause(
        CauseKind::P2pBroken,
        Severity::Critical,
        Action::SetEnv,
        gpus,
    );
    c.message = format!(
        "{}: {what}; {}",
        pair_name(p),
        consumer::likely_cause_words(&pair_name(p), &why)
    );
    c.short = if wrong.is_some() {
        "P2P over PCIe returned wrong values".into()
    } else {
        "P2P over PCIe hung".into()
    };
    c.fix = "set NCCL_P2P_DISABLE=1 (stage through host memory)".into();
    c.env_fix = vec![(
        consumer::P2P_OFF.0.to_string(),
        consumer::P2P_OFF.1.to_string(),
    )];
    c.evidence = vec![
        Evidence::new("all-reduce", what).expected("finishes with 0 wrong elements"),
        Evidence::new("NVML P2P status", consumer::status_words(p)),
        Evidence::new("transport", "P2P over PCIe").source("predicted from NCCL_* variables"),
    ];
    c.source = consumer::HANG_SOURCE.into();
    Some(c)
}

/// NCCL variables that turn the pair's best transport off, or force one it should not use.
fn env_causes(input: &ExplainInput<'_>, p: &Pair<'_>, gpus: &[GpuRef]) -> Vec<Cause> {
    let env = input.nccl_env;
    let mut out = Vec::new();
    let allowed = transport::allowed(p.link, p.p2p);
    let p2p_off = transport::env_on(env, "NCCL_P2P_DISABLE");
    let level = transport::p2p_level(env);
    let rank = transport::path_rank(p.link);
    let env_cause = |kind, var: &str, value: &str, fix_value: &str, message: String| {
        let action = if kind == CauseKind::P2pLevelTooLow {
            Action::SetEnv
        } else {
            Action::UnsetEnv
        };
        let mut c = new_cause(kind, Severity::Warning, action, gpus);
        c.message = message;
        c.short = format!("{var}={value}");
        c.fix = if action == Action::SetEnv {
            format!("set {var}={fix_value} (or unset it)")
        } else {
            format!("unset {var}")
        };
        c.env_fix = vec![(var.to_string(), fix_value.to_string())];
        c.evidence = vec![Evidence::new(var, value).expected("unset")];
        c
    };
    if p2p_off && allowed == Transport::P2p {
        out.push(env_cause(
            CauseKind::P2pDisabled,
            "NCCL_P2P_DISABLE",
            "1",
            "0",
            format!(
                "{}: NCCL_P2P_DISABLE=1 turns off the P2P transport the pair's {} link allows",
                pair_name(p),
                p.link
            ),
        ));
    }
    if let Some(lvl) = level.filter(|_| !p2p_off) {
        let raw = env.get("NCCL_P2P_LEVEL").cloned().unwrap_or_default();
        if lvl < rank && allowed == Transport::P2p {
            out.push(env_cause(
                CauseKind::P2pLevelTooLow,
                "NCCL_P2P_LEVEL",
                &raw,
                level_name(p.link),
                format!("{}: NCCL_P2P_LEVEL={raw} is below the pair's path, so NCCL does not use P2P on it", pair_name(p)),
            ));
        }
        if lvl >= rank && p.link.crosses_host_bridge() && !p.link.is_nvlink() {
            let mut c = env_cause(
                CauseKind::P2pForced,
                "NCCL_P2P_LEVEL",
                &raw,
                "PXB",
                format!("{}: NCCL_P2P_LEVEL={raw} forces P2P across the host bridge; on a PHB machine it halved all-reduce bandwidth (4.3 → 2.3 GB/s)", pair_name(p)),
            );
            c.fix = "unset NCCL_P2P_LEVEL (the A/B runs PXB, P2P only below PCIe switches)".into();
            c.source =
                format!("{NCCL_ENV_DOCS}; Runcrate's field report, 4xA6000 PHB: 4.3 → 2.3 GB/s");
            out.push(c);
        }
    }
    // Shared memory matters only where P2P is not the pair's transport.
    let p2p_in_use = transport::predicted(p.link, p.p2p, env) == Transport::P2p;
    if transport::env_on(env, "NCCL_SHM_DISABLE") && !p2p_in_use {
        out.push(env_cause(
            CauseKind::ShmDisabled,
            "NCCL_SHM_DISABLE",
            "1",
            "0",
            format!("{}: without P2P, NCCL_SHM_DISABLE=1 leaves only the network (sockets) between the pair", pair_name(p)),
        ));
    }
    out
}

/// The NCCL_P2P_LEVEL word that admits a link.
fn level_name(link: LinkClass) -> &'static str {
    match link {
        LinkClass::X | LinkClass::Nv(_) => "NVL",
        LinkClass::Pix => "PIX",
        LinkClass::Pxb => "PXB",
        LinkClass::Phb | LinkClass::Node => "PHB",
        LinkClass::Sys => "SYS",
    }
}

/// ACS on a bridge between two GPUs below a PCIe switch sends their P2P up to the root complex.
fn acs(input: &ExplainInput<'_>, p: &Pair<'_>, gpus: &[GpuRef]) -> Option<Cause> {
    if !matches!(p.link, LinkClass::Pix | LinkClass::Pxb) {
        return None;
    }
    let pa = input.platform.gpu(&p.a.pci_bus_id)?;
    let pb = input.platform.gpu(&p.b.pci_bus_id)?;
    let between = bridges_between(pa, pb)?;
    let on: Vec<String> = between
        .iter()
        .filter(|br| br.acs.redirects_p2p())
        .map(|br| format!("{} ({})", br.bdf, br.acs.set_bits().join(" ")))
        .collect();
    let unread: Vec<&str> = between
        .iter()
        .filter(|br| matches!(br.acs, AcsState::NeedsRoot | AcsState::Unknown { .. }))
        .map(|br| br.bdf.as_str())
        .collect();
    let source = "NCCL troubleshooting: PCI Access Control Services (ACS) redirects peer traffic to the root complex: lower bandwidth or hangs; disable it on the bridges (BIOS or setpci ECAP_ACS+0x6.w=0000)";
    let mut c = if !on.is_empty() {
        let mut c = new_cause(CauseKind::Acs, Severity::Warning, Action::DisableAcs, gpus);
        c.message = format!(
            "{}: ACS redirects peer traffic on {}",
            pair_name(p),
            on.join(", ")
        );
        c.short = format!("ACS redirects P2P on {}", on.join(", "));
        c.fix = format!(
            "disable ACS on {} (BIOS: PCIe ACS or VT-d off; or setpci at boot)",
            between
                .iter()
                .filter(|br| br.acs.redirects_p2p())
                .map(|br| br.bdf.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        c.evidence = on
            .iter()
            .map(|b| {
                Evidence::new("ACS control", b.clone())
                    .expected("no SrcValid, ReqRedir, CmpltRedir")
            })
            .collect();
        c
    } else if !unread.is_empty() {
        let mut c = new_cause(CauseKind::Acs, Severity::Info, Action::None, gpus);
        c.message = format!(
            "{}: ACS of {} unknown: reading past 64 bytes of config space needs root",
            pair_name(p),
            unread.join(", ")
        );
        c.short = "ACS unread (needs root)".into();
        c.fix = "run as root to read ACS".into();
        c
    } else {
        return None;
    };
    c.source = source.into();
    Some(c)
}

fn cross_numa(p: &Pair<'_>, gpus: &[GpuRef]) -> Option<Cause> {
    if p.link != LinkClass::Sys {
        return None;
    }
    let mut c = new_cause(CauseKind::CrossNuma, Severity::Info, Action::PickGpus, gpus);
    c.message = format!(
        "{}: the pair crosses NUMA nodes over the CPU interconnect; its traffic takes the SMP link",
        pair_name(p)
    );
    c.short = "the pair crosses NUMA nodes (SYS)".into();
    c.fix = "give the job GPUs of one NUMA node where it needs fast pairs".into();
    c.evidence = vec![Evidence::new("link class", "SYS").expected("PHB or closer")];
    c.source =
        "nvidia-smi topo -m legend (SYS: across the SMP interconnect between NUMA nodes)".into();
    Some(c)
}

/// Node and GPU causes that bear on this pair.
fn bears_on(c: &Cause, p: &Pair<'_>) -> bool {
    let own = c.gpus.is_empty()
        || c.gpus
            .iter()
            .any(|g| g.uuid == p.a.uuid || g.uuid == p.b.uuid);
    own && match c.kind {
        CauseKind::IommuTranslated | CauseKind::PcieDowntrained | CauseKind::PcieIdleDownclock => {
            !p.link.is_nvlink()
        }
        CauseKind::NvlinkDown => p.link.is_nvlink(),
        CauseKind::NumaUnknown => false,
        _ => true,
    }
}

fn related(node_causes: &[Cause], p: &Pair<'_>) -> Vec<CauseKind> {
    let mut out: Vec<CauseKind> = node_causes
        .iter()
        .filter(|c| bears_on(c, p))
        .map(|c| c.kind)
        .collect();
    out.dedup();
    out
}

fn union_env_fix(causes: &[&Cause]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in causes.iter().flat_map(|c| c.env_fix.iter()) {
        if !out.iter().any(|(ok, _)| ok == k) {
            out.push((k.clone(), v.clone()));
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn downgraded(
    p: &Pair<'_>,
    gpus: &[GpuRef],
    chosen: Transport,
    allowed: Transport,
    measured: bool,
    action: Option<Action>,
    env_fix: &[(String, String)],
) -> Cause {
    let mut c = new_cause(
        CauseKind::TransportDowngraded,
        Severity::Warning,
        action.unwrap_or(Action::CheckLink),
        gpus,
    );
    let how = if measured {
        "NCCL chose"
    } else {
        "the environment leaves"
    };
    c.message = format!(
        "{}: {how} {}, the topology allows {}",
        pair_name(p),
        chosen.label(),
        allowed.label()
    );
    c.short = format!(
        "transport {} instead of {}",
        chosen.label(),
        allowed.label()
    );
    c.fix = if action.is_some() {
        "see the causes".into()
    } else {
        "no cause found: run with NCCL_DEBUG=INFO and read why NCCL skipped P2P".into()
    };
    c.env_fix = env_fix.to_vec();
    c.evidence = vec![Evidence::new("transport", chosen.label())
        .expected(allowed.label())
        .source(if measured {
            "NCCL INFO log (channel lines)"
        } else {
            "predicted from NCCL_* variables"
        })];
    c.source =
        "NCCL documentation: transports P2P, SHM, NET; nvidia-smi topo -m path classes".into();
    c
}

/// The pair's figure, its reference and their ratio.
fn judge_figure(
    input: &ExplainInput<'_>,
    p: &Pair<'_>,
    m: Option<&PairMeasurement>,
) -> (Option<f64>, Option<Expectation>, Option<f64>) {
    let busbw = m
        .and_then(|m| m.busbw_gbps)
        .filter(|b| b.is_finite() && *b > 0.0);
    let info = |r: &GpuRef| input.gpus.iter().find(|g| g.uuid == r.uuid);
    let gen = [info(p.a), info(p.b)]
        .iter()
        .filter_map(|g| g.and_then(|g| g.pcie).map(|l| l.gen_max))
        .min();
    let model = info(p.a).map(|g| g.name.as_str()).unwrap_or("");
    let expected = expect::expected_pair(p.link, gen, model);
    let ratio = busbw.zip(expected.as_ref()).map(|(b, e)| b / e.busbw_gbps);
    (busbw, expected, ratio)
}

fn below_expected(
    p: &Pair<'_>,
    gpus: &[GpuRef],
    busbw: f64,
    e: &Expectation,
    ratio: f64,
    explained_by: Option<Action>,
) -> Option<Cause> {
    let severity = expect::ratio_band(ratio)?;
    let action = match (explained_by, severity) {
        (Some(a), _) => a,
        (None, Severity::Critical) => Action::Drain,
        (None, _) => Action::CheckLink,
    };
    let mut c = new_cause(CauseKind::BelowExpected, severity, action, gpus);
    c.message = format!(
        "{}: all-reduce busbw {busbw:.2} GB/s is {:.0}% of the {:.2} GB/s expected for {}",
        pair_name(p),
        ratio * 100.0,
        e.busbw_gbps,
        e.class
    );
    c.short = format!("{:.0}% of expected", ratio * 100.0);
    c.fix = if explained_by.is_some() {
        "see the causes".into()
    } else if severity == Severity::Critical {
        "no cause found: drain the node and check its links".into()
    } else {
        "no cause found: check the links and compare with a sister node".into()
    };
    c.evidence = vec![
        Evidence::new("all-reduce busbw", format!("{busbw:.2} GB/s"))
            .expected(format!(
                "≥ {:.0}% of {:.2} GB/s",
                expect::WARN_RATIO * 100.0,
                e.busbw_gbps
            ))
            .source(e.source.clone()),
    ];
    c.source = e.source.clone();
    Some(c)
}

fn below_history(p: &Pair<'_>, gpus: &[GpuRef], busbw: f64, history: &[f64]) -> Option<Cause> {
    let m = expect::median(history)?;
    if busbw >= expect::HISTORY_DRIFT_RATIO * m {
        return None;
    }
    let mut c = new_cause(
        CauseKind::BelowHistory,
        Severity::Warning,
        Action::CheckLink,
        gpus,
    );
    c.message = format!(
        "{}: all-reduce busbw {busbw:.2} GB/s is {:.0}% of this node's recent median {m:.2} GB/s",
        pair_name(p),
        busbw / m * 100.0
    );
    c.short = format!("{:.0}% of this node's median", busbw / m * 100.0);
    c.fix = "compare with the last good run: what changed (driver, firmware, environment)".into();
    c.evidence = vec![Evidence::new("busbw", format!("{busbw:.2} GB/s"))
        .expected(format!(
            "≥ {:.0}% of {m:.2} GB/s",
            expect::HISTORY_DRIFT_RATIO * 100.0
        ))
        .source(format!("node history, {} runs", history.len()))];
    c.source = "the node's own history (ddpcheckd)".into();
    Some(c)
}

/// "because" words: the environment's assignments told together, then every other cause.
fn because(causes: &[Cause], node_causes: &[Cause], p: &Pair<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let env: Vec<&str> = causes
        .iter()
        .filter(|c| is_env(c.kind))
        .map(|c| c.short.as_str())
        .collect();
    match env.len() {
        0 => {}
        1 => out.push(format!("{} is set", env[0])),
        _ => out.push(format!("{} are set", env.join(" and "))),
    }
    let others = causes
        .iter()
        .chain(node_causes.iter().filter(|c| bears_on(c, p)))
        .filter(|c| !is_env(c.kind) && !is_effect(c.kind))
        .filter(|c| {
            c.severity >= Severity::Warning
                || c.kind == CauseKind::VirtualMachine
                || c.kind.is_platform_limit()
        });
    out.extend(others.map(|c| c.short.clone()));
    out
}

/// The fix in words: unsets together ("unset A and B"), then each other action once.
fn fix_words(causes: &[Cause], node_causes: &[Cause], p: &Pair<'_>) -> String {
    let all: Vec<&Cause> = causes
        .iter()
        .chain(node_causes.iter().filter(|c| bears_on(c, p)))
        .filter(|c| c.action != Action::None && c.severity >= Severity::Warning)
        .collect();
    let mut unset: Vec<&str> = Vec::new();
    for c in all
        .iter()
        .filter(|c| c.action == Action::UnsetEnv && is_env(c.kind))
    {
        for (k, _) in &c.env_fix {
            if !unset.contains(&k.as_str()) {
                unset.push(k);
            }
        }
    }
    let mut parts: Vec<String> = Vec::new();
    if !unset.is_empty() {
        parts.push(format!("unset {}", unset.join(" and ")));
    }
    for c in all.iter().filter(|c| c.action != Action::UnsetEnv) {
        if c.fix != "see the causes" && !parts.contains(&c.fix) {
            parts.push(c.fix.clone());
        }
    }
    parts.join("; ")
}
