//! The reference transport: UDP data from one sender to several receivers (stations), feedback
//! reports back. Sans-IO state machines ([`Sender`], [`Receiver`]) with `handle_*` /
//! `poll_transmit` / `poll_timeout`; the socket drivers live in the `aggrate` crate
//! (`aggrate::transport::io`).
//!
//! **Trust.** Both ends hold a pre-shared key ([`wire::Psk`], ≥ 16 random bytes, never a
//! default). Per station, the sender opens a session with a hello carrying a fresh nonce; the
//! receiver answers a hello without a valid cookie with a cookie only (stateless, bound to the
//! source address and [`wire::COOKIE_EPOCH`]), and a hello that carries one with its own nonce;
//! both derive the session's keys from the key and both nonces ([`wire::SessionKeys`]). An old
//! hello replayed, from any address, never opens a handshake. Hellos are limited per source and
//! hello ([`HELLO_PER_SOURCE`] per second, [`HELLO_SOURCES`] tracked: replays of an old hello
//! through a relay, from the real sender's address, spend that hello's allowance only) and in all
//! ([`HELLO_GLOBAL`] per second); a pending handshake is not replaced by another address's until
//! data verifies under it or [`PENDING_TIMEOUT`] passes. Every datagram after that carries a tag
//! under the session's keys: data the receiver cannot verify, that comes from another address
//! than the hello's, or that it has seen before ([`wire::ReplayWindow`]) is dropped and counted
//! before the estimator or a counter sees it, and feedback goes only to that address. Feedback from another session (an earlier
//! run, a restarted receiver) never verifies; within a session, report numbers only rise. A
//! verified report is range-checked ([`wire::check_report`]) and at most [`REPORT_BURST`]
//! reports are accepted per report interval. When feedback stops for three intervals the
//! sender decays its rate and opens a new session (a restarted receiver rejoins that way, within
//! four report intervals: three of silence, then a cookie and a hello); until it is answered,
//! data continues under the old keys.
//!
//! The sender paces each station at the rate the controller sets ([`AirtimeSplit`] over the
//! study's loop). The receiver runs the [`OnlineEstimator`] on kernel receive times and emits one
//! feedback per report interval.

pub mod reliable;
pub mod wire;

#[cfg(test)]
mod bulk_tests;

use std::net::SocketAddr;
use std::time::Duration;

use crate::control::{AirtimeSplit, Controller as _, Pacer, PiParams, Rate};
use crate::runtime::{AggReport, OnlineEstimator, RxPacket};
use crate::time::Ts;
use reliable::{BulkReceiver, BulkSender};
use wire::{
    Cookie, Data, Feedback, Hello, HelloAck, Kind, Psk, ReplayWindow, SessionKeys, WireError, COOKIE_BYTES, NONCE_LEN,
};

/// Bytes a data datagram adds to a reliable segment: the transport's data header and the
/// frame's.
pub const BULK_OVERHEAD: usize = wire::DATA_HEADER_LEN + reliable::DATA_HEADER_LEN;

/// Most bytes a reliable stream's window holds at each end (the window in segments is cut to
/// it for large datagrams: 4,096 segments of 65,000 bytes would be 266 MB).
pub const BULK_WINDOW_BYTES: usize = 64 << 20;

/// The reliable layer's settings for data datagrams of `datagram` bytes (UDP payload): a
/// segment fills a datagram after [`BULK_OVERHEAD`], the window the default or
/// [`BULK_WINDOW_BYTES`] of segments, whichever is less; the transfer is `stream`.
pub fn bulk_config(datagram: usize, stream: u32) -> Result<reliable::BulkConfig, reliable::FrameError> {
    let segment = datagram
        .checked_sub(BULK_OVERHEAD)
        .filter(|&s| s > 0)
        .ok_or(reliable::FrameError::Config {
            field: "datagram",
            what: format!("{datagram} bytes: more than {BULK_OVERHEAD} (headers) needed"),
        })?;
    let d = reliable::BulkConfig::default();
    reliable::BulkConfig {
        segment,
        window: d.window.min(BULK_WINDOW_BYTES / segment).max(2),
        stream,
        ..d
    }
    .check()
}

/// Reports accepted per station per report interval at most (a burst allowance; the bucket
/// refills at this many per interval).
pub const REPORT_BURST: u32 = 3;

/// Hellos a receiver answers per source address per second (a burst of as many).
pub const HELLO_PER_SOURCE: u32 = 8;
/// Hellos a receiver answers per second in all (a burst of as many).
pub const HELLO_GLOBAL: u32 = 256;
/// Source addresses whose hello rate a receiver tracks (a fixed table; the least useful entry
/// makes room for a new source).
pub const HELLO_SOURCES: usize = 64;
/// A handshake a receiver has answered is not replaced by another address's hello for this long
/// unless data verifies under it (at least this, or two report intervals).
pub const PENDING_TIMEOUT: Duration = Duration::from_secs(1);

/// Counters of a sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SenderStats {
    /// Data packets emitted.
    pub sent: u64,
    /// Hellos emitted.
    pub hellos: u64,
    /// Sessions opened (hello answered).
    pub sessions: u64,
    /// Feedback accepted.
    pub feedback: u64,
    /// Feedback refused: bad tag, wrong session, malformed, stale or out of range.
    pub feedback_dropped: u64,
    /// Feedback refused because more came than the interval allows.
    pub feedback_limited: u64,
    /// Silence decays applied.
    pub silence_decays: u64,
    /// Cookies taken from a receiver (a hello sent again with it).
    pub cookies: u64,
    /// Datagrams of another protocol version (an older or newer aggrate at the other end).
    pub other_version: u64,
    /// The last such version seen.
    pub other_version_seen: Option<u8>,
    /// Acks of the reliable layer accepted (refused ones count in `feedback_dropped`).
    pub acks: u64,
}

/// One datagram to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Station index (which receiver).
    pub station: usize,
    /// Bytes are in the sender's buffer: [`Sender::buffer`].
    pub len: usize,
}

/// A token bucket: `cap` tokens, refilled at `cap` per `per`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Ts,
}

impl Bucket {
    /// Tokens there would be at `now`.
    fn level(&self, now: Ts, cap: u32, per: Duration) -> f64 {
        let dt = now.saturating_since(self.at).as_secs_f64();
        (self.tokens + dt * cap as f64 / per.as_secs_f64().max(1e-9)).min(cap as f64)
    }

    fn take(&mut self, now: Ts, cap: u32, per: Duration) -> bool {
        let dt = now.saturating_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        let per = per.as_secs_f64().max(1e-9);
        self.tokens = (self.tokens + dt * cap as f64 / per).min(cap as f64);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Station {
    seq: u64,
    last_number: Option<u32>,
    latest: Option<AggReport>,
    keys: Option<SessionKeys>,
    /// The hello waiting for an answer, and when to send it again.
    hello: Option<(Hello, Ts)>,
    /// The receiver's cookie for that hello (zero: none yet).
    cookie: [u8; COOKIE_BYTES],
    bucket: Bucket,
    last_feedback: Ts,
    /// The reliable stream to this station, if it carries one.
    bulk: Option<Box<BulkSender>>,
    /// The last ack number accepted in this session.
    last_ack: Option<u32>,
    /// Whether the station had something to send when last asked (a bulk station without a
    /// frame does not spend pacing slots).
    ready: bool,
    /// Datagram bytes sent since the loop last stepped (to tell an application-limited stream).
    sent_bytes: u64,
    /// When the last datagram went (a stream waiting for its producer sends a padding datagram
    /// every [`BULK_KEEPALIVE`], so its receiver knows the sender is there).
    last_sent: Ts,
    /// Whether the station was idle (nothing to send) at the last poll.
    was_idle: bool,
}

/// How often a bulk station with nothing to send sends an empty data datagram.
pub const BULK_KEEPALIVE: Duration = Duration::from_secs(5);

/// The sans-IO sender.
pub struct Sender {
    psk: Psk,
    rng: NonceGen,
    payload: usize,
    n_max: f64,
    split: AirtimeSplit,
    /// Each station's pacing clock (datagrams are never in flight: not acknowledged).
    pacer: Pacer,
    stations: Vec<Station>,
    /// Start of the last report interval the loop stepped on.
    stepped: Option<Ts>,
    buf: Vec<u8>,
    interval: Duration,
    last_feedback: Ts,
    next_silence_check: Ts,
    stats: SenderStats,
    /// A reliable frame on its way into a datagram.
    frame: Vec<u8>,
    /// Since when `sent_bytes` counts.
    sent_since: Ts,
}

/// Nonces from a 32-byte seed: HMAC-SHA-256(seed, counter), truncated — a PRF in counter
/// mode (the construction HKDF-Expand and HMAC-DRBG rest on), so the core needs no RNG crate.
/// Unpredictable to anyone without the seed; the IO layer seeds it from the OS.
struct NonceGen {
    seed: [u8; 32],
    counter: u64,
}

impl NonceGen {
    fn new(seed: [u8; 32]) -> NonceGen {
        NonceGen { seed, counter: 0 }
    }
}

fn nonce(g: &mut NonceGen) -> [u8; NONCE_LEN] {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&g.seed).expect("HMAC takes any key length");
    mac.update(b"aggrate nonce");
    mac.update(&g.counter.to_be_bytes());
    g.counter += 1;
    let out = mac.finalize().into_bytes();
    let mut n = [0u8; NONCE_LEN];
    n.copy_from_slice(&out[..NONCE_LEN]);
    n
}

impl Sender {
    /// A sender to `stations` receivers under the pre-shared key `psk`, with `payload` bytes per
    /// packet after the data header, reports expected every `interval`. `seed` seeds the nonces:
    /// give it fresh OS entropy (`aggrate::transport::io::entropy`) outside tests.
    pub fn new(
        psk: Psk,
        seed: [u8; 32],
        stations: usize,
        payload: usize,
        control: PiParams,
        interval: Duration,
        now: Ts,
    ) -> Result<Sender, crate::control::ParamError> {
        let stations = stations.max(1);
        let mut rng = NonceGen::new(seed);
        let mut st = Vec::with_capacity(stations);
        for i in 0..stations {
            let n = nonce(&mut rng);
            st.push(Station {
                seq: 0,
                last_number: None,
                latest: None,
                keys: None,
                hello: Some((
                    Hello {
                        session: u32::from_be_bytes([n[0], n[1], n[2], n[3]]),
                        station: i as u32,
                        nonce_s: n,
                    },
                    now,
                )),
                cookie: [0; COOKIE_BYTES],
                bucket: Bucket {
                    tokens: REPORT_BURST as f64,
                    at: now,
                },
                last_feedback: now,
                bulk: None,
                last_ack: None,
                ready: true,
                sent_bytes: 0,
                last_sent: now,
                was_idle: false,
            });
        }
        let mut sender = Sender {
            psk,
            rng,
            payload,
            n_max: 64.0,
            split: AirtimeSplit::new(control, stations)?,
            pacer: Pacer::new(stations, now, interval),
            stations: st,
            stepped: None,
            buf: Vec::with_capacity(wire::DATA_HEADER_LEN + payload),
            interval,
            last_feedback: now,
            next_silence_check: now + interval * 3,
            stats: SenderStats::default(),
            frame: Vec::new(),
            sent_since: now,
        };
        sender.set_cell_airtime(true);
        Ok(sender)
    }

    /// Steer several stations by the cell's airtime relation as well as by their receivers'
    /// levels (the default), or by the receivers' levels alone.
    pub fn set_cell_airtime(&mut self, on: bool) {
        self.split.set_cell(on.then(|| crate::control::Cell {
            airtime: crate::airtime::AirtimeParams::default(),
            ip_len: (self.payload + wire::DATA_HEADER_LEN + 28) as f64,
        }));
    }

    /// The level the controller steers station `i` by, given one report per station of the
    /// same interval ([`AirtimeSplit::level_of`]).
    pub fn level_of(&self, reports: &[AggReport], i: usize) -> f64 {
        self.split.level_of(reports, i)
    }

    /// Rate of station `i`.
    pub fn rate(&self, i: usize) -> Rate {
        self.split.rate(i)
    }

    /// Use these bottleneck classifier weights in the loop from now on (the shipped ones until
    /// then).
    pub fn set_bottleneck_weights(&mut self, w: crate::control::BottleneckWeights) {
        self.split.set_bottleneck_weights(w);
    }

    /// The loop (its state: start-up, bottleneck class, the level of its last step) and the
    /// station it drives.
    pub fn control(&self) -> (&crate::control::PiController, usize) {
        (self.split.controller(), self.split.driven())
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// Whether station `i` has a session (its hello was answered).
    pub fn connected(&self, i: usize) -> bool {
        self.stations.get(i).is_some_and(|s| s.keys.is_some())
    }

    /// Bytes of the last [`Transmit`].
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// Carry a reliable stream to station `i` from now on ([`reliable`]): its datagrams carry
    /// the stream's frames — new data, repairs, parity — at the rate the controller sets (they
    /// spend the same pacing slots as any datagram, never more), and a datagram goes only when
    /// the stream has a frame to send. The station's acks go to it. Its segments must fit the
    /// datagram size: `payload` ≥ [`BulkConfig::frame_len`](reliable::BulkConfig::frame_len).
    pub fn set_bulk(&mut self, i: usize, bulk: BulkSender) {
        if let Some(s) = self.stations.get_mut(i) {
            s.bulk = Some(Box::new(bulk));
            s.ready = true;
        }
    }

    /// Station `i`'s reliable stream.
    pub fn bulk(&self, i: usize) -> Option<&BulkSender> {
        self.stations.get(i)?.bulk.as_deref()
    }

    /// Station `i`'s reliable stream, to offer it bytes.
    pub fn bulk_mut(&mut self, i: usize) -> Option<&mut BulkSender> {
        let s = self.stations.get_mut(i)?;
        // Offered bytes may make a frame: ask again at the next poll.
        s.ready = true;
        s.bulk.as_deref_mut()
    }

    /// Bytes per data datagram.
    pub fn datagram_len(&self) -> usize {
        wire::DATA_HEADER_LEN + self.payload
    }

    fn hello_retry(&self) -> Duration {
        (self.interval / 5).clamp(Duration::from_millis(20), Duration::from_millis(200))
    }

    /// The next datagram due at `now`, if any (call until `None`).
    pub fn poll_transmit(&mut self, now: Ts) -> Option<Transmit> {
        // Hellos first: a station without a session gets nothing else.
        let retry = self.hello_retry();
        for (i, s) in self.stations.iter_mut().enumerate() {
            if let Some((h, at)) = &mut s.hello {
                if *at <= now {
                    *at = now + retry;
                    wire::emit_hello(&mut self.buf, &self.psk, h, &s.cookie);
                    self.stats.hellos += 1;
                    return Some(Transmit {
                        station: i,
                        len: self.buf.len(),
                    });
                }
            }
        }
        for (i, s) in self.stations.iter_mut().enumerate() {
            let keepalive = now.saturating_since(s.last_sent) >= BULK_KEEPALIVE;
            s.ready = s.keys.is_some() && (keepalive || s.bulk.as_mut().is_none_or(|b| b.wants_to_send(now)));
            if s.keys.is_some() && (!s.ready || s.was_idle) {
                // Nothing to send, or the first send after nothing: no credit built up for a
                // burst when the stream resumes.
                self.pacer.idle(i, now);
            }
            s.was_idle = s.keys.is_some() && !s.ready;
        }
        let stations = &self.stations;
        let (at, i) = self
            .pacer
            .next_due(now, &self.split, |i| stations[i].ready)
            .filter(|&(at, _)| at <= now)?;
        let rate = self.split.pacing_rate(i);
        let s = &mut self.stations[i];
        let keys = s.keys.as_ref()?;
        let d = Data {
            seq: s.seq.checked_add(1)?,
            sent: now,
        };
        match s.bulk.as_mut().map(|b| b.poll_frame(now, &mut self.frame)) {
            Some(Some(_)) => wire::emit_data_payload(&mut self.buf, keys, &d, &self.frame),
            // A keepalive: an empty datagram (no frame, nothing for the stream).
            Some(None) => wire::emit_data(&mut self.buf, keys, &d, 0),
            None => wire::emit_data(&mut self.buf, keys, &d, self.payload),
        }
        s.last_sent = now;
        s.seq = d.seq;
        let len = self.buf.len();
        s.sent_bytes += (len + 28) as u64;
        // Paced from the scheduled time, so late wake-ups do not lower the rate; at most one
        // report interval of credit. Datagrams are not acknowledged: nothing stays in flight.
        self.pacer.sent(i, at, rate, (len + 28) as u32);
        self.pacer.acked(i);
        self.stats.sent += 1;
        Some(Transmit { station: i, len })
    }

    /// When to call again: the next send, hello, silence check or reliable-layer timer.
    pub fn poll_timeout(&self) -> Ts {
        let mut t = self.next_silence_check;
        for (i, s) in self.stations.iter().enumerate() {
            if let Some((_, at)) = &s.hello {
                t = t.min(*at);
            }
            // A station without a stream is always ready once it has keys; one with a stream
            // when it last had a frame (or was told of news since: an ack, bytes, a timer).
            if s.keys.is_some() && (s.bulk.is_none() || s.ready) {
                t = t.min(self.pacer.next(i));
            }
            if s.keys.is_some() && s.bulk.is_some() {
                t = t.min(s.last_sent + BULK_KEEPALIVE);
            }
            if let Some(d) = s.bulk.as_ref().and_then(|b| b.poll_timeout()) {
                t = t.min(d);
            }
        }
        t
    }

    /// Time passes: without feedback for three report intervals, decay the rate once per
    /// interval (the feedback path may be gone: do not hold or rise blind), and open a new
    /// session with each silent station (its receiver may have restarted).
    pub fn handle_timeout(&mut self, now: Ts) {
        for s in &mut self.stations {
            if let Some(b) = s.bulk.as_mut().filter(|b| b.poll_timeout().is_some_and(|d| d <= now)) {
                b.handle_timeout(now);
                s.ready = true;
            }
        }
        if now < self.next_silence_check {
            return;
        }
        self.next_silence_check = now + self.interval;
        if now.saturating_since(self.last_feedback) >= self.interval * 3 {
            self.split.on_silence(now, now.saturating_since(self.last_feedback));
            self.stats.silence_decays += 1;
        }
        for i in 0..self.stations.len() {
            let s = &self.stations[i];
            if s.hello.is_none() && now.saturating_since(s.last_feedback) >= self.interval * 3 {
                let n = nonce(&mut self.rng);
                self.stations[i].hello = Some((
                    Hello {
                        session: u32::from_be_bytes([n[0], n[1], n[2], n[3]]),
                        station: i as u32,
                        nonce_s: n,
                    },
                    now,
                ));
                // A cookie is bound to its hello's nonce.
                self.stations[i].cookie = [0; COOKIE_BYTES];
            }
        }
    }

    /// An ack of station `station`'s reliable stream: fresh (its number above the last, checked
    /// before the tag), verified, then to the stream.
    fn ack(&mut self, now: Ts, station: usize, bytes: &[u8]) -> Result<(), WireError> {
        let Some(s) = self.stations.get_mut(station) else {
            return Err(WireError::Peer);
        };
        let keys = s.keys.as_ref().ok_or(WireError::NoSession)?;
        // A stale number is refused before the tag is computed (a replay costs no HMAC);
        // a fresh one must still verify.
        let claimed = bytes.get(12..16).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        if let (Some(n), Some(last)) = (claimed, s.last_ack) {
            if n <= last {
                return Err(WireError::Stale { got: n, last });
            }
        }
        let (number, frame) = wire::parse_ack(bytes, keys)?;
        let b = s.bulk.as_mut().ok_or(WireError::Kind(6))?;
        // Only now, verified and fresh, does the stream see it; a frame it refuses
        // still used up its number (it was the receiver's).
        s.last_ack = Some(number);
        b.handle_ack(now, frame)?;
        s.ready = true;
        self.stats.acks += 1;
        Ok(())
    }

    /// Whether station `i` carries a stream that sent under 90 % of what its rate allowed over
    /// `span` (since the loop last stepped).
    fn app_limited(&self, i: usize, span: Duration) -> bool {
        let Some(s) = self.stations.get(i).filter(|s| s.bulk.is_some()) else {
            return false;
        };
        let allowed = self.split.rate(i).mbps * 1e6 / 8.0 * span.as_secs_f64();
        (s.sent_bytes as f64) < 0.9 * allowed
    }

    /// A datagram from station `station`'s address (a hello-ack or feedback). Anything that does
    /// not verify, is stale, out of range or over the rate is dropped and counted; the error
    /// says why.
    pub fn handle_datagram(&mut self, now: Ts, station: usize, bytes: &[u8]) -> Result<(), WireError> {
        let r = self.datagram(now, station, bytes);
        match &r {
            Err(WireError::Flood) => self.stats.feedback_limited += 1,
            Err(WireError::Version(v)) => {
                self.stats.feedback_dropped += 1;
                self.stats.other_version += 1;
                self.stats.other_version_seen = Some(*v);
            }
            Err(_) => self.stats.feedback_dropped += 1,
            Ok(()) => {}
        }
        r
    }

    fn datagram(&mut self, now: Ts, station: usize, bytes: &[u8]) -> Result<(), WireError> {
        let (kind, _, _) = wire::peek(bytes)?;
        let Some(s) = self.stations.get_mut(station) else {
            return Err(WireError::Peer);
        };
        match kind {
            Kind::Cookie => {
                let c: Cookie = wire::parse_cookie(bytes, &self.psk)?;
                let Some((h, at)) = &mut s.hello else {
                    return Err(WireError::Kind(5));
                };
                if c.hello != *h {
                    return Err(WireError::Session {
                        got: c.hello.session,
                        want: h.session,
                    });
                }
                // Send the hello again now, with the cookie.
                s.cookie = c.cookie;
                *at = now;
                self.stats.cookies += 1;
                Ok(())
            }
            Kind::HelloAck => {
                let a: HelloAck = wire::parse_hello_ack(bytes, &self.psk)?;
                let Some((h, _)) = &s.hello else {
                    return Err(WireError::Kind(4));
                };
                if a.hello != *h {
                    // An answer to another hello (an old one, or another station's).
                    return Err(WireError::Session {
                        got: a.hello.session,
                        want: h.session,
                    });
                }
                s.keys = Some(SessionKeys::derive(
                    &self.psk, h.session, h.station, &h.nonce_s, &a.nonce_r,
                ));
                s.hello = None;
                s.last_number = None;
                s.last_ack = None;
                s.ready = true;
                // The new session's receiver may keep another clock: its intervals count afresh.
                s.latest = None;
                s.last_feedback = now;
                self.stepped = None;
                self.stats.sessions += 1;
                Ok(())
            }
            Kind::Feedback => {
                let keys = s.keys.as_ref().ok_or(WireError::NoSession)?;
                let f = wire::parse_feedback(bytes, keys)?;
                if let Some(last) = s.last_number {
                    if f.number <= last {
                        return Err(WireError::Stale { got: f.number, last });
                    }
                }
                wire::check_report(&f.report, self.n_max)?;
                if !s.bucket.take(now, REPORT_BURST, self.interval) {
                    return Err(WireError::Flood);
                }
                s.last_number = Some(f.number);
                s.latest = Some(f.report);
                s.last_feedback = now;
                self.stats.feedback += 1;
                self.last_feedback = now;
                // The loop steps once per report interval, when every connected station has
                // reported it: the cell's airtime relation needs every station's load of the
                // same interval (with one station's report a step behind, during start-up a
                // third lower, it reads the cell's level low and the loop overshoots into the
                // AP's queue). A report lost on the way delays the step by one interval: a
                // driven station's report for a later interval steps with what there is. Until
                // the driven station reports at all, follow whoever does.
                let start = f.report.start;
                let driven = self.split.driven();
                let complete = self
                    .stations
                    .iter()
                    .filter(|x| x.keys.is_some())
                    .all(|x| x.latest.is_some_and(|r| r.start >= start));
                let overdue = station == driven && self.stepped.is_some_and(|p| start > p + self.interval);
                let fresh = self.stepped.is_none_or(|p| start > p);
                if fresh && (complete || overdue || self.stations[driven].latest.is_none()) {
                    self.stepped = Some(start);
                    let reports: Vec<AggReport> = self.stations.iter().map(|s| s.latest.unwrap_or_default()).collect();
                    // A stream that had less to send than the rate allowed (a slow producer)
                    // says nothing about the rate's headroom: the loop may lower the rate then,
                    // not raise it (RFC 7661's rule for application-limited senders).
                    let limited = self.app_limited(driven, now.saturating_since(self.sent_since));
                    let before = self.split.loop_rate();
                    self.split.on_reports(now, &reports);
                    if limited {
                        self.split.cap_loop_rate(before);
                    }
                    for s in &mut self.stations {
                        s.sent_bytes = 0;
                    }
                    self.sent_since = now;
                }
                Ok(())
            }
            Kind::Ack => self.ack(now, station, bytes),
            _ => Err(WireError::Kind(bytes[3])),
        }
    }
}

/// Counters of a receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReceiverStats {
    /// Data packets accepted.
    pub received: u64,
    /// Datagrams refused (not ours, malformed, not verified, wrong peer).
    pub dropped: u64,
    /// Hellos answered.
    pub hellos: u64,
    /// Hellos not answered: over the rate allowed per source or in all.
    pub hellos_limited: u64,
    /// Hellos without a valid cookie, answered with a cookie (no handshake).
    pub cookies: u64,
    /// Valid hellos refused because another address's handshake is pending.
    pub hellos_refused: u64,
    /// Data that verified but was seen before, or too old (replays).
    pub replayed: u64,
    /// Data whose send time lay more than an hour from its receive time: the hosts' clocks
    /// disagree, and the reports carry no one-way delay for it.
    pub clock_skewed: u64,
    /// Datagrams of another protocol version (an older or newer aggrate at the other end).
    pub other_version: u64,
    /// The last such version seen.
    pub other_version_seen: Option<u8>,
    /// Sessions started (first verified data under new keys).
    pub sessions: u64,
    /// Feedback emitted.
    pub feedback: u64,
    /// Acks of the reliable layer emitted.
    pub acks: u64,
    /// Verified data whose reliable frame the stream refused (malformed: a key holder's bug).
    pub frames_refused: u64,
    /// Of those, frames of another transfer (a sender restarted while this receiver kept the
    /// first one's stream).
    pub other_stream: u64,
}

struct Peer {
    keys: SessionKeys,
    addr: SocketAddr,
    ack: HelloAck,
    /// When the handshake was answered.
    since: Ts,
}

/// Hello rates per source address and hello (a fixed table) and in all.
///
/// Keyed by the hello's nonce as well as its source: behind an access point (or any relay)
/// every hello comes from one address, and an old hello replayed there must spend its own
/// allowance, not the real sender's fresh one. Only key holders make hellos (a hello carries a
/// tag under the key), so the distinct nonces an attacker has are the old hellos it recorded.
struct HelloLimiter {
    sources: Vec<((SocketAddr, [u8; wire::NONCE_LEN]), Bucket)>,
    global: Bucket,
}

impl HelloLimiter {
    fn new() -> HelloLimiter {
        HelloLimiter {
            sources: Vec::with_capacity(HELLO_SOURCES),
            global: Bucket {
                tokens: HELLO_GLOBAL as f64,
                at: Ts::ZERO,
            },
        }
    }

    /// One hello (`nonce`) from `from` at `now`: within both rates?
    fn allow(&mut self, from: SocketAddr, nonce: [u8; wire::NONCE_LEN], now: Ts) -> bool {
        let sec = Duration::from_secs(1);
        let from = (from, nonce);
        let i = match self.sources.iter().position(|(a, _)| *a == from) {
            Some(i) => i,
            None => {
                let fresh = Bucket {
                    tokens: HELLO_PER_SOURCE as f64,
                    at: now,
                };
                if self.sources.len() < HELLO_SOURCES {
                    self.sources.push((from, fresh));
                    self.sources.len() - 1
                } else {
                    // Make room: the entry that would lose least — the fullest bucket (a full
                    // bucket is what a fresh entry starts with), the oldest on ties.
                    let i = (0..self.sources.len())
                        .max_by(|&a, &b| {
                            let (x, y) = (&self.sources[a].1, &self.sources[b].1);
                            x.level(now, HELLO_PER_SOURCE, sec)
                                .total_cmp(&y.level(now, HELLO_PER_SOURCE, sec))
                                .then(y.at.cmp(&x.at))
                        })
                        .unwrap_or(0);
                    self.sources[i] = (from, fresh);
                    i
                }
            }
        };
        self.sources[i].1.take(now, HELLO_PER_SOURCE, sec) && self.global.take(now, HELLO_GLOBAL, sec)
    }
}

/// The sans-IO receiver.
pub struct Receiver {
    psk: Psk,
    rng: NonceGen,
    est: OnlineEstimator,
    number: u32,
    highest: u64,
    buf: Vec<u8>,
    stats: ReceiverStats,
    last: Option<AggReport>,
    current: Option<Peer>,
    pending: Option<Peer>,
    /// A hello-ack to send, and where.
    ack_due: Option<SocketAddr>,
    /// A cookie to send, and where.
    cookie_due: Option<(SocketAddr, Cookie)>,
    /// The secret cookies are made under (drawn per receiver).
    cookie_secret: [u8; 32],
    hellos: HelloLimiter,
    /// Data sequence numbers of the current session.
    window: ReplayWindow,
    /// μ_R to report when packets carry none (b/s), e.g. from the OS or configuration.
    pub phy_rate_bps: Option<u64>,
    /// The reliable stream the data carries, if any, and the last ack number sent.
    bulk: Option<Box<BulkReceiver>>,
    ack_number: u32,
    frame: Vec<u8>,
}

impl Receiver {
    /// A receiver under the pre-shared key `psk` running `est`; `seed` seeds its nonces (fresh OS
    /// entropy outside tests: `aggrate::transport::io::entropy`). Its packets' lengths are UDP
    /// payloads over IPv4: the estimator's airtime level adds 28 bytes of headers to them.
    pub fn new(psk: Psk, seed: [u8; 32], mut est: OnlineEstimator) -> Receiver {
        let mut level = est.level_config().clone();
        level.l3_overhead_bytes = 28;
        // The estimator's own settings were checked; only the overhead changed.
        let _ = est.set_level_config(level);
        let mut rng = NonceGen::new(seed);
        let cookie_secret = nonce(&mut rng);
        Receiver {
            psk,
            rng,
            est,
            number: 0,
            highest: 0,
            buf: Vec::with_capacity(wire::HELLO_ACK_LEN.max(wire::FEEDBACK_LEN)),
            stats: ReceiverStats::default(),
            last: None,
            current: None,
            pending: None,
            ack_due: None,
            cookie_due: None,
            cookie_secret,
            hellos: HelloLimiter::new(),
            window: ReplayWindow::default(),
            phy_rate_bps: None,
            bulk: None,
            ack_number: 0,
            frame: Vec::new(),
        }
    }

    /// Take a reliable stream from the data ([`reliable`]): frames in verified, fresh data go
    /// to it, and its acks go back to the session's peer (authenticated, numbered).
    pub fn set_bulk(&mut self, bulk: BulkReceiver) {
        self.bulk = Some(Box::new(bulk));
    }

    /// The reliable stream, to read what arrived in order.
    pub fn bulk_mut(&mut self) -> Option<&mut BulkReceiver> {
        self.bulk.as_deref_mut()
    }

    /// The reliable stream.
    pub fn bulk(&self) -> Option<&BulkReceiver> {
        self.bulk.as_deref()
    }

    /// Counters.
    pub fn stats(&self) -> ReceiverStats {
        ReceiverStats {
            clock_skewed: self.est.clock_skewed(),
            ..self.stats
        }
    }

    /// The estimator, to set its operating point while it runs
    /// ([`OnlineEstimator::set_load_offset`]).
    pub fn estimator_mut(&mut self) -> &mut OnlineEstimator {
        &mut self.est
    }

    /// The last report sent.
    pub fn last_report(&self) -> Option<&AggReport> {
        self.last.as_ref()
    }

    /// The address of the session's peer, once data has verified.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.current.as_ref().map(|p| p.addr)
    }

    /// A datagram from `from`, received at kernel time `host`: a hello, or data of the session.
    pub fn handle_datagram(&mut self, host: Ts, from: SocketAddr, bytes: &[u8]) -> Result<(), WireError> {
        self.handle_datagram_radio(host, from, bytes, None)
    }

    /// [`Receiver::handle_datagram_radio`] with the receiver calibrating its model's operating
    /// point from its own receive times (`recv --self-calibrate`), by the one rule every driver
    /// follows: `cal` sees a datagram only when the receiver accepted it as data — refused,
    /// replayed and handshake datagrams never reach it — and after each window it used the
    /// estimator takes the new operating point at once. Returns the handling's result and the
    /// step of a window used.
    pub fn handle_calibrated<'c>(
        &mut self,
        host: Ts,
        from: SocketAddr,
        bytes: &[u8],
        tsft: Option<crate::time::Tsft>,
        cal: Option<&'c mut crate::selfcal::OnlineCalibrator>,
    ) -> (Result<(), WireError>, Option<&'c crate::selfcal::Step>) {
        let before = self.stats.received;
        let r = self.handle_datagram_radio(host, from, bytes, tsft);
        let step = match cal {
            Some(c) if self.stats.received > before => c.feed(&mut self.est, host, bytes.len() as u32),
            _ => None,
        };
        (r, step)
    }

    /// [`Receiver::handle_datagram`] with the radio's MAC timestamp of the frame that carried
    /// it, where the receiver can read one (a monitor interface, an emulator): the estimator's
    /// MAC-timestamp mode needs it.
    pub fn handle_datagram_radio(
        &mut self,
        host: Ts,
        from: SocketAddr,
        bytes: &[u8],
        tsft: Option<crate::time::Tsft>,
    ) -> Result<(), WireError> {
        let r = self.datagram(host, from, bytes, tsft);
        if let Err(e) = &r {
            self.stats.dropped += 1;
            if let WireError::Version(v) = e {
                self.stats.other_version += 1;
                self.stats.other_version_seen = Some(*v);
            }
        }
        r
    }

    fn datagram(
        &mut self,
        host: Ts,
        from: SocketAddr,
        bytes: &[u8],
        tsft: Option<crate::time::Tsft>,
    ) -> Result<(), WireError> {
        let (kind, _, _) = wire::peek(bytes)?;
        match kind {
            Kind::Hello => {
                let (h, cookie) = wire::parse_hello(bytes, &self.psk)?;
                if !self.hellos.allow(from, h.nonce_s, host) {
                    self.stats.hellos_limited += 1;
                    return Err(WireError::HelloFlood);
                }
                let epoch = host.as_nanos() / wire::COOKIE_EPOCH.as_nanos() as u64;
                if !wire::cookie_valid(&self.cookie_secret, epoch, &from, &h, &cookie) {
                    // Stateless: the cookie alone, at the hello's size, to the hello's source.
                    self.cookie_due = Some((
                        from,
                        Cookie {
                            hello: h,
                            cookie: wire::make_cookie(&self.cookie_secret, epoch, &from, &h),
                        },
                    ));
                    self.stats.cookies += 1;
                    return Ok(());
                }
                // The sender repeats a hello until it is answered: answer it the same way.
                if let Some(p) = self.pending.as_ref().or(self.current.as_ref()) {
                    if p.ack.hello == h && p.addr == from {
                        self.ack_due = Some(from);
                        return Ok(());
                    }
                }
                // A handshake answered for another address stands until data verifies under it
                // or it times out.
                let timeout = PENDING_TIMEOUT.max(self.est.interval() * 2);
                if let Some(p) = &self.pending {
                    if p.addr != from && host.saturating_since(p.since) < timeout {
                        self.stats.hellos_refused += 1;
                        return Err(WireError::Pending);
                    }
                }
                let ack = HelloAck {
                    hello: h,
                    nonce_r: nonce(&mut self.rng),
                };
                // The current session stays until data verifies under the new keys: a hello
                // costs one answer, not the session.
                self.pending = Some(Peer {
                    keys: SessionKeys::derive(&self.psk, h.session, h.station, &h.nonce_s, &ack.nonce_r),
                    addr: from,
                    ack,
                    since: host,
                });
                self.ack_due = Some(from);
                self.stats.hellos += 1;
                Ok(())
            }
            Kind::Data => self.data(host, from, bytes, tsft),
            _ => Err(WireError::Kind(bytes[3])),
        }
    }

    /// A data datagram: verified under the current (or the pending) session, fresh, then to
    /// the estimator and, if it carries one, its frame to the reliable stream.
    fn data(
        &mut self,
        host: Ts,
        from: SocketAddr,
        bytes: &[u8],
        tsft: Option<crate::time::Tsft>,
    ) -> Result<(), WireError> {
        let on_current = self
            .current
            .as_ref()
            .filter(|c| c.addr == from)
            .map(|c| wire::parse_data(bytes, &c.keys));
        let (d, payload) = match on_current {
            Some(Ok(x)) => x,
            other => {
                let Some(p) = self.pending.as_ref().filter(|p| p.addr == from) else {
                    return Err(match other {
                        Some(Err(e)) => e,
                        _ if self.current.is_none() && self.pending.is_none() => WireError::NoSession,
                        _ => WireError::Peer,
                    });
                };
                let x = wire::parse_data(bytes, &p.keys)?;
                // A new session: sequence numbers and report numbers start again.
                self.current = self.pending.take();
                self.number = 0;
                self.highest = 0;
                self.window = ReplayWindow::default();
                self.ack_number = 0;
                self.est.reset_sequence();
                self.stats.sessions += 1;
                x
            }
        };
        // Verified, but seen before (or too old): a replay, dropped before the estimator
        // and every counter.
        if !self.window.accept(d.seq) {
            self.stats.replayed += 1;
            return Err(WireError::Replay {
                seq: d.seq,
                highest: self.window.highest().unwrap_or(0),
            });
        }
        self.stats.received += 1;
        self.highest = self.highest.max(d.seq);
        self.est.push(&RxPacket {
            host,
            seq: Some(d.seq),
            sent: Some(d.sent),
            len: (payload + wire::DATA_HEADER_LEN).min(u32::MAX as usize) as u32,
            tsft,
            phy_rate_bps: self.phy_rate_bps,
        });
        // Zeros are padding; anything else is the reliable stream's frame.
        if let (Some(b), Some(&k)) = (self.bulk.as_mut(), bytes.get(wire::DATA_HEADER_LEN)) {
            if k != 0 {
                if let Err(e) = b.handle_frame(host, &bytes[wire::DATA_HEADER_LEN..]) {
                    self.stats.frames_refused += 1;
                    if matches!(e, reliable::FrameError::Stream { .. }) {
                        self.stats.other_stream += 1;
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// A datagram due at `now` — a hello-ack or a feedback — in [`Receiver::buffer`], with its
    /// destination (call until `None`). Feedback goes only to the session's peer.
    pub fn poll_transmit(&mut self, now: Ts) -> Option<(usize, SocketAddr)> {
        if let Some((to, c)) = self.cookie_due.take() {
            wire::emit_cookie(&mut self.buf, &self.psk, &c);
            return Some((self.buf.len(), to));
        }
        if let Some(to) = self.ack_due.take() {
            let p = self
                .pending
                .as_ref()
                .filter(|p| p.addr == to)
                .or(self.current.as_ref().filter(|p| p.addr == to))?;
            wire::emit_hello_ack(&mut self.buf, &self.psk, &p.ack);
            return Some((self.buf.len(), to));
        }
        if let Some(mut r) = self.est.poll_report(now) {
            if r.phy_rate_bps.is_none() {
                r.phy_rate_bps = self.phy_rate_bps.map(|v| v as f64);
            }
            self.last = Some(r);
            if let Some(peer) = self.current.as_ref() {
                self.number = self.number.checked_add(1)?;
                wire::emit_feedback(
                    &mut self.buf,
                    &peer.keys,
                    &Feedback {
                        number: self.number,
                        highest_seq: self.highest,
                        report: r,
                    },
                );
                self.stats.feedback += 1;
                return Some((self.buf.len(), peer.addr));
            }
        }
        let peer = self.current.as_ref()?;
        let b = self.bulk.as_mut()?;
        // Checked first: an acknowledgement taken from the stream is never lost for want of a
        // number (after 2^32 − 1 acks in one session, about 12 TB, the stream waits for the
        // next session).
        let number = self.ack_number.checked_add(1)?;
        if !b.poll_ack(now, &mut self.frame) {
            return None;
        }
        self.ack_number = number;
        wire::emit_ack(&mut self.buf, &peer.keys, self.ack_number, &self.frame);
        self.stats.acks += 1;
        Some((self.buf.len(), peer.addr))
    }

    /// Whether the last datagram from [`Receiver::poll_transmit`] was a report.
    pub fn sent_report(&self) -> bool {
        self.buf.len() == wire::FEEDBACK_LEN && self.buf.get(3) == Some(&2)
    }

    /// Bytes of the last datagram from [`Receiver::poll_transmit`].
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// When a report can next be due.
    pub fn poll_timeout(&self, now: Ts) -> Ts {
        let step = self.est.interval().as_nanos().max(1) as u64;
        let report = Ts((now.as_nanos() / step).saturating_add(1).saturating_mul(step));
        match self.bulk.as_ref().and_then(|b| b.poll_timeout()) {
            Some(t) => report.min(t),
            None => report,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::FeatureSpec;
    use crate::runtime::Mode;

    pub(crate) fn psk() -> Psk {
        Psk::new(b"the test's pre-shared key").unwrap()
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn pair(stations: usize) -> (Sender, Vec<Receiver>) {
        let s = Sender::new(
            psk(),
            [1; 32],
            stations,
            1472 - wire::DATA_HEADER_LEN,
            PiParams::default(),
            Duration::from_millis(500),
            Ts::ZERO,
        )
        .unwrap();
        let r = (0..stations)
            .map(|i| {
                let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(500)).unwrap();
                Receiver::new(psk(), [10 + i as u8; 32], est)
            })
            .collect();
        (s, r)
    }

    /// Run sender → receivers (from address `addr(1)`) and feedback back until `until`.
    fn run(s: &mut Sender, r: &mut [Receiver], from: Ts, until: Ts) {
        let mut now = from;
        while now < until {
            s.handle_timeout(now);
            while let Some(t) = s.poll_transmit(now) {
                let b = s.buffer()[..t.len].to_vec();
                let _ = r[t.station].handle_datagram(now, addr(1), &b);
            }
            for (i, rx) in r.iter_mut().enumerate() {
                while let Some((n, to)) = rx.poll_transmit(now) {
                    assert_eq!(to, addr(1), "replies go to the peer only");
                    let b = rx.buffer()[..n].to_vec();
                    let _ = s.handle_datagram(now, i, &b);
                }
            }
            now = s
                .poll_timeout()
                .min(now + Duration::from_millis(5))
                .max(now + Duration::from_micros(1));
        }
    }

    /// Data handed over with the radio's MAC timestamps: the MAC-timestamp estimator finds the
    /// frames (four packets per TSFT here) and the feedback says so.
    #[test]
    fn radio_timestamps_reach_the_estimator() {
        let (mut s, mut r) = pair(1);
        run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(100));
        assert!(s.connected(0));
        let mut now = Ts::from_millis(100);
        let mut k = 0u64;
        while now < Ts::from_millis(1300) {
            while let Some(t) = s.poll_transmit(now) {
                let b = s.buffer()[..t.len].to_vec();
                let tsft = crate::time::Tsft(1_000_000 + 500 * (k / 4));
                r[0].handle_datagram_radio(now, addr(1), &b, Some(tsft)).unwrap();
                k += 1;
            }
            while let Some((n, _)) = r[0].poll_transmit(now) {
                let b = r[0].buffer()[..n].to_vec();
                let _ = s.handle_datagram(now, 0, &b);
            }
            now = s
                .poll_timeout()
                .min(now + Duration::from_millis(5))
                .max(now + Duration::from_micros(1));
        }
        let rep = r[0].last_report().copied().expect("a report");
        assert!(rep.frames > 0);
        assert!((rep.mean_agg - 4.0).abs() < 0.2, "{rep:?}");
        // Without the timestamps the same mode sees no frame boundaries.
        let (mut s2, mut r2) = pair(1);
        run(&mut s2, &mut r2, Ts::ZERO, Ts::from_millis(1300));
        let rep2 = r2[0].last_report().copied().expect("a report without timestamps too");
        assert!(rep2.packets > 0 && (rep2.mean_agg - 4.0).abs() > 0.5, "{rep2:?}");
    }

    #[test]
    fn a_handshake_opens_the_session_then_data_flows_at_the_controller_rate() {
        let (mut s, mut r) = pair(1);
        assert!(!s.connected(0));
        run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(100));
        assert!(s.connected(0));
        assert_eq!(s.stats().sessions, 1);
        assert_eq!(r[0].stats().sessions, 1);
        assert_eq!(r[0].peer(), Some(addr(1)));
        // 20 Mb/s for ~100 ms (28-byte UDP/IP overhead counted in the pacing).
        let mbps = s.stats().sent as f64 * 1500.0 * 8.0 / 0.1 / 1e6;
        assert!((mbps - 20.0).abs() < 1.0, "{mbps}");
        assert_eq!(r[0].stats().received, s.stats().sent);
        assert_eq!(r[0].stats().dropped, 0);
    }

    #[test]
    fn feedback_raises_the_rate_and_silence_decays_it_then_a_new_session_opens() {
        let (mut s, mut r) = pair(1);
        run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(1600));
        assert!(s.stats().feedback >= 2, "{:?}", s.stats());
        assert!(s.rate(0).mbps > 20.0, "start-up raised the rate");
        // The receiver goes away: after 3 intervals the rate halves each interval, down to the
        // floor, and the sender says hello again.
        let hellos = s.stats().hellos;
        let mut now = Ts::from_millis(1600);
        for _ in 0..40 {
            now = now + Duration::from_millis(500);
            s.handle_timeout(now);
            while s.poll_transmit(now).is_some() {}
        }
        assert!(s.stats().silence_decays >= 30);
        assert_eq!(s.rate(0).mbps, 1.0, "decayed to the minimum");
        assert!(s.stats().hellos > hellos, "a new session is offered");
    }

    #[test]
    fn several_receivers_get_equal_airtime_rates() {
        let (mut s, mut r) = pair(2);
        r[0].phy_rate_bps = Some(866_000_000);
        r[1].phy_rate_bps = Some(433_000_000);
        let mut per_station = [0u64; 2];
        let mut now = Ts::ZERO;
        while now < Ts::from_millis(3000) {
            s.handle_timeout(now);
            while let Some(t) = s.poll_transmit(now) {
                per_station[t.station] += 1;
                let b = s.buffer()[..t.len].to_vec();
                r[t.station].handle_datagram(now, addr(1), &b).unwrap();
            }
            for (i, rx) in r.iter_mut().enumerate() {
                while let Some((n, _)) = rx.poll_transmit(now) {
                    let b = rx.buffer()[..n].to_vec();
                    s.handle_datagram(now, i, &b).unwrap();
                }
            }
            now = s
                .poll_timeout()
                .min(now + Duration::from_millis(5))
                .max(now + Duration::from_micros(1));
        }
        // The faster station is driven; the other gets half its rate (PHY 433 vs 866 Mb/s).
        assert!(s.rate(0).mbps > 20.0, "the loop moved: {}", s.rate(0).mbps);
        assert!((s.rate(1).mbps - s.rate(0).mbps / 2.0).abs() < 1e-9);
        assert!(per_station[0] > per_station[1] && per_station[1] > 0, "{per_station:?}");
        assert_eq!(s.stats().feedback_dropped, 0);
    }
}
