//! An impairment layer between a sender and a receiver, sans-IO: what a path does to datagrams —
//! random loss, bursts of loss (Gilbert–Elliott), reordering, duplication, a fixed delay with
//! jitter, and a rate limit with a bounded queue — on any clock (the virtual clock of `sim` and
//! the property tests, or the host's in a live relay). Seeded: the same seed and the same
//! offered datagrams give the same deliveries.
//!
//! Offer a datagram with [`Impairment::push`] at the time it leaves the sender; take what has
//! arrived with [`Impairment::poll`]; [`Impairment::next_due`] says when the next one arrives.
//!
//! Per datagram, in order: the rate limit (a FIFO that serialises at `rate_bps` and holds at
//! most `queue_bytes`: beyond, a tail drop), then loss (the Gilbert–Elliott state steps once per
//! datagram; without bursts, `loss` alone), then the delay: `delay` plus a uniform draw in
//! `[0, jitter]` (jitter reorders datagrams closer together than it, as netem's does), plus
//! `reorder_delay` for the `reorder` share held back (later ones overtake it). A duplicate
//! (`duplicate` share) is a second copy with its own jitter. At most [`MAX_IN_FLIGHT`] datagrams
//! and [`MAX_IN_FLIGHT_BYTES`] bytes are held: beyond, the newest is dropped and counted — the
//! layer never grows without bound. The counters always add up: `offered + duplicated = lost +
//! queue_drops + overflow + delivered + held`.
//!
//! ```
//! use std::time::Duration;
//! use aggrate::impair::{ImpairConfig, Impairment};
//! use aggrate::Ts;
//!
//! let cfg = ImpairConfig { delay: Duration::from_millis(100), seed: 7, ..ImpairConfig::default() };
//! let mut path = Impairment::new(cfg).unwrap();
//! path.push(Ts::ZERO, 1000, "hello");
//! assert_eq!(path.poll(Ts::from_millis(99)), None);
//! assert_eq!(path.next_due(), Some(Ts::from_millis(100)));
//! assert_eq!(path.poll(Ts::from_millis(100)), Some("hello"));
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::Ts;

/// Datagrams an [`Impairment`] holds at most (delayed, queued or held back).
pub const MAX_IN_FLIGHT: usize = 1 << 16;
/// Bytes (the `len` given to [`Impairment::push`]) an [`Impairment`] holds at most.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;
/// Largest rate-limit queue (bytes).
pub const MAX_QUEUE_BYTES: usize = 1 << 30;

/// Bursts of loss: a two-state Markov chain stepped once per datagram (Gilbert–Elliott). In the
/// good state a datagram is lost with `loss_good`, in the bad state with `loss_bad`. Mean burst
/// (bad-state) length `1 / to_good` datagrams; the long-run loss is
/// `(to_good·loss_good + to_bad·loss_bad) / (to_good + to_bad)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GilbertElliott {
    /// P(good → bad) per datagram.
    pub to_bad: f64,
    /// P(bad → good) per datagram.
    pub to_good: f64,
    /// Loss in the good state.
    pub loss_good: f64,
    /// Loss in the bad state.
    pub loss_bad: f64,
}

impl GilbertElliott {
    /// The long-run loss rate.
    pub fn mean_loss(&self) -> f64 {
        let s = self.to_good + self.to_bad;
        if s > 0.0 {
            (self.to_good * self.loss_good + self.to_bad * self.loss_bad) / s
        } else {
            self.loss_good
        }
    }
}

/// What the path does (see the module docs). The default does nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImpairConfig {
    /// Random loss per datagram (0..1); ignored when `burst` is set.
    pub loss: f64,
    /// Bursts of loss instead of `loss`.
    pub burst: Option<GilbertElliott>,
    /// Share of datagrams held back by `reorder_delay` (0..1).
    pub reorder: f64,
    /// How long a reordered datagram is held back.
    #[serde(with = "duration_ms")]
    pub reorder_delay: Duration,
    /// Share of datagrams delivered twice (0..1).
    pub duplicate: f64,
    /// One-way delay.
    #[serde(with = "duration_ms")]
    pub delay: Duration,
    /// Extra delay, uniform in [0, jitter).
    #[serde(with = "duration_ms")]
    pub jitter: Duration,
    /// Rate limit in bit/s (None: none).
    pub rate_bps: Option<f64>,
    /// The rate limit's queue in bytes (tail drop beyond; 1 ..= [`MAX_QUEUE_BYTES`]; no effect
    /// without `rate_bps`).
    pub queue_bytes: usize,
    /// Seed of every draw.
    pub seed: u64,
}

impl Default for ImpairConfig {
    fn default() -> Self {
        ImpairConfig {
            loss: 0.0,
            burst: None,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(10),
            duplicate: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            queue_bytes: 1 << 20,
            seed: 0,
        }
    }
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Duration::try_from_secs_f64(ms / 1e3).map_err(serde::de::Error::custom)
    }
}

/// A field of an [`ImpairConfig`] out of range.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("impairment: {field} = {value}: {allowed}")]
pub struct ImpairError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: f64,
    /// What is allowed.
    pub allowed: &'static str,
}

impl ImpairConfig {
    /// Check ranges.
    pub fn check(self) -> Result<ImpairConfig, ImpairError> {
        let prob = |field, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(ImpairError {
                    field,
                    value: v,
                    allowed: "a probability in [0, 1]",
                })
            }
        };
        prob("loss", self.loss)?;
        prob("reorder", self.reorder)?;
        prob("duplicate", self.duplicate)?;
        if let Some(b) = &self.burst {
            prob("burst.to_bad", b.to_bad)?;
            prob("burst.to_good", b.to_good)?;
            prob("burst.loss_good", b.loss_good)?;
            prob("burst.loss_bad", b.loss_bad)?;
        }
        if !(1..=MAX_QUEUE_BYTES).contains(&self.queue_bytes) {
            return Err(ImpairError {
                field: "queue_bytes",
                value: self.queue_bytes as f64,
                allowed: "1 ..= 2^30 bytes",
            });
        }
        if let Some(r) = self.rate_bps {
            if !(r.is_finite() && r >= 1.0) {
                return Err(ImpairError {
                    field: "rate_bps",
                    value: r,
                    allowed: "finite, >= 1 bit/s",
                });
            }
        }
        for (field, d) in [
            ("delay", self.delay),
            ("jitter", self.jitter),
            ("reorder_delay", self.reorder_delay),
        ] {
            if d > Duration::from_secs(60) {
                return Err(ImpairError {
                    field,
                    value: d.as_secs_f64(),
                    allowed: "at most 60 s",
                });
            }
        }
        Ok(self)
    }
}

/// What an [`Impairment`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImpairStats {
    /// Datagrams offered.
    pub offered: u64,
    /// Lost at random or in a burst.
    pub lost: u64,
    /// Dropped at the rate limit's full queue.
    pub queue_drops: u64,
    /// Dropped because [`MAX_IN_FLIGHT`] were held.
    pub overflow: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Held back by the reorder delay.
    pub held_back: u64,
    /// Delivered (copies included).
    pub delivered: u64,
}

/// The path (see the module docs).
#[derive(Debug)]
pub struct Impairment<T> {
    cfg: ImpairConfig,
    rng: ChaCha8Rng,
    bad: bool,
    /// When the rate limit's link is next free.
    link_free: Ts,
    /// (arrival, order of entry, datagram): the earliest first, ties in the order offered.
    heap: BinaryHeap<Reverse<(Ts, u64, Held<T>)>>,
    entered: u64,
    held_bytes: usize,
    /// The latest `now` offered (time never goes back for the rate limit).
    last_now: Ts,
    stats: ImpairStats,
}

/// A held datagram and its length, ordered by nothing (the heap orders by time and entry).
#[derive(Debug)]
struct Held<T>(T, usize);

impl<T> PartialEq for Held<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Held<T> {}
impl<T> PartialOrd for Held<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Held<T> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<T: Clone> Impairment<T> {
    /// A path with these settings (checked).
    pub fn new(cfg: ImpairConfig) -> Result<Impairment<T>, ImpairError> {
        let cfg = cfg.check()?;
        Ok(Impairment {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            bad: false,
            link_free: Ts::ZERO,
            heap: BinaryHeap::new(),
            entered: 0,
            held_bytes: 0,
            last_now: Ts::ZERO,
            stats: ImpairStats::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &ImpairConfig {
        &self.cfg
    }

    /// What it did so far.
    pub fn stats(&self) -> ImpairStats {
        self.stats
    }

    /// Datagrams held now.
    pub fn in_flight(&self) -> usize {
        self.heap.len()
    }

    /// Offer a datagram of `len` bytes that leaves the sender at `now` (an earlier `now` than
    /// one offered before is taken as that one: time does not go back).
    pub fn push(&mut self, now: Ts, len: usize, item: T) {
        self.stats.offered += 1;
        let now = self.last_now.max(now);
        self.last_now = now;
        // The rate limit: serialised after what is queued; the queue holds what has not left.
        let mut at = now;
        if let Some(rate) = self.cfg.rate_bps {
            let start = self.link_free.max(now);
            let backlog_bytes = start.saturating_since(now).as_secs_f64() * rate / 8.0;
            if backlog_bytes + len as f64 > self.cfg.queue_bytes as f64 {
                self.stats.queue_drops += 1;
                return;
            }
            let done = start + Duration::try_from_secs_f64(len as f64 * 8.0 / rate).unwrap_or(Duration::MAX);
            self.link_free = done;
            at = done;
        }
        if self.lost() {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.draw(self.cfg.duplicate) { 2 } else { 1 };
        self.stats.duplicated += copies - 1;
        let mut item = Some(item);
        for copy in 0..copies {
            let mut arrive = at + self.cfg.delay;
            if !self.cfg.jitter.is_zero() {
                let j = self.rng.random::<f64>() * self.cfg.jitter.as_secs_f64();
                arrive = arrive + Duration::from_secs_f64(j);
            }
            let held_back = self.draw(self.cfg.reorder);
            if held_back {
                arrive = arrive + self.cfg.reorder_delay;
            }
            if self.heap.len() >= MAX_IN_FLIGHT || self.held_bytes + len > MAX_IN_FLIGHT_BYTES {
                self.stats.overflow += 1;
                continue;
            }
            self.stats.held_back += held_back as u64;
            // The last copy takes the datagram itself, the first of two a clone.
            let d = if copy + 1 == copies { item.take() } else { item.clone() };
            if let Some(d) = d {
                self.entered += 1;
                self.held_bytes += len;
                self.heap.push(Reverse((arrive, self.entered, Held(d, len))));
            }
        }
    }

    /// The next datagram that has arrived by `now` (call until None).
    pub fn poll(&mut self, now: Ts) -> Option<T> {
        match self.heap.peek() {
            Some(Reverse((at, _, _))) if *at <= now => {
                self.stats.delivered += 1;
                self.heap.pop().map(|Reverse((_, _, Held(t, len)))| {
                    self.held_bytes -= len;
                    t
                })
            }
            _ => None,
        }
    }

    /// When the next held datagram arrives.
    pub fn next_due(&self) -> Option<Ts> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    fn draw(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random::<f64>() < p
    }

    /// Whether this datagram is lost (stepping the burst state first).
    fn lost(&mut self) -> bool {
        match self.cfg.burst {
            Some(b) => {
                let flip = if self.bad { b.to_good } else { b.to_bad };
                if self.draw(flip) {
                    self.bad = !self.bad;
                }
                self.draw(if self.bad { b.loss_bad } else { b.loss_good })
            }
            None => self.draw(self.cfg.loss),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: ImpairConfig, n: u64, gap: Duration) -> (Vec<(Ts, u64)>, ImpairStats) {
        let mut p = Impairment::new(cfg).unwrap();
        let mut out = Vec::new();
        let mut now = Ts::ZERO;
        for i in 0..n {
            p.push(now, 1000, i);
            while let Some(x) = p.poll(now) {
                out.push((now, x));
            }
            now = now + gap;
        }
        while let Some(t) = p.next_due() {
            while let Some(x) = p.poll(t) {
                out.push((t, x));
            }
        }
        (out, p.stats())
    }

    #[test]
    fn nothing_configured_delivers_everything_in_order_at_once() {
        let (out, s) = run(ImpairConfig::default(), 1000, Duration::from_micros(100));
        assert_eq!(out.len(), 1000);
        assert!(out.iter().enumerate().all(|(i, (_, x))| *x == i as u64));
        assert_eq!((s.offered, s.delivered, s.lost), (1000, 1000, 0));
    }

    #[test]
    fn random_loss_is_near_its_rate_and_the_seed_repeats_it() {
        let cfg = ImpairConfig {
            loss: 0.05,
            seed: 3,
            ..ImpairConfig::default()
        };
        let (a, s) = run(cfg.clone(), 20_000, Duration::from_micros(50));
        let rate = s.lost as f64 / s.offered as f64;
        // Binomial(20000, 0.05): σ ≈ 0.0015.
        assert!((rate - 0.05).abs() < 0.006, "{rate}");
        assert_eq!(a.len() as u64, s.offered - s.lost);
        let (b, _) = run(cfg.clone(), 20_000, Duration::from_micros(50));
        assert_eq!(a, b, "same seed, same path");
        let (c, _) = run(ImpairConfig { seed: 4, ..cfg }, 20_000, Duration::from_micros(50));
        assert_ne!(a, c, "another seed, another path");
    }

    #[test]
    fn gilbert_elliott_loses_in_bursts_of_the_stated_length() {
        let ge = GilbertElliott {
            to_bad: 0.01,
            to_good: 0.25,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        let cfg = ImpairConfig {
            burst: Some(ge),
            seed: 11,
            ..ImpairConfig::default()
        };
        let n = 200_000;
        let (out, s) = run(cfg, n, Duration::from_micros(10));
        let rate = s.lost as f64 / n as f64;
        assert!((rate - ge.mean_loss()).abs() < 0.01, "{rate} vs {}", ge.mean_loss());
        // Runs of consecutive losses: mean 1 / to_good = 4.
        let got: std::collections::HashSet<u64> = out.iter().map(|(_, x)| *x).collect();
        let (mut runs, mut lost_in_runs, mut cur) = (0u64, 0u64, 0u64);
        for i in 0..n {
            if got.contains(&i) {
                if cur > 0 {
                    runs += 1;
                    lost_in_runs += cur;
                }
                cur = 0;
            } else {
                cur += 1;
            }
        }
        let mean_run = lost_in_runs as f64 / runs as f64;
        assert!((mean_run - 4.0).abs() < 0.4, "{mean_run}");
    }

    #[test]
    fn delay_jitter_and_reordering_shape_the_arrivals() {
        let cfg = ImpairConfig {
            delay: Duration::from_millis(100),
            jitter: Duration::from_millis(2),
            reorder: 0.02,
            reorder_delay: Duration::from_millis(20),
            seed: 5,
            ..ImpairConfig::default()
        };
        let gap = Duration::from_millis(1);
        let (out, s) = run(cfg, 5000, gap);
        assert_eq!(out.len(), 5000);
        let late = |(t, x): &(Ts, u64)| t.saturating_since(Ts::ZERO + gap * *x as u32);
        assert!(out.iter().all(|o| late(o) >= Duration::from_millis(100)));
        assert!(out.iter().all(|o| late(o) <= Duration::from_millis(122)));
        let held = out.iter().filter(|o| late(o) >= Duration::from_millis(120)).count() as u64;
        assert!(held <= s.held_back && s.held_back > 50 && s.held_back < 150, "{s:?}");
        // Overtaken: an arrival after a later-sent one.
        let inversions = out.windows(2).filter(|w| w[1].1 < w[0].1).count();
        assert!(inversions > 50, "{inversions}");
    }

    #[test]
    fn duplicates_arrive_twice() {
        let cfg = ImpairConfig {
            duplicate: 0.1,
            seed: 9,
            ..ImpairConfig::default()
        };
        let (out, s) = run(cfg, 10_000, Duration::from_micros(100));
        assert_eq!(out.len() as u64, 10_000 + s.duplicated);
        assert!((s.duplicated as f64 - 1000.0).abs() < 150.0, "{s:?}");
    }

    #[test]
    fn the_rate_limit_paces_and_its_queue_drops_the_excess() {
        // 200,000 B/s with a 20,000 B queue, offered 1,000 B every 2.5 ms (400,000 B/s) for 2 s.
        let cfg = ImpairConfig {
            rate_bps: Some(1.6e6),
            queue_bytes: 20_000,
            seed: 1,
            ..ImpairConfig::default()
        };
        let (out, s) = run(cfg, 800, Duration::from_micros(2500));
        let last = out.last().unwrap().0.as_nanos() as f64 / 1e9;
        let rate = out.len() as f64 * 1000.0 / last;
        assert!((rate - 200_000.0).abs() < 10_000.0, "{rate}");
        assert!(s.queue_drops > 350 && s.queue_drops < 420, "{s:?}");
        // Spaced by the serialisation time, 5 ms.
        assert!(out
            .windows(2)
            .all(|w| w[1].0.saturating_since(w[0].0) >= Duration::from_micros(4999)));
        // The queue holds 20,000 B: at most 100 ms of waiting (+ the 5 ms of the datagram's own
        // serialisation), and a full queue reaches it.
        let wait = out
            .iter()
            .map(|(t, x)| t.saturating_since(Ts::ZERO + Duration::from_micros(2500) * *x as u32))
            .max()
            .unwrap();
        assert!(
            wait >= Duration::from_millis(95) && wait <= Duration::from_millis(106),
            "{wait:?}"
        );
    }

    #[test]
    fn held_datagrams_are_bounded() {
        let cfg = ImpairConfig {
            delay: Duration::from_secs(50),
            ..ImpairConfig::default()
        };
        let mut p = Impairment::new(cfg).unwrap();
        for i in 0..(MAX_IN_FLIGHT as u64 + 10) {
            p.push(Ts::ZERO, 100, i);
        }
        assert_eq!(p.in_flight(), MAX_IN_FLIGHT);
        assert_eq!(p.stats().overflow, 10);
        // Duplicates dropped at the bound: the counters still add up.
        let mut d = Impairment::new(ImpairConfig {
            delay: Duration::from_secs(50),
            duplicate: 1.0,
            ..ImpairConfig::default()
        })
        .unwrap();
        for i in 0..(MAX_IN_FLIGHT as u64 / 2 + 3) {
            d.push(Ts::ZERO, 100, i);
        }
        let s = d.stats();
        assert_eq!(
            s.offered + s.duplicated,
            s.lost + s.queue_drops + s.overflow + s.delivered + d.in_flight() as u64,
            "{s:?}"
        );
        assert_eq!(s.overflow, 6);
        // And bytes: 2,000 datagrams of 64 KiB are more than the byte bound.
        let mut b = Impairment::new(ImpairConfig {
            delay: Duration::from_secs(50),
            ..ImpairConfig::default()
        })
        .unwrap();
        for i in 0..2000u32 {
            b.push(Ts::ZERO, 65_536, i);
        }
        assert_eq!(b.in_flight(), MAX_IN_FLIGHT_BYTES / 65_536);
    }

    #[test]
    fn out_of_range_settings_are_refused_by_name() {
        for (cfg, field) in [
            (
                ImpairConfig {
                    loss: 1.5,
                    ..ImpairConfig::default()
                },
                "loss",
            ),
            (
                ImpairConfig {
                    rate_bps: Some(f64::NAN),
                    ..ImpairConfig::default()
                },
                "rate_bps",
            ),
            (
                ImpairConfig {
                    burst: Some(GilbertElliott {
                        to_bad: -0.1,
                        to_good: 0.5,
                        loss_good: 0.0,
                        loss_bad: 1.0,
                    }),
                    ..ImpairConfig::default()
                },
                "burst.to_bad",
            ),
            (
                ImpairConfig {
                    delay: Duration::from_secs(3600),
                    ..ImpairConfig::default()
                },
                "delay",
            ),
            (
                ImpairConfig {
                    queue_bytes: 0,
                    ..ImpairConfig::default()
                },
                "queue_bytes",
            ),
        ] {
            let e = Impairment::<u8>::new(cfg).unwrap_err();
            assert_eq!(e.field, field);
            assert!(e.to_string().contains(field));
        }
        let j: Result<ImpairConfig, _> = serde_json::from_str(r#"{"los": 0.1}"#);
        assert!(j.is_err(), "unknown fields are refused");
        let j: ImpairConfig = serde_json::from_str(r#"{"loss": 0.02, "delay": 100}"#).unwrap();
        assert_eq!((j.loss, j.delay), (0.02, Duration::from_millis(100)));
    }
}
