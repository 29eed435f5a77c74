//! The online estimator: per received packet, the same [`GapWindow`] features the models were
//! trained on, a frame-start decision, frame closing; every Δ a report of the mean aggregation
//! level μ_N (optionally corrected by the model's slot SVR), receive rate, loss, one-way delay and
//! PHY rate μ_R.
//!
//! Sans-IO: callers feed [`RxPacket`]s with their kernel receive time and poll reports with
//! the current time; nothing here reads a clock or a socket. O(1) per packet; after the first
//! report no allocation happens (delay samples reuse one buffer).
//!
//! Two modes: [`Mode::Model`] estimates frame starts from kernel timestamps with a trained model
//! (what a phone can do); [`Mode::Mac`] reads them from the radio's MAC timestamps (TSFT), the
//! ground truth a rooted client or a capture has.
//!
//! **The level a controller steers by** ([`AggReport::level`]). Packets ÷ predicted starts
//! (`mean_agg`) is only as good as the starts the receive path shows: hidden starts inflate it,
//! invented ones deflate it. When the PHY rate is known (from the packets or
//! [`OnlineEstimator::set_phy_rate`]), the model-mode estimator also reports the level the
//! airtime relation gives for the interval's delivery rate and packet size
//! ([`crate::airtime`]: what the access point must aggregate to deliver that rate), in
//! `corrected_agg`, which [`AggReport::level`] prefers. Its inputs are counted per packet (two
//! adds and a compare); the relation is solved once per interval. Pauses longer than
//! [`SILENCE`] do not count as receiving time.

use std::time::Duration;

use serde::Serialize;

use crate::airtime::{AirtimeParams, Measured};
use crate::features::{FeatureSpec, FrameSlots, GapWindow};
use crate::level::{GapHist, IntervalInputs, LevelFeatures, LevelModel};
use crate::model::Predict;
use crate::model::{EstimatorModel, ModelFile};
use crate::time::{Ts, Tsft};

/// Errors building an estimator.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// Report interval out of range.
    #[error("report interval {0:?}: must be between 10 ms and 60 s")]
    Interval(Duration),
    /// The model file's spec is unusable.
    #[error("model spec: {0}")]
    Spec(#[from] crate::features::Error),
    /// The model does not fit the spec it was given with (e.g. 41 weights for 21 features).
    #[error("model does not fit its spec: {field}: {what}")]
    Mismatch {
        /// The model field.
        field: &'static str,
        /// What is wrong.
        what: String,
    },
}

/// `w·((x − μ)/σ) + b` as `(w/σ)·x + (b − Σ wμ/σ)` for the linear models.
fn fold(m: &EstimatorModel, width: usize) -> Option<(Vec<f64>, f64)> {
    let (scaler, w, b) = match m {
        EstimatorModel::Logistic(l) => (&l.scaler, &l.w, l.b),
        EstimatorModel::LinearSvm(l) => (&l.scaler, &l.w, l.b),
        EstimatorModel::SlotSvr(s) => (&s.base.scaler, &s.base.w, s.base.b),
        EstimatorModel::Threshold(t) => {
            let mut w = vec![0.0; width];
            *w.first_mut()? = 1.0;
            return Some((w, -t.threshold_us));
        }
        // Not linear: decided by the model itself (already folded, f32).
        EstimatorModel::Mlp(_) => return None,
    };
    if w.len() != width || scaler.mean.len() != width || scaler.std.len() != width {
        return None;
    }
    Some(scaler.fold(w, b))
}

/// One received packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxPacket {
    /// Kernel receive time (SO_TIMESTAMPNS) or any host clock.
    pub host: Ts,
    /// Transport sequence number (for loss), if any.
    pub seq: Option<u64>,
    /// Send time on the sender's clock, if carried (for one-way delay; same clock assumed).
    pub sent: Option<Ts>,
    /// Bytes (for the receive rate).
    pub len: u32,
    /// Radio MAC timestamp, if known (required in [`Mode::Mac`]).
    pub tsft: Option<Tsft>,
    /// PHY rate of the frame, if the OS or radiotap tells it (b/s).
    pub phy_rate_bps: Option<u64>,
}

/// Where frame starts come from.
#[derive(Clone, Debug)]
pub enum Mode {
    /// A trained model on kernel-timestamp gaps (and its slot SVR, if it has one).
    Model(Box<EstimatorModel>),
    /// MAC timestamps: a packet starts a frame when its TSFT differs from the previous one.
    Mac,
}

/// A closed frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameEstimate {
    /// Receive time of its first packet.
    pub start: Ts,
    /// Packets (capped at N_max).
    pub level: u16,
}

/// What the receiver knows about the last interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct AggReport {
    /// Interval start.
    pub start: Ts,
    /// Interval end.
    pub end: Ts,
    /// Frames closed in the interval.
    pub frames: u64,
    /// Packets received.
    pub packets: u64,
    /// μ_N: mean aggregation level of the frames closed in the interval (0 without frames).
    pub mean_agg: f64,
    /// The corrected level: from airtime when the estimator knows the PHY rate (see the
    /// module docs), else from the model's slot SVR when it has one and enough slots have passed.
    pub corrected_agg: Option<f64>,
    /// Receive rate (b/s of payload bytes as given in `len`).
    pub rx_rate_bps: f64,
    /// Packets missing by sequence number in the interval.
    pub lost: u64,
    /// lost / (lost + packets).
    pub loss_rate: f64,
    /// Mean one-way delay (ms), when send times are present.
    pub owd_mean_ms: Option<f64>,
    /// 95th percentile one-way delay (ms).
    pub owd_p95_ms: Option<f64>,
    /// μ_R: mean PHY rate of the interval's packets (b/s), when known.
    pub phy_rate_bps: Option<f64>,
    /// The airtime relation's level alone (the least the station can be at when others use the
    /// channel unannounced), when the PHY rate is known.
    pub airtime_agg: Option<f64>,
    /// The learned level's trees alone, before [`crate::level::combine`] (on the airtime level
    /// with nobody else on the channel), when the model has them and the airtime level exists.
    pub trees_agg: Option<f64>,
    /// The interval's features for the learned level ([`crate::level`]), when the airtime level
    /// exists: as the trees were fitted, from the airtime level with nobody else on the channel
    /// and no survey (a survey only lifts the floor the reported level keeps to).
    #[serde(skip)]
    pub features: Option<LevelFeatures>,
}

impl AggReport {
    /// The level a controller should use: the corrected one when present.
    pub fn level(&self) -> f64 {
        self.corrected_agg.unwrap_or(self.mean_agg)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    frames: u64,
    level_sum: u64,
    /// Sum of the squared sizes of the frames closed (their spread: a frame count that finds
    /// the A-MPDUs finds them alike in size; one that invents and misses starts does not).
    level_sq_sum: u64,
    /// Packets the per-packet model decided with a value, and those it decided within
    /// [`AMBIGUOUS`] of its threshold (its confidence in the starts it counts).
    decided: u64,
    ambiguous: u64,
    packets: u64,
    bytes: u64,
    lost: u64,
    owd_sum_ns: u128,
    owd_n: u64,
    phy_sum: f64,
    phy_n: u64,
    /// Receiving time: the sum of the gaps shorter than [`SILENCE`] that end in the interval,
    /// and how many there are.
    active_ns: u64,
    active_gaps: u64,
    /// Those gaps by octave.
    gaps: GapHist,
}

/// A per-packet decision value (a logit) this close to the threshold is an ambiguous start: a
/// probability between 0.27 and 0.73.
pub const AMBIGUOUS: f32 = 1.0;

/// A gap between packets at least this long is a pause of the sender, not receiving time (the
/// longest A-MPDU exchange, at the longest PPDU behind heavy contention, is a few ms).
pub const SILENCE: Duration = Duration::from_millis(20);

/// How the estimator turns an interval into a level besides counting frames: the airtime
/// relation ([`crate::airtime`]), the bytes each packet's `len` lacks of its IP length, the PHY
/// rate when packets do not carry it, and the share of the channel others take.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelConfig {
    /// The airtime relation (`None`: report the frame count only).
    pub airtime: Option<AirtimeParams>,
    /// Added to each packet's `len` to get its IP length (28 for the UDP payload over IPv4; 0
    /// when `len` is the IP length).
    pub l3_overhead_bytes: u32,
    /// PHY rate used when packets carry none (b/s).
    pub phy_rate_bps: Option<u64>,
    /// Share of the channel other transmissions take, from a channel survey (0: unknown — the
    /// airtime level is then the least the station can be at).
    pub others_share: f64,
}

impl Default for LevelConfig {
    fn default() -> Self {
        LevelConfig {
            airtime: Some(AirtimeParams::default()),
            l3_overhead_bytes: 0,
            phy_rate_bps: None,
            others_share: 0.0,
        }
    }
}

/// The per-packet estimator. See the module docs.
#[derive(Clone, Debug)]
pub struct OnlineEstimator {
    mode: Mode,
    /// The model's decision folded to raw features, `w·x + b` (linear models): no scaler
    /// division per packet.
    folded: Option<(Vec<f64>, f64)>,
    /// A perceptron's share of its slow inputs, kept while they stay the same.
    mlp_base: Option<crate::model::mlp::MlpBase>,
    n_max: u16,
    gaps: GapWindow,
    slots: Option<FrameSlots>,
    svr_latest: Option<f64>,
    open: Option<(Ts, u32)>,
    last_tsft: Option<Tsft>,
    interval: Duration,
    period_start: Option<Ts>,
    /// End of the open interval in ns (`u64::MAX` before the first packet).
    period_end_ns: u64,
    acc: Acc,
    owd: Vec<f32>,
    next_seq: Option<u64>,
    seq_jumps: u64,
    ready: std::collections::VecDeque<AggReport>,
    level: LevelConfig,
    /// Receive time of the last packet (for receiving time across intervals).
    last_host: Option<Ts>,
    clock_skewed: u64,
    /// The learned level (from the model file), used when the airtime level exists.
    level_model: Option<std::sync::Arc<LevelModel>>,
}

/// Send and receive times further apart than this (an hour) are clocks that disagree, not a
/// delay: such packets give no one-way delay ([`OnlineEstimator::clock_skewed`]).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(3600);

/// A sequence number further than this ahead of (or behind) the expected one is a jump — a
/// restarted or misbehaving sender — not that many losses: counted in
/// [`OnlineEstimator::seq_jumps`], and the expectation restarts from it.
pub const SEQ_WINDOW: u64 = 1 << 20;

/// Finished reports kept when the caller does not poll (oldest dropped first).
const READY_MAX: usize = 64;

impl OnlineEstimator {
    /// An estimator for a loaded model file (its spec decides m, σ, N_max and the slots).
    pub fn from_model(file: &ModelFile, interval: Duration) -> Result<OnlineEstimator, Error> {
        let spec = file.spec.check().map_err(Error::Spec)?;
        let mut e = OnlineEstimator::new(Mode::Model(Box::new(file.model.clone())), spec, interval)?;
        e.set_level_model(file.level.clone())?;
        Ok(e)
    }

    /// Use this learned level (checked) when the airtime level exists, or none: the airtime
    /// level alone.
    pub fn set_level_model(&mut self, m: Option<LevelModel>) -> Result<(), Error> {
        if let Some(m) = &m {
            m.check().map_err(|e| Error::Mismatch {
                field: "level",
                what: e.to_string(),
            })?;
        }
        self.level_model = m.map(std::sync::Arc::new);
        Ok(())
    }

    /// An estimator with an explicit mode and spec.
    pub fn new(mode: Mode, spec: FeatureSpec, interval: Duration) -> Result<OnlineEstimator, Error> {
        if interval < Duration::from_millis(10) || interval > Duration::from_secs(60) {
            return Err(Error::Interval(interval));
        }
        let spec = spec.check().map_err(Error::Spec)?;
        if let Mode::Model(m) = &mode {
            crate::model::validate_model(&spec, m).map_err(|(field, what)| Error::Mismatch { field, what })?;
        }
        let slots = match &mode {
            Mode::Model(m) if m.slot_svr().is_some() => Some(FrameSlots::new(&spec)),
            _ => None,
        };
        let folded = match &mode {
            Mode::Model(m) => fold(m, spec.width()),
            Mode::Mac => None,
        };
        // MAC timestamps are the truth: no level but the frames'.
        let level = match &mode {
            Mode::Model(_) => LevelConfig::default(),
            Mode::Mac => LevelConfig {
                airtime: None,
                ..LevelConfig::default()
            },
        };
        Ok(OnlineEstimator {
            folded,
            mlp_base: None,
            mode,
            n_max: spec.n_max.max(1),
            gaps: GapWindow::new(&spec),
            slots,
            svr_latest: None,
            open: None,
            last_tsft: None,
            interval,
            period_start: None,
            period_end_ns: u64::MAX,
            acc: Acc::default(),
            owd: Vec::with_capacity(4096),
            next_seq: None,
            seq_jumps: 0,
            ready: std::collections::VecDeque::with_capacity(READY_MAX),
            level,
            last_host: None,
            clock_skewed: 0,
            level_model: None,
        })
    }

    /// Packets whose send time lay more than [`MAX_CLOCK_SKEW`] from their receive time (the two
    /// hosts' clocks disagree): they gave no one-way delay.
    pub fn clock_skewed(&self) -> u64 {
        self.clock_skewed
    }

    /// How intervals become levels besides counting frames (see [`LevelConfig`]); checked.
    pub fn set_level_config(&mut self, mut c: LevelConfig) -> Result<(), Error> {
        if let Some(a) = c.airtime.take() {
            c.airtime = Some(a.check().map_err(|e| Error::Mismatch {
                field: "airtime",
                what: e.to_string(),
            })?);
        }
        if !(c.others_share.is_finite() && (0.0..1.0).contains(&c.others_share)) {
            return Err(Error::Mismatch {
                field: "others_share",
                what: format!("{} is not a share in [0, 1)", c.others_share),
            });
        }
        self.level = c;
        Ok(())
    }

    /// The level settings in use.
    pub fn level_config(&self) -> &LevelConfig {
        &self.level
    }

    /// The PHY rate to use when packets carry none (b/s; `None`: unknown).
    pub fn set_phy_rate(&mut self, bps: Option<u64>) {
        self.level.phy_rate_bps = bps.filter(|&b| b > 0);
    }

    /// The share of the channel other transmissions took, as a channel survey measured it
    /// (clamped to [0, 0.99]; not finite: 0). Applies from the interval that is open.
    pub fn set_others_share(&mut self, share: f64) {
        self.level.others_share = if share.is_finite() { share.clamp(0.0, 0.99) } else { 0.0 };
    }

    /// Replace a perceptron's operating point while it runs (its
    /// [`LoadOffset`](crate::model::mlp::LoadOffset), subtracted from the decision; `None`: the
    /// model's own): what online self-calibration sets as it learns the receiver. The offset
    /// enters with the slow inputs, so the per-packet cost is unchanged; the next packet decides
    /// with it. The offset is checked as a model file's is; models other than a perceptron on a
    /// receiver context have none (an error, and nothing changes).
    pub fn set_load_offset(&mut self, offset: Option<crate::model::mlp::LoadOffset>) -> Result<(), Error> {
        let Mode::Model(m) = &mut self.mode else {
            return Err(Error::Mismatch {
                field: "load_offset",
                what: "MAC-timestamp mode has no operating point".into(),
            });
        };
        let EstimatorModel::Mlp(mlp) = m.as_mut() else {
            return Err(Error::Mismatch {
                field: "load_offset",
                what: "only a perceptron has a load offset".into(),
            });
        };
        if let Some(o) = &offset {
            // A perceptron without slow inputs has none to follow: refused here too.
            mlp.check_offset(o).map_err(|what| Error::Mismatch {
                field: "load_offset",
                what,
            })?;
        }
        mlp.load_offset = offset;
        // The kept base holds the old offset.
        self.mlp_base = None;
        Ok(())
    }

    /// Report interval Δ.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Forget the expected sequence number (a new session numbers from 1 again).
    pub fn reset_sequence(&mut self) {
        self.next_seq = None;
    }

    /// Sequence jumps beyond [`SEQ_WINDOW`] seen so far.
    pub fn seq_jumps(&self) -> u64 {
        self.seq_jumps
    }

    /// One received packet (in receive order). Returns the frame its arrival closed, if any.
    pub fn push(&mut self, p: &RxPacket) -> Option<FrameEstimate> {
        if p.host.0 >= self.period_end_ns {
            self.roll(p.host);
        }
        if self.period_start.is_none() {
            // Intervals sit on a grid of Δ on the receive clock, so that a report polled at a
            // multiple of Δ covers exactly the Δ before it.
            let step = self.interval.as_nanos().max(1) as u64;
            self.set_period(Ts(p.host.as_nanos() - p.host.as_nanos() % step));
        }
        let a = &mut self.acc;
        a.packets += 1;
        a.bytes += p.len as u64;
        if let Some(prev) = self.last_host.replace(p.host) {
            let gap = p.host.as_nanos().saturating_sub(prev.as_nanos());
            if gap < SILENCE.as_nanos() as u64 {
                a.active_ns += gap;
                a.active_gaps += 1;
                a.gaps.add(gap);
            }
        }
        if let Some(rate) = p.phy_rate_bps {
            a.phy_sum += rate as f64;
            a.phy_n += 1;
        }
        if let Some(sent) = p.sent {
            // Clocks more than MAX_CLOCK_SKEW apart give no one-way delay (counted in
            // `clock_skewed`): a report must not carry an hour of "delay" the sender would refuse.
            if p.host.0.abs_diff(sent.0) > MAX_CLOCK_SKEW.as_nanos() as u64 {
                self.clock_skewed = self.clock_skewed.saturating_add(1);
            } else {
                let d_ns = p.host.0.saturating_sub(sent.0);
                a.owd_sum_ns += d_ns as u128;
                a.owd_n += 1;
                if self.owd.len() < 1 << 20 {
                    self.owd.push(d_ns as f32 * 1e-6);
                }
            }
        }
        if let Some(seq) = p.seq {
            // Checked sequence arithmetic with a window: no wrapping sums, no overflow at 2^64.
            match self.next_seq {
                Some(n) if seq >= n && seq - n <= SEQ_WINDOW => {
                    a.lost = a.lost.saturating_add(seq - n);
                    self.next_seq = seq.checked_add(1);
                }
                // Reordered or duplicate packets do not move the expectation back.
                Some(n) if seq < n && n - seq <= SEQ_WINDOW => {}
                Some(_) => {
                    self.seq_jumps += 1;
                    self.next_seq = seq.checked_add(1);
                }
                None => self.next_seq = seq.checked_add(1),
            }
        }
        let start = match &self.mode {
            Mode::Mac => {
                let t = p.tsft;
                let s = t.is_some() && t != self.last_tsft;
                if t.is_some() {
                    self.last_tsft = t;
                }
                s
            }
            Mode::Model(m) => match self.gaps.push(p.host) {
                Some(row) => {
                    let v = match (&self.folded, m.as_ref()) {
                        (Some((w, b)), _) => Some(row.iter().zip(w).fold(*b, |acc, (x, w)| acc + x * w)),
                        (None, EstimatorModel::Mlp(mlp)) => {
                            // The same sums as `MlpModel::decision_f32`, keeping the slow inputs' share.
                            let split = mlp.inputs.saturating_sub(mlp.slow_inputs).min(row.len());
                            let (fast, slow) = row.split_at(split);
                            let base = match &self.mlp_base {
                                Some(b) if crate::model::mlp::MlpModel::base_fits(b, slow) => b,
                                _ => self.mlp_base.insert(mlp.base(slow)),
                            };
                            Some(mlp.finish(fast, base) as f64)
                        }
                        (None, _) => None,
                    };
                    match v {
                        Some(v) => {
                            self.acc.decided += 1;
                            self.acc.ambiguous += u64::from(v.abs() < AMBIGUOUS as f64);
                            v > 0.0
                        }
                        None => m.predict_row(row),
                    }
                }
                // Until the window is full: the first packet starts a frame, the rest join it.
                None => self.open.is_none(),
            },
        };
        if let Some(slots) = &mut self.slots {
            slots.push(p.host, start);
            while let Some(row) = slots.poll_row() {
                let v = match &self.mode {
                    Mode::Model(m) => m.slot_svr().map(|s| s.predict(row.values)),
                    Mode::Mac => None,
                };
                self.svr_latest = v;
            }
        }
        let mut closed = None;
        match (&mut self.open, start) {
            (Some((at, n)), true) => {
                let level = (*n).min(self.n_max as u32) as u16;
                closed = Some(FrameEstimate { start: *at, level });
                self.open = Some((p.host, 1));
            }
            (None, _) => self.open = Some((p.host, 1)),
            (Some((_, n)), false) => *n += 1,
        }
        if let Some(f) = closed {
            self.acc.frames += 1;
            self.acc.level_sum += f.level as u64;
            self.acc.level_sq_sum += (f.level as u64).pow(2);
        }
        closed
    }

    /// The next finished report, if an interval has ended at or before `now` (intervals that
    /// ended while packets were pushed come out in order). Intervals are aligned to multiples
    /// of Δ; the first is the one holding the first packet.
    pub fn poll_report(&mut self, now: Ts) -> Option<AggReport> {
        self.roll(now);
        if self.ready.front().is_some_and(|r| r.end <= now) {
            self.ready.pop_front()
        } else {
            None
        }
    }

    /// Close every interval that ended at or before `now`.
    /// The interval now open starts at `start` (and ends Δ later: the per-packet fast path
    /// compares against that end only).
    fn set_period(&mut self, start: Ts) {
        self.period_start = Some(start);
        self.period_end_ns = (start + self.interval).0;
    }

    fn roll(&mut self, now: Ts) {
        let Some(mut start) = self.period_start else {
            return;
        };
        if now < start + self.interval {
            return;
        }
        // After a long silence, skip to the interval before `now` (empty ones beyond the kept
        // history would be dropped anyway).
        let step = self.interval.as_nanos().max(1) as u64;
        let behind = now.as_nanos().saturating_sub(start.as_nanos()) / step;
        if behind > READY_MAX as u64 + 1 {
            start = Ts(start.as_nanos() + (behind - READY_MAX as u64) * step);
            self.set_period(start);
        }
        while start + self.interval <= now {
            let r = self.finish(start);
            if self.ready.len() == READY_MAX {
                self.ready.pop_front();
            }
            self.ready.push_back(r);
            start = start + self.interval;
            self.set_period(start);
        }
    }

    fn finish(&mut self, start: Ts) -> AggReport {
        let end = start + self.interval;
        let a = std::mem::take(&mut self.acc);
        let secs = self.interval.as_secs_f64();
        let (owd_mean_ms, owd_p95_ms) = if a.owd_n > 0 {
            let mean = a.owd_sum_ns as f64 / a.owd_n as f64 / 1e6;
            let k = ((self.owd.len() as f64 * 0.95) as usize).min(self.owd.len().saturating_sub(1));
            let p95 = if self.owd.is_empty() {
                mean
            } else {
                *self.owd.select_nth_unstable_by(k, |x, y| x.total_cmp(y)).1 as f64
            };
            (Some(mean), Some(p95))
        } else {
            (None, None)
        };
        self.owd.clear();
        let phy = if a.phy_n > 0 {
            Some(a.phy_sum / a.phy_n as f64)
        } else {
            self.level.phy_rate_bps.map(|v| v as f64)
        };
        let count = (a.frames > 0).then(|| a.level_sum as f64 / a.frames as f64);
        let loss_rate = if a.lost.saturating_add(a.packets) > 0 {
            a.lost as f64 / (a.lost as f64 + a.packets as f64)
        } else {
            0.0
        };
        let (airtime, features) = match (&self.level.airtime, phy) {
            (Some(p), Some(phy_bps)) if a.active_gaps > 0 && a.active_ns > 0 && a.packets > 0 => {
                let m = Measured {
                    pkt_rate: a.active_gaps as f64 * 1e9 / a.active_ns as f64,
                    ip_len: a.bytes as f64 / a.packets as f64 + self.level.l3_overhead_bytes as f64,
                    phy_bps,
                    others_share: self.level.others_share,
                };
                // Near the RTS threshold the frame count tells which regime the AP is in.
                let n0 = p.level_with_count(&m, count);
                // The trees' inputs as they were fitted: the airtime level with nobody else on
                // the channel and no survey (a survey lifts the floor in `combine`, and only it).
                let plain = Measured { others_share: 0.0, ..m };
                let features = p.level_with_count(&plain, count).map(|n_plain| {
                    let x = LevelFeatures::of(
                        &IntervalInputs {
                            airtime: n_plain,
                            count: count.unwrap_or(0.0),
                            data_share: m.pkt_rate * p.subframe_bytes(m.ip_len) * 8.0 / phy_bps,
                            overhead_share: m.pkt_rate * p.fixed_us() * 1e-6,
                            survey_share: 0.0,
                            loss_rate,
                            ambiguous_share: if a.decided > 0 {
                                a.ambiguous as f64 / a.decided as f64
                            } else {
                                0.0
                            },
                            frame_cv: if a.frames > 0 {
                                let mean = a.level_sum as f64 / a.frames as f64;
                                let var = (a.level_sq_sum as f64 / a.frames as f64 - mean * mean).max(0.0);
                                var.sqrt() / mean.max(1.0)
                            } else {
                                0.0
                            },
                            airtime_with: &|x| {
                                p.level_with_count(
                                    &Measured {
                                        others_share: x.min(0.99),
                                        ..m
                                    },
                                    count,
                                )
                            },
                        },
                        &a.gaps,
                    );
                    (n_plain, x)
                });
                (n0, features)
            }
            _ => (None, None),
        };
        let cap = self.n_max as f64;
        let trees = match (&self.level_model, &features) {
            (Some(lm), Some((n_plain, x))) => Some((lm, lm.level(*n_plain, x))),
            _ => None,
        };
        let learned = match (trees, airtime) {
            (Some((lm, t)), Some(n0)) => Some(crate::level::combine(t, n0, count, cap, lm.rule)),
            _ => None,
        };
        AggReport {
            start,
            end,
            frames: a.frames,
            packets: a.packets,
            mean_agg: if a.frames > 0 {
                a.level_sum as f64 / a.frames as f64
            } else {
                0.0
            },
            corrected_agg: learned
                .or(airtime.map(|v| v.min(cap)))
                .or(self.svr_latest.map(|v| v.clamp(1.0, cap))),
            rx_rate_bps: a.bytes as f64 * 8.0 / secs,
            lost: a.lost,
            loss_rate,
            owd_mean_ms,
            owd_p95_ms,
            phy_rate_bps: phy,
            airtime_agg: airtime.map(|v| v.min(cap)),
            trees_agg: trees.map(|(_, t)| t),
            features: features.map(|(_, x)| x),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac_estimator() -> OnlineEstimator {
        OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(500)).unwrap()
    }

    #[test]
    fn mac_mode_counts_frames_levels_loss_and_delay() {
        let mut e = mac_estimator();
        let mut seq = 0u64;
        // 1 s of frames of 8 packets every 1 ms; sequence 100 is lost.
        for f in 0..1000u64 {
            for k in 0..8u64 {
                seq += 1;
                if seq == 100 {
                    continue;
                }
                let host = Ts::from_micros(10_000 + f * 1000 + k * 10);
                e.push(&RxPacket {
                    host,
                    seq: Some(seq),
                    sent: Some(host.saturating_sub(Duration::from_millis(2))),
                    len: 1500,
                    tsft: Some(Tsft(f * 1000)),
                    phy_rate_bps: Some(866_700_000),
                });
            }
        }
        // Packets were pushed past the first interval: its report waits, complete.
        let r = e.poll_report(Ts::from_millis(500)).unwrap();
        assert!(e.poll_report(Ts::from_millis(500)).is_none(), "one report per interval");
        assert_eq!((r.start, r.end), (Ts::ZERO, Ts::from_millis(500)), "aligned to Δ");
        assert_eq!(
            r.frames, 489,
            "frames closed in [0, 500 ms): frame k closes at 10 + k + 1 ms"
        );
        assert_eq!(r.mean_agg, (489.0 * 8.0 - 1.0) / 489.0, "one frame lost a packet");
        assert_eq!(r.lost, 1);
        assert!((r.owd_mean_ms.unwrap() - 2.0).abs() < 1e-9);
        assert!((r.owd_p95_ms.unwrap() - 2.0).abs() < 1e-3);
        assert_eq!(r.phy_rate_bps, Some(866_700_000.0));
        // 490 frames of 8 in [10 ms, 500 ms), one packet lost, over Δ = 0.5 s.
        assert_eq!(r.packets, 490 * 8 - 1);
        assert!((r.rx_rate_bps - (490.0 * 8.0 - 1.0) * 1500.0 * 8.0 / 0.5).abs() < 1e-6);
        assert_eq!(r.corrected_agg, None);
        // No packets for a while: empty intervals report zero frames.
        let r2 = e.poll_report(Ts::from_millis(1000)).unwrap();
        assert_eq!((r2.frames, r2.mean_agg, r2.lost), (500, 8.0, 0));
        let r3 = e.poll_report(Ts::from_millis(1500)).unwrap();
        assert_eq!(r3.frames, 10, "the last frame stays open");
        let r4 = e.poll_report(Ts::from_millis(2000)).unwrap();
        assert_eq!((r4.frames, r4.packets, r4.mean_agg), (0, 0, 0.0));
    }

    /// A survey lifts the floor and nothing else: the trees get the inputs they were fitted on
    /// (no survey) and the level is the larger of theirs and the survey-lifted airtime level.
    /// 1500-byte packets at VHT MCS 9, 2 SS in A-MPDUs of `sizes` in turn: 12 µs apart inside
    /// one, 700 µs before each.
    fn ampdus(sizes: &[u64]) -> impl Iterator<Item = RxPacket> + '_ {
        let frames = (0..).flat_map(move |f: usize| (0..sizes[f % sizes.len()]).map(|k| k == 0));
        frames.zip(0u64..).scan(0u64, |t, (first, i)| {
            *t += if first { 700_000 } else { 12_000 };
            Some(RxPacket {
                host: Ts(*t),
                seq: Some(i),
                len: 1500,
                phy_rate_bps: Some(866_700_000),
                ..RxPacket::default()
            })
        })
    }

    #[test]
    fn a_survey_lifts_the_learned_levels_floor_without_feeding_the_trees() {
        let file = crate::model::ModelFile::shipped().unwrap();
        let lm = file.level.clone().expect("the shipped model has a learned level");
        let report = |share: f64| {
            let mut e = OnlineEstimator::from_model(&file, Duration::from_millis(500)).unwrap();
            e.set_others_share(share);
            // A-MPDUs of 12 packets: a 1 s interval and a half.
            for p in ampdus(&[12]).take(20_000) {
                e.push(&p);
            }
            e.poll_report(Ts::from_millis(1000)).unwrap()
        };
        let (quiet, surveyed) = (report(0.0), report(0.4));
        let (xq, xs) = (quiet.features.unwrap(), surveyed.features.unwrap());
        assert_eq!(xq, xs, "the trees' inputs do not see the survey");
        let (aq, as_) = (quiet.airtime_agg.unwrap(), surveyed.airtime_agg.unwrap());
        assert!(as_ > 1.5 * aq, "the survey lifts the airtime level: {aq} → {as_}");
        let trees = lm.level(aq, &xq);
        assert_eq!((quiet.trees_agg, surveyed.trees_agg), (Some(trees), Some(trees)));
        let cap = 64.0;
        assert!((quiet.level() - trees.max(aq).min(cap)).abs() < 1e-9);
        assert!(
            (surveyed.level() - trees.max(as_).min(cap)).abs() < 1e-9,
            "not the trees' ratio on the lifted floor"
        );
    }

    /// The last two features tell how far the frame count can be trusted: frames alike in size
    /// when the receive path shows the A-MPDUs, a spread when it splits or merges them; and the
    /// share of packets the per-packet model decided close to its threshold (a share).
    #[test]
    fn the_count_features_see_the_spread_of_the_frames() {
        let file = crate::model::ModelFile::shipped().unwrap();
        let names = crate::level::feature_names();
        let (amb, cv) = (names.len() - 2, names.len() - 1);
        assert_eq!(
            (names[amb].as_str(), names[cv].as_str()),
            ("ambiguous_share", "frame_cv")
        );
        let features = |sizes: &[u64]| {
            let mut e = OnlineEstimator::from_model(&file, Duration::from_millis(500)).unwrap();
            for p in ampdus(sizes).take_while(|p| p.host < Ts::from_millis(1000)) {
                e.push(&p);
            }
            e.poll_report(Ts::from_millis(1000)).unwrap()
        };
        let alike = features(&[12]);
        let mixed = features(&[4, 20]);
        let (xa, xm) = (alike.features.unwrap(), mixed.features.unwrap());
        assert!(alike.mean_agg > 11.0 && alike.mean_agg < 13.0, "{}", alike.mean_agg);
        assert!(xa.0[cv] < 0.1, "frames of 12: {}", xa.0[cv]);
        assert!(xm.0[cv] > 0.4, "frames of 4 and 20: {}", xm.0[cv]);
        for x in [xa, xm] {
            assert!((0.0..=1.0).contains(&x.0[amb]), "{}", x.0[amb]);
        }
    }

    #[test]
    fn interval_is_checked() {
        assert!(OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(1)).is_err());
    }

    #[test]
    fn model_mode_decides_like_the_model() {
        use crate::model::{LogisticModel, Scaler};
        // A hand-made logistic model: a start when the newest gap is far above the others.
        let spec = FeatureSpec {
            m: 4,
            sigma: true,
            ..FeatureSpec::default()
        };
        let model = LogisticModel {
            scaler: Scaler {
                mean: vec![50.0, 50.0, 50.0, 50.0, 40.0],
                std: vec![80.0, 80.0, 80.0, 80.0, 30.0],
            },
            w: vec![3.0, -0.5, -0.5, -0.5, 0.2],
            b: -1.0,
            iterations: 0,
        };
        let em = EstimatorModel::Logistic(model.clone());
        // The same model under a spec of another width (m = 5 + σ: 6 features) is refused.
        let wide = FeatureSpec { m: 5, ..spec };
        let err =
            OnlineEstimator::new(Mode::Model(Box::new(em.clone())), wide, Duration::from_millis(500)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Mismatch {
                    field: "model.scaler",
                    ..
                }
            ),
            "{err}"
        );
        let mut e = OnlineEstimator::new(Mode::Model(Box::new(em)), spec, Duration::from_millis(500)).unwrap();
        let mut w = GapWindow::new(&spec);
        let mut t = 0u64;
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for i in 0..5000u64 {
            t += if i % 7 == 0 {
                300_000 + i * 37 % 50_000
            } else {
                9_000 + i * 13 % 4_000
            };
            let host = Ts(t);
            if let Some(row) = w.push(host) {
                theirs.push(model.predict_row(row));
            }
            let before = e.acc.frames;
            e.push(&RxPacket {
                host,
                ..RxPacket::default()
            });
            ours.push(e.acc.frames > before);
        }
        // Frames close on predicted starts: the estimator's closes = the model's starts (after
        // the window filled and the first start opened a frame).
        let closes: usize = ours.iter().filter(|c| **c).count();
        let starts: usize = theirs.iter().filter(|s| **s).count();
        assert!(starts > 600, "{starts}");
        assert!(closes == starts || closes + 1 == starts, "{closes} vs {starts}");
    }

    /// The shipped perceptron with a calibrated load offset decides online exactly as offline
    /// (the offset rides in the slow inputs' base, which the estimator keeps between refreshes).
    #[test]
    fn a_calibrated_perceptron_decides_online_as_offline() {
        let mut file = crate::model::ModelFile::shipped().unwrap();
        let plain = file.model.clone();
        let spec = file.spec;
        let li = spec.width() - 1;
        let EstimatorModel::Mlp(m) = &mut file.model else {
            panic!("the shipped model is a perceptron")
        };
        // ln 30 µs … ln 80 µs: the loads of the trace below, which changes load halfway.
        m.load_offset = Some(crate::model::LoadOffset {
            input: li,
            knots: vec![[30f64.ln(), 1.5], [80f64.ln(), -1.0]],
        });
        assert!(m.check(spec.width()).is_ok());
        let model = file.model.clone();
        let mut t = 0u64;
        let trace: Vec<Ts> = (0..20_000u64)
            .map(|i| {
                let (frame, inside) = if i < 10_000 { (9, 20_000) } else { (23, 8_000) };
                t += if i % frame == 0 {
                    150_000 + i * 7_919 % 120_000
                } else {
                    inside + i * 104_729 % 12_000
                };
                Ts(t)
            })
            .collect();
        let mut e = OnlineEstimator::from_model(&file, Duration::from_millis(500)).unwrap();
        let mut w = GapWindow::new(&spec);
        let (mut ours, mut theirs, mut differ) = (0usize, 0usize, 0usize);
        for &host in &trace {
            if let Some(row) = w.push(host) {
                theirs += usize::from(model.predict_row(row));
                // The offset changes decisions (else this test would pass without it).
                differ += usize::from(plain.predict_row(row) != model.predict_row(row));
            }
            let before = e.acc.frames;
            e.push(&RxPacket {
                host,
                ..RxPacket::default()
            });
            ours += usize::from(e.acc.frames > before);
        }
        assert!(theirs > 1000, "{theirs}");
        assert!(ours == theirs || ours + 1 == theirs, "{ours} vs {theirs}");
        assert!(differ > 10, "{differ}");
    }

    /// An operating point set while the estimator runs takes effect from the next packet (the
    /// kept base is dropped), and bad offsets or models without one are refused unchanged.
    #[test]
    fn a_load_offset_set_while_running_moves_the_next_decisions() {
        let file = crate::model::ModelFile::shipped().unwrap();
        let li = file.spec.width() - 1;
        let mut e = OnlineEstimator::from_model(&file, Duration::from_millis(500)).unwrap();
        let mut t = 0u64;
        // A-MPDUs of 16 packets 12 µs apart, 400 µs between them.
        // Frames closed (each start closes the open one).
        let mut run = |e: &mut OnlineEstimator, n: u64| -> u64 {
            let mut closed = 0;
            for i in 0..n {
                t += if i % 16 == 0 { 400_000 } else { 12_000 };
                let host = Ts(t);
                closed += u64::from(
                    e.push(&RxPacket {
                        host,
                        ..RxPacket::default()
                    })
                    .is_some(),
                );
            }
            closed
        };
        let plain = run(&mut e, 4_000);
        assert!((240..=251).contains(&plain), "{plain} frames of 4000 packets in 16s");
        let constant = |v: f64| crate::model::LoadOffset {
            input: li,
            knots: vec![[3.0, v]],
        };
        // A threshold above every decision: no packet starts a frame.
        e.set_load_offset(Some(constant(1e6))).unwrap();
        assert_eq!(run(&mut e, 4_000), 0);
        // Below every decision: every packet does.
        e.set_load_offset(Some(constant(-1e6))).unwrap();
        assert_eq!(run(&mut e, 4_000), 4_000);
        // Back to the model's own.
        e.set_load_offset(None).unwrap();
        assert_eq!(run(&mut e, 4_000), 250);
        // Refused, and the estimator keeps deciding as before.
        for bad in [
            crate::model::LoadOffset {
                input: li,
                knots: vec![[3.0, f64::NAN]],
            },
            crate::model::LoadOffset {
                input: li,
                knots: vec![[3.0, 0.0], [2.0, 0.0]],
            },
            crate::model::LoadOffset {
                input: 0,
                knots: vec![[3.0, 0.0]],
            },
            crate::model::LoadOffset {
                input: li,
                knots: vec![],
            },
        ] {
            let err = e.set_load_offset(Some(bad.clone())).unwrap_err();
            assert!(err.to_string().contains("load_offset"), "{err}");
        }
        assert_eq!(run(&mut e, 4_000), 250);
        let mut mac = mac_estimator();
        assert!(mac.set_load_offset(None).is_err());
    }
}
