//! One pass over a capture's records → what `aggrate inspect` reports: the flows (counted, with
//! a cap), the 802.11 frame types, and the aggregation summary of one flow — the one a filter
//! selects, or, without one, the largest UDP (else TCP) flow, which is only known at the end, so
//! every flow is summarised as it goes (at most [`MAX_FLOW_STATES`], each a labeller and a level
//! histogram; later flows are still counted). Fed record by record; no IO.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use crate::capture::dot11::FrameType;
use crate::capture::filter::{pick_flow, FlowCounts, FlowFilter, MAX_COUNTED_FLOWS};
use crate::capture::{FiveTuple, PacketRecord};
use crate::label::{Dedup, FlowSummary, Labeler, SummaryBuilder, DEDUP_MAX_STREAMS};
use crate::progress::Progress;

use super::{read_records, Error, ReadStats};

/// Flows summarised at most when no flow is selected; later flows are still counted.
pub const MAX_FLOW_STATES: usize = 4096;

/// One flow's labeller and summary.
#[derive(Clone)]
struct FlowState {
    labeler: Labeler,
    summary: SummaryBuilder,
    /// MPDUs (records whose packet is the first of its MPDU; A-MSDUs carry more packets).
    mpdus: u64,
}

impl FlowState {
    fn push(&mut self, r: &PacketRecord) {
        self.mpdus += u64::from(r.msdu.0 == 0);
        self.summary.packet(r);
        if let Some(f) = self.labeler.push(r).closed {
            self.summary.frame(&f);
        }
    }
    fn finish(mut self, dups: u64) -> (FlowSummary, bool, u64) {
        if let Some(f) = self.labeler.finish() {
            self.summary.frame(&f);
        }
        (self.summary.finish(dups), self.labeler.has_ground_truth(), self.mpdus)
    }
}

/// 802.11 frames by type (records without an 802.11 header are not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FrameTypes {
    /// Data frames.
    pub data: u64,
    /// Management frames.
    pub management: u64,
    /// Control frames.
    pub control: u64,
    /// Extension frames.
    pub extension: u64,
}

/// A capture's summary, as `inspect` reports it (beside what the read itself says).
#[derive(Clone, Debug)]
pub struct CaptureSummary {
    /// Every IP flow: (flow, packets, bytes), largest first.
    pub flows: Vec<(FiveTuple, u64, u64)>,
    /// The flow summarised, when chosen among the flows (not with a filter).
    pub selected: Option<FiveTuple>,
    /// Why these packets: the flow chosen and why, or the filter, or that there was none.
    pub selection: String,
    /// The selected packets' summary, if any were selected.
    pub summary: Option<FlowSummary>,
    /// They carry A-MPDU ground truth (TSFT / A-MPDU status).
    pub ground_truth: bool,
    /// Their MPDUs (fewer than packets when MPDUs carry A-MSDUs).
    pub mpdus: u64,
    /// Retransmitted duplicates dropped.
    pub duplicates_dropped: u64,
    /// 802.11 frames by type.
    pub frame_types: FrameTypes,
    /// Frames skipped undecoded because they cannot carry a flow.
    pub frames_skipped: u64,
    /// Records with TSFT in their radiotap header.
    pub tsft_records: u64,
    /// Records with A-MPDU status in their radiotap header.
    pub ampdu_records: u64,
    /// Caps on state that were hit, each named with its limit and what it cost.
    pub caps_hit: Vec<String>,
}

/// Builds a [`CaptureSummary`] record by record.
pub struct Summariser {
    filter: FlowFilter,
    /// How the filter reads, for the summary's `selection`.
    filter_words: String,
    counts: FlowCounts,
    dedup: Dedup,
    /// Flow → index into `states`, with a one-entry cache for runs of one flow.
    per_flow: HashMap<FiveTuple, usize>,
    states: Vec<FlowState>,
    last: Option<(FiveTuple, usize)>,
    unsummarised: u64,
    types: FrameTypes,
    skipped: u64,
    tsft_records: u64,
    ampdu_records: u64,
    /// A fresh flow state, cloned for each flow (and the filter's single flow).
    blank: FlowState,
    single: FlowState,
}

impl Summariser {
    /// For the packets `filter` selects (`filter_words`: how it reads, for messages), or without
    /// a filter the flow picked at the end; A-MPDUs capped at `n_max`.
    pub fn new(filter: FlowFilter, filter_words: String, n_max: u16) -> Result<Self, crate::label::Error> {
        let blank = FlowState {
            labeler: Labeler::new(n_max)?,
            summary: SummaryBuilder::new(n_max),
            mpdus: 0,
        };
        Ok(Summariser {
            filter,
            filter_words,
            counts: FlowCounts::default(),
            dedup: Dedup::default(),
            per_flow: HashMap::new(),
            states: Vec::new(),
            last: None,
            unsummarised: 0,
            types: FrameTypes::default(),
            skipped: 0,
            tsft_records: 0,
            ampdu_records: 0,
            single: blank.clone(),
            blank,
        })
    }

    /// The next record.
    pub fn push(&mut self, r: &PacketRecord) {
        self.counts.push(r);
        match r.dot11.map(|d| d.ftype) {
            Some(FrameType::Data) => self.types.data += 1,
            Some(FrameType::Mgmt) => self.types.management += 1,
            Some(FrameType::Ctrl) => self.types.control += 1,
            Some(FrameType::Ext) => self.types.extension += 1,
            None => {}
        }
        self.skipped += u64::from(r.skipped.is_some());
        if let Some(rt) = &r.radio {
            self.tsft_records += u64::from(rt.tsft.is_some());
            self.ampdu_records += u64::from(rt.ampdu.is_some());
        }
        if !self.dedup.keep(r) {
            return;
        }
        if !self.filter.is_empty() {
            if self.filter.matches(r) {
                self.single.push(r);
            }
            return;
        }
        // A TCP flow is summarised by its data segments (bare ACKs carry nothing).
        let data =
            r.l3.is_some_and(|l| l.flow.proto != crate::capture::net::PROTO_TCP || l.payload_len > 0);
        let Some(flow) = r.flow().filter(|_| data) else { return };
        let i = match self.last {
            Some((f, i)) if f == flow => i,
            _ => {
                let n = self.states.len();
                let i = match self.per_flow.get(&flow) {
                    Some(&i) => i,
                    None if n >= MAX_FLOW_STATES => {
                        self.unsummarised += 1;
                        return;
                    }
                    None => {
                        self.states.push(self.blank.clone());
                        self.per_flow.insert(flow, n);
                        n
                    }
                };
                self.last = Some((flow, i));
                i
            }
        };
        self.states[i].push(r);
    }

    /// The summary of everything pushed.
    pub fn finish(mut self) -> CaptureSummary {
        let (selected, selection, state) = if self.filter.is_empty() {
            match pick_flow(&self.counts, &self.filter) {
                Some((f, why)) => {
                    let state = self.per_flow.get(&f).map(|&i| self.states.swap_remove(i));
                    (Some(f), why.to_string(), state)
                }
                None => (None, "no UDP or TCP flow in the capture".to_string(), None),
            }
        } else {
            (
                None,
                format!("packets matching {}", self.filter_words),
                Some(self.single),
            )
        };
        let (summary, ground_truth, mpdus) = match state {
            Some(s) => {
                let (sum, gt, mpdus) = s.finish(self.dedup.dropped);
                (Some(sum), gt, mpdus)
            }
            None => (None, false, 0),
        };
        let mut caps_hit = Vec::new();
        if self.unsummarised > 0 {
            caps_hit.push(format!(
                "flows summarised: {MAX_FLOW_STATES} (packets of later flows not summarised: {}; select one with --port/--ip)",
                self.unsummarised
            ));
        }
        if self.counts.over_cap_packets > 0 {
            caps_hit.push(format!(
                "flows counted: {MAX_COUNTED_FLOWS} (packets of later flows not counted: {})",
                self.counts.over_cap_packets
            ));
        }
        if self.dedup.untracked > 0 {
            caps_hit.push(format!(
                "retransmission filter: {DEDUP_MAX_STREAMS} transmitter × TID streams (packets kept unfiltered: {})",
                self.dedup.untracked
            ));
        }
        CaptureSummary {
            flows: self.counts.sorted(),
            selected,
            selection,
            summary,
            ground_truth,
            mpdus,
            duplicates_dropped: self.dedup.dropped,
            frame_types: self.types,
            frames_skipped: self.skipped,
            tsft_records: self.tsft_records,
            ampdu_records: self.ampdu_records,
            caps_hit,
        }
    }
}
/// One flow of [`Inspection::flows`].
#[derive(Clone, Debug, Serialize)]
pub struct FlowRow {
    /// The flow, as `proto src:port > dst:port`.
    pub flow: String,
    /// Its packets.
    pub packets: u64,
    /// Its bytes.
    pub bytes: u64,
}

/// A capture described: how it read and what it holds — what `aggrate inspect --json` prints
/// and the Python package's `inspect` returns.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    /// The capture.
    pub file: String,
    /// Container (pcap, pcapng).
    pub format: String,
    /// Compression (none, gzip, xz).
    pub compression: String,
    /// Link type, named with its number.
    pub link_type: Option<String>,
    /// Records read (with those of undecoded link types).
    pub records: u64,
    /// Damaged records skipped (with `keep_going`).
    pub damaged_skipped: u64,
    /// Flows counted.
    pub flows_total: usize,
    /// The ten largest flows.
    pub flows: Vec<FlowRow>,
    /// The flow summarised, when chosen among the flows.
    pub selected_flow: Option<String>,
    /// Why these packets.
    pub selection: String,
    /// The packets carry A-MPDU ground truth.
    pub ground_truth: bool,
    /// Packets of the selected flow.
    pub packets: u64,
    /// MPDUs of the selected flow (fewer than packets when MPDUs carry A-MSDUs).
    pub mpdus: u64,
    /// A-MPDUs (with ground truth).
    pub frames: Option<u64>,
    /// Mean MPDUs per A-MPDU (with ground truth).
    pub mean_agg: Option<f64>,
    /// Median MPDUs per A-MPDU (with ground truth).
    pub median_agg: Option<f64>,
    /// Largest A-MPDU (with ground truth).
    pub max_agg: Option<u16>,
    /// PHY rates seen (b/s).
    pub phy_rates_bps: Vec<u64>,
    /// The selected flow's rate (Mb/s).
    pub received_mbps: f64,
    /// Its duration (s).
    pub duration_s: f64,
    /// Retransmitted duplicates dropped.
    pub duplicates_dropped: u64,
    /// 802.11 frames by type (records without an 802.11 header are not counted).
    pub frame_types: FrameTypes,
    /// Frames skipped undecoded because they cannot carry a flow (short control or management
    /// frames, frames cut by the snap length).
    pub frames_skipped: u64,
    /// Records with TSFT in their radiotap header.
    pub tsft_records: u64,
    /// Records with A-MPDU status in their radiotap header.
    pub ampdu_records: u64,
    /// Caps on state that were hit (each named with its limit and what it cost).
    pub caps_hit: Vec<String>,
    /// Records whose timestamp fraction was ≥ 1 s, normalised as tshark does.
    pub timestamps_fixed: u64,
    /// Records of pcapng interfaces with link types aggrate does not decode (in `records`,
    /// skipped).
    pub other_link_records: u64,
    /// False whenever reading stopped before the end of the file (also with `keep_going`).
    pub complete: bool,
    /// Bytes of the file not read when reading stopped early.
    pub unread_bytes: u64,
    /// What stopped the read, naming the file and byte offset.
    pub error: Option<String>,
}

impl Inspection {
    /// `path`'s read (`read`) and summary, flat.
    pub fn of(path: &Path, read: &ReadStats, s: CaptureSummary) -> Inspection {
        let gt = s.ground_truth;
        let summary = s.summary.as_ref();
        let with_gt = summary.filter(|_| gt);
        Inspection {
            file: path.display().to_string(),
            format: format!("{:?}", read.format).to_lowercase(),
            compression: format!("{:?}", read.compression).to_lowercase(),
            link_type: read.link.map(|l| format!("{} ({})", l.name(), l.number())),
            records: read.records + read.other_link_packets,
            damaged_skipped: read.skipped,
            flows_total: s.flows.len(),
            flows: s
                .flows
                .iter()
                .take(10)
                .map(|(f, p, b)| FlowRow {
                    flow: f.to_string(),
                    packets: *p,
                    bytes: *b,
                })
                .collect(),
            selected_flow: s.selected.map(|f| f.to_string()),
            selection: s.selection.clone(),
            ground_truth: gt,
            packets: summary.map_or(0, |s| s.packets),
            mpdus: s.mpdus,
            frames: with_gt.map(|s| s.frames),
            mean_agg: with_gt.map(|s| s.mean_agg),
            median_agg: with_gt.map(|s| s.median_agg),
            max_agg: with_gt.map(|s| s.max_agg),
            phy_rates_bps: summary.map(|s| s.phy_rates_bps.clone()).unwrap_or_default(),
            received_mbps: summary.map_or(0.0, |s| s.received_mbps),
            duration_s: summary.map_or(0.0, |s| s.duration_s),
            duplicates_dropped: s.duplicates_dropped,
            frame_types: s.frame_types,
            frames_skipped: s.frames_skipped,
            tsft_records: s.tsft_records,
            ampdu_records: s.ampdu_records,
            caps_hit: s.caps_hit,
            timestamps_fixed: read.timestamps_fixed,
            other_link_records: read.other_link_packets,
            complete: read.damage.is_none(),
            unread_bytes: read.unread_bytes,
            error: read.damage.as_ref().map(|e| format!("{}: {e}", path.display())),
        }
    }
}

/// Read `path` once and describe it ([`Summariser`] over the packets `filter` selects —
/// `filter_words` says how it reads — A-MPDUs capped at `n_max`). Damage stops the read and is
/// in the result (`complete`, `error`), with everything before it; with `keep_going` damaged
/// records are skipped. The read's outcome comes back too, for the caller to judge the damage
/// ([`ReadStats::fatal_damage`]).
pub fn inspect(
    path: &Path,
    filter: FlowFilter,
    filter_words: String,
    n_max: u16,
    keep_going: bool,
    progress: &mut dyn Progress,
) -> Result<(Inspection, ReadStats), Error> {
    let mut sum = Summariser::new(filter, filter_words, n_max)?;
    let read = read_records(path, keep_going, progress, |r| sum.push(r))?;
    Ok((Inspection::of(path, &read, sum.finish()), read))
}
