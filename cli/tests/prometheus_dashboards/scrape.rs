//! Reading a scrape: bandwidth causes and host copies per node, families and the names of metrics
//! and recording rules.

use super::*;

/// The value of label `name` on one series line of a scrape.
fn label(line: &str, name: &str) -> Option<String> {
    let key = format!("{name}=\"");
    let start = line.find(&key)? + key.len();
    let len = line[start..].find('"')?;
    Some(line[start..start + len].to_string())
}

/// `ddpcheck_bandwidth_cause` series of a scrape, as (cause, action, severity, gpus).
fn causes(scrape: &str) -> BTreeSet<(String, String, String, String)> {
    scrape
        .lines()
        .filter(|l| l.starts_with("ddpcheck_bandwidth_cause{") && l.ends_with(" 1"))
        .filter_map(|l| {
            Some((
                label(l, "cause")?,
                label(l, "action")?,
                label(l, "severity")?,
                label(l, "gpus")?,
            ))
        })
        .collect()
}

/// The cause metric names each node's causes after its preflight: none on the healthy node,
/// the downtrained GPU's link with its action, the VM as a node-wide cause.
pub(super) fn assert_fleet_causes(scrapes: &[(&str, String)]) {
    let of = |inst: &str| {
        let (_, s) = scrapes.iter().find(|(i, _)| *i == inst).expect("scraped");
        causes(s)
    };
    let own = |c: &str, a: &str, s: &str, g: &str| {
        (c.to_string(), a.to_string(), s.to_string(), g.to_string())
    };
    assert_eq!(of("h200x2-nvlink"), BTreeSet::new());
    let a6000 = of("a6000x4-phb");
    assert!(
        a6000.contains(&own("pcie_downtrained", "check_link", "warning", "1")),
        "{a6000:?}"
    );
    let t4 = of("t4x2-pcie");
    assert!(
        t4.contains(&own("virtual_machine", "none", "info", "")),
        "{t4:?}"
    );
}

/// Values of one family of a scrape by its (`gpu`, `direction`) labels.
fn by_gpu_direction(scrape: &str, family: &str) -> BTreeMap<(String, String), f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| {
            let value = l.rsplit_once(' ')?.1.parse().ok()?;
            Some(((label(l, "gpu")?, label(l, "direction")?), value))
        })
        .collect()
}

/// Each GPU's own link: both directions of every GPU where the preflight timed copies, the
/// A6000 node's degraded GPU 1 under 60% of its link and slower than its GPU 0, and nothing on
/// the T4 node, whose stuck GPU starts no copies.
pub(super) fn assert_fleet_host_copies(scrapes: &[(&str, String)]) {
    let of = |inst: &str, family: &str| {
        let (_, s) = scrapes.iter().find(|(i, _)| *i == inst).expect("scraped");
        by_gpu_direction(s, family)
    };
    let bw = "ddpcheck_gpu_host_copy_bytes_per_second";
    let ratio = "ddpcheck_gpu_host_copy_capacity_ratio";
    let key = |g: &str, d: &str| (g.to_string(), d.to_string());
    for (inst, gpus) in [("h200x2-nvlink", 2), ("a6000x4-phb", 4)] {
        let (b, r) = (of(inst, bw), of(inst, ratio));
        assert_eq!(b.len(), 2 * gpus, "{inst}: {b:?}");
        assert_eq!(r.len(), 2 * gpus, "{inst}: {r:?}");
    }
    let h200 = of("h200x2-nvlink", ratio);
    assert!(h200.values().all(|v| (0.6..1.0).contains(v)), "{h200:?}");
    let (b, r) = (of("a6000x4-phb", bw), of("a6000x4-phb", ratio));
    for d in ["host_to_device", "device_to_host"] {
        assert!(r[&key("1", d)] < 0.6, "{r:?}");
        assert!(r[&key("0", d)] >= 0.6, "{r:?}");
        assert!(b[&key("1", d)] < b[&key("0", d)], "{b:?}");
    }
    assert!(of("t4x2-pcie", bw).is_empty());
}

/// Every `ddpcheck_[a-z_]+` in a text.
pub(super) fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("ddpcheck_") {
        let tail = &rest[i..];
        let len = "ddpcheck_".len()
            + tail["ddpcheck_".len()..]
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
                .count();
        if len > "ddpcheck_".len() {
            out.insert(tail[..len].to_string());
        }
        rest = &tail[len..];
    }
    out
}

/// `# TYPE name kind` lines of a scrape: family name to type.
pub(super) fn families(scrape: &str) -> BTreeMap<String, String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

/// Every `ddpcheck:name` (a recording rule's name) in a text.
pub(super) fn recorded_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("ddpcheck:") {
        let tail = &rest[i..];
        let len = tail
            .bytes()
            .take_while(|b| b.is_ascii_lowercase() || matches!(b, b'_' | b':'))
            .count();
        out.insert(tail[..len].to_string());
        rest = &tail[len..];
    }
    out
}
