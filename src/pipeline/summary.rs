//! One pass over a capture's records → what `aggrate inspect` reports: the flows (counted, with
//! a cap), the 802.11 frame types, and the aggregation summary of one flow — the one a filter
//! selects, or, without one, the largest UDP (else TCP) flow, which is only known at the end, so
//! every flow is summarised as it goes (at most [`MAX_FLOW_STATES`], each a labeller and a level
//! histogram; later flows are still counted). Fed record by record; no IO.

use std::collections::HashMap;

use serde::Serialize;

use crate::capture::dot11::FrameType;
use crate::capture::filter::{pick_flow, FlowCounts, FlowFilter, MAX_COUNTED_FLOWS};
use crate::capture::{FiveTuple, PacketRecord};
use crate::label::{Dedup, FlowSummary, Labeler, SummaryBuilder, DEDUP_MAX_STREAMS};

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
