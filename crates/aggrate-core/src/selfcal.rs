//! Self-calibration of a perceptron's operating point from a receiver's own receive times, where
//! the estimator runs: no label, no sniffer, no second step.
//!
//! The shipped perceptron ranks packets as well on most receivers it never saw as their own
//! models do; what differs is its operating point (the threshold on its decision). Receivers
//! that time packets alike share it. So a summary of measured receivers — per capture its gap
//! summary ([`GapStats`]) and the model's decisions on its rows binned by label
//! ([`BankSummary`], a few hundred kilobytes of JSON that the embedder passes in) — lends a new
//! receiver the threshold that is best on the captures whose timing is nearest its own.
//!
//! [`OnlineCalibrator`] does that while the estimator runs: it keeps the receive times of the last
//! [`WINDOW_GAPS`] gaps (a fixed buffer), and when a window is full it summarises it, takes the
//! [`Likeness::k`] nearest summarised captures at the nearest rate, and puts their best threshold
//! into the estimator ([`OnlineEstimator::set_load_offset`]) as the knot at the window's load
//! (`lmean`). Knots of one load average the last [`KNOT_MEMORY`] windows; a window that mixes
//! rates (its halves differ by more than [`STEADY`]) or spans a pause over [`MAX_GAP`] is not
//! used. A summary calibrates the model it was made for only ([`fingerprint`]).
//!
//! Clock: the receive times pushed. Units: times in ns, rates in Mb/s of IP packets, distances in
//! spreads (each summary number divided by its standard deviation over the captures at that
//! rate).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::features::{FeatureSpec, GapWindow};
use crate::model::mlp::{MlpModel, MAX_KNOTS};
use crate::model::{EstimatorModel, LoadOffset, ModelFile};
use crate::runtime::OnlineEstimator;
use crate::time::Ts;

/// Quantiles of the log gap in a [`GapStats`].
pub const QUANTILES: [f64; 13] = [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];
/// Lags of the log gap's autocorrelation in a [`GapStats`].
pub const LAGS: [usize; 3] = [1, 2, 4];
/// Numbers in a [`GapStats`].
pub const STATS: usize = QUANTILES.len() + LAGS.len();
/// Gaps a run needs for its summary.
pub const MIN_GAPS: usize = 64;

/// What a run's receive times look like, without labels: the [`QUANTILES`] of ln(gap µs + 0.1)
/// (the gap features' log), then its autocorrelation at [`LAGS`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GapStats(pub [f64; STATS]);

impl GapStats {
    /// The summary of receive times in arrival order (a time before the one ahead of it counts
    /// as a zero gap); `None` with fewer than [`MIN_GAPS`] gaps.
    pub fn of(host: &[Ts]) -> Option<GapStats> {
        if host.len() < MIN_GAPS + 1 {
            return None;
        }
        let lg: Vec<f64> = host
            .windows(2)
            .map(|w| (w[1].0.saturating_sub(w[0].0) as f64 / 1000.0 + 0.1).ln())
            .collect();
        let mut sorted = lg.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        let mut s = [0.0; STATS];
        for (o, q) in s.iter_mut().zip(QUANTILES) {
            // Linear interpolation between order statistics (numpy's default).
            let pos = q * (sorted.len() - 1) as f64;
            let (i, f) = (pos.floor() as usize, pos.fract());
            *o = sorted[i] + f * (sorted[(i + 1).min(sorted.len() - 1)] - sorted[i]);
        }
        let mean = lg.iter().sum::<f64>() / lg.len() as f64;
        let d: Vec<f64> = lg.iter().map(|v| v - mean).collect();
        let var: f64 = d.iter().map(|v| v * v).sum();
        for (o, &k) in s[QUANTILES.len()..].iter_mut().zip(&LAGS) {
            // Equal gaps leave only rounding error in `d`: no spread, no correlation.
            *o = if var > 1e-12 {
                d.iter().zip(&d[k..]).map(|(a, b)| a * b).sum::<f64>() / var
            } else {
                0.0
            };
        }
        Some(GapStats(s))
    }
}

/// The `k` candidates (index, summary) whose summaries are nearest `s` — (index, distance),
/// nearest first — each number divided by its spread (standard deviation, at least 0.01) over
/// the candidates. Empty without candidates.
pub fn nearest_among(candidates: &[(usize, &GapStats)], s: &GapStats, k: usize) -> Vec<(usize, f64)> {
    if candidates.is_empty() {
        return Vec::new();
    }
    let n = candidates.len() as f64;
    let mut sd = [0.0; STATS];
    for (j, v) in sd.iter_mut().enumerate() {
        let mean = candidates.iter().map(|c| c.1 .0[j]).sum::<f64>() / n;
        let var = candidates.iter().map(|c| (c.1 .0[j] - mean).powi(2)).sum::<f64>() / n;
        // A spread below 0.01 (1 % in gap, or in correlation) is no spread: it would turn
        // rounding-sized differences into large distances.
        *v = var.sqrt().max(0.01);
    }
    let mut d: Vec<(usize, f64)> = candidates
        .iter()
        .map(|&(i, b)| {
            let dist = (0..STATS).map(|j| ((b.0[j] - s.0[j]) / sd[j]).powi(2)).sum::<f64>();
            (i, dist.sqrt())
        })
        .collect();
    d.sort_unstable_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    d.truncate(k.max(1));
    d
}

/// The best-F1 threshold on decisions `dec` with labels `y`, each standing for `w` rows, and
/// its confusion counts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Threshold {
    /// Decisions above it are frame starts (half-way between the last called and the next).
    pub threshold: f64,
    /// Starts called right.
    pub tp: u64,
    /// Others called starts.
    pub fp: u64,
    /// Starts missed.
    pub fn_: u64,
    /// Others left.
    pub tn: u64,
}

/// The threshold with the best F1 on weighted decisions (rows with equal decisions are called
/// together); `None` without a start or when the lengths differ.
pub fn best_threshold_weighted(dec: &[f64], y: &[bool], w: &[u64]) -> Option<Threshold> {
    if dec.len() != y.len() || w.len() != dec.len() {
        return None;
    }
    let positives: u64 = (0..y.len()).filter(|&i| y[i]).map(|i| w[i]).sum();
    if positives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..dec.len()).filter(|&i| w[i] > 0).collect();
    order.sort_unstable_by(|&a, &b| dec[b].total_cmp(&dec[a]));
    let (mut tp, mut fp) = (0u64, 0u64);
    let mut best = (0.0, 0usize, 0u64, 0u64); // (F1, entries called, tp, fp)
    let mut k = 0;
    while k < order.len() {
        // Every row with this decision is called together.
        let v = dec[order[k]];
        while k < order.len() && dec[order[k]].total_cmp(&v).is_eq() {
            if y[order[k]] {
                tp += w[order[k]];
            } else {
                fp += w[order[k]];
            }
            k += 1;
        }
        let f1 = 2.0 * tp as f64 / (2 * tp + fp + (positives - tp)) as f64;
        if f1 > best.0 {
            best = (f1, k, tp, fp);
        }
    }
    let (_, called, tp, fp) = best;
    let lowest_called = dec[order[called.checked_sub(1)?]];
    let threshold = match order.get(called) {
        Some(&next) => lowest_called + (dec[next] - lowest_called) / 2.0,
        None => lowest_called - lowest_called.abs().max(1.0),
    };
    let n: u64 = w.iter().sum();
    Some(Threshold {
        threshold,
        tp,
        fp,
        fn_: positives - tp,
        tn: n - positives - fp,
    })
}

/// The feature a model's operating point follows, when it can follow one: the perceptron on a
/// receiver context takes its mean log-gap (`lmean`, the last feature, a slow input).
pub fn load_input(model: &EstimatorModel, spec: &FeatureSpec) -> Option<usize> {
    match model {
        EstimatorModel::Mlp(m) if spec.context > 0 && m.slow_inputs > 0 => Some(spec.width() - 1),
        _ => None,
    }
}

/// `model` without any load offset: a calibration replaces an earlier one rather than stacking
/// on it.
pub fn without_offset(model: &EstimatorModel) -> EstimatorModel {
    match model {
        EstimatorModel::Mlp(m) => EstimatorModel::Mlp(MlpModel {
            load_offset: None,
            ..m.clone()
        }),
        other => other.clone(),
    }
}

/// The median of a run's loads (the upper one of an even count); `loads` must not be empty.
pub fn median_load(mut loads: Vec<f64>) -> f64 {
    loads.sort_unstable_by(f64::total_cmp);
    loads[loads.len() / 2]
}

/// A model's identity for [`BankSummary`]: SHA-256 of its parameters without any load offset
/// (a calibrated copy of a model is the same model) and of its feature layout, in hex (the
/// first 16 bytes).
pub fn fingerprint(model: &EstimatorModel, spec: &FeatureSpec) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    // Serialising plain parameter structs cannot fail; an empty hash input would still differ
    // from any real model's.
    h.update(serde_json::to_vec(&without_offset(model)).unwrap_or_default());
    h.update(serde_json::to_vec(spec).unwrap_or_default());
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Format tag of a [`BankSummary`].
pub const SUMMARY_FORMAT: &str = "aggrate-bank-summary/1";

/// Width of a [`BankSummary`]'s decision bins, in the model's decision units (a logit for the
/// perceptron and the logistic model). A threshold set on binned decisions lies within half a
/// bin of the one set on the same rows.
pub const BIN_WIDTH: f64 = 0.02;

/// Largest bank summary read, uncompressed (the shipped model's is 2 MB).
pub const MAX_SUMMARY_BYTES: u64 = 64 << 20;

/// Most rows a summary's run may count: far more than any capture, and small enough that sums
/// over every run of a bank stay exact in a `u64`.
const MAX_RUN_ROWS: i64 = 1 << 40;

/// Measured receivers for label-free calibration without their captures: per run (a capture at
/// one rate) its receiver, rate and [`GapStats`], and its rows' decisions under **one model**,
/// binned by label. The shipped model's, of its training receivers, is
/// `models/mlp8_m5_ctx1024.bank.json.xz` (xz-compressed JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BankSummary {
    /// [`SUMMARY_FORMAT`].
    pub format: String,
    /// The model's [`fingerprint`]: a summary calibrates that model only.
    pub model: String,
    /// The model's name, for messages.
    pub model_name: String,
    /// Where the runs came from (dataset folders), for the reader.
    pub from: Vec<String>,
    /// Width of the decision bins.
    pub bin_width: f64,
    /// The runs.
    pub runs: Vec<SummaryRun>,
}

/// One run of a [`BankSummary`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryRun {
    /// Receiver name.
    pub receiver: String,
    /// Send rate.
    pub rate_mbps: f64,
    /// Its [`GapStats`] ([`STATS`] numbers).
    pub stats: Vec<f64>,
    /// `[bin, starts, others]` for each bin holding a row: bin `b` holds decisions in
    /// `[b·w, (b+1)·w)`, `w` the summary's bin width.
    pub bins: Vec<[i64; 3]>,
}

/// Why a summary or a calibrator is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// Bytes that are not a bank summary.
    #[error("not a bank summary: {0}")]
    NotASummary(String),
    /// A summary with a field out of range (named).
    #[error("bank summary: {0}")]
    Summary(String),
    /// A summary made for another model.
    #[error(
        "the bank summary was made for model {summary} ({name}), not this one ({model}): its decisions are that model's"
    )]
    OtherModel {
        /// Fingerprint the summary was made for.
        summary: String,
        /// That model's name.
        name: String,
        /// This model's fingerprint.
        model: String,
    },
    /// The model has no load offset to set.
    #[error("self-calibration sets a perceptron's load offset; this model has none (only a perceptron on a receiver context)")]
    NoLoad,
    /// A distance limit that is not a distance.
    #[error("distance limit {0}: 0 or more (inf: no limit)")]
    BadDistance(f64),
}

/// One checked run of a [`SummaryBank`].
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryBankRun {
    /// Receiver name.
    pub receiver: String,
    /// Send rate (Mb/s).
    pub rate_mbps: f64,
    /// Its gap summary.
    pub stats: GapStats,
    /// `[bin, starts, others]` per non-empty decision bin.
    pub bins: Vec<[i64; 3]>,
}

/// A [`BankSummary`], checked: what calibration reads of it.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryBank {
    /// The runs.
    pub runs: Vec<SummaryBankRun>,
    /// The model's fingerprint.
    pub fingerprint: String,
    /// The model's name.
    pub model_name: String,
    /// Width of the decision bins.
    pub bin_width: f64,
}

impl SummaryBank {
    /// A summary from its JSON bytes (at most [`MAX_SUMMARY_BYTES`]), checked.
    pub fn from_json(bytes: &[u8]) -> Result<SummaryBank, Error> {
        if bytes.len() as u64 > MAX_SUMMARY_BYTES {
            return Err(Error::NotASummary(format!(
                "more than {MAX_SUMMARY_BYTES} bytes of JSON"
            )));
        }
        let s: BankSummary = serde_json::from_slice(bytes).map_err(|e| Error::NotASummary(e.to_string()))?;
        SummaryBank::of(&s)
    }

    /// The bank a [`BankSummary`] describes, checked: each field that is wrong is named.
    pub fn of(s: &BankSummary) -> Result<SummaryBank, Error> {
        let bad = |m: String| Err(Error::Summary(m));
        if s.format != SUMMARY_FORMAT {
            return bad(format!("format {:?}: expected {SUMMARY_FORMAT:?}", s.format));
        }
        if !(s.bin_width.is_finite() && s.bin_width > 0.0) {
            return bad(format!("bin_width {}: a positive width", s.bin_width));
        }
        if s.runs.is_empty() {
            return bad("no runs".to_string());
        }
        let mut runs = Vec::with_capacity(s.runs.len());
        for (i, r) in s.runs.iter().enumerate() {
            if !(r.rate_mbps.is_finite() && r.rate_mbps > 0.0) {
                return bad(format!("runs[{i}].rate_mbps {}: a positive send rate", r.rate_mbps));
            }
            let stats: [f64; STATS] = match r.stats.as_slice().try_into() {
                Ok(a) => a,
                Err(_) => return bad(format!("runs[{i}].stats: {} numbers, expected {STATS}", r.stats.len())),
            };
            if let Some(j) = stats.iter().position(|v| !v.is_finite()) {
                return bad(format!("runs[{i}].stats[{j}] is not a finite number"));
            }
            if let Some(b) = r.bins.iter().find(|b| b[1] < 0 || b[2] < 0) {
                return bad(format!("runs[{i}].bins: negative count in bin {}", b[0]));
            }
            // Checked one bin at a time, so that the sum itself cannot overflow.
            let mut rows: i64 = 0;
            for b in &r.bins {
                rows += b[1].min(MAX_RUN_ROWS) + b[2].min(MAX_RUN_ROWS);
                if rows > MAX_RUN_ROWS {
                    return bad(format!(
                        "runs[{i}].bins: counts add up to more than {MAX_RUN_ROWS} rows"
                    ));
                }
            }
            runs.push(SummaryBankRun {
                receiver: r.receiver.clone(),
                rate_mbps: r.rate_mbps,
                stats: GapStats(stats),
                bins: r.bins.clone(),
            });
        }
        Ok(SummaryBank {
            runs,
            fingerprint: s.model.clone(),
            model_name: s.model_name.clone(),
            bin_width: s.bin_width,
        })
    }

    /// Refused unless the summary was made for `model` with `spec`.
    pub fn check_model(&self, model: &EstimatorModel, spec: &FeatureSpec) -> Result<(), Error> {
        let model = fingerprint(model, spec);
        if model != self.fingerprint {
            return Err(Error::OtherModel {
                summary: self.fingerprint.clone(),
                name: self.model_name.clone(),
                model,
            });
        }
        Ok(())
    }

    /// The bank rate nearest `rate` and, at it, the `k` runs whose summaries are nearest `s`
    /// ([`nearest_among`]); `None` when the bank has no run.
    pub fn nearest(&self, rate: f64, s: &GapStats, k: usize) -> Option<(f64, Vec<(usize, f64)>)> {
        let at = self
            .runs
            .iter()
            .map(|r| r.rate_mbps)
            .min_by(|a, b| (a - rate).abs().total_cmp(&(b - rate).abs()))?;
        let cands: Vec<(usize, &GapStats)> = (0..self.runs.len())
            .filter(|&i| self.runs[i].rate_mbps == at)
            .map(|i| (i, &self.runs[i].stats))
            .collect();
        Some((at, nearest_among(&cands, s, k)))
    }

    /// The binned decisions of runs `nearest` as weighted decisions (each bin's centre, its
    /// label, its count), for [`best_threshold_weighted`].
    pub fn pool(&self, nearest: &[(usize, f64)]) -> (Vec<f64>, Vec<bool>, Vec<u64>) {
        pool_of_bins(
            nearest
                .iter()
                .filter_map(|&(i, _)| self.runs.get(i))
                .map(|r| r.bins.as_slice()),
            self.bin_width,
        )
    }
}

/// Weighted decisions of binned runs: each non-empty `[bin, starts, others]` as its centre with
/// each label and count.
pub fn pool_of_bins<'a>(
    runs: impl IntoIterator<Item = &'a [[i64; 3]]>,
    bin_width: f64,
) -> (Vec<f64>, Vec<bool>, Vec<u64>) {
    let (mut dec, mut y, mut w) = (Vec::new(), Vec::new(), Vec::new());
    for bins in runs {
        for &[bin, starts, others] in bins {
            let centre = (bin as f64 + 0.5) * bin_width;
            for (label, count) in [(true, starts), (false, others)] {
                if count > 0 {
                    dec.push(centre);
                    y.push(label);
                    w.push(count as u64);
                }
            }
        }
    }
    (dec, y, w)
}

/// How the bank stands in for a receiver: how many runs, and how alike they must be.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Likeness {
    /// Bank runs nearest each window whose decisions set its threshold (≥ 1).
    pub k: usize,
    /// A window whose nearest bank run is farther than this keeps the model's own threshold
    /// (`f64::INFINITY`: always calibrate).
    pub max_distance: f64,
}

impl Likeness {
    /// Whether a window whose nearest bank run lies `distance` away is near enough (NaN never
    /// is).
    pub fn admits(&self, distance: f64) -> bool {
        distance <= self.max_distance
    }
}

/// Bank runs nearest a window that lend it their decisions (as `calibrate --no-labels
/// --measured`'s default).
pub const DEFAULT_K: usize = 5;

/// Farthest a receiver's run may lie from the shipped model's training receivers to count as
/// like one of them: on the test receivers (`datasets/unseen.toml`, `shaped.toml`) none of the
/// 73 points (receiver, rate up to 500 Mb/s) within it failed the strict test, and 15 of the 47
/// beyond it did; of the training receivers each held out (against the other 55), 18 of 175 and
/// 26 of 105 (models/README.md). `aggrate eval` warns beyond it, and it is the online
/// calibrator's limit where the receiver's WLAN is not the training one.
pub const FAMILIAR_DISTANCE: f64 = 1.0;

/// How near a window's nearest training receiver must lie for its threshold to be taken.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum DistanceLimit {
    /// By the receiver's PHY rate: no limit when it is the model's training WLAN's (the measured
    /// bank's own WLAN), [`FAMILIAR_DISTANCE`] when it is another or not known.
    ByPhy,
    /// This limit (spreads; infinity: none).
    Fixed(f64),
}

impl DistanceLimit {
    /// A limit given by a user: `None` is [`DistanceLimit::ByPhy`]; a fixed one must be 0 or
    /// more.
    pub fn given(max_distance: Option<f64>) -> Result<DistanceLimit, Error> {
        max_distance.map_or(DistanceLimit::ByPhy, DistanceLimit::Fixed).check()
    }

    /// The limit, if it is one: a fixed distance must be 0 or more (infinity: none).
    pub fn check(self) -> Result<DistanceLimit, Error> {
        match self {
            DistanceLimit::Fixed(d) if d.is_nan() || d < 0.0 => Err(Error::BadDistance(d)),
            l => Ok(l),
        }
    }

    /// The limit for a receiver whose PHY rate is `phy_bps` (if known), running `file`.
    pub fn resolve(self, file: &ModelFile, phy_bps: Option<u64>) -> f64 {
        match self {
            DistanceLimit::Fixed(d) => d,
            DistanceLimit::ByPhy => match (training_phy_bps(file), phy_bps) {
                // Within 1 %: a PHY rate said in Mb/s with a decimal or two.
                (Some(t), Some(p)) if (t as f64 - p as f64).abs() <= 0.01 * t as f64 => f64::INFINITY,
                _ => FAMILIAR_DISTANCE,
            },
        }
    }
}

/// The PHY rate of the WLAN `file` was trained over (its `metrics.training_wlan`: VHT `mcs`,
/// `nss`, `bw_mhz`; short guard interval as the datasets use), if it says.
pub fn training_phy_bps(file: &ModelFile) -> Option<u64> {
    let w = file.metrics.get("training_wlan")?;
    let num = |k: &str| w.get(k)?.as_u64();
    vht_rate_bps(num("mcs")? as u8, num("nss")? as u8, num("bw_mhz")? as u32)
}

/// VHT data rate with a short guard interval (IEEE 802.11-2020 Table 21-30 ff.): data subcarriers
/// of the width × bits per subcarrier of the MCS × coding rate × streams, per 3.6 µs symbol.
pub fn vht_rate_bps(mcs: u8, nss: u8, bw_mhz: u32) -> Option<u64> {
    let n_sd: u64 = match bw_mhz {
        20 => 52,
        40 => 108,
        80 => 234,
        160 => 468,
        _ => return None,
    };
    // (bits per subcarrier, coding rate numerator, denominator)
    let (bpsc, num, den): (u64, u64, u64) = match mcs {
        0 => (1, 1, 2),
        1 => (2, 1, 2),
        2 => (2, 3, 4),
        3 => (4, 1, 2),
        4 => (4, 3, 4),
        5 => (6, 2, 3),
        6 => (6, 3, 4),
        7 => (6, 5, 6),
        8 => (8, 3, 4),
        9 => (8, 5, 6),
        _ => return None,
    };
    if !(1..=8).contains(&nss) {
        return None;
    }
    let ndbps = n_sd * bpsc * nss as u64 * num / den;
    // Bits per 3.6 µs symbol → b/s.
    Some(ndbps * 10_000_000 / 36)
}

/// Gaps per calibration window: 0.4 s at 500 Mb/s of 1,500-byte packets, 2 s at 100 Mb/s.
pub const WINDOW_GAPS: usize = 16_384;
/// Windows a knot averages over (the newest count most when a receiver changes).
pub const KNOT_MEMORY: u32 = 8;
/// Largest relative difference between the received rates of a window's two halves for the
/// window to count as one rate.
pub const STEADY: f64 = 0.25;
/// A longer gap (a pause, a new session) starts the window again.
pub const MAX_GAP: Duration = Duration::from_secs(1);
/// Bytes of IPv4 and UDP headers added to a datagram's length to get the IP length the bank's
/// rates count.
pub const IP_UDP_HEADERS: u64 = 28;

/// What one window did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// Windows summarised so far (this one included).
    pub window: u64,
    /// Received rate over the window (Mb/s of IP packets).
    pub rate_mbps: f64,
    /// The bank rate its neighbours were taken at.
    pub bank_rate_mbps: f64,
    /// The window's median load (`lmean`), where its knot sits.
    pub load: f64,
    /// The nearest bank run's receiver.
    pub nearest: String,
    /// Its distance (spreads).
    pub distance: f64,
    /// The threshold best on the neighbours (0 when the bank is too far: the model's own).
    pub threshold: f64,
    /// The nearest bank run lay beyond the likeness limit: the model's own threshold was kept.
    pub too_far: bool,
    /// Knots in the offset now.
    pub knots: usize,
}

/// What a calibrator did over a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Windows used.
    pub windows: u64,
    /// Windows not used (mixed rates, a failed summary).
    pub skipped: u64,
    /// Used windows whose nearest training receiver lay beyond the limit.
    pub too_far: u64,
    /// The last used window.
    pub last: Option<Step>,
    /// The operating point now (`[load, threshold]` knots; empty before the first window).
    pub knots: Vec<[f64; 2]>,
}

/// A knot being learned: its load, the sum of its last thresholds and how many (≤
/// [`KNOT_MEMORY`]), and the window that last touched it.
#[derive(Clone, Copy, Debug)]
struct Knot {
    load: f64,
    sum: f64,
    n: u32,
    touched: u64,
}

/// The online self-calibrator of one receiver (see the module docs).
#[derive(Clone, Debug)]
pub struct OnlineCalibrator {
    bank: SummaryBank,
    spec: FeatureSpec,
    like: Likeness,
    load_input: usize,
    /// Receive times of the window so far: at most `WINDOW_GAPS + 1`.
    times: Vec<Ts>,
    /// IP bytes received in each half of the window.
    bytes: [u64; 2],
    knots: Vec<Knot>,
    windows: u64,
    skipped: u64,
    too_far: u64,
    last: Option<Step>,
}

impl OnlineCalibrator {
    /// A calibrator of `file`'s model on `bank` (a summary made for that model: another is
    /// refused), with `like` neighbours.
    pub fn new(bank: SummaryBank, file: &ModelFile, like: Likeness) -> Result<OnlineCalibrator, Error> {
        bank.check_model(&file.model, &file.spec)?;
        let load_input = load_input(&file.model, &file.spec).ok_or(Error::NoLoad)?;
        Ok(OnlineCalibrator {
            bank,
            spec: file.spec,
            like,
            load_input,
            times: Vec::with_capacity(WINDOW_GAPS + 1),
            bytes: [0; 2],
            knots: Vec::new(),
            windows: 0,
            skipped: 0,
            too_far: 0,
            last: None,
        })
    }

    /// [`OnlineCalibrator::new`] for a receiver whose PHY rate is `phy_bps` (if known), with
    /// [`DEFAULT_K`] neighbours and the distance `limit` resolved for it: what `recv
    /// --self-calibrate`, the C ABI and Python run.
    pub fn for_receiver(
        bank: SummaryBank,
        file: &ModelFile,
        limit: DistanceLimit,
        phy_bps: Option<u64>,
    ) -> Result<OnlineCalibrator, Error> {
        let like = Likeness {
            k: DEFAULT_K,
            max_distance: limit.check()?.resolve(file, phy_bps),
        };
        OnlineCalibrator::new(bank, file, like)
    }

    /// Windows not used (mixed rates, no frame start among the neighbours).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// What it did so far.
    pub fn summary(&self) -> Summary {
        Summary {
            windows: self.windows,
            skipped: self.skipped,
            too_far: self.too_far,
            last: self.last.clone(),
            knots: self.offset().map(|o| o.knots).unwrap_or_default(),
        }
    }

    /// [`OnlineCalibrator::push`], and when a window was used, `est` takes the new operating
    /// point at once; the window's step is returned.
    pub fn feed(&mut self, est: &mut OnlineEstimator, host: Ts, len: u32) -> Option<&Step> {
        self.push(host, len)?;
        // Finite knots by increasing load on the model's own load input: not refused.
        let _ = est.set_load_offset(self.offset());
        self.last.as_ref()
    }

    /// One accepted data packet: its receive time and datagram length (UDP payload). Returns
    /// what the window did when this packet completed one that was used; then apply
    /// [`OnlineCalibrator::offset`].
    pub fn push(&mut self, host: Ts, len: u32) -> Option<Step> {
        if let Some(&last) = self.times.last() {
            if host.saturating_since(last) > MAX_GAP {
                self.restart();
            }
        }
        let half = (self.times.len() > WINDOW_GAPS / 2) as usize;
        self.bytes[half] += len as u64 + IP_UDP_HEADERS;
        self.times.push(host);
        if self.times.len() <= WINDOW_GAPS {
            return None;
        }
        let step = self.window();
        self.restart();
        if step.is_none() {
            self.skipped += 1;
        }
        step
    }

    fn restart(&mut self) {
        self.times.clear();
        self.bytes = [0; 2];
    }

    /// Received rate (Mb/s of IP packets) over times `t` carrying `bytes`.
    fn rate(t: &[Ts], bytes: u64) -> f64 {
        let span = match (t.first(), t.last()) {
            (Some(a), Some(b)) => b.saturating_since(*a).as_nanos(),
            _ => 0,
        };
        if span == 0 {
            return f64::NAN;
        }
        bytes as f64 * 8.0 / span as f64 * 1e3
    }

    fn window(&mut self) -> Option<Step> {
        let t = &self.times;
        let mid = WINDOW_GAPS / 2 + 1;
        let (a, b) = (
            Self::rate(&t[..mid], self.bytes[0]),
            Self::rate(&t[mid - 1..], self.bytes[1]),
        );
        let rate = Self::rate(t, self.bytes[0] + self.bytes[1]);
        if !(a.is_finite() && b.is_finite() && rate.is_finite()) || (a - b).abs() > STEADY * a.max(b) {
            return None;
        }
        let stats = GapStats::of(t)?;
        let (bank_rate, nearest) = self.bank.nearest(rate, &stats, self.like.k)?;
        let (first, distance) = *nearest.first()?;
        let too_far = !self.like.admits(distance);
        let threshold = if too_far {
            0.0
        } else {
            let (dec, y, w) = self.bank.pool(&nearest);
            best_threshold_weighted(&dec, &y, &w)?.threshold
        };
        // The window's load as the offline calibration takes a capture's: the median of its
        // context rows' `lmean`.
        let mut gw = GapWindow::new(&self.spec);
        let loads: Vec<f64> = t
            .iter()
            .filter_map(|&h| gw.push(h).map(|row| row[self.load_input]))
            .collect();
        if loads.is_empty() {
            return None;
        }
        let load = median_load(loads);
        if !load.is_finite() || !threshold.is_finite() {
            return None;
        }
        self.windows += 1;
        self.too_far += u64::from(too_far);
        self.learn(load, threshold);
        let step = Step {
            window: self.windows,
            rate_mbps: rate,
            bank_rate_mbps: bank_rate,
            load,
            nearest: self.bank.runs[first].receiver.clone(),
            distance,
            threshold,
            too_far,
            knots: self.knots.len(),
        };
        self.last = Some(step.clone());
        Some(step)
    }

    fn learn(&mut self, load: f64, threshold: f64) {
        let now = self.windows;
        if let Some(k) = self.knots.iter_mut().find(|k| k.load == load) {
            if k.n >= KNOT_MEMORY {
                // The mean of the last KNOT_MEMORY, approximately: the oldest share makes room.
                k.sum -= k.sum / k.n as f64;
                k.n -= 1;
            }
            k.sum += threshold;
            k.n += 1;
            k.touched = now;
            return;
        }
        if self.knots.len() >= MAX_KNOTS {
            // The load not seen longest gives way.
            if let Some(i) = (0..self.knots.len()).min_by_key(|&i| self.knots[i].touched) {
                self.knots.swap_remove(i);
            }
        }
        self.knots.push(Knot {
            load,
            sum: threshold,
            n: 1,
            touched: now,
        });
        self.knots.sort_unstable_by(|a, b| a.load.total_cmp(&b.load));
    }

    /// The operating point learned so far (`None` before the first window).
    pub fn offset(&self) -> Option<LoadOffset> {
        if self.knots.is_empty() {
            return None;
        }
        Some(LoadOffset {
            input: self.load_input,
            knots: self.knots.iter().map(|k| [k.load, k.sum / k.n as f64]).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bank for the shipped model: two receivers at 100 and 400 Mb/s, whose decisions put the
    /// frame starts above 1.0 and the rest below.
    fn bank() -> SummaryBank {
        let file = ModelFile::shipped().unwrap();
        let run = |receiver: &str, rate_mbps: f64, shift: f64| SummaryRun {
            receiver: receiver.into(),
            rate_mbps,
            stats: (0..STATS).map(|j| j as f64 * 0.1 + shift).collect(),
            bins: vec![[-100, 0, 900], [-10, 2, 60], [60, 30, 1], [100, 40, 0]],
        };
        SummaryBank::of(&BankSummary {
            format: SUMMARY_FORMAT.into(),
            model: fingerprint(&file.model, &file.spec),
            model_name: "shipped".into(),
            from: Vec::new(),
            bin_width: BIN_WIDTH,
            runs: vec![run("a", 100.0, 0.0), run("b", 400.0, 0.0), run("c", 400.0, 0.5)],
        })
        .unwrap()
    }

    fn calibrator(max_distance: f64) -> OnlineCalibrator {
        OnlineCalibrator::new(bank(), &ModelFile::shipped().unwrap(), Likeness { k: 2, max_distance }).unwrap()
    }

    /// Receive times of A-MPDUs of `per` packets `inside` ns apart, `between` ns from the last
    /// packet of one to the first of the next, from `t0`.
    fn frames(t0: u64, n: usize, per: usize, inside: u64, between: u64) -> Vec<Ts> {
        let mut t = t0;
        (0..n)
            .map(|i| {
                t += if i % per == 0 { between } else { inside };
                Ts(t)
            })
            .collect()
    }

    #[test]
    fn a_steady_window_sets_one_knot_at_its_load() {
        let mut c = calibrator(f64::INFINITY);
        // 32 packets 10 µs apart, 600 µs between: 32 × 1,500 B per 910 µs = 422 Mb/s.
        let t = frames(0, WINDOW_GAPS + 1, 32, 10_000, 600_000);
        let mut steps = Vec::new();
        for (i, &h) in t.iter().enumerate() {
            let s = c.push(h, 1472);
            if i < WINDOW_GAPS {
                assert!(s.is_none(), "no step before the window is full ({i})");
            }
            steps.extend(s);
        }
        assert_eq!(steps.len(), 1);
        let s = &steps[0];
        assert!((s.rate_mbps - 422.0).abs() < 5.0, "{s:?}");
        assert_eq!(s.bank_rate_mbps, 400.0);
        // Between the highest "other" bin (-10 → -0.19) and the lowest start-holding bin above
        // it (60 → 1.21): the best F1 calls bins 60 and 100.
        assert!(!s.too_far && s.threshold > -0.19 && s.threshold < 1.21, "{s:?}");
        // The mean gap is 910/32 = 28.4 µs: lmean is the log of its bin's centre.
        assert!((s.load - 28.4f64.ln()).abs() < 0.05, "{s:?}");
        let o = c.offset().unwrap();
        assert_eq!(o.knots, vec![[s.load, s.threshold]]);
        assert_eq!(o.input, ModelFile::shipped().unwrap().spec.width() - 1);
        assert!(c.times.is_empty(), "the next window starts empty");
        assert_eq!(c.summary().windows, 1);
    }

    #[test]
    fn far_from_every_training_receiver_the_model_keeps_its_threshold() {
        let mut c = calibrator(0.0);
        let mut step = None;
        for h in frames(0, WINDOW_GAPS + 1, 32, 10_000, 600_000) {
            step = step.or(c.push(h, 1472));
        }
        let s = step.unwrap();
        assert!(s.too_far && s.distance > 0.0, "{s:?}");
        assert_eq!(s.threshold, 0.0);
        assert_eq!(c.offset().unwrap().knots, vec![[s.load, 0.0]]);
    }

    #[test]
    fn mixed_rates_and_pauses_are_not_summarised() {
        let mut c = calibrator(f64::INFINITY);
        let a = frames(0, WINDOW_GAPS / 2 + 1, 32, 10_000, 600_000);
        let b = frames(a[a.len() - 1].0, WINDOW_GAPS / 2, 32, 30_000, 1_800_000);
        for h in a.into_iter().chain(b) {
            assert!(c.push(h, 1472).is_none());
        }
        assert_eq!((c.skipped(), c.offset()), (1, None));
        let a = frames(10_000_000_000, 10_000, 32, 10_000, 600_000);
        let b = frames(a[a.len() - 1].0 + 2_000_000_000, WINDOW_GAPS + 1, 32, 10_000, 600_000);
        let n = a.len();
        let steps: Vec<usize> = a
            .into_iter()
            .chain(b)
            .enumerate()
            .filter_map(|(i, h)| c.push(h, 1472).map(|_| i))
            .collect();
        assert_eq!(steps, vec![n + WINDOW_GAPS]);
    }

    #[test]
    fn knots_follow_the_last_windows_and_stay_bounded() {
        let mut c = calibrator(f64::INFINITY);
        for _ in 0..KNOT_MEMORY {
            c.learn(3.0, 1.0);
        }
        for _ in 0..KNOT_MEMORY {
            c.learn(3.0, 0.0);
        }
        // Each new window takes an eighth of the mean's weight: (7/8)^8 of the ones is left.
        let v = c.offset().unwrap().knots[0][1];
        assert!((v - (7f64 / 8.0).powi(8)).abs() < 1e-12, "{v}");
        for i in 0..(MAX_KNOTS + 10) {
            c.windows += 1;
            c.learn(1.0 + i as f64 * 0.01, i as f64);
        }
        let k = c.offset().unwrap().knots;
        assert_eq!(k.len(), MAX_KNOTS);
        assert!(k.windows(2).all(|w| w[0][0] < w[1][0]));
        assert!(!k.iter().any(|x| x[0] == 3.0), "the oldest load went first");
        // The estimator takes what the calibrator makes, through `feed`.
        let file = ModelFile::shipped().unwrap();
        let mut e = OnlineEstimator::from_model(&file, Duration::from_millis(500)).unwrap();
        e.set_load_offset(c.offset()).unwrap();
    }

    #[test]
    fn a_model_without_a_load_or_another_models_bank_is_refused() {
        use crate::model::{LogisticModel, Scaler};
        let mut logistic = ModelFile::shipped().unwrap();
        logistic.spec = FeatureSpec::default();
        let w = logistic.spec.width();
        logistic.model = EstimatorModel::Logistic(LogisticModel {
            scaler: Scaler {
                mean: vec![0.0; w],
                std: vec![1.0; w],
            },
            w: vec![0.0; w],
            b: 0.0,
            iterations: 0,
        });
        let like = Likeness {
            k: 1,
            max_distance: 1.0,
        };
        assert!(matches!(
            OnlineCalibrator::new(bank(), &logistic, like),
            Err(Error::OtherModel { .. })
        ));
        let mut b = bank();
        b.fingerprint = fingerprint(&logistic.model, &logistic.spec);
        assert!(matches!(OnlineCalibrator::new(b, &logistic, like), Err(Error::NoLoad)));
        // A calibrated copy of the shipped model is the same model.
        let mut copy = ModelFile::shipped().unwrap();
        if let EstimatorModel::Mlp(m) = &mut copy.model {
            m.load_offset = Some(LoadOffset {
                input: copy.spec.width() - 1,
                knots: vec![[3.0, 0.5]],
            });
        }
        assert!(OnlineCalibrator::new(bank(), &copy, like).is_ok());
    }

    #[test]
    fn vht_rates_from_the_standard() {
        assert_eq!(vht_rate_bps(9, 2, 80), Some(866_666_666));
        assert_eq!(vht_rate_bps(7, 1, 80), Some(325_000_000));
        assert_eq!(vht_rate_bps(0, 1, 20), Some(7_222_222));
        assert_eq!(vht_rate_bps(10, 1, 80), None);
        assert_eq!(vht_rate_bps(9, 0, 80), None);
        assert_eq!(vht_rate_bps(9, 2, 30), None);
    }

    #[test]
    fn weighted_threshold_is_the_repeated_rows_threshold() {
        let dec = [3.0, 2.0, 1.0, -1.0, -2.0];
        let y = [true, true, false, true, false];
        let w = [2, 1, 3, 1, 5];
        let t = best_threshold_weighted(&dec, &y, &w).unwrap();
        // The same rows written out one by one.
        let (mut d1, mut y1) = (Vec::new(), Vec::new());
        for i in 0..5 {
            for _ in 0..w[i] {
                d1.push(dec[i]);
                y1.push(y[i]);
            }
        }
        let ones = vec![1u64; d1.len()];
        assert_eq!(best_threshold_weighted(&d1, &y1, &ones), Some(t));
        assert_eq!((t.tp, t.fp, t.fn_, t.tn), (3, 0, 1, 8));
        assert!(best_threshold_weighted(&[1.0], &[false], &[1]).is_none(), "no start");
        assert!(
            best_threshold_weighted(&[1.0], &[true], &[]).is_none(),
            "lengths differ"
        );
    }

    #[test]
    fn summaries_are_checked_field_by_field() {
        let run = SummaryRun {
            receiver: "r".into(),
            rate_mbps: 100.0,
            stats: vec![0.5; STATS],
            bins: vec![[0, 1, 2]],
        };
        let ok = BankSummary {
            format: SUMMARY_FORMAT.into(),
            model: "ab".into(),
            model_name: "m".into(),
            from: Vec::new(),
            bin_width: BIN_WIDTH,
            runs: vec![run.clone()],
        };
        assert!(SummaryBank::of(&ok).is_ok());
        let e = |s: BankSummary| SummaryBank::of(&s).unwrap_err().to_string();
        assert!(e(BankSummary {
            format: "x".into(),
            ..ok.clone()
        })
        .contains("format"));
        assert!(e(BankSummary {
            bin_width: 0.0,
            ..ok.clone()
        })
        .contains("bin_width"));
        assert!(e(BankSummary {
            runs: vec![],
            ..ok.clone()
        })
        .contains("no runs"));
        let with = |r: SummaryRun| BankSummary {
            runs: vec![r],
            ..ok.clone()
        };
        assert!(e(with(SummaryRun {
            rate_mbps: f64::NAN,
            ..run.clone()
        }))
        .contains("runs[0].rate_mbps"));
        assert!(e(with(SummaryRun {
            stats: vec![1.0; 3],
            ..run.clone()
        }))
        .contains("runs[0].stats: 3 numbers"));
        assert!(e(with(SummaryRun {
            bins: vec![[0, -1, 0]],
            ..run.clone()
        }))
        .contains("negative count"));
        assert!(e(with(SummaryRun {
            bins: vec![[0, 1 << 41, 1 << 41]],
            ..run.clone()
        }))
        .contains("more than"));
        assert!(SummaryBank::from_json(b"{")
            .unwrap_err()
            .to_string()
            .starts_with("not a bank summary"));
        let json = serde_json::to_vec(&ok).unwrap();
        assert_eq!(SummaryBank::from_json(&json).unwrap(), SummaryBank::of(&ok).unwrap());
    }
}
