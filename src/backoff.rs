//! Exponential reconnect backoff with jitter that only lengthens.
//!
//! Delay before attempt `n + 1` after `n` failures (n ≥ 1):
//! `min(cap, initial × factor^(n-1)) × j`, with `j` drawn uniformly from
//! `[1, 1.25)` and the product capped again at `cap × 1.25`. The un-jittered
//! part never decreases, and the jitter never shortens a delay, so boxes
//! restarted together spread out and no upstream is tried more often than
//! the schedule allows.

use crate::limits;
use std::time::Duration;

/// Why a backoff policy was refused (config validation names the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
    /// `initial` must be > 0.
    #[error("initial delay must be greater than zero")]
    ZeroInitial,
    /// `cap` must be ≥ `initial`.
    #[error("cap ({cap:?}) must not be shorter than the initial delay ({initial:?})")]
    CapBelowInitial {
        /// The initial delay.
        initial: Duration,
        /// The cap.
        cap: Duration,
    },
    /// `factor` must be within [`limits::MIN_BACKOFF_FACTOR`] ..=
    /// [`limits::MAX_BACKOFF_FACTOR`] (1.0 ..= 10.0).
    #[error("factor {0} must be within 1.0 ..= 10.0")]
    Factor(String),
}

/// A validated backoff policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial: Duration,
    factor: f64,
    cap: Duration,
}

/// Largest jitter multiplier (exclusive).
pub const JITTER_MAX: f64 = 1.25;

impl Backoff {
    /// Validates `initial > 0`, `1 ≤ factor ≤ 10`, `cap ≥ initial`.
    pub fn new(initial: Duration, factor: f64, cap: Duration) -> Result<Backoff, BackoffError> {
        if initial.is_zero() {
            return Err(BackoffError::ZeroInitial);
        }
        if !(limits::MIN_BACKOFF_FACTOR..=limits::MAX_BACKOFF_FACTOR).contains(&factor) {
            return Err(BackoffError::Factor(factor.to_string()));
        }
        if cap < initial {
            return Err(BackoffError::CapBelowInitial { initial, cap });
        }
        Ok(Backoff {
            initial,
            factor,
            cap,
        })
    }

    /// The cap.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The un-jittered delay after `failures` consecutive failures (≥ 1):
    /// `min(cap, initial × factor^(failures-1))`; zero for 0 failures.
    pub fn base_delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let exp = (failures - 1).min(64) as i32;
        let secs = self.initial.as_secs_f64() * self.factor.powi(exp);
        if !secs.is_finite() || secs >= self.cap.as_secs_f64() {
            self.cap
        } else {
            Duration::from_secs_f64(secs)
        }
    }

    /// The delay to wait: [`Backoff::base_delay`] × a factor from `unit`
    /// mapped to `[1, 1.25)` (`unit` in `[0, 1)`, e.g. from [`jitter_unit`]).
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let j = 1.0 + (JITTER_MAX - 1.0) * unit.clamp(0.0, 0.999_999);
        self.base_delay(failures).mul_f64(j)
    }
}

/// A uniform number in `[0, 1)` from the OS CSPRNG (0.5 if it fails).
pub fn jitter_unit() -> f64 {
    let mut b = [0u8; 8];
    match getrandom::fill(&mut b) {
        Ok(()) => (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn validates() {
        assert_eq!(
            Backoff::new(s(0), 2.0, s(1)),
            Err(BackoffError::ZeroInitial)
        );
        assert!(matches!(
            Backoff::new(s(2), 2.0, s(1)),
            Err(BackoffError::CapBelowInitial { .. })
        ));
        assert!(matches!(
            Backoff::new(s(1), 0.5, s(1)),
            Err(BackoffError::Factor(_))
        ));
        assert!(Backoff::new(s(1), 2.0, s(1800)).is_ok());
    }

    #[test]
    fn schedule_doubles_to_the_cap_and_never_decreases() {
        let b = Backoff::new(s(1), 2.0, s(1800)).unwrap();
        let d: Vec<u64> = (1..=14).map(|n| b.base_delay(n).as_secs()).collect();
        assert_eq!(
            d,
            vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1800, 1800, 1800]
        );
        assert_eq!(b.base_delay(u32::MAX), s(1800));
    }

    #[test]
    fn jitter_only_lengthens() {
        let b = Backoff::new(s(10), 2.0, s(100)).unwrap();
        for u in [0.0, 0.3, 0.999, 1.0] {
            let d = b.delay(1, u);
            assert!(d >= s(10) && d < Duration::from_millis(12_500), "{d:?}");
        }
        for _ in 0..1000 {
            let u = jitter_unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
