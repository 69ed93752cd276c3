//! The one source of time. Every reading of the wall clock goes through [`now`] (and
//! [`now_ms`], [`now_secs`] made from it); leases held in the process run on
//! [`mono_ms`], the monotonic clock, which a step of the wall clock does not move;
//! signed timestamps are checked against a [`Clock`], which tests can fix.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The wall clock now.
pub fn now() -> SystemTime {
    SystemTime::now()
}

/// Unix milliseconds now (0 before 1970).
pub fn now_ms() -> u64 {
    now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Unix seconds now (0 before 1970).
pub fn now_secs() -> u64 {
    now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Milliseconds on the process's monotonic clock (since its first reading): what
/// leases held in the process (the disk store's index and claims) run on.
pub fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Where the gateway reads the time from when it checks signed timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The system clock.
    System,
    /// A fixed instant in unix seconds (tests verifying captured deliveries).
    Fixed(u64),
}

impl Clock {
    /// Unix seconds now.
    pub fn now(self) -> u64 {
        match self {
            Self::System => now_secs(),
            Self::Fixed(t) => t,
        }
    }
}
