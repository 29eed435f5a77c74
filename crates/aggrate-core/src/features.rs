//! Model inputs from packet timing — the single implementation shared by training and the online
//! estimator.
//!
//! * [`GapWindow`]: per packet, the last m inter-arrival gaps (µs, host timestamps, most recent
//!   first) plus, optionally, their population standard deviation σ (µs). O(1) per packet: exact
//!   integer running sums over a ring of m gaps (no drift, no reallocation), then an O(m) copy into
//!   the row buffer (m ≤ 256).
//!
//!   With a **receiver context** (`FeatureSpec::context = W > 0`) the row describes each gap
//!   relative to the receiver it came through instead of in absolute µs, so that a model can
//!   carry across receivers: `[lg_1 … lg_m, rank_1 … rank_m, q50, q90, q99, lmean]`, where
//!   `lg_i` is the log of gap i (µs, on a log-linear grid of 8 bins per octave, see [`gap_bin`]),
//!   `rank_i = ln((n + 1) / (n_above + 0.5))` says how rare gap i was among the n ≤ W gaps
//!   before it (`n_above` counts the larger ones, ties half), and `q50`, `q90`, `q99`, `lmean`
//!   are the quantiles and the log mean of those W gaps (their load and scale). Exact integer
//!   counts in a histogram with a Fenwick tree: O(log bins) per packet, no allocation.
//! * [`SlotWindow`]: per 100 ms slot, mean and variance of a per-frame quantity (e.g. predicted
//!   aggregation level) and the frame count, stacked over the last d slots (most recent first).
//!
//! Clock: only the [`Ts`] values passed in. A timestamp earlier than the previous one counts as a
//! zero gap (never a panic, never a negative feature).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::Ts;

/// Errors of feature configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// m out of range.
    #[error("m (gaps per row) must be 1..={max}, got {m}")]
    BadM {
        /// Given.
        m: usize,
        /// Limit.
        max: usize,
    },
    /// d out of range.
    #[error("d (slots per row) must be 1..=64, got {0}")]
    BadD(usize),
    /// Slot length out of range.
    #[error("slot length must be 1 ms..=60 s, got {0:?}")]
    BadSlot(Duration),
    /// N_max out of range.
    #[error("n_max (largest aggregation level) must be 1..=1024, got {0}")]
    BadNMax(u16),
    /// Context horizon out of range, or combined with σ.
    #[error("context (receiver horizon in gaps) must be 0 or {min}..={max} and without sigma, got {context} (sigma {sigma})")]
    BadContext {
        /// Given.
        context: u32,
        /// With σ.
        sigma: bool,
        /// Least horizon.
        min: u32,
        /// Largest horizon.
        max: u32,
    },
}

/// The feature layout a model was trained with; the model file embeds it and the runtime refuses
/// a model whose spec differs from its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureSpec {
    /// Gaps per row.
    pub m: usize,
    /// Append σ of the m gaps.
    pub sigma: bool,
    /// Unit of gaps and σ (always "us"; kept in files so a reader can check).
    pub unit: GapUnit,
    /// Slot length for slot features, ns.
    pub slot_ns: u64,
    /// Slots per slot-feature row.
    pub d: usize,
    /// Cap on aggregation levels.
    pub n_max: u16,
    /// Receiver context over the last `context` gaps (0 = none: raw gaps in µs, the layout of
    /// models before context features). See the module docs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// Values per row after the m gap logs and m ranks of a context spec: q50, q90, q99, lmean.
pub const CONTEXT_EXTRA: usize = 4;

/// Largest receiver-context horizon.
pub const MAX_CONTEXT: u32 = 65_536;

/// Bins of the log-linear gap grid ([`gap_bin`]).
pub const GAP_BINS: usize = 175;

/// The bin of a gap of `ns` nanoseconds on a log-linear grid: `x = ns / 100 + 1` (units of
/// 0.1 µs), exact below 16 units, then 8 bins per octave, up to 2^24 units (1.68 s; longer gaps
/// share the last bin).
pub fn gap_bin(ns: u64) -> usize {
    let x = (ns / 100 + 1).min((1 << 24) - 1);
    let e = 63 - x.leading_zeros() as usize;
    if e < 3 {
        (x - 1) as usize
    } else {
        7 + 8 * (e - 3) + ((x >> (e - 3)) & 7) as usize
    }
}

/// ln(µs) of the centre of a gap bin (the value a context row carries for gaps in that bin).
pub fn bin_log_us(bin: usize) -> f64 {
    let centre = if bin < 7 {
        (bin + 1) as f64
    } else {
        let e = (bin - 7) / 8 + 3;
        let sub = ((bin - 7) % 8) as u64;
        let lo = (8 + sub) << (e - 3);
        lo as f64 + (1u64 << (e - 3)) as f64 / 2.0 - 0.5
    };
    (centre * 0.1).ln()
}

/// Unit of gap features.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GapUnit {
    /// Microseconds.
    #[serde(rename = "us")]
    Micros,
}

/// Largest m supported.
pub const MAX_M: usize = 256;

impl Default for FeatureSpec {
    fn default() -> Self {
        FeatureSpec {
            m: 20,
            sigma: true,
            unit: GapUnit::Micros,
            slot_ns: 100_000_000,
            d: 5,
            n_max: 64,
            context: 0,
        }
    }
}

impl FeatureSpec {
    /// Check ranges.
    pub fn check(self) -> Result<FeatureSpec, Error> {
        if self.m == 0 || self.m > MAX_M {
            return Err(Error::BadM { m: self.m, max: MAX_M });
        }
        if self.d == 0 || self.d > 64 {
            return Err(Error::BadD(self.d));
        }
        if !(1_000_000..=60_000_000_000).contains(&self.slot_ns) {
            return Err(Error::BadSlot(Duration::from_nanos(self.slot_ns)));
        }
        if !(1..=1024).contains(&self.n_max) {
            return Err(Error::BadNMax(self.n_max));
        }
        if self.context != 0 && (self.sigma || !(16..=MAX_CONTEXT).contains(&self.context)) {
            return Err(Error::BadContext {
                context: self.context,
                sigma: self.sigma,
                min: 16,
                max: MAX_CONTEXT,
            });
        }
        Ok(self)
    }
    /// Width of a gap row: m (+1 with σ), or 2m + [`CONTEXT_EXTRA`] with a receiver context.
    pub fn width(&self) -> usize {
        if self.context > 0 {
            2 * self.m + CONTEXT_EXTRA
        } else {
            self.m + self.sigma as usize
        }
    }
    /// Names of the gap-row columns: `gap_us_1` (most recent) … `gap_us_m`, then `sigma_us`;
    /// with a context `lg_1` … `lg_m`, `rank_1` … `rank_m`, `q50`, `q90`, `q99`, `lmean`.
    pub fn column_names(&self) -> Vec<String> {
        if self.context > 0 {
            let mut v: Vec<String> = (1..=self.m).map(|i| format!("lg_{i}")).collect();
            v.extend((1..=self.m).map(|i| format!("rank_{i}")));
            v.extend(["q50", "q90", "q99", "lmean"].map(String::from));
            return v;
        }
        let mut v: Vec<String> = (1..=self.m).map(|i| format!("gap_us_{i}")).collect();
        if self.sigma {
            v.push("sigma_us".into());
        }
        v
    }
}

/// The receiver context of a [`GapWindow`]: a histogram of the last W gap bins (counts and a
/// Fenwick tree over them, for ranks and quantiles) and the sum of the gaps, for the mean. The
/// quantiles and mean are refreshed every [`CONTEXT_REFRESH`] gaps (they move slowly over W ≥ 16
/// gaps; refreshing them every packet would double the per-packet cost).
#[derive(Clone, Debug)]
struct Context {
    w: usize,
    bins: Vec<u8>,
    gaps: Vec<u64>,
    head: usize,
    n: usize,
    cnt: Vec<u32>,
    /// Gaps per block of [`BLOCK`] bins: `below` sums at most a block's worth of blocks and of
    /// bins (two short loops the compiler vectorises), `add` touches two counters. A Fenwick
    /// tree needs three dependent walks of ~log2(bins) steps per packet instead.
    block: Vec<u32>,
    sum: u64,
    since_refresh: u32,
    summary: [f64; CONTEXT_EXTRA],
    /// ln((W + 1) / (k/2 + 0.5)) for k = 0 ..= 2W (the rank once the horizon is full).
    rank_full: Vec<f64>,
    log_bin: Vec<f64>,
}

/// Gaps between refreshes of a context's quantiles and mean.
pub const CONTEXT_REFRESH: u32 = 8;

/// Bins per block of a context's two-level histogram.
const BLOCK: usize = 16;
/// Blocks (the last one partly used).
const BLOCKS: usize = GAP_BINS.div_ceil(BLOCK);

/// Longest gap a context's sum counts (larger gaps count as this: the sum of W gaps stays far
/// from overflowing u64).
const CONTEXT_GAP_CAP_NS: u64 = 1 << 40;

impl Context {
    fn new(w: usize) -> Context {
        Context {
            w,
            bins: vec![0; w],
            gaps: vec![0; w],
            head: 0,
            n: 0,
            cnt: vec![0; BLOCKS * BLOCK],
            block: vec![0; BLOCKS],
            sum: 0,
            since_refresh: 0,
            summary: [0.0; CONTEXT_EXTRA],
            rank_full: (0..=2 * w)
                .map(|k| ((w as f64 + 1.0) / (k as f64 / 2.0 + 0.5)).ln())
                .collect(),
            log_bin: (0..GAP_BINS).map(bin_log_us).collect(),
        }
    }

    fn reset(&mut self) {
        self.head = 0;
        self.n = 0;
        self.sum = 0;
        self.since_refresh = 0;
        self.cnt.iter_mut().for_each(|c| *c = 0);
        self.block.iter_mut().for_each(|f| *f = 0);
    }

    fn add(&mut self, bin: usize, delta: i32) {
        self.cnt[bin] = self.cnt[bin].wrapping_add_signed(delta);
        self.block[bin / BLOCK] = self.block[bin / BLOCK].wrapping_add_signed(delta);
    }

    /// Gaps in bins < `bin`.
    fn below(&self, bin: usize) -> u32 {
        let b = bin / BLOCK;
        let blocks: u32 = self.block[..b].iter().sum();
        let within: u32 = self.cnt[b * BLOCK..bin].iter().sum();
        blocks + within
    }

    /// Smallest bin whose cumulative count exceeds `target` (quantile bin).
    fn find(&self, target: u32) -> usize {
        let mut rem = target;
        for (b, &c) in self.block.iter().enumerate() {
            if rem < c {
                for (j, &n) in self.cnt[b * BLOCK..(b + 1) * BLOCK].iter().enumerate() {
                    if rem < n {
                        return (b * BLOCK + j).min(GAP_BINS - 1);
                    }
                    rem -= n;
                }
            }
            rem -= c;
        }
        GAP_BINS - 1
    }

    /// Rank of a gap in `bin` among the horizon (before it joins), then let it join.
    fn rank_and_push(&mut self, bin: usize, gap_ns: u64) -> f64 {
        let n = self.n as u32;
        let below = self.below(bin);
        let equal = self.cnt[bin];
        // Twice the mid-rank count of larger gaps: 2·(above) + (equal).
        let k2 = (2 * (n - below - equal) + equal) as usize;
        let rank = if self.n == self.w {
            self.rank_full[k2]
        } else {
            ((n as f64 + 1.0) / (k2 as f64 / 2.0 + 0.5)).ln()
        };
        let gap_ns = gap_ns.min(CONTEXT_GAP_CAP_NS);
        if self.n == self.w {
            let old = self.bins[self.head] as usize;
            if old != bin {
                self.add(old, -1);
                self.add(bin, 1);
            }
            self.sum -= self.gaps[self.head];
        } else {
            self.n += 1;
            self.add(bin, 1);
        }
        self.bins[self.head] = bin as u8;
        self.gaps[self.head] = gap_ns;
        self.sum += gap_ns;
        self.head += 1;
        if self.head == self.w {
            self.head = 0;
        }
        rank
    }

    /// `[q50, q90, q99, lmean]` of the horizon, refreshed every [`CONTEXT_REFRESH`] gaps.
    fn summary(&mut self, out: &mut [f64]) {
        if self.since_refresh == 0 {
            let n = self.n as u32;
            for (k, p) in [0.5, 0.9, 0.99].into_iter().enumerate() {
                let target = ((n as f64 - 1.0) * p).floor().max(0.0) as u32;
                self.summary[k] = self.log_bin[self.find(target)];
            }
            let mean = if n > 0 { self.sum / n as u64 } else { 0 };
            self.summary[3] = self.log_bin[gap_bin(mean)];
        }
        self.since_refresh = (self.since_refresh + 1) % CONTEXT_REFRESH;
        out.copy_from_slice(&self.summary);
    }
}

/// Sliding window over the last m inter-arrival gaps.
///
/// ```
/// use aggrate_core::features::{FeatureSpec, GapWindow};
/// use aggrate_core::Ts;
///
/// let spec = FeatureSpec { m: 2, sigma: true, ..FeatureSpec::default() }.check().unwrap();
/// let mut w = GapWindow::new(&spec);
/// assert!(w.push(Ts::from_micros(100)).is_none()); // no gap yet
/// assert!(w.push(Ts::from_micros(110)).is_none()); // one gap of 10 µs
/// let row = w.push(Ts::from_micros(140)).unwrap(); // gaps 30 µs (newest), 10 µs; σ = 10 µs
/// assert_eq!(row, &[30.0, 10.0, 10.0]);
/// ```
#[derive(Clone, Debug)]
pub struct GapWindow {
    m: usize,
    sigma: bool,
    prev: Option<Ts>,
    ring: Vec<u64>,
    head: usize,
    count: usize,
    sum: u128,
    sumsq: u128,
    row: Vec<f64>,
    context: Option<Box<Context>>,
}

impl GapWindow {
    /// A window for `spec` (call [`FeatureSpec::check`] first; m is clamped to 1..=[`MAX_M`]).
    pub fn new(spec: &FeatureSpec) -> GapWindow {
        let m = spec.m.clamp(1, MAX_M);
        let context = (spec.context > 0).then(|| Box::new(Context::new(spec.context.min(MAX_CONTEXT) as usize)));
        let sigma = spec.sigma && context.is_none();
        GapWindow {
            m,
            sigma,
            prev: None,
            ring: vec![0; m],
            head: 0,
            count: 0,
            sum: 0,
            sumsq: 0,
            row: vec![
                0.0;
                if context.is_some() {
                    2 * m + CONTEXT_EXTRA
                } else {
                    m + sigma as usize
                }
            ],
            context,
        }
    }

    /// Forget all history.
    pub fn reset(&mut self) {
        self.prev = None;
        self.count = 0;
        self.sum = 0;
        self.sumsq = 0;
        if let Some(c) = &mut self.context {
            c.reset();
        }
    }

    /// Add a packet's host timestamp. Returns the row once m gaps are buffered:
    /// `[gap_1 … gap_m, σ]` in µs, gap_1 being the gap that ends at this packet.
    pub fn push(&mut self, host: Ts) -> Option<&[f64]> {
        let prev = self.prev.replace(host);
        let gap = host.as_nanos().saturating_sub(prev?.as_nanos());
        if let Some(c) = &mut self.context {
            let m = self.m;
            let bin = gap_bin(gap);
            let rank = c.rank_and_push(bin, gap);
            self.row.copy_within(0..m - 1, 1);
            self.row.copy_within(m..2 * m - 1, m + 1);
            self.row[0] = c.log_bin[bin];
            self.row[m] = rank;
            if self.count < m {
                self.count += 1;
            }
            if self.count < m {
                return None;
            }
            c.summary(&mut self.row[2 * m..]);
            return Some(&self.row);
        }
        if self.count == self.m {
            let old = self.ring[self.head].min(SIGMA_GAP_MAX_NS) as u128;
            self.sum -= old;
            self.sumsq -= old * old;
        } else {
            self.count += 1;
        }
        self.ring[self.head] = gap;
        self.head = (self.head + 1) % self.m;
        // σ's moments count a gap as at most 2^40 ns (18 min): with m ≤ MAX_M gaps, n·Σg² stays
        // below 2^100, so the sums cannot overflow whatever the timestamps.
        let g = gap.min(SIGMA_GAP_MAX_NS) as u128;
        self.sum += g;
        self.sumsq += g * g;
        // Shift the row right by one and put the newest gap first.
        self.row.copy_within(0..self.m - 1, 1);
        self.row[0] = gap as f64 * 1e-3;
        if self.count < self.m {
            return None;
        }
        if self.sigma {
            self.row[self.m] = self.sigma_us();
        }
        Some(&self.row)
    }

    /// Population σ of the buffered gaps in µs (exact integer moments, then one sqrt).
    fn sigma_us(&self) -> f64 {
        let n = self.count as u128;
        if n == 0 {
            return 0.0;
        }
        let num = (n * self.sumsq).saturating_sub(self.sum * self.sum); // n²·var, in ns²
        (num as f64).sqrt() / n as f64 * 1e-3
    }
}

/// Longest gap σ's running moments count (larger gaps count as this).
pub const SIGMA_GAP_MAX_NS: u64 = 1 << 40;

/// One slot-feature row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlotRow<'a> {
    /// Start of the slot the row ends with.
    pub slot_start: Ts,
    /// `[mean_1, var_1, count_1, …, mean_d, var_d, count_d]`, slot 1 the most recent.
    pub values: &'a [f64],
}

#[derive(Clone, Copy, Debug, Default)]
struct SlotAcc {
    n: u64,
    sum: f64,
    sumsq: f64,
}

/// Per-slot mean/variance/count of a per-frame quantity, stacked over d slots.
///
/// Slots are aligned to multiples of the slot length on the [`Ts`] clock. Call
/// [`SlotWindow::poll_row`] with the current time until it returns `None` before each
/// [`SlotWindow::push`], so that no slot closes without its row being seen.
#[derive(Clone, Debug)]
pub struct SlotWindow {
    slot_ns: u64,
    d: usize,
    current: Option<u64>,
    acc: SlotAcc,
    history: Vec<[f64; 3]>, // ring of closed slots
    head: usize,
    closed: usize,
    row: Vec<f64>,
}

impl SlotWindow {
    /// From a checked spec.
    pub fn new(spec: &FeatureSpec) -> SlotWindow {
        let d = spec.d.clamp(1, 64);
        SlotWindow {
            slot_ns: spec.slot_ns.max(1),
            d,
            current: None,
            acc: SlotAcc::default(),
            history: vec![[0.0; 3]; d],
            head: 0,
            closed: 0,
            row: vec![0.0; 3 * d],
        }
    }

    fn close_current(&mut self) {
        let a = self.acc;
        let (mean, var) = if a.n == 0 {
            (0.0, 0.0)
        } else {
            let mean = a.sum / a.n as f64;
            (mean, (a.sumsq / a.n as f64 - mean * mean).max(0.0))
        };
        self.head = (self.head + self.d - 1) % self.d;
        self.history[self.head] = [mean, var, a.n as f64];
        self.closed += 1;
        self.acc = SlotAcc::default();
        self.current = self.current.map(|s| s + 1);
    }

    /// Record one value (e.g. a frame's level) at time `at`.
    pub fn push(&mut self, at: Ts, value: f64) {
        let s = at.as_nanos() / self.slot_ns;
        match self.current {
            None => self.current = Some(s),
            Some(c) if s > c => {
                // Slots the caller did not poll are closed silently (bounded by d: older ones
                // would fall out of the window anyway).
                let skip = (s - c).min(self.d as u64 + 1);
                for _ in 0..skip {
                    self.close_current();
                }
                self.current = Some(s);
            }
            _ => {}
        }
        self.acc.n += 1;
        self.acc.sum += value;
        self.acc.sumsq += value * value;
    }

    /// Close the current slot if `now` is past its end and return the row ending with it (once d
    /// slots have closed). Call repeatedly: each call closes at most one slot.
    pub fn poll_row(&mut self, now: Ts) -> Option<SlotRow<'_>> {
        let c = self.current?;
        if now.as_nanos() / self.slot_ns <= c {
            return None;
        }
        self.close_current();
        if self.closed < self.d {
            return None;
        }
        for i in 0..self.d {
            let h = self.history[(self.head + i) % self.d];
            self.row[3 * i..3 * i + 3].copy_from_slice(&h);
        }
        Some(SlotRow {
            slot_start: Ts(c * self.slot_ns),
            values: &self.row,
        })
    }
}

/// Frames from per-packet "first of frame" decisions, and their per-slot statistics.
///
/// Feed packets in receive order with [`FrameSlots::push`]; a frame closes when the next one
/// starts, and its level (packets, capped at N_max) is recorded in the slot where it started.
/// Slots close only at frame starts, so no frame is ever attributed to a later slot; drain the
/// rows with [`FrameSlots::poll_row`] after each push. Used with predicted starts for the slot
/// SVR's inputs and with true starts for its target.
#[derive(Clone, Debug)]
pub struct FrameSlots {
    n_max: u16,
    open: Option<(Ts, u32)>,
    now: Ts,
    window: SlotWindow,
}

impl FrameSlots {
    /// From a checked spec (its `slot_ns`, `d` and `n_max`).
    pub fn new(spec: &FeatureSpec) -> FrameSlots {
        FrameSlots {
            n_max: spec.n_max.max(1),
            open: None,
            now: Ts::ZERO,
            window: SlotWindow::new(spec),
        }
    }

    /// One packet received at `host`; `start`: it begins a frame. Returns the frame that this
    /// start closed, as (start time, level).
    pub fn push(&mut self, host: Ts, start: bool) -> Option<(Ts, u16)> {
        let mut closed = None;
        match (&mut self.open, start) {
            (Some((at, n)), true) => {
                let level = (*n).min(self.n_max as u32) as u16;
                closed = Some((*at, level));
                self.window.push(*at, level as f64);
                self.open = Some((host, 1));
                self.now = host;
            }
            (None, true) => {
                self.open = Some((host, 1));
                self.now = host;
            }
            (Some((_, n)), false) => *n += 1,
            // Packets before the first start belong to a frame we did not see begin.
            (None, false) => {}
        }
        closed
    }

    /// The next row whose last slot ended before the latest frame start (call until `None`).
    pub fn poll_row(&mut self) -> Option<SlotRow<'_>> {
        self.window.poll_row(self.now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(m: usize, sigma: bool) -> FeatureSpec {
        FeatureSpec {
            m,
            sigma,
            ..FeatureSpec::default()
        }
    }

    #[test]
    fn sigma_cannot_overflow_on_extreme_timestamps() {
        let mut w = GapWindow::new(&spec(3, true));
        let mut last = None;
        for t in [0, u64::MAX / 2, u64::MAX - 5, u64::MAX - 4, u64::MAX] {
            last = w.push(Ts(t)).map(|r| r.to_vec());
        }
        // Gaps (newest first): 4 ns, 1 ns, ~2^63 ns counted as 2^40 ns in σ's moments.
        let r = last.unwrap();
        assert!(r[3].is_finite() && r[3] > 0.0, "σ {}", r[3]);
        let g = SIGMA_GAP_MAX_NS as f64;
        let want = ((g * g + 1.0 + 16.0) / 3.0 - ((g + 5.0) / 3.0).powi(2)).sqrt() * 1e-3;
        assert!((r[3] - want).abs() / want < 1e-9, "{} vs {want}", r[3]);
    }

    #[test]
    fn gaps_are_most_recent_first_in_micros() {
        let mut w = GapWindow::new(&spec(3, true));
        assert!(w.push(Ts::from_micros(0)).is_none());
        assert!(w.push(Ts::from_micros(10)).is_none());
        assert!(w.push(Ts::from_micros(30)).is_none());
        let r = w.push(Ts::from_micros(60)).unwrap().to_vec();
        assert_eq!(&r[..3], &[30.0, 20.0, 10.0]);
        // population σ of {10, 20, 30} = sqrt(200/3)
        assert!((r[3] - (200.0f64 / 3.0).sqrt()).abs() < 1e-9);
        let r = w.push(Ts::from_micros(100)).unwrap().to_vec();
        assert_eq!(&r[..3], &[40.0, 30.0, 20.0]);
        // Time going backwards is a zero gap.
        let r = w.push(Ts::from_micros(90)).unwrap().to_vec();
        assert_eq!(&r[..3], &[0.0, 40.0, 30.0]);
    }

    #[test]
    fn gap_bins_are_log_linear_and_monotone() {
        assert_eq!(gap_bin(0), 0);
        assert_eq!(gap_bin(99), 0);
        assert_eq!(gap_bin(100), 1);
        assert_eq!(gap_bin(699), 6);
        assert_eq!(gap_bin(700), 7); // x = 8: first octave bin
        assert_eq!(gap_bin(1_499), 14); // x = 15
        assert_eq!(gap_bin(1_500), 15); // x = 16: bins 2 units wide from here
        assert_eq!(gap_bin(u64::MAX), GAP_BINS - 1);
        let mut last = 0;
        for ns in (0..50_000_000u64).step_by(997) {
            let b = gap_bin(ns);
            assert!(b >= last && b < GAP_BINS);
            last = b;
            // The bin's value is within one bin width (≤ 1/8 octave, 9 %) of ln(gap_us + 0.1).
            let exact = (ns as f64 / 1000.0 + 0.1).ln();
            assert!(
                (bin_log_us(b) - exact).abs() < 0.1,
                "{ns} ns: bin {b} {} vs {exact}",
                bin_log_us(b)
            );
        }
    }

    #[test]
    fn context_ranks_and_quantiles_match_a_brute_force_count() {
        let spec = FeatureSpec {
            m: 1,
            sigma: false,
            context: 64,
            ..FeatureSpec::default()
        }
        .check()
        .unwrap();
        let mut w = GapWindow::new(&spec);
        let mut bins: Vec<usize> = Vec::new();
        let (mut t, mut x) = (0u64, 12345u64);
        w.push(Ts(t));
        for i in 0..5000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Gaps from 0 to ~1 s, log-spread, with runs of equal ones.
            let gap = if i % 7 < 3 {
                10_000
            } else {
                (1u64 << ((x >> 59) as u32 + 3)) + (x >> 40) % 1000
            };
            t += gap;
            let row = w.push(Ts(t)).unwrap().to_vec();
            let bin = gap_bin(gap);
            let before = &bins[bins.len().saturating_sub(64)..];
            let n = before.len() as f64;
            let above = before.iter().filter(|&&b| b > bin).count() as f64;
            let equal = before.iter().filter(|&&b| b == bin).count() as f64;
            let want = ((n + 1.0) / (above + equal / 2.0 + 0.5)).ln();
            assert!((row[1] - want).abs() < 1e-9, "gap {i}: rank {} vs {want}", row[1]);
            bins.push(bin);
            // Quantiles are refreshed on the first row after each CONTEXT_REFRESH rows.
            if i % CONTEXT_REFRESH as usize == 0 {
                let mut last: Vec<usize> = bins[bins.len().saturating_sub(64)..].to_vec();
                last.sort_unstable();
                for (k, p) in [0.5, 0.9, 0.99].into_iter().enumerate() {
                    let idx = ((last.len() as f64 - 1.0) * p).floor().max(0.0) as usize;
                    assert_eq!(row[2 + k], bin_log_us(last[idx]), "gap {i}: q{p}");
                }
            }
        }
    }

    #[test]
    fn context_rows_rank_gaps_against_the_horizon() {
        let spec = FeatureSpec {
            m: 2,
            sigma: false,
            context: 16,
            ..FeatureSpec::default()
        }
        .check()
        .unwrap();
        assert_eq!(spec.width(), 8);
        assert_eq!(spec.column_names()[2], "rank_1");
        let mut w = GapWindow::new(&spec);
        // 30 gaps of 10 µs, then one of 1 ms.
        let mut t = 0u64;
        assert!(w.push(Ts(t)).is_none());
        let mut row = Vec::new();
        for _ in 0..30 {
            t += 10_000;
            if let Some(r) = w.push(Ts(t)) {
                row = r.to_vec();
            }
        }
        let lg10 = bin_log_us(gap_bin(10_000));
        assert_eq!(&row[..2], &[lg10, lg10]);
        // All 16 earlier gaps are equal: mid-rank count 8 → ln(17 / 8.5).
        assert!((row[2] - (17.0f64 / 8.5).ln()).abs() < 1e-12, "{row:?}");
        assert_eq!(&row[4..], &[lg10, lg10, lg10, lg10], "q50, q90, q99, lmean");
        t += 1_000_000;
        let row = w.push(Ts(t)).unwrap().to_vec();
        assert_eq!(row[0], bin_log_us(gap_bin(1_000_000)));
        assert_eq!(row[1], lg10);
        // Larger than all 16 before it: ln(17 / 0.5).
        assert!((row[2] - 34f64.ln()).abs() < 1e-12);
        // Its rank moved to rank_2 on the next packet.
        t += 10_000;
        let next = w.push(Ts(t)).unwrap().to_vec();
        assert_eq!(next[3], row[2]);
        // The summary is refreshed every CONTEXT_REFRESH rows: after that many more, it has seen
        // the 1 ms gap (1 of 16, above the 99th percentile's index 14); the mean moved up.
        let mut last = next;
        for _ in 0..CONTEXT_REFRESH {
            t += 10_000;
            last = w.push(Ts(t)).unwrap().to_vec();
        }
        assert_eq!(&last[4..7], &[lg10, lg10, lg10]);
        assert!(last[7] > lg10 + 1.0, "{last:?}");
        // A second 1 ms gap: ranked against one equal gap (mid-rank 0.5) …
        t += 1_000_000;
        let second = w.push(Ts(t)).unwrap().to_vec();
        assert!((second[2] - 17f64.ln()).abs() < 1e-12, "{second:?}");
        // … and two of 16 put q99 on it.
        for _ in 0..CONTEXT_REFRESH {
            t += 10_000;
            last = w.push(Ts(t)).unwrap().to_vec();
        }
        assert_eq!(last[6], bin_log_us(gap_bin(1_000_000)));
        assert_eq!(last[5], lg10);
        // σ cannot go with a context, nor a horizon below 16.
        assert!(FeatureSpec { sigma: true, ..spec }.check().is_err());
        assert!(FeatureSpec { context: 8, ..spec }.check().is_err());
    }

    #[test]
    fn spec_is_checked() {
        assert!(spec(0, true).check().is_err());
        assert!(spec(MAX_M + 1, true).check().is_err());
        assert!(FeatureSpec {
            d: 0,
            ..FeatureSpec::default()
        }
        .check()
        .is_err());
        assert_eq!(spec(20, true).column_names().last().unwrap(), "sigma_us");
        assert_eq!(spec(20, false).width(), 20);
    }

    #[test]
    fn slot_rows_stack_d_slots_most_recent_first() {
        let s = FeatureSpec {
            d: 2,
            slot_ns: 100_000_000,
            ..FeatureSpec::default()
        };
        let mut w = SlotWindow::new(&s);
        let ms = Ts::from_millis;
        w.push(ms(10), 10.0);
        w.push(ms(50), 20.0);
        assert!(w.poll_row(ms(99)).is_none());
        assert!(w.poll_row(ms(100)).is_none()); // first slot closed, but d = 2 not reached
        w.push(ms(150), 4.0);
        let r = w.poll_row(ms(200)).unwrap();
        assert_eq!(r.slot_start, ms(100));
        assert_eq!(r.values, &[4.0, 0.0, 1.0, 15.0, 25.0, 2.0]);
        // An empty slot.
        let r = w.poll_row(ms(300)).unwrap();
        assert_eq!(r.values, &[0.0, 0.0, 0.0, 4.0, 0.0, 1.0]);
        assert!(w.poll_row(ms(300)).is_none());
    }

    #[test]
    fn frame_slots_attribute_frames_to_their_start_slot() {
        let s = FeatureSpec {
            d: 1,
            slot_ns: 100_000_000,
            n_max: 3,
            ..FeatureSpec::default()
        };
        let mut f = FrameSlots::new(&s);
        let ms = Ts::from_millis;
        assert_eq!(f.push(ms(5), false), None); // before any start: ignored
        assert_eq!(f.push(ms(10), true), None);
        f.push(ms(11), false);
        assert_eq!(f.push(ms(90), true), Some((ms(10), 2)));
        // This frame starts in slot 0 and runs into slot 1: it still counts for slot 0.
        for t in 91..96 {
            f.push(ms(t), false);
        }
        assert!(f.poll_row().is_none());
        assert_eq!(f.push(ms(150), true), Some((ms(90), 3))); // 6 packets, capped at 3
        let r = f.poll_row().unwrap();
        assert_eq!(r.slot_start, ms(0));
        assert_eq!(r.values, &[2.5, 0.25, 2.0]);
        assert!(f.poll_row().is_none());
    }
}
