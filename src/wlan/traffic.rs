//! Traffic in front of the AP: arrival processes per flow (CBR, Poisson, on/off, trace) and a
//! FIFO backhaul link with its own rate and queue. Pure and seeded: same seed, same arrivals.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::config::{bad, ConfigError};
use crate::time::Ts;

/// Arrival process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Arrival {
    /// Constant bit rate.
    Cbr,
    /// Poisson packet arrivals.
    Poisson,
    /// CBR during exponentially distributed on periods, silent during off periods.
    OnOff {
        /// Mean on period (ms).
        on_ms: f64,
        /// Mean off period (ms).
        off_ms: f64,
    },
    /// Send times from a list (seconds from the start), e.g. a recorded trace.
    Trace {
        /// Send times in seconds, ascending.
        times_s: Vec<f64>,
    },
}

/// One flow from the server to a station.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlowConfig {
    /// Destination station.
    pub sta: u16,
    /// Arrival process.
    pub arrival: Arrival,
    /// Mean offered rate (IP bytes, Mb/s); ignored by traces.
    pub rate_mbps: f64,
    /// IP packet length.
    pub ip_len: u16,
    /// Start time (s).
    pub start_s: f64,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            sta: 0,
            arrival: Arrival::Cbr,
            rate_mbps: 100.0,
            ip_len: 1500,
            start_s: 0.0,
        }
    }
}

impl FlowConfig {
    /// Check ranges (`i` names the flow in errors).
    pub fn check(&self, i: usize, stations: usize) -> Result<(), ConfigError> {
        let f = |x: &str| format!("flows[{i}].{x}");
        if self.sta as usize >= stations {
            return Err(bad(
                f("sta"),
                self.sta,
                format!("0..={} (a configured station)", stations.saturating_sub(1)),
            ));
        }
        let is_trace = matches!(self.arrival, Arrival::Trace { .. });
        let rate_ok = self.rate_mbps > 0.0 && self.rate_mbps <= 100_000.0;
        if !is_trace && !rate_ok {
            return Err(bad(f("rate_mbps"), self.rate_mbps, "> 0 and <= 100000"));
        }
        if !(40..=7900).contains(&self.ip_len) {
            return Err(bad(f("ip_len"), self.ip_len, "40..=7900 bytes"));
        }
        if !(self.start_s >= 0.0 && self.start_s.is_finite()) {
            return Err(bad(f("start_s"), self.start_s, ">= 0"));
        }
        if let Arrival::OnOff { on_ms, off_ms } = self.arrival {
            if !(on_ms > 0.0 && off_ms >= 0.0 && on_ms.is_finite() && off_ms.is_finite()) {
                return Err(bad(
                    f("arrival"),
                    format!("on_ms {on_ms}, off_ms {off_ms}"),
                    "on_ms > 0, off_ms >= 0",
                ));
            }
        }
        if let Arrival::Trace { times_s } = &self.arrival {
            if times_s.windows(2).any(|w| w[1] < w[0]) || times_s.iter().any(|t| !(t.is_finite() && *t >= 0.0)) {
                return Err(bad(f("arrival.times_s"), "…", "ascending times >= 0"));
            }
        }
        Ok(())
    }
}

/// A flow's arrival generator.
#[derive(Clone, Debug)]
pub struct Source {
    cfg: FlowConfig,
    next: Option<Ts>,
    gap_ns: f64,
    on_until: Ts,
    idx: usize,
    /// Next application sequence number.
    pub seq: u32,
}

use super::exp_sample as exp;

impl Source {
    /// A generator for a checked flow.
    pub fn new<R: Rng>(cfg: FlowConfig, rng: &mut R) -> Source {
        let gap_ns = cfg.ip_len as f64 * 8.0 / (cfg.rate_mbps * 1e6) * 1e9;
        let start = Ts((cfg.start_s * 1e9) as u64);
        let mut s = Source {
            next: None,
            gap_ns,
            on_until: start,
            idx: 0,
            seq: 0,
            cfg,
        };
        s.next = match &s.cfg.arrival {
            Arrival::Trace { times_s } => times_s.first().map(|t| Ts((t * 1e9) as u64)),
            Arrival::OnOff { on_ms, .. } => {
                s.on_until = start + Duration::from_nanos((exp(rng, *on_ms) * 1e6) as u64);
                Some(start)
            }
            _ => Some(start),
        };
        s
    }

    /// Time of the next arrival.
    pub fn peek(&self) -> Option<Ts> {
        self.next
    }

    /// Destination station.
    pub fn sta(&self) -> u16 {
        self.cfg.sta
    }

    /// IP length.
    pub fn ip_len(&self) -> u16 {
        self.cfg.ip_len
    }

    /// Take the next arrival and schedule the one after it.
    pub fn pop<R: Rng>(&mut self, rng: &mut R) -> Option<(Ts, u32)> {
        let t = self.next?;
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.next = match &self.cfg.arrival {
            Arrival::Cbr => Some(Ts((t.as_nanos() as f64 + self.gap_ns) as u64).max(t)),
            Arrival::Poisson => Some(t + Duration::from_nanos(exp(rng, self.gap_ns) as u64)),
            Arrival::OnOff { on_ms, off_ms } => {
                let mut n = Ts((t.as_nanos() as f64 + self.gap_ns) as u64);
                if n > self.on_until {
                    let off = Duration::from_nanos((exp(rng, *off_ms) * 1e6) as u64);
                    n = self.on_until + off;
                    self.on_until = n + Duration::from_nanos((exp(rng, *on_ms) * 1e6) as u64);
                }
                Some(n)
            }
            Arrival::Trace { times_s } => {
                self.idx += 1;
                times_s.get(self.idx).map(|t| Ts((t * 1e9) as u64))
            }
        };
        Some((t, seq))
    }
}

/// Backhaul link settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackhaulConfig {
    /// Link rate (Mb/s, IP bytes).
    pub rate_mbps: f64,
    /// Queue limit (packets, drop-tail).
    pub queue: usize,
    /// One-way propagation delay (µs).
    pub delay_us: u64,
}

impl Default for BackhaulConfig {
    fn default() -> Self {
        BackhaulConfig {
            rate_mbps: 10_000.0,
            queue: 10_000,
            delay_us: 0,
        }
    }
}

impl BackhaulConfig {
    /// Check ranges.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(self.rate_mbps > 0.0 && self.rate_mbps <= 1_000_000.0) {
            return Err(bad("backhaul.rate_mbps", self.rate_mbps, "> 0 and <= 1000000"));
        }
        if self.queue == 0 {
            return Err(bad("backhaul.queue", self.queue, "at least 1 packet"));
        }
        Ok(())
    }
}

/// A FIFO link: packets leave in arrival order at the link rate.
#[derive(Clone, Debug)]
pub struct Backhaul {
    ns_per_byte: f64,
    queue: usize,
    delay: Duration,
    in_link: VecDeque<Ts>,
    last_departure: Ts,
    /// Packets dropped at the full queue.
    pub dropped: u64,
}

impl Backhaul {
    /// From checked settings.
    pub fn new(c: &BackhaulConfig) -> Backhaul {
        Backhaul {
            ns_per_byte: 8e3 / c.rate_mbps,
            queue: c.queue,
            delay: Duration::from_micros(c.delay_us),
            in_link: VecDeque::new(),
            last_departure: Ts::ZERO,
            dropped: 0,
        }
    }

    /// From now on the link sends at `mbps` (packets already queued keep their departure times).
    pub fn set_rate(&mut self, mbps: f64) {
        if mbps > 0.0 && mbps.is_finite() {
            self.ns_per_byte = 8e3 / mbps;
        }
    }

    /// A packet of `len` bytes arrives at `t`: its arrival time at the AP, or `None` if dropped.
    pub fn push(&mut self, t: Ts, len: u16) -> Option<Ts> {
        while self.in_link.front().is_some_and(|&d| d <= t) {
            self.in_link.pop_front();
        }
        if self.in_link.len() >= self.queue {
            self.dropped += 1;
            return None;
        }
        let start = t.max(self.last_departure);
        let done = start + Duration::from_nanos((len as f64 * self.ns_per_byte) as u64);
        self.last_departure = done;
        self.in_link.push_back(done);
        Some(done + self.delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn cbr_and_poisson_rates() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for arrival in [
            Arrival::Cbr,
            Arrival::Poisson,
            Arrival::OnOff {
                on_ms: 5.0,
                off_ms: 5.0,
            },
        ] {
            let cfg = FlowConfig {
                arrival: arrival.clone(),
                rate_mbps: 120.0,
                ..FlowConfig::default()
            };
            let mut s = Source::new(cfg, &mut rng);
            let mut n = 0u64;
            while s.peek().is_some_and(|t| t < Ts::from_millis(1000)) {
                s.pop(&mut rng);
                n += 1;
            }
            let mbps = n as f64 * 1500.0 * 8.0 / 1e6;
            let expect = if matches!(arrival, Arrival::OnOff { .. }) {
                60.0
            } else {
                120.0
            };
            assert!((mbps - expect).abs() / expect < 0.1, "{arrival:?}: {mbps} Mb/s");
        }
    }

    #[test]
    fn trace_arrivals_follow_the_list() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let cfg = FlowConfig {
            arrival: Arrival::Trace {
                times_s: vec![0.5, 0.25e-3 + 0.5, 1.0],
            },
            ..FlowConfig::default()
        };
        assert!(cfg.check(0, 1).is_ok());
        let mut s = Source::new(cfg, &mut rng);
        let got: Vec<(Ts, u32)> = std::iter::from_fn(|| s.pop(&mut rng)).collect();
        assert_eq!(
            got,
            vec![
                (Ts::from_millis(500), 0),
                (Ts::from_micros(500_250), 1),
                (Ts::from_millis(1000), 2)
            ]
        );
        let bad = FlowConfig {
            arrival: Arrival::Trace {
                times_s: vec![1.0, 0.5],
            },
            ..FlowConfig::default()
        };
        assert!(bad.check(0, 1).unwrap_err().to_string().contains("ascending"));
    }

    #[test]
    fn backhaul_paces_and_drops() {
        let mut b = Backhaul::new(&BackhaulConfig {
            rate_mbps: 12.0,
            queue: 2,
            delay_us: 0,
        });
        // 1500 B at 12 Mb/s = 1 ms each.
        assert_eq!(b.push(Ts(0), 1500), Some(Ts::from_millis(1)));
        assert_eq!(b.push(Ts(0), 1500), Some(Ts::from_millis(2)));
        assert_eq!(b.push(Ts(0), 1500), None);
        assert_eq!(b.push(Ts::from_millis(1), 1500), Some(Ts::from_millis(3)));
        assert_eq!(b.dropped, 1);
    }
}
