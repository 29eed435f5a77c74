//! The reference transport: UDP data from one sender to several receivers (stations), feedback
//! reports back. Sans-IO state machines ([`Sender`], [`Receiver`]) with `handle_*` /
//! `poll_transmit` / `poll_timeout`; the socket drivers live in [`io`].
//!
//! The sender paces each station at the rate the controller sets ([`AirtimeSplit`] over the
//! study's loop), accepts only feedback that verifies under the session key (the rest is dropped
//! and counted), and decays to a safe rate when feedback stops. The receiver runs the
//! [`OnlineEstimator`] on kernel receive times and emits one feedback per report interval.

pub mod io;
pub mod wire;

use std::time::Duration;

use crate::control::{AirtimeSplit, PiParams, Rate};
use crate::runtime::{AggReport, OnlineEstimator, RxPacket};
use crate::time::Ts;
use wire::{Data, Feedback, WireError};

/// Counters of a sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SenderStats {
    /// Data packets emitted.
    pub sent: u64,
    /// Feedback accepted.
    pub feedback: u64,
    /// Feedback refused: bad tag, wrong session, malformed or stale.
    pub feedback_dropped: u64,
    /// Silence decays applied.
    pub silence_decays: u64,
}

/// One datagram to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Station index (which receiver).
    pub station: usize,
    /// Bytes are in the sender's buffer: [`Sender::buffer`].
    pub len: usize,
}

struct Station {
    seq: u64,
    next_send: Ts,
    last_number: Option<u32>,
    latest: Option<AggReport>,
}

/// The sans-IO sender.
pub struct Sender {
    session: u32,
    key: Vec<u8>,
    payload: usize,
    split: AirtimeSplit,
    stations: Vec<Station>,
    buf: Vec<u8>,
    interval: Duration,
    last_feedback: Ts,
    next_silence_check: Ts,
    stats: SenderStats,
}

impl Sender {
    /// A sender to `stations` receivers, with `payload` bytes per packet after the 28-byte
    /// header, reports expected every `interval`.
    pub fn new(
        session: u32,
        key: &[u8],
        stations: usize,
        payload: usize,
        control: PiParams,
        interval: Duration,
        now: Ts,
    ) -> Result<Sender, crate::control::ParamError> {
        let stations = stations.max(1);
        Ok(Sender {
            session,
            key: key.to_vec(),
            payload,
            split: AirtimeSplit::new(control, stations)?,
            stations: (0..stations)
                .map(|_| Station {
                    seq: 0,
                    next_send: now,
                    last_number: None,
                    latest: None,
                })
                .collect(),
            buf: Vec::with_capacity(wire::DATA_HEADER_LEN + payload),
            interval,
            last_feedback: now,
            next_silence_check: now + interval * 3,
            stats: SenderStats::default(),
        })
    }

    /// Rate of station `i`.
    pub fn rate(&self, i: usize) -> Rate {
        self.split.rate(i)
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// Bytes of the last [`Transmit`].
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes per datagram.
    pub fn datagram_len(&self) -> usize {
        wire::DATA_HEADER_LEN + self.payload
    }

    /// The next datagram due at `now`, if any (call until `None`).
    pub fn poll_transmit(&mut self, now: Ts) -> Option<Transmit> {
        let i = (0..self.stations.len())
            .filter(|&i| self.stations[i].next_send <= now)
            .min_by_key(|&i| self.stations[i].next_send)?;
        let len = self.datagram_len();
        let rate = self.split.rate(i);
        let s = &mut self.stations[i];
        s.seq += 1;
        wire::emit_data(
            &mut self.buf,
            &Data {
                session: self.session,
                seq: s.seq,
                sent: now,
            },
            self.payload,
        );
        // Pace from the scheduled time, not from `now`, so late wake-ups do not lower the rate
        // (but never bank more than one interval of credit).
        let base = if now.saturating_since(s.next_send) > self.interval {
            now
        } else {
            s.next_send
        };
        s.next_send = base + rate.interval((len + 28) as u32);
        self.stats.sent += 1;
        Some(Transmit { station: i, len })
    }

    /// When to call again: the next send or the silence check.
    pub fn poll_timeout(&self) -> Ts {
        self.stations
            .iter()
            .map(|s| s.next_send)
            .min()
            .unwrap_or(self.next_silence_check)
            .min(self.next_silence_check)
    }

    /// Time passes: without feedback for three report intervals, decay the rate once per
    /// interval (the feedback path may be gone: do not hold or rise blind).
    pub fn handle_timeout(&mut self, now: Ts) {
        if now >= self.next_silence_check {
            if now.saturating_since(self.last_feedback) >= self.interval * 3 {
                self.split.on_silence(now, now.saturating_since(self.last_feedback));
                self.stats.silence_decays += 1;
            }
            self.next_silence_check = now + self.interval;
        }
    }

    /// A datagram from station `station`'s receiver. Forged, foreign, malformed or stale
    /// feedback is dropped and counted; the error says why.
    pub fn handle_feedback(&mut self, now: Ts, station: usize, bytes: &[u8]) -> Result<(), WireError> {
        let f = match wire::parse_feedback(bytes, self.session, &self.key) {
            Ok(f) => f,
            Err(e) => {
                self.stats.feedback_dropped += 1;
                return Err(e);
            }
        };
        let Some(s) = self.stations.get_mut(station) else {
            self.stats.feedback_dropped += 1;
            return Err(WireError::Kind(2));
        };
        if s.last_number.is_some_and(|n| f.number <= n) {
            // A replay or a late duplicate.
            self.stats.feedback_dropped += 1;
            return Err(WireError::Tag);
        }
        s.last_number = Some(f.number);
        s.latest = Some(f.report);
        self.stats.feedback += 1;
        self.last_feedback = now;
        // The loop runs on the driven station's reports (the others give their PHY rates).
        let driven = self.split.driven();
        if station == driven || self.stations.len() == 1 {
            let reports: Vec<AggReport> = self.stations.iter().map(|s| s.latest.unwrap_or_default()).collect();
            self.split.on_reports(now, &reports);
        } else if self.stations[driven].latest.is_none() {
            // Until the driven station reports, follow whoever does.
            let reports: Vec<AggReport> = self.stations.iter().map(|s| s.latest.unwrap_or_default()).collect();
            self.split.on_reports(now, &reports);
        }
        Ok(())
    }
}

/// Counters of a receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReceiverStats {
    /// Data packets accepted.
    pub received: u64,
    /// Datagrams refused (not ours, malformed).
    pub dropped: u64,
    /// Feedback emitted.
    pub feedback: u64,
}

/// The sans-IO receiver.
pub struct Receiver {
    session: u32,
    key: Vec<u8>,
    est: OnlineEstimator,
    number: u32,
    highest: u64,
    buf: Vec<u8>,
    stats: ReceiverStats,
    last: Option<AggReport>,
    /// μ_R to report when packets carry none (b/s), e.g. from the OS or configuration.
    pub phy_rate_bps: Option<u64>,
}

impl Receiver {
    /// A receiver of session `session` running `est`.
    pub fn new(session: u32, key: &[u8], est: OnlineEstimator) -> Receiver {
        Receiver {
            session,
            key: key.to_vec(),
            est,
            number: 0,
            highest: 0,
            buf: Vec::with_capacity(wire::FEEDBACK_LEN),
            stats: ReceiverStats::default(),
            last: None,
            phy_rate_bps: None,
        }
    }

    /// Counters.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// The last report sent.
    pub fn last_report(&self) -> Option<&AggReport> {
        self.last.as_ref()
    }

    /// A datagram received at kernel time `host`.
    pub fn handle_data(&mut self, host: Ts, bytes: &[u8]) -> Result<(), WireError> {
        let (d, payload) = match wire::parse_data(bytes, self.session) {
            Ok(x) => x,
            Err(e) => {
                self.stats.dropped += 1;
                return Err(e);
            }
        };
        self.stats.received += 1;
        self.highest = self.highest.max(d.seq);
        self.est.push(&RxPacket {
            host,
            seq: Some(d.seq),
            sent: Some(d.sent),
            len: (payload + wire::DATA_HEADER_LEN) as u32,
            tsft: None,
            phy_rate_bps: self.phy_rate_bps,
        });
        Ok(())
    }

    /// A feedback datagram due at `now`, in [`Receiver::buffer`] (call until `None`).
    pub fn poll_transmit(&mut self, now: Ts) -> Option<usize> {
        let mut r = self.est.poll_report(now)?;
        if r.phy_rate_bps.is_none() {
            r.phy_rate_bps = self.phy_rate_bps.map(|v| v as f64);
        }
        self.number += 1;
        wire::emit_feedback(
            &mut self.buf,
            &Feedback {
                session: self.session,
                number: self.number,
                highest_seq: self.highest,
                report: r,
            },
            &self.key,
        );
        self.stats.feedback += 1;
        self.last = Some(r);
        Some(self.buf.len())
    }

    /// Bytes of the last feedback.
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// When a report can next be due.
    pub fn poll_timeout(&self, now: Ts) -> Ts {
        let step = self.est.interval().as_nanos().max(1) as u64;
        Ts((now.as_nanos() / step + 1) * step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::FeatureSpec;
    use crate::runtime::Mode;

    const KEY: &[u8] = b"k";

    fn pair(stations: usize) -> (Sender, Vec<Receiver>) {
        let s = Sender::new(
            5,
            KEY,
            stations,
            1472,
            PiParams::default(),
            Duration::from_millis(500),
            Ts::ZERO,
        )
        .unwrap();
        let r = (0..stations)
            .map(|_| {
                let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(500)).unwrap();
                Receiver::new(5, KEY, est)
            })
            .collect();
        (s, r)
    }

    #[test]
    fn paces_at_the_controller_rate() {
        let (mut s, mut r) = pair(1);
        let mut now = Ts::ZERO;
        let mut bytes = 0u64;
        while now < Ts::from_millis(100) {
            while let Some(t) = s.poll_transmit(now) {
                bytes += t.len as u64;
                r[0].handle_data(now, s.buffer()).unwrap();
            }
            now = s.poll_timeout();
        }
        // 20 Mb/s for 100 ms (28-byte UDP/IP overhead counted in the pacing) ≈ 250 kB.
        let mbps = bytes as f64 * 8.0 / 0.1 / 1e6;
        assert!((mbps - 20.0 * 1500.0 / 1528.0).abs() < 0.5, "{mbps}");
        assert_eq!(r[0].stats().received, s.stats().sent);
    }

    #[test]
    fn forged_feedback_is_dropped_and_silence_decays() {
        let (mut s, mut r) = pair(1);
        let mut buf = Vec::new();
        let forged = Feedback {
            session: 5,
            number: 1,
            highest_seq: 0,
            report: AggReport {
                mean_agg: 1.0,
                ..AggReport::default()
            },
        };
        wire::emit_feedback(&mut buf, &forged, b"not the key");
        assert_eq!(s.handle_feedback(Ts::ZERO, 0, &buf), Err(WireError::Tag));
        assert!(s.handle_feedback(Ts::ZERO, 0, b"garbage").is_err());
        wire::emit_feedback(&mut buf, &Feedback { session: 6, ..forged }, KEY);
        assert!(matches!(
            s.handle_feedback(Ts::ZERO, 0, &buf),
            Err(WireError::Session { .. })
        ));
        assert_eq!(s.stats().feedback_dropped, 3);
        assert_eq!(s.rate(0).mbps, 20.0, "nothing moved the rate");
        // Genuine feedback: start-up raises the rate; a replay of it is refused.
        r[0].handle_data(Ts::from_millis(1), &{
            let mut b = Vec::new();
            wire::emit_data(
                &mut b,
                &Data {
                    session: 5,
                    seq: 1,
                    sent: Ts::ZERO,
                },
                10,
            );
            b
        })
        .unwrap();
        let n = r[0].poll_transmit(Ts::from_millis(500)).unwrap();
        let genuine = r[0].buffer()[..n].to_vec();
        s.handle_feedback(Ts::from_millis(501), 0, &genuine).unwrap();
        assert_eq!(s.rate(0).mbps, 30.0);
        assert!(s.handle_feedback(Ts::from_millis(502), 0, &genuine).is_err(), "replay");
        // Then silence: after 3 intervals the rate halves each interval, down to the floor.
        let mut now = Ts::from_millis(501);
        for _ in 0..40 {
            now = now + Duration::from_millis(500);
            s.handle_timeout(now);
        }
        assert!(s.stats().silence_decays >= 30);
        assert_eq!(s.rate(0).mbps, 1.0, "decayed to the minimum");
    }

    #[test]
    fn several_receivers_get_equal_airtime_rates() {
        let (mut s, mut r) = pair(2);
        r[0].phy_rate_bps = Some(866_000_000);
        r[1].phy_rate_bps = Some(433_000_000);
        let mut now = Ts::ZERO;
        let mut per_station = [0u64; 2];
        let mut next_report = Ts::from_millis(500);
        while now < Ts::from_millis(3000) {
            s.handle_timeout(now);
            while let Some(t) = s.poll_transmit(now) {
                per_station[t.station] += 1;
                r[t.station].handle_data(now, s.buffer()).unwrap();
            }
            if now >= next_report {
                for (i, rx) in r.iter_mut().enumerate() {
                    if let Some(n) = rx.poll_transmit(now) {
                        let fb = rx.buffer()[..n].to_vec();
                        s.handle_feedback(now, i, &fb).unwrap();
                    }
                }
                next_report = next_report + Duration::from_millis(500);
            }
            now = s.poll_timeout().min(next_report);
        }
        // The faster station is driven; the other gets half its rate (PHY 433 vs 866 Mb/s).
        assert!(s.rate(0).mbps > 20.0, "the loop moved: {}", s.rate(0).mbps);
        assert!((s.rate(1).mbps - s.rate(0).mbps / 2.0).abs() < 1e-9);
        assert!(per_station[0] > per_station[1] && per_station[1] > 0, "{per_station:?}");
        assert_eq!(s.stats().feedback_dropped, 0);
    }
}
