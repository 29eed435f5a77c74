//! The AP's queue discipline per station: a drop-tail FIFO (the default), or CoDel (RFC 8289)
//! in front of the same limit — what a current Linux AP runs (mac80211's per-TID fq_codel).
//!
//! CoDel looks at each packet as it leaves the queue for an A-MPDU: once packets have waited
//! longer than `target` for a whole `interval`, it drops one, then the next ones at
//! `interval / √count`, until a packet leaves within `target` again. It never drops when at
//! most one packet would remain (RFC 8289's "one MTU in the queue"), so a queue it serves is
//! never emptied by it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Ts;

/// The AP's queue discipline per station.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Aqm {
    /// Drop-tail FIFO of `queue_limit` packets.
    #[default]
    Fifo,
    /// CoDel with these parameters, in front of the same limit.
    Codel {
        /// Acceptable standing delay (µs; RFC 8289: 5 ms).
        target_us: u32,
        /// Window over which the delay must stay above the target before a drop (µs; 100 ms).
        interval_us: u32,
    },
}

impl Aqm {
    /// CoDel with RFC 8289's parameters (5 ms, 100 ms).
    pub fn codel() -> Aqm {
        Aqm::Codel {
            target_us: 5_000,
            interval_us: 100_000,
        }
    }

    /// The default (left out of written configurations, which stay as they were).
    pub fn is_fifo(&self) -> bool {
        *self == Aqm::Fifo
    }
}

/// One station's CoDel state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Codel {
    first_above: Option<Ts>,
    dropping: bool,
    drop_next: Ts,
    count: u32,
    last_count: u32,
}

impl Codel {
    /// Whether the packet leaving at `now` after waiting `sojourn`, with `remaining` packets
    /// behind it, is dropped.
    pub(crate) fn drop(
        &mut self,
        now: Ts,
        sojourn: Duration,
        remaining: usize,
        target: Duration,
        interval: Duration,
    ) -> bool {
        let ok_to_drop = if sojourn < target || remaining <= 1 {
            self.first_above = None;
            false
        } else {
            match self.first_above {
                None => {
                    self.first_above = Some(now + interval);
                    false
                }
                Some(t) => now >= t,
            }
        };
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
                return false;
            }
            if now >= self.drop_next {
                self.count = self.count.saturating_add(1);
                self.drop_next = control_law(self.drop_next, self.count, interval);
                return true;
            }
            return false;
        }
        if !ok_to_drop {
            return false;
        }
        self.dropping = true;
        // Dropping again soon after the last episode: resume near its drop rate.
        let delta = self.count.saturating_sub(self.last_count);
        self.count = if delta > 1 && now.saturating_since(self.drop_next) < interval * 16 {
            delta
        } else {
            1
        };
        self.drop_next = control_law(now, self.count, interval);
        self.last_count = self.count;
        true
    }
}

/// The next drop time: `interval / √count` after `t`.
fn control_law(t: Ts, count: u32, interval: Duration) -> Ts {
    t + interval.div_f64((count.max(1) as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: Duration = Duration::from_millis(5);
    const INTERVAL: Duration = Duration::from_millis(100);

    #[test]
    fn drops_after_an_interval_above_target_then_faster_and_stops_below_it() {
        let mut c = Codel::default();
        let ms = Ts::from_millis;
        // Above target, but not yet for a whole interval.
        assert!(!c.drop(ms(0), Duration::from_millis(20), 50, TARGET, INTERVAL));
        assert!(!c.drop(ms(99), Duration::from_millis(20), 50, TARGET, INTERVAL));
        // An interval later: the first drop; the next an interval later, then interval/√2.
        assert!(c.drop(ms(100), Duration::from_millis(20), 50, TARGET, INTERVAL));
        assert!(!c.drop(ms(199), Duration::from_millis(20), 50, TARGET, INTERVAL));
        assert!(c.drop(ms(200), Duration::from_millis(20), 50, TARGET, INTERVAL));
        assert!(!c.drop(ms(270), Duration::from_millis(20), 50, TARGET, INTERVAL));
        assert!(c.drop(ms(271), Duration::from_millis(20), 50, TARGET, INTERVAL));
        assert_eq!(c.count, 3);
        // Never the packet before the last.
        assert!(!c.drop(ms(400), Duration::from_millis(20), 1, TARGET, INTERVAL));
        // Below target: the episode ends.
        assert!(!c.drop(ms(401), Duration::from_millis(1), 50, TARGET, INTERVAL));
        assert!(!c.dropping);
    }

    #[test]
    fn the_default_is_the_fifo_and_codel_reads_from_toml() {
        assert!(Aqm::default().is_fifo());
        #[derive(Deserialize)]
        struct W {
            aqm: Aqm,
        }
        let w: W = toml::from_str("aqm = { kind = \"codel\", target_us = 5000, interval_us = 100000 }").unwrap();
        assert_eq!(w.aqm, Aqm::codel());
        assert!(toml::from_str::<W>("aqm = { kind = \"red\" }").is_err());
    }
}
