//! Rate limit of work-starting gRPC calls (preflights and benchmarks): a token bucket of `burst`
//! tokens refilled at `per_minute` tokens a minute, on top of single flight (one test at a
//! time). Cluster phases are single flight only: a cluster check's isolation rounds make many
//! phase calls per node within seconds.
//!
//! Hand-written rather than the `governor` crate: a token must be taken only when the work really
//! starts (a call refused as BUSY by the node lock must not use up the budget), so the check, the
//! lock and the take happen under one mutex, and governor's `check` takes its token at once with
//! no way to give it back. The bucket is a few lines of arithmetic on `Instant`s, tested below
//! with an explicit clock.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Default average rate of started work calls: far above what a Slurm prolog or a health check
/// does (one check per job start), far below a runaway client looping on the GPUs.
pub const DEFAULT_WORK_RATE_PER_MINUTE: f64 = 30.0;
/// Default number of work calls that may start back to back before the rate applies.
pub const DEFAULT_WORK_BURST: u32 = 10;
/// Bounds of the settings (`work_rate_per_minute` 0 turns the limit off).
pub const MAX_WORK_RATE_PER_MINUTE: f64 = 60_000.0;
pub const MAX_WORK_BURST: u32 = 10_000;

/// The limit as configured: `per_minute == 0` means no limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkRate {
    pub per_minute: f64,
    pub burst: u32,
}

impl WorkRate {
    /// No limit (single flight still applies).
    pub const OFF: WorkRate = WorkRate {
        per_minute: 0.0,
        burst: 0,
    };

    pub fn is_off(&self) -> bool {
        !(self.per_minute > 0.0 && self.burst > 0)
    }
}

impl Default for WorkRate {
    fn default() -> WorkRate {
        WorkRate {
            per_minute: DEFAULT_WORK_RATE_PER_MINUTE,
            burst: DEFAULT_WORK_BURST,
        }
    }
}

/// A token bucket with an explicit clock: full at creation, `capacity` tokens at most.
#[derive(Debug)]
pub struct TokenBucket {
    capacity: f64,
    per_second: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(rate: WorkRate, now: Instant) -> TokenBucket {
        TokenBucket {
            capacity: f64::from(rate.burst),
            per_second: rate.per_minute / 60.0,
            tokens: f64::from(rate.burst),
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        // A clock that went backwards (it cannot with Instant, but be safe) adds nothing.
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.per_second).min(self.capacity);
        self.last = now;
    }

    /// `Ok` when a token is there now, else how long until one is.
    pub fn ready(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            return Ok(());
        }
        let missing = 1.0 - self.tokens;
        Err(Duration::from_secs_f64(missing / self.per_second))
    }

    /// Takes one token (call after [`TokenBucket::ready`] said yes, at the same `now`).
    pub fn take(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    /// Tokens there now (whole and fractional).
    pub fn tokens(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }
}

/// A call refused by the limit.
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimited {
    pub rate: WorkRate,
    pub retry_after: Duration,
}

impl RateLimited {
    /// The gRPC message: distinct from BUSY, with the limit and when to try again.
    pub fn message(&self, call: &str) -> String {
        // Rounded up to a tenth, so "retry in 0.0 s" never appears and retrying then succeeds.
        let secs = (self.retry_after.as_secs_f64() * 10.0).ceil() / 10.0;
        format!(
            "rate limited: {} work calls per minute (burst {}); {call} not started; retry in {secs:.1} s",
            self.rate.per_minute, self.rate.burst
        )
    }
}

/// The daemon's limiter: shared by every listener of the control API.
#[derive(Debug)]
pub struct WorkLimiter {
    rate: WorkRate,
    bucket: Option<Mutex<TokenBucket>>,
}

impl WorkLimiter {
    pub fn new(rate: WorkRate) -> WorkLimiter {
        WorkLimiter {
            rate,
            bucket: (!rate.is_off()).then(|| Mutex::new(TokenBucket::new(rate, Instant::now()))),
        }
    }

    pub fn off() -> WorkLimiter {
        WorkLimiter::new(WorkRate::OFF)
    }

    pub fn rate(&self) -> WorkRate {
        self.rate
    }

    /// Runs `start` (taking the node lock) only if a token is there, and takes the token only
    /// if `start` succeeded: a call refused as BUSY costs nothing. The outer `Err` is the limit,
    /// the inner result is `start`'s.
    pub fn admit<T, E>(
        &self,
        start: impl FnOnce() -> Result<T, E>,
    ) -> Result<Result<T, E>, RateLimited> {
        let Some(bucket) = &self.bucket else {
            return Ok(start());
        };
        // A panic while holding the lock cannot leave the bucket inconsistent: keep using it.
        let mut b = match bucket.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        let now = Instant::now();
        if let Err(retry_after) = b.ready(now) {
            return Err(RateLimited {
                rate: self.rate,
                retry_after,
            });
        }
        let out = start();
        if out.is_ok() {
            b.take(now);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_minute: f64, burst: u32) -> WorkRate {
        WorkRate { per_minute, burst }
    }

    #[test]
    fn burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(rate(30.0, 3), t0);
        for _ in 0..3 {
            assert_eq!(b.ready(t0), Ok(()));
            b.take(t0);
        }
        // Empty: one token every 2 s at 30 a minute.
        let wait = b.ready(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 2.0).abs() < 1e-9, "{wait:?}");
        let t1 = t0 + Duration::from_millis(1500);
        let wait = b.ready(t1).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(b.ready(t2), Ok(()));
        b.take(t2);
        assert!(b.ready(t2).is_err());
        // A long idle time refills to the burst, not beyond.
        let t3 = t2 + Duration::from_secs(3600);
        assert!((b.tokens(t3) - 3.0).abs() < 1e-9);
        let mut n = 0;
        while b.ready(t3).is_ok() {
            b.take(t3);
            n += 1;
        }
        assert_eq!(n, 3);
    }

    #[test]
    fn over_one_minute_at_most_burst_plus_rate_start() {
        // Calls every 100 ms for 60 s: 10 at once, then one per 2 s.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(rate(30.0, 10), t0);
        let mut started = 0;
        for i in 0..600 {
            let now = t0 + Duration::from_millis(100 * i);
            if b.ready(now).is_ok() {
                b.take(now);
                started += 1;
            }
        }
        // Tokens refilled over 59.9 s: 29.95, so 29 whole ones, plus the burst of 10.
        assert_eq!(started, 39);
    }

    #[test]
    fn limiter_takes_a_token_only_when_the_work_starts() {
        let l = WorkLimiter::new(rate(1.0, 2));
        // Refused by the node lock: no token used, however often.
        for _ in 0..5 {
            let r = l.admit(|| Err::<(), _>("BUSY"));
            assert_eq!(r, Ok(Err("BUSY")));
        }
        assert_eq!(l.admit(|| Ok::<_, ()>(1)), Ok(Ok(1)));
        assert_eq!(l.admit(|| Ok::<_, ()>(2)), Ok(Ok(2)));
        let mut ran = false;
        let refused = l
            .admit(|| {
                ran = true;
                Ok::<_, ()>(3)
            })
            .unwrap_err();
        assert!(!ran, "start must not run over the limit");
        // One token a minute: the next one within 60 s.
        assert!(refused.retry_after <= Duration::from_secs(60));
        assert!(refused.retry_after > Duration::from_secs(59));
        let m = refused.message("preflight");
        assert!(
            m.starts_with(
                "rate limited: 1 work calls per minute (burst 2); preflight not started; retry in "
            ),
            "{m}"
        );
        assert!(m.ends_with(" s"), "{m}");
        assert!(!m.contains("BUSY"), "{m}");
    }

    #[test]
    fn off_never_refuses() {
        for r in [WorkRate::OFF, rate(0.0, 10), rate(5.0, 0)] {
            let l = WorkLimiter::new(r);
            assert!(r.is_off());
            for i in 0..1000 {
                assert_eq!(l.admit(|| Ok::<_, ()>(i)), Ok(Ok(i)));
            }
        }
        assert!(!WorkRate::default().is_off());
    }

    #[test]
    fn retry_after_rounds_up() {
        let r = RateLimited {
            rate: rate(30.0, 10),
            retry_after: Duration::from_millis(1),
        };
        assert!(r.message("bench_ddp").ends_with("retry in 0.1 s"));
        let r = RateLimited {
            rate: rate(30.0, 10),
            retry_after: Duration::from_millis(1999),
        };
        assert!(r.message("bench_ddp").ends_with("retry in 2.0 s"));
    }
}
