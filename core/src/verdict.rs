//! Verdicts and exit codes (Nagios style, as Meta's gcm) and the Slurm prolog mapping.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::finding::{Finding, Severity};

/// Exit code for a usage error (bad flags, unknown profile): sysexits' EX_USAGE.
pub const EXIT_USAGE: i32 = 64;
/// Exit code when the output cannot be written (a full disk behind a redirect): EX_IOERR.
pub const EXIT_IOERR: i32 = 74;
/// Exit code when the output's reader went away: 128 + SIGPIPE, as a shell reports it.
pub const EXIT_BROKEN_PIPE: i32 = 141;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Healthy.
    Ok,
    /// Degraded: usable, but slower or less safe than it should be.
    Warning,
    /// Unhealthy: do not run jobs here.
    Critical,
    /// Could not tell (no driver, probe error).
    Unknown,
    /// Another test or foreign compute holds the GPUs; nothing was judged.
    Busy,
    /// A probe ran past its deadline and was stopped.
    Timeout,
}

impl Verdict {
    pub const ALL: [Verdict; 6] = [
        Verdict::Ok,
        Verdict::Warning,
        Verdict::Critical,
        Verdict::Unknown,
        Verdict::Busy,
        Verdict::Timeout,
    ];

    /// The verdict of the two a scheduler must care about more: CRITICAL beats TIMEOUT beats
    /// UNKNOWN beats WARNING beats BUSY beats OK; `self` on a tie.
    pub fn worse(self, other: Verdict) -> Verdict {
        let rank = |v: Verdict| match v {
            Verdict::Ok => 0,
            Verdict::Busy => 1,
            Verdict::Warning => 2,
            Verdict::Unknown => 3,
            Verdict::Timeout => 4,
            Verdict::Critical => 5,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }

    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Ok => 0,
            Verdict::Warning => 1,
            Verdict::Critical => 2,
            Verdict::Unknown => 3,
            Verdict::Busy => 4,
            Verdict::Timeout => 5,
        }
    }

    pub fn from_exit_code(code: i32) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.exit_code() == code)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Warning => "WARNING",
            Verdict::Critical => "CRITICAL",
            Verdict::Unknown => "UNKNOWN",
            Verdict::Busy => "BUSY",
            Verdict::Timeout => "TIMEOUT",
        }
    }

    /// The verdict that findings alone give: the worst severity wins.
    pub fn from_findings(findings: &[Finding]) -> Verdict {
        match findings.iter().map(|f| f.severity).max() {
            Some(Severity::Critical) => Verdict::Critical,
            Some(Severity::Warning) => Verdict::Warning,
            _ => Verdict::Ok,
        }
    }

    /// The one-line reason schedulers show: the verdict and its worst finding.
    pub fn reason_line(self, findings: &[Finding], fallback: &str) -> String {
        let worst = findings
            .iter()
            .filter(|f| f.severity > Severity::Info)
            .max_by_key(|f| f.severity);
        match worst {
            Some(f) => self.line(&f.message),
            None => self.line(fallback),
        }
    }

    /// `ddpcheck: VERDICT: message` on one line, always (Slurm and NHC read one): the
    /// message's line breaks and whitespace runs (a worker's stderr tail) become single
    /// spaces, and a message that already starts with the verdict's word (`BUSY: …`) does not
    /// say it twice.
    pub fn line(self, message: &str) -> String {
        let message = one_line(message);
        let word = self.as_str();
        let message = message
            .strip_prefix(word)
            .and_then(|rest| rest.strip_prefix(':'))
            .map_or(message.as_str(), str::trim_start);
        format!("ddpcheck: {word}: {message}")
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `text` as one line: whitespace runs, line breaks included, become single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a verdict dated `dated_unix` (none: its date could not be read) may be reused at
/// `now_unix` under `max_age` seconds (`check --max-age`). A verdict from the future is not
/// fresh: the clock stepped back since it was made, and how old it really is cannot be told.
pub fn is_fresh(dated_unix: Option<f64>, now_unix: f64, max_age: f64) -> bool {
    let Some(dated) = dated_unix else {
        return false;
    };
    let age = now_unix - dated;
    age.is_finite() && (0.0..=max_age).contains(&age)
}

/// How a Slurm prolog treats each verdict: non-zero drains the node and requeues the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrologPolicy {
    /// Drain on WARNING too (default: no, a degraded node still runs jobs).
    pub fail_on_warning: bool,
    /// Drain on UNKNOWN (default: yes, a node we cannot check is not trusted).
    pub fail_on_unknown: bool,
}

impl Default for PrologPolicy {
    fn default() -> Self {
        PrologPolicy {
            fail_on_warning: false,
            fail_on_unknown: true,
        }
    }
}

impl PrologPolicy {
    /// Exit code for the prolog: 0 lets the job run; 1 fails the prolog (Slurm drains the node).
    /// BUSY lets the job run: the GPUs being in use is not a fault of the node.
    pub fn prolog_exit(self, v: Verdict) -> i32 {
        let fail = match v {
            Verdict::Ok | Verdict::Busy => false,
            Verdict::Warning => self.fail_on_warning,
            Verdict::Unknown => self.fail_on_unknown,
            Verdict::Critical | Verdict::Timeout => true,
        };
        i32::from(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Subject;

    #[test]
    fn exit_codes_are_nagios_plus_busy_timeout() {
        let codes: Vec<i32> = Verdict::ALL.iter().map(|v| v.exit_code()).collect();
        assert_eq!(codes, vec![0, 1, 2, 3, 4, 5]);
        for v in Verdict::ALL {
            assert_eq!(Verdict::from_exit_code(v.exit_code()), Some(v));
        }
        assert_eq!(Verdict::from_exit_code(EXIT_USAGE), None);
    }

    #[test]
    fn the_worse_verdict_is_the_one_a_scheduler_must_care_about_more() {
        let order = [
            Verdict::Ok,
            Verdict::Busy,
            Verdict::Warning,
            Verdict::Unknown,
            Verdict::Timeout,
            Verdict::Critical,
        ];
        for (i, a) in order.iter().enumerate() {
            for (j, b) in order.iter().enumerate() {
                assert_eq!(a.worse(*b), order[i.max(j)], "{a} vs {b}");
            }
        }
    }

    #[test]
    fn worst_finding_sets_verdict_and_reason() {
        let f = vec![
            Finding::new("a", Severity::Info, Subject::Node, "fine"),
            Finding::new("b", Severity::Warning, Subject::Node, "slow link"),
        ];
        let v = Verdict::from_findings(&f);
        assert_eq!(v, Verdict::Warning);
        assert_eq!(v.reason_line(&f, "x"), "ddpcheck: WARNING: slow link");
        assert_eq!(Verdict::from_findings(&[]), Verdict::Ok);
    }

    #[test]
    fn the_verdict_line_is_one_line_and_says_its_word_once() {
        let tail = "worker was killed by signal 9; stderr ends with: a\n  b\r\n\tc\n";
        let l = Verdict::Unknown.line(tail);
        assert_eq!(
            l,
            "ddpcheck: UNKNOWN: worker was killed by signal 9; stderr ends with: a b c"
        );
        assert_eq!(
            Verdict::Busy.line("BUSY: another test is already running"),
            "ddpcheck: BUSY: another test is already running"
        );
        // Only the verdict's own word at the start is dropped.
        assert_eq!(
            Verdict::Busy.line("rate limited: BUSY: x"),
            "ddpcheck: BUSY: rate limited: BUSY: x"
        );
        assert_eq!(Verdict::Busy.line("BUSYNESS"), "ddpcheck: BUSY: BUSYNESS");
        let f = vec![Finding::new(
            "w",
            Severity::Critical,
            Subject::Node,
            "two\nlines",
        )];
        assert_eq!(
            Verdict::Critical.reason_line(&f, "x"),
            "ddpcheck: CRITICAL: two lines"
        );
    }

    #[test]
    fn only_a_dated_verdict_from_the_past_within_max_age_is_fresh() {
        let now = 1_800_000_000.0;
        assert!(is_fresh(Some(now - 10.0), now, 60.0));
        assert!(is_fresh(Some(now), now, 0.0));
        assert!(!is_fresh(Some(now - 61.0), now, 60.0));
        // The clock stepped back after the verdict: it is dated in the future.
        assert!(!is_fresh(Some(now + 1.0), now, 60.0));
        assert!(!is_fresh(Some(now + 3600.0), now, 1e9));
        assert!(!is_fresh(None, now, 60.0));
        assert!(!is_fresh(Some(f64::NAN), now, 60.0));
    }

    #[test]
    fn prolog_drains_on_critical_not_on_busy() {
        let p = PrologPolicy::default();
        assert_eq!(p.prolog_exit(Verdict::Ok), 0);
        assert_eq!(p.prolog_exit(Verdict::Warning), 0);
        assert_eq!(p.prolog_exit(Verdict::Busy), 0);
        assert_eq!(p.prolog_exit(Verdict::Critical), 1);
        assert_eq!(p.prolog_exit(Verdict::Timeout), 1);
        assert_eq!(p.prolog_exit(Verdict::Unknown), 1);
    }
}
