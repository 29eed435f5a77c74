//! Time vocabulary: host timestamps ([`Ts`]) and radio TSF timestamps ([`Tsft`]).
//!
//! * [`Ts`] — nanoseconds since an arbitrary epoch of **one** host clock (kernel receive time,
//!   pcap record time, the emulator's virtual clock). Spans between two `Ts` are
//!   [`std::time::Duration`]s.
//! * [`Tsft`] — the 802.11 timing synchronisation function of one radio, in microseconds. All MPDUs
//!   of one A-MPDU share it on most drivers.
//!
//! They are different clocks and deliberately different types: subtracting a `Tsft` from a `Ts`
//! does not compile. Nothing here reads the real clock.

use std::time::Duration;

/// A host timestamp: integer nanoseconds since an arbitrary epoch of one clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Ts(pub u64);

impl Ts {
    /// The epoch of the clock.
    pub const ZERO: Ts = Ts(0);

    /// From nanoseconds.
    pub const fn from_nanos(ns: u64) -> Ts {
        Ts(ns)
    }
    /// From microseconds.
    pub const fn from_micros(us: u64) -> Ts {
        Ts(us * 1_000)
    }
    /// From milliseconds.
    pub const fn from_millis(ms: u64) -> Ts {
        Ts(ms * 1_000_000)
    }
    /// From a [`Duration`] since the epoch (saturating at `u64::MAX` ns, ~584 years).
    pub fn from_duration(d: Duration) -> Ts {
        Ts(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Seconds since the epoch, as f64 (for display and plots only).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
    /// `self - earlier`, or zero when `earlier` is later (time never runs backwards here).
    pub fn saturating_since(self, earlier: Ts) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// `self - d`, saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Ts {
        Ts(self.0.saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }
    /// `self + d`, saturating.
    pub fn saturating_add(self, d: Duration) -> Ts {
        Ts(self.0.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }
}

impl std::ops::Add<Duration> for Ts {
    type Output = Ts;
    fn add(self, d: Duration) -> Ts {
        self.saturating_add(d)
    }
}

impl std::fmt::Display for Ts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:09}s", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

/// A radio TSF timestamp in microseconds (radiotap field 0, "TSFT").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Tsft(pub u64);

impl Tsft {
    /// Microseconds of the radio's TSF.
    pub const fn as_micros(self) -> u64 {
        self.0
    }
    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Tsft) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_and_saturation() {
        let a = Ts::from_micros(250);
        let b = Ts::from_millis(1);
        assert_eq!(a.as_nanos(), 250_000);
        assert_eq!(b.saturating_since(a), Duration::from_micros(750));
        assert_eq!(a.saturating_since(b), Duration::ZERO);
        assert_eq!(a + Duration::from_micros(750), b);
        assert_eq!(Ts(u64::MAX - 1).saturating_add(Duration::from_secs(1)), Ts(u64::MAX));
        assert_eq!(format!("{}", Ts::from_millis(1500)), "1.500000000s");
        assert_eq!(Tsft(10).saturating_since(Tsft(4)), Duration::from_micros(6));
    }
}
