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
    /// IP length from its IP header (0 without one).
    pub ip_len: u32,
}

/// Kernel receive times keyed by application sequence number.
#[derive(Clone, Debug, Default)]
pub struct Join {
    map: HashMap<u32, (u64, bool)>,
    /// Truth packets without a kernel time.
    pub unmatched_truth: u64,
    /// Truth packets with a kernel time.
    pub matched: u64,
    /// Log entries beyond [`MAX_JOIN_ENTRIES`], not kept.
    pub over_cap: u64,
}

/// Kernel-log entries a [`Join`] holds at most: as many as a log may hold.
pub const MAX_JOIN_ENTRIES: usize = crate::capture::io::LOG_MAX_ENTRIES;

impl Join {
    /// From `(seq, host_ns)` pairs (later duplicates of a sequence number win); at most
    /// [`MAX_JOIN_ENTRIES`] are kept, the rest counted in [`Join::over_cap`].
    pub fn new(pairs: impl IntoIterator<Item = (u32, u64)>) -> Join {
        let mut j = Join::default();
        for (s, t) in pairs {
            if j.map.len() >= MAX_JOIN_ENTRIES && !j.map.contains_key(&s) {
                j.over_cap += 1;
            } else {
                j.map.insert(s, (t, false));
            }
        }
        j
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

/// Rows of one open frame kept at most before the frame is closed anyway (a real A-MPDU has
/// ≤ 256 MPDUs; a capture whose frames never close would otherwise grow without bound).
pub const MAX_PENDING_ROWS: usize = 16_384;

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
    /// Frames closed at [`MAX_PENDING_ROWS`] rows instead of at their end.
    pub forced_closes: u64,
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
            forced_closes: 0,
        })
    }

    /// Retransmitted duplicates dropped so far.
    pub fn duplicates_dropped(&self) -> u64 {
        self.dedup.dropped
    }

    /// Packets of transmitter × TID streams beyond the filter's cap (not de-duplicated).
    pub fn dedup_untracked(&self) -> u64 {
        self.dedup.untracked
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
                ip_len: r.l3.map_or(0, |l| l.ip_len),
            });
            if self.pending_meta.len() >= MAX_PENDING_ROWS {
                if let Some(f) = self.labeler.finish() {
                    self.forced_closes += 1;
                    self.flush(f.level, f.phy_rate_bps, sink);
                }
            }
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
    /// Host (kernel) receive time of the row's packet; `Ts::ZERO` when unknown.
    pub host: Vec<Ts>,
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
    /// Rows `i` and `j` belong to one run: the same group and send rate. A capture is one run;
    /// a feature table holding several captures is one group, and its captures' rates tell
    /// them apart (captures at the same rate in one table stay one run).
    pub fn same_run(&self, i: usize, j: usize) -> bool {
        self.group[i] == self.group[j] && self.rate_mbps[i].to_bits() == self.rate_mbps[j].to_bits()
    }
    /// The runs of `idx` (row numbers, contiguous per capture): ranges of positions in `idx`
    /// whose rows are one run ([`Dataset::same_run`]), in order.
    pub fn runs(&self, idx: &[usize]) -> Vec<std::ops::Range<usize>> {
        let mut out = Vec::new();
        let mut s = 0;
        while s < idx.len() {
            let e = (s..idx.len())
                .find(|&k| !self.same_run(idx[s], idx[k]))
                .unwrap_or(idx.len());
            out.push(s..e);
            s = e;
        }
        out
    }
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.x[i * self.d..(i + 1) * self.d]
    }
    /// Append a row without a receive time.
    pub fn push(&mut self, x: &[f64], y: bool, group: u32, rate_mbps: f32, level: u16) {
        self.push_at(Ts::ZERO, x, y, group, rate_mbps, level);
    }
    /// Append a row received at `host`.
    pub fn push_at(&mut self, host: Ts, x: &[f64], y: bool, group: u32, rate_mbps: f32, level: u16) {
        debug_assert_eq!(x.len(), self.d);
        self.host.push(host);
        self.x.extend_from_slice(x);
        self.y.push(y);
        self.group.push(group);
        self.rate_mbps.push(rate_mbps);
        self.level.push(level);
    }
    /// Rows of `m` gaps (+ σ when `sigma`) cut from rows built with a wider gap spec of `wide_m`
    /// gaps (σ, if any, last): the first `m` columns are the `m` most recent gaps, and σ is
    /// recomputed from them with the same exact integer-nanosecond moments as
    /// [`GapWindow`], so a sweep over m reads the captures once. Rows keep their order and
    /// metadata.
    pub fn narrowed(&self, wide_m: usize, m: usize, sigma: bool) -> Dataset {
        let m = m.clamp(1, wide_m.max(1));
        let d = m + sigma as usize;
        let mut out = Dataset {
            d,
            x: Vec::with_capacity(self.len() * d),
            y: self.y.clone(),
            group: self.group.clone(),
            rate_mbps: self.rate_mbps.clone(),
            level: self.level.clone(),
            host: self.host.clone(),
        };
        for i in 0..self.len() {
            let gaps = &self.row(i)[..m];
            out.x.extend_from_slice(gaps);
            if sigma {
                let (mut sum, mut sumsq) = (0u128, 0u128);
                for g in gaps {
                    let ns = (g * 1e3).round() as u128;
                    sum += ns;
                    sumsq += ns * ns;
                }
                let n = m as u128;
                let num = (n * sumsq).saturating_sub(sum * sum);
                out.x.push((num as f64).sqrt() / n as f64 * 1e-3);
            }
        }
        out
    }

    /// Append every row of `other` (same width), keeping its groups.
    pub fn append(&mut self, other: &Dataset) {
        debug_assert_eq!(self.d, other.d);
        self.x.extend_from_slice(&other.x);
        self.y.extend_from_slice(&other.y);
        self.group.extend_from_slice(&other.group);
        self.rate_mbps.extend_from_slice(&other.rate_mbps);
        self.level.extend_from_slice(&other.level);
        self.host.extend_from_slice(&other.host);
    }

    /// The rows at `idx`, as a new dataset.
    pub fn select(&self, idx: &[usize]) -> Dataset {
        let mut out = Dataset::new(self.d);
        for &i in idx {
            out.push_at(
                self.host[i],
                self.row(i),
                self.y[i],
                self.group[i],
                self.rate_mbps[i],
                self.level[i],
            );
        }
        out
    }
}

/// Rows of a [`Dataset`] as sorted, disjoint index ranges: a CV fold's training rows without
/// copying them (a copy of 1.4 M × 21 values per fold cost more than the fold's fit).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowSet {
    ranges: Vec<std::ops::Range<usize>>,
    len: usize,
}

impl RowSet {
    /// Rows `0..n`.
    pub fn all(n: usize) -> RowSet {
        RowSet {
            ranges: (n > 0).then_some(0..n).into_iter().collect(),
            len: n,
        }
    }

    /// The rows at `idx` (any order, duplicates ignored), merged into ranges.
    pub fn from_indices(idx: &[usize]) -> RowSet {
        let mut sorted;
        let idx = if idx.windows(2).all(|w| w[0] < w[1]) {
            idx
        } else {
            sorted = idx.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            &sorted[..]
        };
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
        for &i in idx {
            match ranges.last_mut() {
                Some(r) if r.end == i => r.end += 1,
                _ => ranges.push(i..i + 1),
            }
        }
        RowSet { ranges, len: idx.len() }
    }

    /// Rows of `0..n` not in this set.
    pub fn complement(&self, n: usize) -> RowSet {
        let mut ranges = Vec::new();
        let mut at = 0;
        for r in &self.ranges {
            let start = r.start.min(n);
            if start > at {
                ranges.push(at..start);
            }
            at = at.max(r.end.min(n));
        }
        if at < n {
            ranges.push(at..n);
        }
        let len = ranges.iter().map(|r| r.len()).sum();
        RowSet { ranges, len }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The index ranges, in order.
    pub fn ranges(&self) -> &[std::ops::Range<usize>] {
        &self.ranges
    }

    /// Row indices in order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ranges.iter().flat_map(|r| r.clone())
    }

    /// Index ranges of the rows at positions `lo..hi` of the set (positions count rows in
    /// order), so work can be cut into equal chunks whatever the ranges.
    pub fn spans(&self, lo: usize, hi: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let mut offset = 0;
        self.ranges.iter().filter_map(move |r| {
            let (a, b) = (offset, offset + r.len());
            offset = b;
            let (s, e) = (a.max(lo), b.min(hi));
            (s < e).then(|| r.start + (s - a)..r.start + (e - a))
        })
    }
}

/// Slot-level rows for the SVR: one per slot of each capture in which frames truly started.
#[derive(Clone, Debug, Default)]
pub struct SlotRows {
    /// Features per row (3·d).
    pub d: usize,
    /// Row-major `[mean, var, count] × d` of the predicted levels, most recent slot first.
    pub x: Vec<f64>,
    /// True mean level of the frames that started in the row's last slot.
    pub target: Vec<f64>,
    /// Capture of the row.
    pub group: Vec<u32>,
    /// Send rate of the row's capture (Mb/s; NaN when unknown).
    pub rate_mbps: Vec<f32>,
    /// Start of the row's last slot.
    pub slot_start: Vec<Ts>,
}

impl SlotRows {
    /// Rows.
    pub fn len(&self) -> usize {
        self.target.len()
    }
    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.target.is_empty()
    }
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.x[i * self.d..(i + 1) * self.d]
    }
    /// The estimate without correction: the predicted mean level of the row's last slot.
    pub fn base_level(&self, i: usize) -> f64 {
        self.x[i * self.d]
    }
}

/// Build slot rows from per-row predicted starts `pred` (same order as `data`, whose rows must
/// carry host times): the inputs come from `pred`, the targets from `data.y`, per capture.
pub fn slot_rows(data: &Dataset, pred: &[bool], spec: &FeatureSpec) -> SlotRows {
    use crate::features::FrameSlots;
    let truth_spec = FeatureSpec { d: 1, ..*spec };
    let mut out = SlotRows {
        d: 3 * spec.d,
        ..SlotRows::default()
    };
    let mut start = 0;
    while start < data.len() {
        let g = data.group[start];
        let end = (start..data.len()).find(|&i| data.group[i] != g).unwrap_or(data.len());
        let mut p = FrameSlots::new(spec);
        let mut t = FrameSlots::new(&truth_spec);
        let mut truth: HashMap<Ts, f64> = HashMap::new();
        let mut rows: Vec<(Ts, Vec<f64>)> = Vec::new();
        for (i, &p_start) in pred.iter().enumerate().take(end).skip(start) {
            let host = data.host[i];
            t.push(host, data.y[i]);
            while let Some(r) = t.poll_row() {
                if r.values[2] > 0.0 {
                    truth.insert(r.slot_start, r.values[0]);
                }
            }
            p.push(host, p_start);
            while let Some(r) = p.poll_row() {
                rows.push((r.slot_start, r.values.to_vec()));
            }
        }
        for (slot, x) in rows {
            if let Some(&y) = truth.get(&slot) {
                out.x.extend_from_slice(&x);
                out.target.push(y);
                out.group.push(g);
                out.rate_mbps.push(data.rate_mbps[start]);
                out.slot_start.push(slot);
            }
        }
        start = end;
    }
    out
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
    fn row_sets_merge_complement_and_cut_into_spans() {
        let s = RowSet::from_indices(&[7, 2, 3, 4, 9, 3]);
        assert_eq!(s.ranges(), &[2..5, 7..8, 9..10]);
        assert_eq!(s.len(), 5);
        let c = s.complement(12);
        assert_eq!(c.ranges(), &[0..2, 5..7, 8..9, 10..12]);
        assert_eq!(c.len(), 7);
        assert_eq!(c.iter().chain(s.iter()).count(), 12);
        let spans: Vec<_> = s.spans(1, 4).collect();
        assert_eq!(spans, vec![3..5, 7..8]);
        let parts: Vec<usize> = (0..3).flat_map(|k| s.spans(k * 2, k * 2 + 2)).flatten().collect();
        assert_eq!(parts, s.iter().collect::<Vec<_>>());
        assert!(RowSet::all(0).is_empty());
        assert_eq!(RowSet::all(0).complement(3).iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn folds_are_contiguous_per_group_and_cover_everything() {
        let groups = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1];
        let f = contiguous_folds(&groups, 2).unwrap();
        assert_eq!(f, vec![vec![0, 1, 5, 6, 7], vec![2, 3, 4, 8, 9, 10]]);
        assert!(contiguous_folds(&groups, 6).is_err());
    }

    #[test]
    fn slot_rows_pair_predicted_inputs_with_true_targets() {
        // One capture: frames of 4 packets every 10 ms for 1 s; predictions merge every second
        // pair of frames (level 8 instead of 4) in odd slots.
        let spec = FeatureSpec {
            d: 2,
            slot_ns: 100_000_000,
            ..FeatureSpec::default()
        };
        let mut data = Dataset::new(1);
        let mut pred = Vec::new();
        for f in 0..100u64 {
            for k in 0..4u64 {
                let host = Ts::from_micros(f * 10_000 + k * 10);
                data.push_at(host, &[0.0], k == 0, 0, 300.0, 4);
                let slot_odd = (f * 10 / 100) % 2 == 1;
                pred.push(k == 0 && !(slot_odd && f % 2 == 1));
            }
        }
        let rows = slot_rows(&data, &pred, &spec);
        assert_eq!(rows.d, 6);
        // Slots 0..9; rows need d = 2 closed slots and close at a later frame start: 1..=8.
        assert_eq!(rows.len(), 8);
        for i in 0..rows.len() {
            assert_eq!(rows.target[i], 4.0);
            let odd = (rows.slot_start[i].as_nanos() / 100_000_000) % 2 == 1;
            assert_eq!(rows.base_level(i), if odd { 8.0 } else { 4.0 }, "row {i}");
            assert_eq!(rows.row(i)[2], if odd { 5.0 } else { 10.0 });
        }
    }

    #[test]
    fn narrowed_rows_equal_rows_built_narrow() {
        let ts: Vec<Ts> = (0..300u64).map(|i| Ts(i * 7_919 % 4_000 + i * 20_000)).collect();
        let build = |m: usize, sigma: bool| {
            let spec = FeatureSpec {
                m,
                sigma,
                ..FeatureSpec::default()
            };
            let mut w = GapWindow::new(&spec);
            let mut d = Dataset::new(spec.width());
            for (i, t) in ts.iter().enumerate() {
                if let Some(r) = w.push(*t) {
                    d.push_at(*t, r, i % 3 == 0, 0, 1.0, 2);
                }
            }
            d
        };
        let wide = build(10, true);
        for (m, sigma) in [(1, false), (3, true), (10, true), (10, false)] {
            let n = wide.narrowed(10, m, sigma);
            let direct = build(m, sigma);
            // `direct` has (10 − m) more rows at the start.
            let skip = direct.len() - n.len();
            assert_eq!(skip, 10 - m);
            for i in 0..n.len() {
                assert_eq!(n.row(i), direct.row(i + skip), "m {m} σ {sigma} row {i}");
            }
        }
    }
}
