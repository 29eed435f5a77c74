//! Ground truth: which packets start an A-MPDU, and how many MPDUs each A-MPDU carried.
//!
//! Input: the selected flow's [`PacketRecord`]s in capture order. Output, per packet:
//! `first_of_frame` (the paper's Y) and a frame id; per frame: aggregation level (packet count
//! capped at N_max), PHY rate, TSFT, packets and bytes. No clock; times are only copied.
//!
//! Grouping rule: where radiotap carries A-MPDU status, a frame is a run of packets with the same
//! (reference number, channel), closed early by the last-subframe flag — TSFT is *not* assumed equal
//! inside such a frame, nor is it assumed to mark the start or the end of the PPDU. Where there is
//! no A-MPDU status, a frame is a run of packets with equal TSFT and PHY rate. 802.11
//! retransmissions of an MPDU already seen are dropped first ([`Dedup`]).

use std::collections::HashMap;

use crate::capture::{Mac, PacketRecord};
use crate::time::{Ts, Tsft};

/// Errors of labelling.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No packet carries TSFT or A-MPDU status.
    #[error("no ground truth: none of the {packets} packets carries a radiotap TSFT or A-MPDU status (a receiver-side capture needs `--truth` from a sniffer)")]
    NoGroundTruth {
        /// Packets seen.
        packets: u64,
    },
    /// N_max out of range.
    #[error("n_max must be 1..=1024, got {0}")]
    BadNMax(u32),
}

/// Default cap on the aggregation level (the 802.11ac block-ack window).
pub const DEFAULT_N_MAX: u16 = 64;

/// Which A-MPDU a packet belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Ampdu { reference: u32, channel: u16 },
    Tsft { tsft: u64, rate: u64 },
    Unknown,
}

fn key_of(r: &PacketRecord) -> (Key, bool) {
    match r.radio {
        Some(rt) => match (rt.ampdu, rt.tsft) {
            (Some(a), _) => (
                Key::Ampdu {
                    reference: a.reference,
                    channel: rt.channel_mhz.unwrap_or(0),
                },
                a.is_last() == Some(true),
            ),
            (None, Some(t)) => (
                Key::Tsft {
                    tsft: t,
                    rate: rt.phy_rate_bps().unwrap_or(0),
                },
                false,
            ),
            (None, None) => (Key::Unknown, true),
        },
        None => (Key::Unknown, true),
    }
}

/// One A-MPDU (or single MPDU) of the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Frame {
    /// Frame id, 0-based in the flow.
    pub id: u64,
    /// Packet number (capture) of its first packet.
    pub first_number: u64,
    /// Packets of the flow in it.
    pub packets: u32,
    /// Aggregation level: `packets` capped at N_max.
    pub level: u16,
    /// Bytes (original lengths).
    pub bytes: u64,
    /// TSFT of its first packet.
    pub tsft: Option<Tsft>,
    /// PHY rate of its first packet.
    pub phy_rate_bps: Option<u64>,
    /// A-MPDU reference number, when the capture has one.
    pub ampdu_ref: Option<u32>,
    /// Host time of its first packet.
    pub first_host: Ts,
    /// Host time of its last packet.
    pub last_host: Ts,
}

/// What [`Labeler::push`] says about one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Labeled {
    /// This packet starts a new frame.
    pub first_of_frame: bool,
    /// Id of the frame it belongs to.
    pub frame_id: u64,
    /// The frame this packet closed (the previous one), if any.
    pub closed: Option<Frame>,
}

/// Streaming labeller: O(1) memory, one frame open at a time.
#[derive(Clone, Debug)]
pub struct Labeler {
    n_max: u16,
    open: Option<(Key, bool, Frame)>,
    next_id: u64,
    ground_truth: bool,
}

impl Labeler {
    /// New labeller capping levels at `n_max` (1..=1024).
    pub fn new(n_max: u16) -> Result<Labeler, Error> {
        if n_max == 0 || n_max > 1024 {
            return Err(Error::BadNMax(n_max as u32));
        }
        Ok(Labeler {
            n_max,
            open: None,
            next_id: 0,
            ground_truth: false,
        })
    }

    /// Whether any packet so far carried TSFT or A-MPDU status.
    pub fn has_ground_truth(&self) -> bool {
        self.ground_truth
    }

    /// Label one packet.
    pub fn push(&mut self, r: &PacketRecord) -> Labeled {
        let (key, last) = key_of(r);
        // The "last subframe" flag closes the A-MPDU after the last packet of that MPDU (an
        // A-MSDU's packets all carry their MPDU's radio header).
        let last = last && r.msdu.0 + 1 >= r.msdu.1;
        self.ground_truth |= key != Key::Unknown;
        let bytes = r.len as u64;
        if let Some((k, closed_by_last, f)) = &mut self.open {
            if *k == key && key != Key::Unknown && !*closed_by_last {
                f.packets += 1;
                f.level = f.packets.min(self.n_max as u32) as u16;
                f.bytes += bytes;
                f.last_host = r.host;
                *closed_by_last = last;
                return Labeled {
                    first_of_frame: false,
                    frame_id: f.id,
                    closed: None,
                };
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let frame = Frame {
            id,
            first_number: r.number,
            packets: 1,
            level: 1,
            bytes,
            tsft: r.tsft(),
            phy_rate_bps: r.phy_rate_bps(),
            ampdu_ref: r.radio.and_then(|x| x.ampdu).map(|a| a.reference),
            first_host: r.host,
            last_host: r.host,
        };
        let closed = self.open.replace((key, last, frame)).map(|(_, _, f)| f);
        Labeled {
            first_of_frame: true,
            frame_id: id,
            closed,
        }
    }

    /// Close and return the open frame (end of input).
    pub fn finish(&mut self) -> Option<Frame> {
        self.open.take().map(|(_, _, f)| f)
    }
}

/// Labels of a whole slice of packets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameLabels {
    /// Per packet: starts a frame.
    pub first_of_frame: Vec<bool>,
    /// Per packet: frame id (index into `frames`).
    pub frame_id: Vec<u64>,
    /// Frames in order.
    pub frames: Vec<Frame>,
}

/// Label a slice of one flow's packets (already de-duplicated).
pub fn label_frames(pkts: &[PacketRecord], n_max: u16) -> Result<FrameLabels, Error> {
    let mut l = Labeler::new(n_max)?;
    let mut out = FrameLabels::default();
    for p in pkts {
        let x = l.push(p);
        out.first_of_frame.push(x.first_of_frame);
        out.frame_id.push(x.frame_id);
        out.frames.extend(x.closed);
    }
    out.frames.extend(l.finish());
    if !pkts.is_empty() && !l.has_ground_truth() {
        return Err(Error::NoGroundTruth {
            packets: pkts.len() as u64,
        });
    }
    Ok(out)
}

/// Transmitter × TID streams the retransmission filter tracks at most (2.5 KB each: 10 MB);
/// packets of further streams are kept without de-duplication and counted.
pub const DEDUP_MAX_STREAMS: usize = 4096;

/// Drops 802.11 retransmissions of MPDUs already seen: a packet with the retry flag whose
/// (transmitter, TID, sequence number) is among the last 1024 sequence numbers seen from that
/// transmitter and TID. O(1) per packet (a 4096-bit bitmap and a ring per transmitter/TID), at
/// most [`DEDUP_MAX_STREAMS`] streams.
#[derive(Clone, Debug, Default)]
pub struct Dedup {
    index: HashMap<(Mac, u8), usize>,
    sets: Vec<SeqSet>,
    // One-entry cache: consecutive packets almost always share transmitter and TID.
    last: Option<((Mac, u8), usize)>,
    /// Packets dropped as duplicates.
    pub dropped: u64,
    /// Packets of streams beyond the cap, kept without de-duplication.
    pub untracked: u64,
    /// The decision for the MPDU being read (its further A-MSDU packets share it).
    last_keep: bool,
}

#[derive(Clone, Debug)]
struct SeqSet {
    bits: Box<[u64; 64]>,
    ring: Box<[u16; 1024]>,
    head: usize,
    len: usize,
}

impl SeqSet {
    fn new() -> SeqSet {
        SeqSet {
            bits: Box::new([0; 64]),
            ring: Box::new([0; 1024]),
            head: 0,
            len: 0,
        }
    }
    fn contains(&self, s: u16) -> bool {
        self.bits[(s as usize >> 6) & 63] & (1 << (s & 63)) != 0
    }
    fn insert(&mut self, s: u16) {
        if self.contains(s) {
            return;
        }
        if self.len == self.ring.len() {
            let old = self.ring[self.head];
            self.bits[(old as usize >> 6) & 63] &= !(1 << (old & 63));
        } else {
            self.len += 1;
        }
        self.ring[self.head] = s;
        self.head = (self.head + 1) % self.ring.len();
        self.bits[(s as usize >> 6) & 63] |= 1 << (s & 63);
    }
}

impl Dedup {
    /// Whether to keep `r` (false = a retransmitted duplicate). Records without an 802.11 data
    /// header are always kept.
    pub fn keep(&mut self, r: &PacketRecord) -> bool {
        if r.msdu.0 > 0 {
            if !self.last_keep {
                self.dropped += 1;
            }
            return self.last_keep;
        }
        self.last_keep = self.keep_mpdu(r);
        self.last_keep
    }

    fn keep_mpdu(&mut self, r: &PacketRecord) -> bool {
        let Some(d) = r.dot11 else { return true };
        let (Some(ta), Some(seq)) = (d.ta(), d.seq) else {
            return true;
        };
        if !d.has_data_body() {
            return true;
        }
        let key = (ta, d.tid.unwrap_or(0xff));
        let i = match self.last {
            Some((k, i)) if k == key => i,
            _ => {
                let n = self.sets.len();
                let i = match self.index.get(&key) {
                    Some(&i) => i,
                    None if n >= DEDUP_MAX_STREAMS => {
                        self.untracked += 1;
                        return true;
                    }
                    None => {
                        self.index.insert(key, n);
                        self.sets.push(SeqSet::new());
                        n
                    }
                };
                self.last = Some((key, i));
                i
            }
        };
        let set = &mut self.sets[i];
        let s = seq & 0x0fff;
        if d.retry() && set.contains(s) {
            self.dropped += 1;
            return false;
        }
        set.insert(s);
        true
    }
}

/// Per-flow aggregation summary (what `aggrate inspect` prints).
#[derive(Clone, Debug, serde::Serialize)]
pub struct FlowSummary {
    /// Packets (after de-duplication).
    pub packets: u64,
    /// Frames (A-MPDUs).
    pub frames: u64,
    /// Mean aggregation level over frames.
    pub mean_agg: f64,
    /// Median aggregation level over frames.
    pub median_agg: f64,
    /// Largest aggregation level.
    pub max_agg: u16,
    /// Distinct PHY rates (bit/s), ascending.
    pub phy_rates_bps: Vec<u64>,
    /// IP-layer receive rate in Mb/s over the flow's duration.
    pub received_mbps: f64,
    /// Host-time span of the flow in seconds.
    pub duration_s: f64,
    /// Retransmitted duplicates dropped.
    pub duplicates_dropped: u64,
}

/// Accumulates a [`FlowSummary`] from frames and packets; O(N_max) memory.
#[derive(Clone, Debug)]
pub struct SummaryBuilder {
    packets: u64,
    ip_bytes: u64,
    first: Option<Ts>,
    last: Ts,
    level_hist: Vec<u64>,
    frames: u64,
    level_sum: u64,
    max: u16,
    rates: Vec<u64>,
}

const MAX_DISTINCT_RATES: usize = 256;

impl SummaryBuilder {
    /// For levels capped at `n_max`.
    pub fn new(n_max: u16) -> SummaryBuilder {
        SummaryBuilder {
            packets: 0,
            ip_bytes: 0,
            first: None,
            last: Ts::ZERO,
            level_hist: vec![0; n_max as usize + 1],
            frames: 0,
            level_sum: 0,
            max: 0,
            rates: Vec::new(),
        }
    }
    /// Count a packet of the flow.
    pub fn packet(&mut self, r: &PacketRecord) {
        self.packets += 1;
        self.ip_bytes += r.l3.map(|l| l.ip_len as u64).unwrap_or(r.len as u64);
        self.first.get_or_insert(r.host);
        self.last = self.last.max(r.host);
    }
    /// Count a closed frame.
    pub fn frame(&mut self, f: &Frame) {
        self.frames += 1;
        let l = (f.level as usize).min(self.level_hist.len() - 1);
        self.level_hist[l] += 1;
        self.level_sum += f.level as u64;
        self.max = self.max.max(f.level);
        if let Some(r) = f.phy_rate_bps {
            if let Err(i) = self.rates.binary_search(&r) {
                if self.rates.len() < MAX_DISTINCT_RATES {
                    self.rates.insert(i, r);
                }
            }
        }
    }
    /// The summary.
    pub fn finish(&self, duplicates_dropped: u64) -> FlowSummary {
        let duration_s = self
            .first
            .map(|f| self.last.saturating_since(f).as_secs_f64())
            .unwrap_or(0.0);
        let median = if self.frames == 0 {
            0.0
        } else {
            // Average of the two middle levels (0-based ranks (n-1)/2 and n/2).
            let at = |rank: u64| {
                let mut acc = 0;
                for (lvl, n) in self.level_hist.iter().enumerate() {
                    acc += n;
                    if acc > rank {
                        return lvl as f64;
                    }
                }
                0.0
            };
            (at((self.frames - 1) / 2) + at(self.frames / 2)) / 2.0
        };
        FlowSummary {
            packets: self.packets,
            frames: self.frames,
            mean_agg: if self.frames == 0 {
                0.0
            } else {
                self.level_sum as f64 / self.frames as f64
            },
            median_agg: median,
            max_agg: self.max,
            phy_rates_bps: self.rates.clone(),
            received_mbps: if duration_s > 0.0 {
                self.ip_bytes as f64 * 8.0 / duration_s / 1e6
            } else {
                0.0
            },
            duration_s,
            duplicates_dropped,
        }
    }
}
