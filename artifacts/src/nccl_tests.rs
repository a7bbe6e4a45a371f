//! nccl-tests output (`all_reduce_perf` and its siblings): the version line, the devices of
//! every rank, each size's row out of place and in place with `#wrong` (or the older `error`
//! column), and `# Avg bus bandwidth`. Columns are found by the header's names, so the layouts
//! of nccl-tests 2.0 to 2.17 (without `redop` or `root`, with `error` for `#wrong`) all read.

use ddpcheck_core::collective::{Collective, Sample, Sweep, Timing};
use serde::{Deserialize, Serialize};

use crate::text::{clean, strip_launcher};
use crate::{ArtifactError, Format};

const F: Format = Format::NcclTests;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NcclTests {
    /// `# nccl-tests version 2.13.9 …`.
    pub version: Option<String>,
    /// The NCCL library it ran with (`nccl-library=22105` → `2.21.5`).
    pub nccl_version: Option<String>,
    /// The collective, where the output or its command line names it.
    pub op: Option<Collective>,
    pub devices: Vec<Device>,
    /// The rows as a sweep (its `op` all-reduce where `op` is unknown; see `op`).
    pub sweep: Sweep,
    /// `# Avg bus bandwidth`, GB/s (0 where the run failed).
    pub avg_busbw_gbps: f64,
    /// nccl-tests' own failure line (`Test NCCL failure common.cu:… 'unhandled cuda error'`):
    /// the run stopped there, its rows so far kept, no average.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A failure line nccl-tests prints as it stops (`Test NCCL failure …`, `Test CUDA failure …`).
fn failure_line(t: &str) -> bool {
    !t.contains(" NCCL INFO ")
        && !t.contains(" NCCL WARN ")
        && ["NCCL failure", "CUDA failure", "Test failure"]
            .iter()
            .any(|w| t.contains(w))
}

/// `#  Rank  0 Group  0 Pid   1887 on   worker-1 device  0 [0x8d] NVIDIA H100 80GB HBM3`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub rank: u32,
    pub host: String,
    /// The CUDA device ordinal.
    pub device: u32,
    /// The PCI bus number (`0x8d`), or the bus id where printed whole.
    pub bus: String,
    pub name: String,
}

impl NcclTests {
    /// The hosts the ranks ran on, in order of first appearance.
    pub fn hosts(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for d in &self.devices {
            if !out.contains(&d.host.as_str()) {
                out.push(&d.host);
            }
        }
        out
    }
}

/// NCCL's version code as a version (22105 → 2.21.5; 2708 → 2.7.8 before 2.9).
pub fn nccl_code(code: u32) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, code / 100 % 10, code % 100)
    }
}

fn device(line: &str) -> Option<Device> {
    let t = line.trim_start_matches('#').trim();
    let rest = t.strip_prefix("Rank")?;
    let toks: Vec<&str> = rest.split_whitespace().collect();
    let rank = toks.first()?.parse().ok()?;
    let on = toks.iter().position(|w| *w == "on")?;
    let dev = toks.iter().position(|w| *w == "device")?;
    let host = toks.get(on + 1)?.to_string();
    let device = toks.get(dev + 1)?.parse().ok()?;
    let bus = toks
        .get(dev + 2)?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let name = toks.get(dev + 3..)?.join(" ");
    Some(Device {
        rank,
        host,
        device,
        bus,
        name,
    })
}

fn op_of(text: &str) -> Option<Collective> {
    let words = [
        ("all_reduce_perf", Collective::AllReduce),
        ("all_gather_perf", Collective::AllGather),
        ("reduce_scatter_perf", Collective::ReduceScatter),
        ("alltoall_perf", Collective::AllToAll),
        ("broadcast_perf", Collective::Broadcast),
        ("reduce_perf", Collective::Reduce),
    ];
    // The first binary named wins (reduce_perf is inside all_reduce_perf: longest names first).
    words
        .iter()
        .filter_map(|(w, op)| {
            text.match_indices(w)
                .find(|(i, _)| {
                    *i == 0
                        || !text.as_bytes()[i - 1].is_ascii_alphanumeric()
                            && text.as_bytes()[i - 1] != b'_'
                })
                .map(|(i, _)| (i, *op))
        })
        .min_by_key(|(i, _)| *i)
        .map(|(_, op)| op)
}

/// Column positions from the header's names.
struct Columns {
    size: usize,
    count: usize,
    dtype: usize,
    redop: Option<usize>,
    root: Option<usize>,
    /// time, algbw, busbw, wrong: out of place, then in place where present.
    halves: Vec<[usize; 4]>,
    width: usize,
    /// `#wrong` counts wrong elements; the older `error` is a largest error, not a count, and
    /// is not read as one.
    counts_wrong: bool,
}

fn columns(line: &str) -> Option<Columns> {
    let names: Vec<&str> = line.trim_start_matches('#').split_whitespace().collect();
    let at = |n: &str| names.iter().position(|w| *w == n);
    let (size, count, dtype) = (at("size")?, at("count")?, at("type")?);
    let mut halves = Vec::new();
    let mut i = 0;
    while i + 3 < names.len() {
        if names[i] == "time" && names[i + 1] == "algbw" && names[i + 2] == "busbw" {
            halves.push([i, i + 1, i + 2, i + 3]);
            i += 4;
        } else {
            i += 1;
        }
    }
    (!halves.is_empty()).then_some(Columns {
        size,
        count,
        dtype,
        redop: at("redop"),
        root: at("root"),
        halves,
        width: names.len(),
        counts_wrong: names.contains(&"#wrong"),
    })
}

fn timing(toks: &[&str], h: [usize; 4], counts_wrong: bool) -> Option<Timing> {
    let f = |i: usize| toks.get(i)?.parse::<f64>().ok();
    // `N/A` where the check did not run (`-c 0`).
    let wrong = toks
        .get(h[3])
        .filter(|_| counts_wrong)
        .and_then(|w| w.parse::<u64>().ok());
    Some(Timing {
        time_us: f(h[0])?,
        algbw_gbps: f(h[1])?,
        busbw_gbps: f(h[2])?,
        wrong,
    })
}

fn row(toks: &[&str], c: &Columns) -> Option<Sample> {
    Some(Sample {
        bytes: toks.get(c.size)?.parse().ok()?,
        count: toks.get(c.count)?.parse().ok()?,
        dtype: toks.get(c.dtype)?.to_string(),
        out_of_place: timing(toks, c.halves[0], c.counts_wrong)?,
        in_place: c
            .halves
            .get(1)
            .and_then(|h| timing(toks, *h, c.counts_wrong)),
    })
}

/// What the lines gave, before it is checked.
#[derive(Default)]
struct Parsed {
    version: Option<String>,
    nccl_version: Option<String>,
    devices: Vec<Device>,
    cols: Option<Columns>,
    samples: Vec<Sample>,
    avg: Vec<f64>,
    redop: String,
    root: i32,
    failure: Option<String>,
}

fn version_line(p: &mut Parsed, v: &str) {
    let mut w = v.split_whitespace();
    p.version = w.next().map(str::to_string);
    p.nccl_version = w
        .find_map(|x| x.strip_prefix("nccl-library="))
        .and_then(|c| c.parse().ok())
        .map(nccl_code);
}

/// A size row under the header; a row cut short is a truncated file.
fn size_row(p: &mut Parsed, t: &str) -> Result<(), ArtifactError> {
    let Some(c) = &p.cols else { return Ok(()) };
    let toks: Vec<&str> = t.split_whitespace().collect();
    if toks.first().is_none_or(|w| w.parse::<u64>().is_err()) {
        return Ok(());
    }
    if toks.len() < c.width {
        return Err(ArtifactError::truncated(
            F,
            format!("row {t:?} is cut short"),
        ));
    }
    let s = row(&toks, c).ok_or_else(|| ArtifactError::malformed(F, format!("row {t:?}")))?;
    p.redop = c
        .redop
        .and_then(|i| toks.get(i))
        .map(|s| (*s).to_string())
        .unwrap_or_default();
    p.root = c.root.and_then(|i| toks.get(i)?.parse().ok()).unwrap_or(-1);
    p.samples.push(s);
    Ok(())
}

fn line(p: &mut Parsed, t: &str) -> Result<(), ArtifactError> {
    if failure_line(t) {
        p.failure.get_or_insert_with(|| t.to_string());
    } else if let Some(v) = t.strip_prefix("# nccl-tests version ") {
        version_line(p, v);
    } else if let Some(d) = device(t) {
        p.devices.push(d);
    } else if let Some(a) = t
        .trim_start_matches('#')
        .trim()
        .strip_prefix("Avg bus bandwidth")
    {
        let v = a.trim_start_matches([' ', ':']).trim();
        p.avg.push(
            v.parse()
                .map_err(|_| ArtifactError::malformed(F, format!("avg bus bandwidth {v:?}")))?,
        );
    } else if p.cols.is_none() && t.contains("busbw") && t.contains("size") {
        p.cols = columns(t);
    } else if !t.starts_with('#') && !t.is_empty() {
        size_row(p, t)?;
    }
    Ok(())
}

pub fn parse(text: &str) -> Result<NcclTests, ArtifactError> {
    let text = clean(text);
    let mut p = Parsed {
        root: -1,
        ..Parsed::default()
    };
    for l in text.lines().map(strip_launcher) {
        line(&mut p, l.trim())?;
    }
    finish(&text, p)
}

/// Checks what was read: a header, rows and one average, or nccl-tests' failure line (then the
/// rows so far, and no average).
fn finish(text: &str, mut p: Parsed) -> Result<NcclTests, ArtifactError> {
    // A run that printed its average finished, whatever it warned of on the way.
    if !p.avg.is_empty() {
        p.failure = None;
    }
    let failed = p.failure.is_some();
    if p.cols.is_none() && !failed {
        return Err(ArtifactError::truncated(
            F,
            "no column header (size count type … busbw)",
        ));
    }
    if p.samples.is_empty() && !failed {
        return Err(ArtifactError::truncated(F, "a header but no size rows"));
    }
    let avg_busbw_gbps = match p.avg.as_slice() {
        [a] => *a,
        [] if failed => 0.0,
        [] => {
            return Err(ArtifactError::truncated(
                F,
                "no `# Avg bus bandwidth` line: the run did not finish or the paste was cut",
            ))
        }
        more => {
            return Err(ArtifactError::malformed(
                F,
                format!("{} runs in one file; give each its own file", more.len()),
            ))
        }
    };
    let op = op_of(text);
    let ranks = ddpcheck_core::num::len_u32(p.devices.len());
    Ok(NcclTests {
        version: p.version,
        nccl_version: p.nccl_version,
        op,
        devices: p.devices,
        sweep: Sweep {
            op: op.unwrap_or(Collective::AllReduce),
            ranks,
            redop: p.redop,
            root: p.root,
            samples: p.samples,
        },
        avg_busbw_gbps,
        failure: p.failure,
    })
}
