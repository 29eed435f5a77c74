//! Labelled feature rows: from one capture's records to rows ([`RowExtractor`]), the row matrix
//! models train on ([`Dataset`]), and leakage-free fold splits ([`contiguous_folds`]).
//!
//! From one capture's records to labelled feature rows (one per packet of the selected flow).
//!
//! Input: [`PacketRecord`]s in capture order (already filtered to one flow), and optionally a
//! kernel-timestamp table to [`Join`] by sequence number. Output: per packet, a [`RowMeta`]
//! (label, frame id, aggregation level, times) and the [`GapWindow`] feature row, handed to a
//! sink closure once the packet's frame has closed (its level is known then). Memory: one open
//! frame of rows. No IO, no clock.

use std::collections::HashMap;

use crate::capture::PacketRecord;
use crate::features::{FeatureSpec, GapWindow};
use crate::label::{Dedup, Labeler};
use crate::time::{Ts, Tsft};

/// Everything about a row except its features.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RowMeta {
    /// Packet number in the capture.
    pub number: u64,
    /// Host time used for the gaps.
    pub host: Ts,
    /// Radio TSFT.
    pub tsft: Option<Tsft>,
    /// Application sequence number (payload offset as configured).
    pub seq: Option<u32>,
    /// Y: first packet of its frame.
    pub first_of_frame: bool,
    /// Frame id in the flow.
    pub frame_id: u64,
    /// Aggregation level of its frame (capped at N_max).
    pub level: u16,
    /// PHY rate of its frame.
    pub phy_rate_bps: Option<u64>,
}

/// Kernel receive times keyed by application sequence number.
#[derive(Clone, Debug, Default)]
pub struct Join {
    map: HashMap<u32, (u64, bool)>,
    /// Truth packets without a kernel time.
    pub unmatched_truth: u64,
    /// Truth packets with a kernel time.
    pub matched: u64,
}

impl Join {
    /// From `(seq, host_ns)` pairs (later duplicates of a sequence number win).
    pub fn new(pairs: impl IntoIterator<Item = (u32, u64)>) -> Join {
        Join {
            map: pairs.into_iter().map(|(s, t)| (s, (t, false))).collect(),
            ..Join::default()
        }
    }
    /// Kernel time of `seq`, marking it used.
    pub fn lookup(&mut self, seq: Option<u32>) -> Option<Ts> {
        match seq.and_then(|s| self.map.get_mut(&s)) {
            Some((t, used)) => {
                *used = true;
                self.matched += 1;
                Some(Ts(*t))
            }
            None => {
                self.unmatched_truth += 1;
                None
            }
        }
    }
    /// Kernel entries never matched by a truth packet.
    pub fn unmatched_kernel(&self) -> u64 {
        self.map.values().filter(|(_, used)| !used).count() as u64
    }
    /// Kernel entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Streams one flow's packets into labelled rows.
pub struct RowExtractor {
    spec: FeatureSpec,
    seq_offset: usize,
    window: GapWindow,
    labeler: Labeler,
    dedup: Dedup,
    pending_meta: Vec<RowMeta>,
    pending_x: Vec<f64>,
    /// Packets seen (before de-duplication).
    pub packets_in: u64,
    /// Rows emitted.
    pub rows_out: u64,
    /// Frames closed.
    pub frames: u64,
}

impl RowExtractor {
    /// For a checked spec; sequence numbers are read at `seq_offset` in the payload.
    pub fn new(spec: FeatureSpec, seq_offset: usize) -> Result<RowExtractor, crate::label::Error> {
        Ok(RowExtractor {
            spec,
            seq_offset,
            window: GapWindow::new(&spec),
            labeler: Labeler::new(spec.n_max)?,
            dedup: Dedup::default(),
            pending_meta: Vec::new(),
            pending_x: Vec::new(),
            packets_in: 0,
            rows_out: 0,
            frames: 0,
        })
    }

    /// Retransmitted duplicates dropped so far.
    pub fn duplicates_dropped(&self) -> u64 {
        self.dedup.dropped
    }

    /// Whether any packet carried ground truth.
    pub fn has_ground_truth(&self) -> bool {
        self.labeler.has_ground_truth()
    }

    /// Feed one packet; `host` overrides the record's time (joined kernel time), `None` = the
    /// packet has no usable host time and only takes part in labelling.
    pub fn push(&mut self, r: &PacketRecord, host: Option<Ts>, sink: &mut impl FnMut(&RowMeta, &[f64])) {
        self.packets_in += 1;
        if !self.dedup.keep(r) {
            return;
        }
        let lab = self.labeler.push(r);
        if let Some(f) = lab.closed {
            self.flush(f.level, f.phy_rate_bps, sink);
        }
        let Some(host) = host else { return };
        if let Some(x) = self.window.push(host) {
            self.pending_x.extend_from_slice(x);
            self.pending_meta.push(RowMeta {
                number: r.number,
                host,
                tsft: r.tsft(),
                seq: r.payload_seq(self.seq_offset),
                first_of_frame: lab.first_of_frame,
                frame_id: lab.frame_id,
                level: 0,
                phy_rate_bps: None, // the frame's rate, filled in when it closes
            });
        }
    }

    fn flush(&mut self, level: u16, rate: Option<u64>, sink: &mut impl FnMut(&RowMeta, &[f64])) {
        self.frames += 1;
        let w = self.spec.width();
        for (i, m) in self.pending_meta.iter_mut().enumerate() {
            m.level = level;
            m.phy_rate_bps = rate;
            sink(m, &self.pending_x[i * w..(i + 1) * w]);
        }
        self.rows_out += self.pending_meta.len() as u64;
        self.pending_meta.clear();
        self.pending_x.clear();
    }

    /// End of input: close the last frame.
    pub fn finish(&mut self, sink: &mut impl FnMut(&RowMeta, &[f64])) {
        if let Some(f) = self.labeler.finish() {
            self.flush(f.level, f.phy_rate_bps, sink);
        }
    }
}

/// More folds than a capture has rows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{k}-fold CV needs at least {k} rows per capture; capture {group} has {rows}")]
pub struct FoldError {
    /// Folds.
    pub k: usize,
    /// Capture.
    pub group: u32,
    /// Its rows.
    pub rows: usize,
}

/// Labelled rows.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    /// Features per row.
    pub d: usize,
    /// Row-major features (`n × d`).
    pub x: Vec<f64>,
    /// Label: first packet of an A-MPDU.
    pub y: Vec<bool>,
    /// Group (capture id); rows of a group are contiguous and in capture order.
    pub group: Vec<u32>,
    /// Send-rate tag per row (Mb/s; NaN when unknown).
    pub rate_mbps: Vec<f32>,
    /// True aggregation level of the row's frame.
    pub level: Vec<u16>,
}

impl Dataset {
    /// An empty dataset of `d`-feature rows.
    pub fn new(d: usize) -> Dataset {
        Dataset {
            d,
            ..Dataset::default()
        }
    }
    /// Rows.
    pub fn len(&self) -> usize {
        self.y.len()
    }
    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.x[i * self.d..(i + 1) * self.d]
    }
    /// Append a row.
    pub fn push(&mut self, x: &[f64], y: bool, group: u32, rate_mbps: f32, level: u16) {
        debug_assert_eq!(x.len(), self.d);
        self.x.extend_from_slice(x);
        self.y.push(y);
        self.group.push(group);
        self.rate_mbps.push(rate_mbps);
        self.level.push(level);
    }
    /// The rows at `idx`, as a new dataset.
    pub fn select(&self, idx: &[usize]) -> Dataset {
        let mut out = Dataset::new(self.d);
        for &i in idx {
            out.push(self.row(i), self.y[i], self.group[i], self.rate_mbps[i], self.level[i]);
        }
        out
    }
}

/// Contiguous k-fold split: every group (capture) is cut into k contiguous blocks of (nearly)
/// equal size; fold i tests on block i of every group and trains on the rest. Rows are never
/// shuffled — neighbouring rows share m−1 gaps, so a shuffled split would leak.
pub fn contiguous_folds(groups: &[u32], k: usize) -> Result<Vec<Vec<usize>>, FoldError> {
    let mut folds = vec![Vec::new(); k.max(1)];
    let mut start = 0;
    while start < groups.len() {
        let g = groups[start];
        let end = (start..groups.len()).find(|&i| groups[i] != g).unwrap_or(groups.len());
        let n = end - start;
        if n < k {
            return Err(FoldError { k, group: g, rows: n });
        }
        for (f, fold) in folds.iter_mut().enumerate() {
            let a = start + n * f / k;
            let b = start + n * (f + 1) / k;
            fold.extend(a..b);
        }
        start = end;
    }
    Ok(folds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_are_contiguous_per_group_and_cover_everything() {
        let groups = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1];
        let f = contiguous_folds(&groups, 2).unwrap();
        assert_eq!(f, vec![vec![0, 1, 5, 6, 7], vec![2, 3, 4, 8, 9, 10]]);
        assert!(contiguous_folds(&groups, 6).is_err());
    }
}
