//! Saved reports read back (`--from`): which schema versions this build reads, and the range
//! checks of the figures the tables and the recommendation rest on. A report of an unknown
//! version, or with a time, bandwidth or count no measurement gives (negative, zero where it
//! cannot be, a p90 below the median), is refused with one line naming the field.

use std::ops::RangeInclusive;

use crate::collective::Sweep;
use crate::ddp::DdpResult;
use crate::hostcopy::HostCopyRun;
use crate::report::{BenchCollectivesReport, DdpReport, PreflightReport, SCHEMA_VERSION};

/// Every version this build reads. Bumps to 2 changed only `explain`'s words, which no reader of
/// saved reports takes in; 3 put speedups against one GPU without DDP and says so in each row's
/// `reference` (read as `ddp`, the 1-GPU step in DDP, where a report of 1 or 2 has none).
pub const READABLE_SCHEMA_VERSIONS: RangeInclusive<u32> = 1..=SCHEMA_VERSION;

/// The `schema_version` of a report's JSON, checked before the report itself is read.
pub fn check_schema_version(report: &serde_json::Value) -> Result<(), SavedError> {
    let Some(found) = report.get("schema_version") else {
        return Err(SavedError::NoVersion);
    };
    match found.as_u64().and_then(|v| u32::try_from(v).ok()) {
        Some(v) if READABLE_SCHEMA_VERSIONS.contains(&v) => Ok(()),
        Some(version) if version > SCHEMA_VERSION => Err(SavedError::NewerVersion { version }),
        _ => Err(SavedError::UnknownVersion {
            found: found.to_string(),
        }),
    }
}

/// Why a saved report is refused (a usage error: the file given is not one to read).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SavedError {
    #[error("no schema_version ({})", readable())]
    NoVersion,
    #[error("schema_version {version} is newer than this ddpcheck ({}): read it with the ddpcheck that wrote it", readable())]
    NewerVersion { version: u32 },
    /// `found` as the JSON has it.
    #[error(
        "schema_version {found} is not a version ddpcheck wrote ({})",
        readable()
    )]
    UnknownVersion { found: String },
    /// `field` is its path in the report (`results[0].throughput`).
    #[error("{field} = {value}: must be above 0")]
    NotPositive { field: String, value: f64 },
    #[error("{field} = {value}: must be 0 or more")]
    Negative { field: String, value: f64 },
    #[error("{field} = 0: must be at least 1")]
    ZeroCount { field: String },
    #[error("{p90_field} = {p90} is below {median_field} = {median}: a 90th percentile is never below the median")]
    P90BelowMedian {
        p90_field: String,
        p90: f64,
        median_field: String,
        median: f64,
    },
}

fn readable() -> String {
    format!(
        "it reads versions {} to {}",
        READABLE_SCHEMA_VERSIONS.start(),
        READABLE_SCHEMA_VERSIONS.end()
    )
}

/// Where a figure lies in the report, for the one line that names it.
struct At(String);

impl At {
    fn field(&self, name: &str) -> String {
        if self.0.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.0)
        }
    }

    fn positive(&self, name: &str, v: f64) -> Result<(), SavedError> {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(SavedError::NotPositive {
                field: self.field(name),
                value: v,
            })
        }
    }

    fn not_negative(&self, name: &str, v: f64) -> Result<(), SavedError> {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(SavedError::Negative {
                field: self.field(name),
                value: v,
            })
        }
    }

    fn count(&self, name: &str, v: u64) -> Result<(), SavedError> {
        if v > 0 {
            Ok(())
        } else {
            Err(SavedError::ZeroCount {
                field: self.field(name),
            })
        }
    }

    fn inner(&self, name: &str) -> At {
        At(self.field(name))
    }
}

pub fn check_ddp(r: &DdpReport) -> Result<(), SavedError> {
    for (i, result) in r.results.iter().enumerate() {
        check_ddp_result(result, &At(format!("results[{i}]")))?;
    }
    Ok(())
}

fn check_ddp_result(r: &DdpResult, at: &At) -> Result<(), SavedError> {
    at.count("params", r.params)?;
    at.count("world_size", r.world_size.into())?;
    at.count("micro_batch", r.micro_batch.into())?;
    at.count("accum", r.accum.into())?;
    at.positive("step_time_median_s", r.step_time_median_s)?;
    at.positive("step_time_p90_s", r.step_time_p90_s)?;
    if r.step_time_p90_s < r.step_time_median_s {
        return Err(SavedError::P90BelowMedian {
            p90_field: at.field("step_time_p90_s"),
            p90: r.step_time_p90_s,
            median_field: at.field("step_time_median_s"),
            median: r.step_time_median_s,
        });
    }
    at.positive("throughput", r.throughput)?;
    let optional_positive = [
        ("speedup", r.speedup),
        ("efficiency", r.efficiency),
        ("solo_step_time_median_s", r.solo_step_time_median_s),
    ];
    for (name, v) in optional_positive {
        v.map_or(Ok(()), |v| at.positive(name, v))?;
    }
    let optional_not_negative = [
        ("cost_per_million", r.cost_per_million),
        ("speedup_uncertainty", r.speedup_uncertainty),
        ("speedup_noise_bound", r.speedup_noise_bound),
    ];
    for (name, v) in optional_not_negative {
        v.map_or(Ok(()), |v| at.not_negative(name, v))?;
    }
    for (name, list) in [
        ("launch_step_medians_s", &r.launch_step_medians_s),
        ("launch_solo_step_medians_s", &r.launch_solo_step_medians_s),
    ] {
        for (i, v) in list.iter().enumerate() {
            at.positive(&format!("{name}[{i}]"), *v)?;
        }
    }
    if let Some(p) = &r.plain_reference {
        at.inner("plain_reference")
            .positive("step_time_median_s", p.step_time_median_s)?;
    }
    if let Some(s) = &r.all_reduce_probe {
        check_sweep(s, &at.inner("all_reduce_probe"))?;
    }
    Ok(())
}

pub fn check_preflight(r: &PreflightReport) -> Result<(), SavedError> {
    if let Some(s) = &r.all_reduce {
        check_sweep(s, &At("all_reduce".into()))?;
    }
    if let Some(h) = &r.host_copies {
        check_host_copies(h, &At("host_copies".into()))?;
    }
    Ok(())
}

pub fn check_collectives(r: &BenchCollectivesReport) -> Result<(), SavedError> {
    for (i, run) in r.runs.iter().enumerate() {
        for (j, s) in run.run.sweeps.iter().enumerate() {
            check_sweep(s, &At(format!("runs[{i}].run.sweeps[{j}]")))?;
        }
    }
    Ok(())
}

/// A sweep's sizes and timings. `Timing::from_time` takes a time of 0 (and gives bandwidths of
/// 0), so times and bandwidths need only not be negative.
fn check_sweep(s: &Sweep, at: &At) -> Result<(), SavedError> {
    at.count("ranks", s.ranks.into())?;
    for (i, sample) in s.samples.iter().enumerate() {
        let at = at.inner(&format!("samples[{i}]"));
        at.count("bytes", sample.bytes)?;
        let timings = [
            ("out_of_place", Some(sample.out_of_place)),
            ("in_place", sample.in_place),
        ];
        for (name, t) in timings {
            let Some(t) = t else { continue };
            let at = at.inner(name);
            at.not_negative("time_us", t.time_us)?;
            at.not_negative("algbw_gbps", t.algbw_gbps)?;
            at.not_negative("busbw_gbps", t.busbw_gbps)?;
        }
    }
    Ok(())
}

fn check_host_copies(h: &HostCopyRun, at: &At) -> Result<(), SavedError> {
    for (i, g) in h.gpus.iter().enumerate() {
        for (j, s) in g.samples.iter().enumerate() {
            let at = at.inner(&format!("gpus[{i}].samples[{j}]"));
            at.count("bytes", s.bytes)?;
            at.not_negative("time_us", s.time_us)?;
            at.not_negative("gbps", s.gbps)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn versions_outside_the_readable_ones_are_refused() {
        let v = |n: serde_json::Value| {
            check_schema_version(&serde_json::json!({ "schema_version": n }))
                .map_err(|e| e.to_string())
        };
        assert!(v(1.into()).is_ok());
        assert!(v(SCHEMA_VERSION.into()).is_ok());
        let new = v(99.into()).unwrap_err();
        assert!(new.contains("schema_version 99 is newer"), "{new}");
        assert!(new.contains("versions 1 to 3"), "{new}");
        assert!(
            v(2.into()).is_ok(),
            "reports before the plain reference still read"
        );
        assert!(v(0.into())
            .unwrap_err()
            .contains("schema_version 0 is not a version"));
        assert!(v("2".into()).is_err());
        assert!(check_schema_version(&serde_json::json!({}))
            .unwrap_err()
            .to_string()
            .starts_with("no schema_version"));
    }

    fn result() -> DdpResult {
        DdpResult {
            model: "m".into(),
            params: 1000,
            variant: "base".into(),
            world_size: 2,
            micro_batch: 8,
            accum: 1,
            step_time_median_s: 0.1,
            step_time_p90_s: 0.12,
            throughput: 100.0,
            throughput_unit: "tokens/s".into(),
            ..DdpResult::default()
        }
    }

    #[test]
    fn a_negative_p90_and_an_unordered_one_are_named() {
        assert!(check_ddp_result(&result(), &At("results[0]".into())).is_ok());
        let negative = DdpResult {
            step_time_p90_s: -1.0,
            ..result()
        };
        assert_eq!(
            check_ddp_result(&negative, &At("results[0]".into()))
                .unwrap_err()
                .to_string(),
            "results[0].step_time_p90_s = -1: must be above 0"
        );
        let unordered = DdpResult {
            step_time_p90_s: 0.05,
            ..result()
        };
        let e = check_ddp_result(&unordered, &At("results[0]".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("never below the median"), "{e}");
        let zero_gpus = DdpResult {
            world_size: 0,
            ..result()
        };
        assert!(check_ddp_result(&zero_gpus, &At(String::new()))
            .unwrap_err()
            .to_string()
            .starts_with("world_size = 0"));
    }
}
