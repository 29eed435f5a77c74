//! Reliable delivery of a byte stream over paced datagrams, sans-IO: a [`BulkSender`] that
//! numbers the stream in segments and a [`BulkReceiver`] that puts them back in order.
//!
//! The sender decides *what* goes in each datagram, never *when*: the caller's pacer (the
//! aggregation controller's rate, or a fixed rate in the lab) asks for a frame with
//! [`BulkSender::poll_frame`] whenever it may send one, so repairs and parity spend the same
//! rate as new data, not extra. The frames travel inside the transport's authenticated data
//! payload; this module checks only their own shape.
//!
//! The mechanisms, each switchable for the ablation ([`BulkConfig`]):
//! - **Selective NACK, receiver-initiated** (as Flush, SenSys'07): a gap opens when a later
//!   segment arrives; once it has stayed open longer than the receiver's reordering wait (which
//!   learns from segments that arrive late on their own), the receiver asks for exactly the
//!   missing ranges, and asks again after 1.5 smoothed RTTs (the sender's estimate, carried in
//!   each data frame) while they stay missing. The sender never guesses from duplicate ACKs.
//! - **Cumulative ACK + SACK**: each acknowledgement carries the next expected segment, up to
//!   [`MAX_RANGES`] received ranges above it, and the receive window's end (flow control: the
//!   sender never sends beyond it).
//! - **RFC 6298 retransmission timer**: SRTT/RTTVAR from segments sent once (Karn's rule: none
//!   from a retransmitted segment), RTO = SRTT + max(G, 4·RTTVAR) within
//!   [[`BulkConfig::min_rto`], [`MAX_RTO`]], doubled at each expiry until an ACK moves the
//!   window; an expiry resends the oldest segment not acknowledged. The RFC's 1 s floor is a
//!   setting (200 ms by default, as Linux's).
//! - **XOR parity in the tail**: when the sender has nothing new to send (all data out, or the
//!   window full) and no repair waiting, it spends the idle sending slots on XOR parity over the
//!   segments not yet acknowledged, in whole groups of k ≈ 1/p for the loss p it measures
//!   (about one lost segment per group, which one parity repairs; at most [`MAX_GROUP`]), each
//!   group once; off while no loss has been seen. In the bulk of a transfer ARQ repairs exactly what is lost and parity would
//!   only cost bytes; at the tail, parity saves the wait for a NACK's round trip.
//!
//! Memory is fixed at construction: the sender keeps at most `window` segments (the bytes
//! waiting for acknowledgement, and those offered but not sent); the receiver holds at most
//! `window` segments past the delivered point, and drops (and counts) what lies beyond. The
//! repair queue and the parity store are bounded too.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Ts;

/// A data frame: kind, stream, flags, segment number, the sender's SRTT (µs, saturating),
/// payload length, payload (every frame's length is exact: a truncated frame never parses).
pub const DATA_HEADER_LEN: usize = 1 + 4 + 1 + 8 + 4 + 2;
/// A parity frame's header: kind, stream, k, first segment, XOR of the member lengths.
pub const PARITY_HEADER_LEN: usize = 1 + 4 + 1 + 8 + 2;
/// Bytes of the largest acknowledgement (kind, stream, cumulative point, window end, both range
/// lists full).
pub const MAX_ACK_LEN: usize = 1 + 4 + 8 + 8 + 2 * (1 + MAX_RANGES * 16);
/// SACK and NACK ranges an acknowledgement carries at most (each).
pub const MAX_RANGES: usize = 16;
/// Longest retransmission timeout.
pub const MAX_RTO: Duration = Duration::from_secs(60);
/// Longest wait between window probes.
pub const MAX_PROBE: Duration = Duration::from_secs(5);
/// Largest segment.
pub const MAX_SEGMENT: usize = 65_000;
/// Largest window (segments).
pub const MAX_WINDOW: usize = 1 << 20;
/// Parity groups a receiver keeps waiting for their members.
pub const PARITY_KEPT: usize = 64;
/// Largest parity group.
pub const MAX_GROUP: usize = 32;

const KIND_DATA: u8 = 1;
const KIND_PARITY: u8 = 2;
const KIND_ACK: u8 = 3;
const FLAG_FIN: u8 = 1;
const FLAG_RETX: u8 = 2;

/// Settings of both ends.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkConfig {
    /// Payload bytes per segment (the last may be shorter).
    pub segment: usize,
    /// Segments kept in flight (sender) and past the delivered point (receiver).
    pub window: usize,
    /// Receiver-initiated NACKs (off: repairs come from the retransmission timer alone).
    pub nack: bool,
    /// SACK ranges in acknowledgements (off: the cumulative point only).
    pub sack: bool,
    /// XOR parity in the tail.
    pub fec: bool,
    /// Floor of the retransmission timeout.
    pub min_rto: Duration,
    /// The first reordering wait before a gap is NACKed (it grows with reordering seen).
    pub reorder_wait: Duration,
    /// A receiver acknowledges at least every this many data frames, and at latest this long
    /// after an unacknowledged one.
    pub ack_every: u32,
    /// See `ack_every`.
    pub ack_delay: Duration,
    /// The transfer's identity, in every frame and acknowledgement: a frame or ack of another
    /// stream is refused, so a restarted sender's new transfer is never mixed into an old one's
    /// state. Drawn at random per transfer by a sender; a receiver with 0 takes the first
    /// frame's.
    pub stream: u32,
}

impl Default for BulkConfig {
    fn default() -> Self {
        BulkConfig {
            segment: 1400,
            window: 4096,
            nack: true,
            sack: true,
            fec: true,
            min_rto: Duration::from_millis(200),
            reorder_wait: Duration::from_millis(5),
            ack_every: 2,
            ack_delay: Duration::from_millis(10),
            stream: 0,
        }
    }
}

impl BulkConfig {
    /// The settings, if each is in range.
    pub fn check(self) -> Result<BulkConfig, FrameError> {
        let bad = |field: &'static str, what: String| Err(FrameError::Config { field, what });
        if !(1..=MAX_SEGMENT).contains(&self.segment) {
            return bad("segment", format!("{} bytes: 1..={MAX_SEGMENT}", self.segment));
        }
        if !(2..=MAX_WINDOW).contains(&self.window) {
            return bad("window", format!("{} segments: 2..={MAX_WINDOW}", self.window));
        }
        if self.min_rto.is_zero() || self.min_rto > MAX_RTO {
            return bad("min_rto", format!("{:?}: (0, {MAX_RTO:?}]", self.min_rto));
        }
        if self.ack_every == 0 || self.ack_delay > Duration::from_secs(1) {
            return bad("ack_every", "at least 1, ack_delay at most 1 s".into());
        }
        Ok(self)
    }

    /// Bytes of one data frame carrying a full segment.
    pub fn frame_len(&self) -> usize {
        DATA_HEADER_LEN + self.segment
    }
}

/// A frame that does not parse, or settings out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Shorter than its fields.
    #[error("reliable frame truncated: {field} needs byte {need}, frame has {len}")]
    Truncated {
        /// The field cut off.
        field: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes there are.
        len: usize,
    },
    /// A kind this end does not take.
    #[error("reliable frame of kind {0} not expected here")]
    Kind(u8),
    /// A field out of range.
    #[error("reliable frame field {field}: {what}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        what: String,
    },
    /// A frame or ack of another transfer.
    #[error("reliable frame of stream {got:#010x}, this transfer is stream {want:#010x} (another transfer: a restarted sender?)")]
    Stream {
        /// In the frame.
        got: u32,
        /// This end's.
        want: u32,
    },
    /// A setting out of range.
    #[error("reliable transfer setting {field}: {what}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is allowed.
        what: String,
    },
}

/// A cursor over a frame's bytes, naming the field that is cut off.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], FrameError> {
        let end = self.at + n;
        let s = self.b.get(self.at..end).ok_or(FrameError::Truncated {
            field,
            need: end,
            len: self.b.len(),
        })?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        Ok(self.take(1, field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, FrameError> {
        let s = self.take(2, field)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, FrameError> {
        let s = self.take(4, field)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, FrameError> {
        let s = self.take(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }
    fn rest(&self) -> &'a [u8] {
        &self.b[self.at.min(self.b.len())..]
    }
}

/// What the sender put in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// A segment sent for the first time.
    New(u64),
    /// A segment sent again (after a NACK or a timeout).
    Repair(u64),
    /// Parity over segments `first .. first + k`.
    Parity {
        /// First member.
        first: u64,
        /// Members.
        k: usize,
    },
}

/// Counters of a sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BulkSenderStats {
    /// Stream bytes in first transmissions.
    pub new_bytes: u64,
    /// Stream bytes sent again.
    pub repair_bytes: u64,
    /// Parity payload bytes.
    pub parity_bytes: u64,
    /// Frame bytes in all (headers included).
    pub frame_bytes: u64,
    /// Segments sent again after a NACK.
    pub nack_repairs: u64,
    /// Segments sent again after a retransmission timeout.
    pub rto_repairs: u64,
    /// Timer expiries.
    pub timeouts: u64,
    /// Parity frames.
    pub parity_frames: u64,
    /// Acknowledgements taken.
    pub acks: u64,
    /// Acknowledgements refused (malformed, or naming segments never sent).
    pub acks_refused: u64,
    /// RTT samples taken (Karn: first transmissions only).
    pub rtt_samples: u64,
}

/// RFC 6298's estimator.
#[derive(Clone, Debug)]
struct Rto {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The timeout in use (backed off after expiries).
    rto: Duration,
    /// The timeout the estimates give (what an acknowledgement of new data restores).
    computed: Duration,
    min: Duration,
    /// RFC 6298's G: here the receiver's acknowledgement delay (at least 1 ms). On a path
    /// whose delay barely varies RTTVAR falls towards zero, and an RTO of SRTT + 4·RTTVAR
    /// fires before a delayed acknowledgement can come back.
    granularity: Duration,
}

impl Rto {
    fn new(min: Duration, granularity: Duration) -> Rto {
        // RFC 6298 2.1: 1 s before the first sample (or the floor, if higher).
        let first = Duration::from_secs(1).max(min);
        Rto {
            srtt: None,
            rttvar: Duration::ZERO,
            rto: first,
            computed: first,
            min,
            granularity: granularity.max(Duration::from_millis(1)),
        }
    }

    fn sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                // β = 1/4, α = 1/8.
                let diff = s.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                self.srtt = Some(s * 7 / 8 + r / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        self.computed = (srtt + self.granularity.max(self.rttvar * 4)).clamp(self.min, MAX_RTO);
        self.rto = self.computed;
    }

    /// New data acknowledged: the back-off ends (as Linux does; RFC 6298 5.7 allows keeping it
    /// until the next sample, which Karn's rule can withhold for long after a burst of loss).
    fn progress(&mut self) {
        self.rto = self.computed;
    }

    fn back_off(&mut self) {
        self.rto = (self.rto * 2).min(MAX_RTO);
    }
}

/// Per-segment state at the sender.
#[derive(Clone, Copy, Debug, Default)]
struct SegMeta {
    /// Last transmission.
    sent_at: Option<Ts>,
    /// Sent more than once (no RTT sample: Karn).
    retx: bool,
    /// Received, as a SACK said.
    sacked: bool,
    /// Waiting in the repair queue.
    queued: bool,
    /// Covered by a parity frame already.
    parity: bool,
}

/// The sending end. See the module docs.
#[derive(Clone, Debug)]
pub struct BulkSender {
    cfg: BulkConfig,
    /// Segment bytes by slot (`seq % window`).
    buf: Vec<u8>,
    lens: Vec<u32>,
    meta: Vec<SegMeta>,
    /// Oldest segment not acknowledged cumulatively.
    base: u64,
    /// Next segment never sent.
    next_new: u64,
    /// Segments formed from offered bytes (`base .. formed` are in `buf`).
    formed: u64,
    /// Bytes of the segment being filled (`formed`'s slot).
    partial: usize,
    finished: bool,
    /// The last segment, once `finish` formed it.
    fin: Option<u64>,
    /// The receiver's window end (segments below it may be sent).
    peer_window_end: u64,
    repairs: VecDeque<u64>,
    rto: Rto,
    /// When the timer expires (something unacknowledged is in flight).
    deadline: Option<Ts>,
    /// Segments sent and segments NACKed, decayed: the loss the parity group follows.
    loss_sent: f64,
    loss_lost: f64,
    /// Next segment a parity group may start at.
    parity_next: u64,
    /// The receiver's window is closed and its update may be lost: send the next segment
    /// anyway (a window probe: the receiver answers even a segment it must drop).
    probe: bool,
    stats: BulkSenderStats,
}

impl BulkSender {
    /// A sender (settings checked).
    pub fn new(cfg: BulkConfig) -> Result<BulkSender, FrameError> {
        let cfg = cfg.check()?;
        Ok(BulkSender {
            buf: vec![0; cfg.window * cfg.segment],
            lens: vec![0; cfg.window],
            meta: vec![SegMeta::default(); cfg.window],
            base: 0,
            next_new: 0,
            formed: 0,
            partial: 0,
            finished: false,
            fin: None,
            peer_window_end: cfg.window as u64,
            repairs: VecDeque::with_capacity(cfg.window),
            rto: Rto::new(cfg.min_rto, cfg.ack_delay),
            deadline: None,
            loss_sent: 0.0,
            loss_lost: 0.0,
            parity_next: 0,
            probe: false,
            stats: BulkSenderStats::default(),
            cfg,
        })
    }

    /// Counters.
    pub fn stats(&self) -> BulkSenderStats {
        self.stats
    }

    /// Smoothed RTT, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.rto.srtt
    }

    /// Current retransmission timeout.
    pub fn rto(&self) -> Duration {
        self.rto.rto
    }

    /// Segments acknowledged cumulatively (all bytes before `acked() · segment` arrived).
    pub fn acked(&self) -> u64 {
        self.base
    }

    /// Whether stream bytes it took wait for acknowledgement (sent or not): `false` while it
    /// waits for its producer.
    pub fn outstanding(&self) -> bool {
        self.base < self.formed || (self.finished && !self.is_done())
    }

    /// Whether every segment, the last included, is acknowledged.
    pub fn is_done(&self) -> bool {
        self.fin.is_some_and(|f| self.base > f)
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.cfg.window as u64) as usize
    }

    /// Stream bytes [`BulkSender::offer`] would take now (none once finished).
    pub fn room(&self) -> usize {
        if self.finished {
            return 0;
        }
        let free = self.cfg.window as u64 - (self.formed - self.base).min(self.cfg.window as u64);
        (free as usize * self.cfg.segment).saturating_sub(self.partial)
    }

    /// Take stream bytes: returns how many fit (the rest must be offered again once
    /// acknowledgements free room). Nothing is taken after [`BulkSender::finish`].
    pub fn offer(&mut self, mut data: &[u8]) -> usize {
        let seg = self.cfg.segment;
        let mut taken = 0;
        while !data.is_empty() && !self.finished && self.formed - self.base < self.cfg.window as u64 {
            let slot = self.slot(self.formed);
            let n = (seg - self.partial).min(data.len());
            let at = slot * seg + self.partial;
            self.buf[at..at + n].copy_from_slice(&data[..n]);
            self.partial += n;
            taken += n;
            data = &data[n..];
            if self.partial == seg {
                self.form(slot);
            }
        }
        taken
    }

    fn form(&mut self, slot: usize) {
        self.lens[slot] = self.partial as u32;
        self.meta[slot] = SegMeta::default();
        self.formed += 1;
        self.partial = 0;
    }

    /// No more bytes: the segment being filled (or an empty one, if the stream ended on a
    /// segment boundary) is the last. `false` while the window has no room for it yet (call
    /// again after acknowledgements).
    pub fn finish(&mut self) -> bool {
        if self.finished {
            return true;
        }
        let ends_on_boundary = self.partial == 0 && self.formed > 0;
        if ends_on_boundary {
            // The last formed segment is the last one, unless it was sent already without the
            // flag: then an empty final segment follows.
            if self.next_new < self.formed {
                self.fin = Some(self.formed - 1);
                self.finished = true;
                return true;
            }
        }
        if self.formed - self.base >= self.cfg.window as u64 {
            return false;
        }
        let slot = self.slot(self.formed);
        self.form(slot);
        self.fin = Some(self.formed - 1);
        self.finished = true;
        true
    }

    /// The next frame into `out` (cleared first), if there is one to send now: a repair first,
    /// then new data, then tail parity. Call when the pacer may send a datagram.
    pub fn poll_frame(&mut self, now: Ts, out: &mut Vec<u8>) -> Option<Sent> {
        out.clear();
        while let Some(seq) = self.repairs.pop_front() {
            let slot = self.slot(seq);
            self.meta[slot].queued = false;
            if seq < self.base || self.meta[slot].sacked || seq >= self.next_new {
                continue;
            }
            self.meta[slot].retx = true;
            self.emit_data(now, seq, true, out);
            return Some(Sent::Repair(seq));
        }
        let open = self.next_new < self.peer_window_end || std::mem::take(&mut self.probe);
        if self.next_new < self.formed && open {
            let seq = self.next_new;
            self.next_new += 1;
            self.loss_sent += 1.0;
            self.emit_data(now, seq, false, out);
            return Some(Sent::New(seq));
        }
        if self.next_new < self.formed && self.deadline.is_none() {
            // Blocked by the receiver's window alone: the timer probes it.
            self.deadline = Some(now + self.rto.rto);
        }
        self.poll_parity(out)
    }

    fn emit_data(&mut self, now: Ts, seq: u64, retx: bool, out: &mut Vec<u8>) {
        let slot = self.slot(seq);
        let len = self.lens[slot] as usize;
        let mut flags = 0;
        if self.fin == Some(seq) {
            flags |= FLAG_FIN;
        }
        if retx {
            flags |= FLAG_RETX;
        }
        let srtt_us = self.rto.srtt.map_or(0, |s| s.as_micros().min(u32::MAX as u128) as u32);
        out.push(KIND_DATA);
        out.extend_from_slice(&self.cfg.stream.to_be_bytes());
        out.push(flags);
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&srtt_us.to_be_bytes());
        out.extend_from_slice(&(len as u16).to_be_bytes());
        let at = slot * self.cfg.segment;
        out.extend_from_slice(&self.buf[at..at + len]);
        self.meta[slot].sent_at = Some(now);
        if retx {
            self.stats.repair_bytes += len as u64;
        } else {
            self.stats.new_bytes += len as u64;
        }
        self.stats.frame_bytes += out.len() as u64;
        if self.deadline.is_none() {
            self.deadline = Some(now + self.rto.rto);
        }
    }

    /// The measured loss (NACKed ÷ sent, decayed), and the parity group size it asks for.
    pub fn parity_group(&self) -> Option<usize> {
        if !self.cfg.fec || self.loss_lost <= 0.0 || self.loss_sent <= 0.0 {
            return None;
        }
        let p = (self.loss_lost / self.loss_sent).clamp(1e-4, 0.5);
        Some(((1.0 / p).round() as usize).clamp(2, MAX_GROUP))
    }

    /// The next parity group (first member, size), if a whole one is due.
    fn parity_due(&self) -> Option<(u64, usize)> {
        let k = self.parity_group()?;
        let mut first = self.parity_next.max(self.base);
        // Members: sent, not acknowledged, not the last segment (its flag is not in parity),
        // consecutive.
        let end = self.next_new.min(self.fin.unwrap_or(u64::MAX));
        while first < end {
            let m = self.meta[self.slot(first)];
            if !m.sacked && !m.parity {
                break;
            }
            first += 1;
        }
        // Whole groups only: a smaller one costs a segment as well and covers fewer losses.
        (end.saturating_sub(first) >= k as u64).then_some((first, k))
    }

    /// Whether [`BulkSender::poll_frame`] would give a frame now (a repair, new data the
    /// window lets go, or a parity group): a driver that paces datagrams asks before it spends
    /// a pacing slot.
    /// (Repairs that became needless — acknowledged since they were queued — are dropped from
    /// the queue's front on the way, as `poll_frame` drops them.)
    /// Blocked by the receiver's window alone, it starts the timer that probes it, as
    /// `poll_frame` does.
    pub fn wants_to_send(&mut self, now: Ts) -> bool {
        while let Some(&seq) = self.repairs.front() {
            let slot = self.slot(seq);
            if seq < self.base || self.meta[slot].sacked || seq >= self.next_new {
                self.meta[slot].queued = false;
                self.repairs.pop_front();
            } else {
                return true;
            }
        }
        let open = self.next_new < self.peer_window_end || self.probe;
        if self.next_new < self.formed && open {
            return true;
        }
        if self.next_new < self.formed && self.deadline.is_none() {
            self.deadline = Some(now + self.rto.rto);
        }
        self.parity_due().is_some()
    }

    fn poll_parity(&mut self, out: &mut Vec<u8>) -> Option<Sent> {
        let (first, k) = self.parity_due()?;
        let seg = self.cfg.segment;
        out.push(KIND_PARITY);
        out.extend_from_slice(&self.cfg.stream.to_be_bytes());
        out.push(k as u8);
        out.extend_from_slice(&first.to_be_bytes());
        let mut len_xor = 0u16;
        let body = out.len();
        out.resize(body + seg, 0);
        for seq in first..first + k as u64 {
            let slot = self.slot(seq);
            let len = self.lens[slot] as usize;
            len_xor ^= len as u16;
            let src = &self.buf[slot * seg..slot * seg + len];
            for (o, s) in out[body..body + len].iter_mut().zip(src) {
                *o ^= s;
            }
            self.meta[slot].parity = true;
        }
        out.splice(body..body, len_xor.to_be_bytes());
        self.parity_next = first + k as u64;
        self.stats.parity_bytes += seg as u64;
        self.stats.parity_frames += 1;
        self.stats.frame_bytes += out.len() as u64;
        Some(Sent::Parity { first, k })
    }

    /// When the retransmission timer expires, if it runs.
    pub fn poll_timeout(&self) -> Option<Ts> {
        self.deadline
    }

    /// The timer: at its expiry, the oldest segment not acknowledged is queued for repair and
    /// the timeout doubles.
    pub fn handle_timeout(&mut self, now: Ts) {
        let Some(d) = self.deadline else { return };
        if now < d {
            return;
        }
        if self.base >= self.next_new {
            // Nothing in flight: if data waits behind a closed window, probe it (backing off),
            // else the timer stops.
            if self.next_new < self.formed && self.next_new >= self.peer_window_end {
                self.probe = true;
                self.rto.back_off();
                // A window held closed (a receiver hashing a large part before it reads on)
                // is asked again at least this often: the ends' idle limits never see silence.
                self.deadline = Some(now + self.rto.rto.min(MAX_PROBE));
            } else {
                self.deadline = None;
            }
            return;
        }
        // Every hole below a SACKed segment whose last copy left at least an RTO ago is
        // repaired, as a SACK scoreboard does after a timeout (RFC 6675 5.1), and the oldest
        // segment not acknowledged: one per expiry would take one RTO per lost segment. A segment repaired a moment ago (after
        // a NACK) is in flight, not lost: if only such remain, the timer waits for the oldest
        // of them, without backing off (nothing expired).
        let rto = self.rto.rto;
        let mut wait_for: Option<Ts> = None;
        let mut repaired = 0u64;
        // Beyond the highest SACKed segment nothing says a segment is lost rather than its
        // acknowledgement late: only the oldest is repaired there (the RFC's one).
        let sacked_below = (self.base..self.next_new)
            .rev()
            .find(|&s| self.meta[self.slot(s)].sacked)
            .unwrap_or(self.base);
        let mut first = true;
        for seq in self.base..self.next_new {
            let m = self.meta[self.slot(seq)];
            if m.sacked || m.queued {
                continue;
            }
            if !first && seq > sacked_below {
                break;
            }
            first = false;
            match m.sent_at {
                Some(t) if now.as_nanos() < (t + rto).as_nanos() => {
                    wait_for = Some(wait_for.map_or(t + rto, |w| w.min(t + rto)));
                }
                _ => {
                    if self.queue_repair(seq) {
                        repaired += 1;
                    }
                }
            }
        }
        if repaired > 0 {
            self.stats.timeouts += 1;
            self.stats.rto_repairs += repaired;
            self.loss_lost += repaired as f64;
            self.rto.back_off();
            wait_for = None;
        }
        self.deadline = Some(wait_for.unwrap_or(now + self.rto.rto));
    }

    fn queue_repair(&mut self, seq: u64) -> bool {
        let slot = self.slot(seq);
        if self.meta[slot].queued || self.meta[slot].sacked || seq < self.base || seq >= self.next_new {
            return false;
        }
        self.meta[slot].queued = true;
        self.repairs.push_back(seq);
        true
    }

    /// An acknowledgement from the receiver. Refused (and counted) if malformed or if it names
    /// segments never sent: nothing changes then.
    pub fn handle_ack(&mut self, now: Ts, frame: &[u8]) -> Result<(), FrameError> {
        let ack = match Ack::parse(frame) {
            Ok(a) if a.stream != self.cfg.stream => Err(FrameError::Stream {
                got: a.stream,
                want: self.cfg.stream,
            }),
            other => other,
        };
        let ack = match ack {
            Ok(a) => a,
            Err(e) => {
                self.stats.acks_refused += 1;
                return Err(e);
            }
        };
        let sane = ack.cum <= self.next_new
            && ack.window_end >= ack.cum
            && ack
                .sack
                .iter()
                .chain(&ack.nack)
                .all(|&(s, e)| s >= ack.cum && s < e && e <= self.next_new);
        if !sane {
            self.stats.acks_refused += 1;
            return Err(FrameError::Field {
                field: "ack",
                what: format!("names segments beyond {} sent", self.next_new),
            });
        }
        self.stats.acks += 1;
        // The window a receiver can offer ends at most a window past what it acknowledged.
        let window_end = ack.window_end.min(ack.cum.saturating_add(self.cfg.window as u64));
        self.peer_window_end = self.peer_window_end.max(window_end);
        let mut sample = None;
        let mut progressed = false;
        // A cumulative advance across a repaired (or parity-covered) segment: the segments
        // behind it waited for the repair, so their times are no round trips (as Linux's
        // FLAG_RETRANS_DATA_ACKED): no sample from this advance.
        let mut ambiguous = false;
        while self.base < ack.cum {
            let m = self.meta[self.slot(self.base)];
            ambiguous |= m.retx || m.parity;
            if !m.retx && !m.sacked && !ambiguous {
                sample = sample.max(m.sent_at);
            }
            self.base += 1;
            progressed = true;
        }
        if self.cfg.sack {
            for &(s, e) in &ack.sack {
                for seq in s.max(self.base)..e {
                    let slot = self.slot(seq);
                    let m = &mut self.meta[slot];
                    if !m.sacked {
                        m.sacked = true;
                        if !m.retx && !m.parity {
                            sample = sample.max(m.sent_at);
                        }
                    }
                }
            }
        }
        if let Some(sent) = sample {
            self.rto
                .sample(Duration::from_nanos(now.as_nanos().saturating_sub(sent.as_nanos())));
            self.stats.rtt_samples += 1;
        }
        if self.cfg.nack {
            // A NACK for a segment repaired less than an SRTT ago was sent before that repair
            // could arrive (the receiver asks again only after 1.5 SRTT): already answered.
            let fresh = self.rto.srtt.unwrap_or(self.rto.rto);
            for &(s, e) in &ack.nack {
                for seq in s.max(self.base)..e {
                    let m = self.meta[self.slot(seq)];
                    if m.retx && m.sent_at.is_some_and(|t| now.as_nanos() < (t + fresh).as_nanos()) {
                        continue;
                    }
                    if self.queue_repair(seq) {
                        self.stats.nack_repairs += 1;
                        self.loss_lost += 1.0;
                    }
                }
            }
        }
        // Decay the loss measure over about 1,000 segments.
        if self.loss_sent > 1000.0 {
            self.loss_sent *= 0.5;
            self.loss_lost *= 0.5;
        }
        if progressed {
            self.rto.progress();
            // RFC 6298 5.3: restart the timer when new data is acknowledged.
            self.deadline = (self.base < self.next_new).then(|| now + self.rto.rto);
        }
        Ok(())
    }
}

/// An acknowledgement's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    /// The transfer it acknowledges ([`BulkConfig::stream`]).
    pub stream: u32,
    /// Next segment expected (all before it received).
    pub cum: u64,
    /// Segments below this may be sent (flow control).
    pub window_end: u64,
    /// Received ranges above `cum`, `[start, end)`.
    pub sack: Vec<(u64, u64)>,
    /// Missing ranges the receiver asks for now.
    pub nack: Vec<(u64, u64)>,
}

impl Ack {
    /// Write into `out` (cleared first).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(KIND_ACK);
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.extend_from_slice(&self.cum.to_be_bytes());
        out.extend_from_slice(&self.window_end.to_be_bytes());
        for list in [&self.sack, &self.nack] {
            let n = list.len().min(MAX_RANGES);
            out.push(n as u8);
            for &(s, e) in &list[..n] {
                out.extend_from_slice(&s.to_be_bytes());
                out.extend_from_slice(&e.to_be_bytes());
            }
        }
    }

    /// Parse (at most [`MAX_RANGES`] ranges each, each non-empty).
    pub fn parse(b: &[u8]) -> Result<Ack, FrameError> {
        let mut r = Reader { b, at: 0 };
        let kind = r.u8("kind")?;
        if kind != KIND_ACK {
            return Err(FrameError::Kind(kind));
        }
        let stream = r.u32("stream")?;
        let cum = r.u64("cum")?;
        let window_end = r.u64("window_end")?;
        let mut lists = [Vec::new(), Vec::new()];
        for (list, name) in lists.iter_mut().zip(["sack ranges", "nack ranges"]) {
            let n = r.u8(name)? as usize;
            if n > MAX_RANGES {
                return Err(FrameError::Field {
                    field: name,
                    what: format!("{n} ranges, at most {MAX_RANGES}"),
                });
            }
            for _ in 0..n {
                let (s, e) = (r.u64("range start")?, r.u64("range end")?);
                if e <= s {
                    return Err(FrameError::Field {
                        field: name,
                        what: format!("empty range {s}..{e}"),
                    });
                }
                list.push((s, e));
            }
        }
        if !r.rest().is_empty() {
            return Err(FrameError::Field {
                field: "ack",
                what: format!("{} bytes after the ranges", r.rest().len()),
            });
        }
        let [sack, nack] = lists;
        Ok(Ack {
            stream,
            cum,
            window_end,
            sack,
            nack,
        })
    }
}

/// Counters of a receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BulkReceiverStats {
    /// Data frames taken (first copies).
    pub segments: u64,
    /// Copies of segments already held.
    pub duplicates: u64,
    /// Segments beyond the window (dropped; the sender's flow control should prevent them).
    pub beyond_window: u64,
    /// Segments rebuilt from parity.
    pub recovered: u64,
    /// Parity frames taken.
    pub parity: u64,
    /// Frames refused (malformed).
    pub refused: u64,
    /// Segments NACKed (each request counted).
    pub nacked: u64,
    /// Acknowledgements emitted.
    pub acks: u64,
    /// Gaps that filled without a NACK, later than the reordering wait allowed (the wait grew).
    pub late: u64,
    /// Bytes delivered in order.
    pub delivered_bytes: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Hole {
    /// When a later segment showed it missing.
    since: Option<Ts>,
    /// When it was last NACKed.
    nacked: Option<Ts>,
}

#[derive(Clone, Debug)]
struct Parity {
    first: u64,
    k: usize,
    len_xor: u16,
    bytes: Vec<u8>,
}

/// The receiving end. See the module docs.
#[derive(Clone, Debug)]
pub struct BulkReceiver {
    cfg: BulkConfig,
    /// The transfer taken ([`BulkConfig::stream`], or the first frame's).
    stream: Option<u32>,
    buf: Vec<u8>,
    lens: Vec<u32>,
    /// Which segment each slot holds (`u64::MAX`: none).
    holds: Vec<u64>,
    holes: Vec<Hole>,
    /// Next segment to deliver.
    delivered: u64,
    /// Next segment missing.
    cum: u64,
    /// One past the highest segment held.
    highest: u64,
    /// Segments in `cum .. highest` not held (at most a window of them).
    missing: std::collections::BTreeSet<u64>,
    /// The earliest NACK due, while nothing it depends on changed (`None` inside: none due;
    /// outer `None`: to be recomputed). A scan of `missing` per event cost most of a fast
    /// transfer's time.
    nack_next: std::cell::Cell<Option<Option<Ts>>>,
    fin: Option<u64>,
    srtt_hint: Duration,
    reorder_wait: Duration,
    parity: VecDeque<Parity>,
    unacked: u32,
    ack_due: Option<Ts>,
    /// The window end the last acknowledgement gave.
    advertised: u64,
    stats: BulkReceiverStats,
}

impl BulkReceiver {
    /// A receiver (settings checked; the sender's `segment` and a window at least as large).
    pub fn new(cfg: BulkConfig) -> Result<BulkReceiver, FrameError> {
        let cfg = cfg.check()?;
        Ok(BulkReceiver {
            stream: (cfg.stream != 0).then_some(cfg.stream),
            buf: vec![0; cfg.window * cfg.segment],
            lens: vec![0; cfg.window],
            holds: vec![u64::MAX; cfg.window],
            holes: vec![Hole::default(); cfg.window],
            delivered: 0,
            cum: 0,
            highest: 0,
            missing: std::collections::BTreeSet::new(),
            nack_next: std::cell::Cell::new(None),
            fin: None,
            srtt_hint: Duration::ZERO,
            reorder_wait: cfg.reorder_wait,
            parity: VecDeque::with_capacity(PARITY_KEPT),
            unacked: 0,
            ack_due: None,
            advertised: cfg.window as u64,
            stats: BulkReceiverStats::default(),
            cfg,
        })
    }

    /// Counters.
    pub fn stats(&self) -> BulkReceiverStats {
        self.stats
    }

    /// The reordering wait it has learnt.
    pub fn reorder_wait(&self) -> Duration {
        self.reorder_wait
    }

    /// Whether the last segment and all before it arrived.
    pub fn is_complete(&self) -> bool {
        self.fin.is_some_and(|f| self.cum > f)
    }

    /// Whether everything was also delivered.
    pub fn is_done(&self) -> bool {
        self.fin.is_some_and(|f| self.delivered > f)
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.cfg.window as u64) as usize
    }

    fn held(&self, seq: u64) -> bool {
        self.holds[self.slot(seq)] == seq
    }

    /// A frame from the sender (data or parity).
    pub fn handle_frame(&mut self, now: Ts, frame: &[u8]) -> Result<(), FrameError> {
        let r = self.parse_frame(now, frame);
        if r.is_err() {
            self.stats.refused += 1;
        }
        r
    }

    fn parse_frame(&mut self, now: Ts, frame: &[u8]) -> Result<(), FrameError> {
        let mut r = Reader { b: frame, at: 0 };
        let kind = r.u8("kind")?;
        let stream = r.u32("stream")?;
        if let Some(want) = self.stream.filter(|&w| w != stream) {
            return Err(FrameError::Stream { got: stream, want });
        }
        // The stream is learnt only from a frame that parsed whole.
        let r = self.parse_body(now, kind, r);
        if r.is_ok() && self.stream.is_none() {
            self.stream = Some(stream);
        }
        r
    }

    fn parse_body(&mut self, now: Ts, kind: u8, mut r: Reader<'_>) -> Result<(), FrameError> {
        match kind {
            KIND_DATA => {
                let flags = r.u8("flags")?;
                let seq = r.u64("segment")?;
                let srtt_us = r.u32("srtt")?;
                let len = r.u16("length")? as usize;
                let payload = r.rest();
                if payload.len() != len {
                    return Err(FrameError::Field {
                        field: "length",
                        what: format!("{len} bytes said, {} there", payload.len()),
                    });
                }
                if payload.len() > self.cfg.segment {
                    return Err(FrameError::Field {
                        field: "payload",
                        what: format!("{} bytes, segment is {}", payload.len(), self.cfg.segment),
                    });
                }
                if flags & FLAG_FIN == 0 && payload.len() != self.cfg.segment {
                    return Err(FrameError::Field {
                        field: "payload",
                        what: format!("{} bytes in a segment that is not the last", payload.len()),
                    });
                }
                if seq == u64::MAX {
                    return Err(FrameError::Field {
                        field: "segment",
                        what: "number 2^64 − 1 (reserved)".into(),
                    });
                }
                // The hint moves the re-NACK times: taken when it moved by an eighth or more.
                let hint = Duration::from_micros(srtt_us as u64);
                if srtt_us > 0 && hint.abs_diff(self.srtt_hint) > self.srtt_hint / 8 {
                    self.srtt_hint = hint;
                    self.nack_next.set(None);
                }
                // A last segment beyond the window says nothing yet (it is dropped below).
                if flags & FLAG_FIN != 0 && seq < self.delivered + self.cfg.window as u64 {
                    match self.fin {
                        Some(f) if f != seq => {
                            return Err(FrameError::Field {
                                field: "flags",
                                what: format!("a second last segment {seq} (the last is {f})"),
                            })
                        }
                        _ => self.fin = Some(seq),
                    }
                }
                self.take_segment(now, seq, payload, flags & FLAG_RETX != 0);
                Ok(())
            }
            KIND_PARITY => {
                let k = r.u8("k")? as usize;
                let first = r.u64("first")?;
                let len_xor = r.u16("len_xor")?;
                let bytes = r.rest();
                if !(2..=MAX_GROUP).contains(&k) || bytes.len() != self.cfg.segment {
                    return Err(FrameError::Field {
                        field: "parity",
                        what: format!(
                            "k {k} (2..={MAX_GROUP}), {} bytes (segment {})",
                            bytes.len(),
                            self.cfg.segment
                        ),
                    });
                }
                let Some(end) = first
                    .checked_add(k as u64)
                    .filter(|&e| e <= self.delivered + self.cfg.window as u64)
                else {
                    return Err(FrameError::Field {
                        field: "first",
                        what: format!("parity group {first} + {k} beyond the window"),
                    });
                };
                self.stats.parity += 1;
                if end <= self.cum {
                    return Ok(());
                }
                if self.parity.len() == PARITY_KEPT {
                    self.parity.pop_front();
                }
                self.parity.push_back(Parity {
                    first,
                    k,
                    len_xor,
                    bytes: bytes.to_vec(),
                });
                self.try_parity(now);
                Ok(())
            }
            other => Err(FrameError::Kind(other)),
        }
    }

    fn take_segment(&mut self, now: Ts, seq: u64, payload: &[u8], retx: bool) {
        self.unacked += 1;
        if self.ack_due.is_none() {
            self.ack_due = Some(now + self.cfg.ack_delay);
        }
        if seq < self.cum || self.held(seq) {
            self.stats.duplicates += 1;
            // A duplicate says an acknowledgement was lost or late: acknowledge now.
            self.ack_due = Some(now);
            return;
        }
        if seq >= self.delivered + self.cfg.window as u64 {
            self.stats.beyond_window += 1;
            return;
        }
        if self.fin.is_some_and(|f| seq > f) {
            self.stats.refused += 1;
            return;
        }
        let slot = self.slot(seq);
        let seg = self.cfg.segment;
        self.buf[slot * seg..slot * seg + payload.len()].copy_from_slice(payload);
        self.lens[slot] = payload.len() as u32;
        self.holds[slot] = seq;
        self.stats.segments += 1;
        // A gap that fills by itself after the wait was reordering, not loss: wait longer.
        if self.missing.remove(&seq) {
            self.nack_next.set(None);
        }
        let hole = std::mem::take(&mut self.holes[slot]);
        if let (Some(since), false) = (hole.since, retx) {
            let open = Duration::from_nanos(now.as_nanos().saturating_sub(since.as_nanos()));
            if open > self.reorder_wait {
                self.stats.late += 1;
                self.reorder_wait = (open * 5 / 4).min(Duration::from_secs(1));
                self.nack_next.set(None);
            }
        }
        if seq > self.highest {
            // Segments skipped over are missing from now.
            for s in self.highest.max(self.cum)..seq {
                if !self.held(s) {
                    let sl = self.slot(s);
                    self.holes[sl] = Hole {
                        since: Some(now),
                        nacked: None,
                    };
                    self.missing.insert(s);
                    self.nack_next.set(None);
                }
            }
            self.ack_due = Some(now);
        }
        // Out of order, or filling a gap: acknowledge at once (RFC 5681 4.2), so that the
        // sender's timer does not wait on the delayed acknowledgement of a repair.
        if seq != self.cum || seq + 1 < self.highest {
            self.ack_due = Some(now);
        }
        self.highest = self.highest.max(seq + 1);
        while self.cum < self.highest && self.held(self.cum) {
            self.cum += 1;
        }
        if self.unacked >= self.cfg.ack_every || self.is_complete() {
            self.ack_due = Some(now);
        }
        self.try_parity(now);
    }

    fn try_parity(&mut self, now: Ts) {
        let mut i = 0;
        while i < self.parity.len() {
            let p = &self.parity[i];
            let (first, end) = (p.first, p.first + p.k as u64);
            if end <= self.cum {
                self.parity.remove(i);
                continue;
            }
            // The missing members (counted, the first kept: no allocation per arrival).
            let mut missing = (first..end).filter(|&s| !self.held(s) && s >= self.cum);
            let (one, more) = (missing.next(), missing.next().is_some());
            // Members delivered and overwritten cannot take part.
            let usable = (first..end).all(|s| s >= self.cum || self.held(s));
            if let (Some(seq), false, true) = (one, more, usable) {
                let Some(p) = self.parity.remove(i) else { return };
                let seg = self.cfg.segment;
                let mut bytes = p.bytes;
                let mut len = p.len_xor;
                for s in (first..end).filter(|&s| s != seq) {
                    let slot = self.slot(s);
                    len ^= self.lens[slot] as u16;
                    for (b, x) in bytes
                        .iter_mut()
                        .zip(&self.buf[slot * seg..slot * seg + self.lens[slot] as usize])
                    {
                        *b ^= x;
                    }
                }
                let len = (len as usize).min(seg);
                self.stats.recovered += 1;
                // Rebuilt, not sent again: counted as neither late nor a duplicate.
                self.take_segment(now, seq, &bytes[..len], true);
                return;
            }
            if one.is_none() {
                self.parity.remove(i);
                continue;
            }
            i += 1;
        }
    }

    /// In-order bytes: the next segment not yet delivered, if it arrived. Call until `None`.
    pub fn read(&mut self) -> Option<&[u8]> {
        if self.delivered >= self.cum {
            return None;
        }
        let seq = self.delivered;
        self.delivered += 1;
        let slot = self.slot(seq);
        let seg = self.cfg.segment;
        let len = self.lens[slot] as usize;
        self.stats.delivered_bytes += len as u64;
        // The window moved a quarter past what the sender knows: tell it (it may be waiting).
        if self.ack_due.is_none()
            && self.delivered + self.cfg.window as u64 >= self.advertised + self.cfg.window as u64 / 4
        {
            self.ack_due = Some(Ts::ZERO);
        }
        Some(&self.buf[slot * seg..slot * seg + len])
    }

    /// When an acknowledgement or a NACK is due.
    pub fn poll_timeout(&self) -> Option<Ts> {
        let nack = self.next_nack_due();
        match (self.ack_due, nack) {
            (Some(a), Some(n)) => Some(a.min(n)),
            (a, n) => a.or(n),
        }
    }

    fn renack(&self) -> Duration {
        // Before the sender has measured a round trip, its first timeout (1 s) bounds one.
        let rtt = if self.srtt_hint.is_zero() {
            Duration::from_secs(1)
        } else {
            self.srtt_hint
        };
        (rtt * 3 / 2).max(self.reorder_wait * 2).max(Duration::from_millis(1))
    }

    fn nack_due_at(&self, h: &Hole) -> Option<Ts> {
        let since = h.since?;
        Some(match h.nacked {
            None => since + self.reorder_wait,
            Some(t) => t + self.renack(),
        })
    }

    fn next_nack_due(&self) -> Option<Ts> {
        if !self.cfg.nack {
            return None;
        }
        if let Some(cached) = self.nack_next.get() {
            return cached;
        }
        let due = self
            .missing
            .iter()
            .filter_map(|&s| self.nack_due_at(&self.holes[self.slot(s)]))
            .min();
        self.nack_next.set(Some(due));
        due
    }

    /// An acknowledgement into `out` (cleared first), if one is due at `now`.
    pub fn poll_ack(&mut self, now: Ts, out: &mut Vec<u8>) -> bool {
        let nack_due = self.next_nack_due().is_some_and(|t| t <= now);
        if !(self.ack_due.is_some_and(|t| t <= now) || nack_due) {
            return false;
        }
        let mut ack = Ack {
            stream: self.stream.unwrap_or(0),
            cum: self.cum,
            window_end: self.delivered + self.cfg.window as u64,
            ..Ack::default()
        };
        if self.cfg.sack || self.cfg.nack {
            // Runs of missing segments (the set is small: the losses of one window), and the
            // held runs between them.
            let mut held_from = self.cum;
            let mut it = self.missing.iter().copied().peekable();
            while let Some(start) = it.next() {
                if self.cfg.sack && start > held_from && ack.sack.len() < MAX_RANGES {
                    ack.sack.push((held_from, start));
                }
                let mut end = start + 1;
                while it.peek() == Some(&end) {
                    it.next();
                    end += 1;
                }
                let due = self.cfg.nack
                    && (start..end).any(|m| self.nack_due_at(&self.holes[self.slot(m)]).is_some_and(|t| t <= now));
                if due && ack.nack.len() < MAX_RANGES {
                    for m in start..end {
                        let slot = self.slot(m);
                        self.holes[slot].nacked = Some(now);
                        self.holes[slot].since.get_or_insert(now);
                    }
                    self.stats.nacked += end - start;
                    self.nack_next.set(None);
                    ack.nack.push((start, end));
                }
                held_from = end;
            }
            if self.cfg.sack && self.highest > held_from && ack.sack.len() < MAX_RANGES {
                ack.sack.push((held_from, self.highest));
            }
        }
        ack.emit(out);
        self.advertised = ack.window_end;
        self.stats.acks += 1;
        self.unacked = 0;
        self.ack_due = None;
        true
    }
}

#[cfg(test)]
pub(crate) mod tests;
