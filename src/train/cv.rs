//! Cross-validation drivers and scoring: contiguous k-fold CV on packets ([`packet_cv`]) and
//! leave-one-receiver-out ([`receiver_cv`]), which holds out a whole receive path and compares the
//! model trained without it with one trained on that receiver alone (its own contiguous CV).
//!
//! Inputs: a [`Dataset`] and a [`Fitter`]; outputs: typed reports ([`FoldReport`],
//! [`RateReport`], [`ReceiverReport`]) that `report` renders. Progress goes through a
//! [`Progress`] callback; nothing here prints or reads a clock.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    cv_predict_svr, fit_svr, levels_from_starts, Error, Fit, LogisticCv, Predict, SvmCv, SvrModel, SvrParams,
    ThresholdFit, ValidLogisticParams, ValidMlpParams, ValidSvmParams, ValidSvrParams,
};
use crate::dataset::{contiguous_folds, slot_rows, Dataset, FoldError, RowSet, SlotRows};
use crate::features::FeatureSpec;
use crate::metrics::{AggMetrics, BinaryMetrics, LevelError};
use crate::model::EstimatorModel;

pub use crate::progress::{NoProgress, Progress};

/// Errors of the CV drivers.
#[derive(Debug, thiserror::Error)]
pub enum CvError {
    /// Fitting failed.
    #[error(transparent)]
    Fit(#[from] Error),
    /// Folds could not be made.
    #[error(transparent)]
    Folds(#[from] FoldError),
    /// Calibrating a held-out model failed.
    #[error("calibrating a held-out model: {0}")]
    Calibrate(#[from] super::calibrate::Error),
    /// Calibrating a held-out model on the emulated bank failed.
    #[error("calibrating on the emulated bank: {0}")]
    SelfCalibrate(#[from] super::bank::Error),
    /// A capture has no receiver name.
    #[error("a capture has no receiver: every capture needs one (manifest.json `receiver`, or the capture's pcapng comment)")]
    NoReceiver,
    /// Too few slot rows for the slot SVR.
    #[error(
        "only {rows} slot rows: the captures are too short for d = {d} slots of {slot_ms} ms (try --slot-ms or --d)"
    )]
    TooFewSlotRows {
        /// Slot rows.
        rows: usize,
        /// Slots per row.
        d: usize,
        /// Slot length (ms).
        slot_ms: u64,
    },
    /// A capture has fewer than 2 slot rows.
    #[error(
        "a capture has {0} slot row(s): SVR cross-validation needs 2 per capture (try a shorter --slot-ms or --d)"
    )]
    ShortSlotCapture(usize),
    /// No SVR grid point.
    #[error("slot SVR: empty (C, γ, ε) grid")]
    EmptyGrid,
    /// A grid-search worker failed (a bug: it panicked).
    #[error("slot SVR: a grid worker failed")]
    GridWorker,
    /// Fewer than two receivers to leave out (test receivers do not count).
    #[error("leave-one-receiver-out needs at least 2 receivers to train on; the data has {0}")]
    TooFewReceivers(usize),
}

/// What a CV fits.
#[derive(Clone, Copy, Debug)]
pub enum Fitter {
    /// Logistic regression (folds start from the all-rows fit and read rows in place).
    Logistic(ValidLogisticParams),
    /// Linear SVM (folds start from the all-rows fit).
    Svm(ValidSvmParams),
    /// The m = 1 threshold on feature 0.
    Threshold,
    /// The perceptron.
    Mlp(ValidMlpParams),
}

impl Fitter {
    /// Fit on the rows `rows` of `data` (through each kind's [`Fit`]).
    pub fn fit(&self, data: &Dataset, rows: &RowSet) -> Result<EstimatorModel, Error> {
        Ok(match self {
            Fitter::Logistic(p) => p.fit(data, rows)?.into(),
            Fitter::Svm(p) => p.fit(data, rows)?.into(),
            Fitter::Threshold => ThresholdFit.fit(data, rows)?.into(),
            Fitter::Mlp(p) => p.fit(data, rows)?.into(),
        })
    }
}

/// Metrics of one fold.
#[derive(Clone, Debug, Serialize)]
pub struct FoldReport {
    /// Fold index.
    pub fold: usize,
    /// Test rows.
    pub rows: u64,
    /// F1 of "first of frame".
    pub f1: f64,
    /// Precision.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// Accuracy.
    pub accuracy: f64,
    /// Aggregation RMSE per packet.
    pub agg_rmse: f64,
    /// μ_N per report interval of the fold's held-out rows, as packets ÷ predicted starts
    /// against the truth ([`crate::metrics::count_pairs`], 100 ms); none when no interval has
    /// enough A-MPDUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mu_n: Option<LevelError>,
}

/// Slot metrics of one send rate (slot-SVR models): the packet model alone vs corrected.
#[derive(Clone, Debug, Serialize)]
pub struct SlotRateReport {
    /// Send rate.
    pub rate_mbps: f64,
    /// Slots.
    pub slots: u64,
    /// RMSE of the packet model's mean level.
    pub base_rmse: f64,
    /// RMSE of the corrected level.
    pub svr_rmse: f64,
    /// Within ±1 (packet model).
    pub base_acc_within1: f64,
    /// Within ±1 (corrected).
    pub svr_acc_within1: f64,
    /// Mean true level.
    pub true_mean_level: f64,
}

/// Metrics of one send rate.
#[derive(Clone, Debug, Serialize)]
pub struct RateReport {
    /// Send rate (NaN: unknown).
    pub rate_mbps: f64,
    /// Rows.
    pub rows: u64,
    /// F1.
    pub f1: f64,
    /// Precision.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// Accuracy.
    pub accuracy: f64,
    /// Aggregation RMSE per packet.
    pub agg_rmse: f64,
    /// Exact aggregation level share.
    pub agg_acc: f64,
    /// Within ±1.
    pub agg_acc_within1: f64,
    /// Mean level error.
    pub agg_mean_error: f64,
    /// Slot-level metrics (slot SVR models only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<SlotRateReport>,
}

/// Metrics per send rate: (rate, labels, levels), keyed by rate in kb/s (−1: unknown).
pub type PerRate = BTreeMap<i64, (f64, BinaryMetrics, AggMetrics)>;

/// Predict the rows `idx` (contiguous per capture, in capture order) and score them: labels, and
/// levels from predicted starts within each run's block (a capture; see [`Dataset::same_run`]);
/// also added into `per_rate`.
pub fn score(
    data: &Dataset,
    idx: &[usize],
    model: &impl Predict,
    n_max: u16,
    per_rate: &mut PerRate,
) -> (BinaryMetrics, AggMetrics) {
    let pred: Vec<bool> = idx.iter().map(|&i| model.predict_row(data.row(i))).collect();
    score_predicted(data, idx, &pred, n_max, per_rate)
}

/// [`score`] for predictions already made (`pred[k]` for row `idx[k]`).
pub fn score_predicted(
    data: &Dataset,
    idx: &[usize],
    pred: &[bool],
    n_max: u16,
    per_rate: &mut PerRate,
) -> (BinaryMetrics, AggMetrics) {
    let truth: Vec<bool> = idx.iter().map(|&i| data.y[i]).collect();
    let bm = BinaryMetrics::from_labels(&truth, pred);
    let mut agg = AggMetrics::default();
    for run in data.runs(idx) {
        let (s, e) = (run.start, run.end);
        let lv = levels_from_starts(&pred[s..e], n_max);
        let tl: Vec<u16> = idx[s..e].iter().map(|&i| data.level[i]).collect();
        let am = AggMetrics::from_levels(&tl, &lv);
        agg.add(&am);
        let rate = data.rate_mbps[idx[s]];
        let key = if rate.is_nan() { -1 } else { (rate * 1000.0) as i64 };
        let entry = per_rate
            .entry(key)
            .or_insert((rate as f64, BinaryMetrics::default(), AggMetrics::default()));
        entry.1.add(&BinaryMetrics::from_labels(&truth[s..e], &pred[s..e]));
        entry.2.add(&am);
    }
    (bm, agg)
}

/// Per-rate rows of a report.
pub fn rate_reports(per_rate: &PerRate) -> Vec<RateReport> {
    per_rate
        .values()
        .map(|(r, b, g)| RateReport {
            rate_mbps: *r,
            rows: b.tp + b.fp + b.tn + b.fn_,
            f1: b.f1(),
            precision: b.precision(),
            recall: b.recall(),
            accuracy: b.accuracy(),
            agg_rmse: g.rmse(),
            agg_acc: g.accuracy(),
            agg_acc_within1: g.accuracy_within1(),
            agg_mean_error: g.mean_error(),
            slot: None,
        })
        .collect()
}

/// Result of the packet-level CV.
pub struct PacketCv {
    /// The model fitted on all rows.
    pub final_model: EstimatorModel,
    /// Per fold.
    pub folds: Vec<FoldReport>,
    /// Per send rate, over all folds.
    pub per_rate: PerRate,
    /// Out-of-fold predicted starts, per row.
    pub oof: Vec<bool>,
    /// μ_N per report interval over every fold's held-out rows (see [`FoldReport::mu_n`]).
    pub mu_n: Option<LevelError>,
}

/// Fit on all rows, then k contiguous folds (each capture cut into k blocks; fold i tests block
/// i of every capture).
pub fn packet_cv(
    data: &Dataset,
    k: usize,
    n_max: u16,
    fit: Fitter,
    progress: &mut dyn Progress,
) -> Result<PacketCv, CvError> {
    let folds = contiguous_folds(&data.group, k)?;
    // The model on all rows comes first: it is the result, and (logistic, SVM) the start of
    // every fold, whose training rows are 95 % the same.
    enum Warm<'d> {
        Logistic(LogisticCv<'d>),
        Svm(SvmCv<'d>),
        Rows(Fitter),
    }
    progress.start("fitting on all rows", 0);
    let warm = match fit {
        Fitter::Logistic(p) => Warm::Logistic(LogisticCv::new(data, &p)?),
        Fitter::Svm(p) => Warm::Svm(SvmCv::new(data, &p)?),
        f => Warm::Rows(f),
    };
    let n = data.len();
    let final_model = match &warm {
        Warm::Logistic(cv) => EstimatorModel::Logistic(cv.model().clone()),
        Warm::Svm(cv) => EstimatorModel::LinearSvm(cv.model().clone()),
        Warm::Rows(f) => f.fit(data, &RowSet::all(n))?,
    };
    progress.finish();
    progress.start("cross-validating", folds.len() as u64);
    let mut fold_reports = Vec::new();
    let mut per_rate = PerRate::new();
    let mut oof = vec![false; n];
    let mut pairs = Vec::new();
    for (fi, test) in folds.iter().enumerate() {
        let model = match &warm {
            Warm::Logistic(cv) => EstimatorModel::Logistic(cv.without(test)?),
            Warm::Svm(cv) => EstimatorModel::LinearSvm(cv.without(test)?),
            Warm::Rows(f) => f.fit(data, &RowSet::from_indices(test).complement(n))?,
        };
        let pred: Vec<bool> = test.iter().map(|&i| model.predict_row(data.row(i))).collect();
        let (bm, agg) = score_predicted(data, test, &pred, n_max, &mut per_rate);
        for (&i, &p) in test.iter().zip(&pred) {
            oof[i] = p;
        }
        let fold_pairs = held_out_pairs(data, test, &pred);
        fold_reports.push(FoldReport {
            fold: fi,
            rows: test.len() as u64,
            f1: bm.f1(),
            precision: bm.precision(),
            recall: bm.recall(),
            accuracy: bm.accuracy(),
            agg_rmse: agg.rmse(),
            mu_n: LevelError::of(&fold_pairs),
        });
        pairs.extend(fold_pairs);
        progress.inc();
    }
    progress.finish();
    Ok(PacketCv {
        final_model,
        folds: fold_reports,
        per_rate,
        oof,
        mu_n: LevelError::of(&pairs),
    })
}

/// μ_N per report interval of held-out rows `idx` with predictions `pred`, run by run.
fn held_out_pairs(data: &Dataset, idx: &[usize], pred: &[bool]) -> Vec<crate::metrics::LevelPair> {
    let mut out = Vec::new();
    for run in data.runs(idx) {
        let host: Vec<crate::time::Ts> = idx[run.clone()].iter().map(|&i| data.host[i]).collect();
        let truth: Vec<bool> = idx[run.clone()].iter().map(|&i| data.y[i]).collect();
        out.extend(crate::metrics::count_pairs(
            &host,
            &truth,
            &pred[run],
            crate::metrics::CV_REPORT_INTERVAL,
        ));
    }
    out
}

/// F1, precision and recall of one held-out evaluation.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Score {
    /// F1.
    pub f1: f64,
    /// Precision.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// Aggregation RMSE per packet.
    pub agg_rmse: f64,
}

impl Score {
    fn of(b: &BinaryMetrics, a: &AggMetrics) -> Score {
        Score {
            f1: b.f1(),
            precision: b.precision(),
            recall: b.recall(),
            agg_rmse: a.rmse(),
        }
    }
}

/// One held-out receiver at one send rate.
#[derive(Clone, Debug, Serialize)]
pub struct ReceiverRate {
    /// Send rate.
    pub rate_mbps: f64,
    /// Rows of this receiver at this rate.
    pub rows: u64,
    /// The model trained without this receiver.
    pub held_out: Score,
    /// The same model kind trained on this receiver alone (its own contiguous CV).
    pub own: Score,
    /// The m = 1 threshold trained without this receiver.
    pub threshold_held_out: Score,
    /// The m = 1 threshold on this receiver alone (own CV).
    pub threshold_own: Score,
    /// Variants of the held-out model scored beside it (when asked for: [`HeldOutCalibrations`]),
    /// each on the rows its [`Variant`] says. In JSON each is a field of its own
    /// (`calibrated`, `self_calibrated`, …).
    #[serde(flatten)]
    pub variants: BTreeMap<Variant, Score>,
    /// How far this rate's capture lies from the self-calibration bank (its nearest bank run's
    /// distance, [`super::bank::Bank::nearest`]), with [`Variant::SelfCalibrated`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_calibration_distance: Option<f64>,
    /// How far this rate's capture lies from every receiver its held-out model was trained on:
    /// its nearest training capture's distance ([`super::bank::Bank::likeness_of`], no label
    /// read). Far from all of them is where held-out models lose most (models/README.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_distance: Option<f64>,
}

/// A variant of the held-out model that [`receiver_cv`] scores beside it, to show what a step
/// that needs none of the receiver's labels buys (or, for `Calibrated`, what a short labelled
/// stretch buys). Variants are reported in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Calibrated on the first share of each of the receiver's captures ([`crate::train::calibrate`],
    /// with its labels), scored on the rest of them.
    Calibrated,
    /// Calibrated without the receiver's labels, on the emulated receivers that time packets
    /// most like it ([`crate::train::bank`]), scored on all its rows.
    SelfCalibrated,
    /// Fitted again without the receiver but tailored to it without its labels: the training
    /// receivers that time packets most like it weigh more ([`Tailor`], `train --like`), scored
    /// on all its rows.
    Tailored,
    /// The tailored model, then self-calibrated on the bank: whether the two label-free steps
    /// add up.
    TailoredSelfCalibrated,
    /// Calibrated without the receiver's labels as `SelfCalibrated`, but on the *training*
    /// receivers that time packets most like it (measured ones, real-kernel paths among them)
    /// instead of emulated ones; scored on all its rows.
    SelfCalibratedOnTraining,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 5] = [
        Variant::Calibrated,
        Variant::SelfCalibrated,
        Variant::Tailored,
        Variant::TailoredSelfCalibrated,
        Variant::SelfCalibratedOnTraining,
    ];

    /// Its name in reports' lines ("self-calibrated").
    pub fn label(self) -> &'static str {
        match self {
            Variant::Calibrated => "calibrated",
            Variant::SelfCalibrated => "self-calibrated",
            Variant::Tailored => "tailored",
            Variant::TailoredSelfCalibrated => "tailored, self-calibrated",
            Variant::SelfCalibratedOnTraining => "self-calibrated on training receivers",
        }
    }

    /// Its name in CSV columns and JSON fields ("self_calibrated").
    pub fn key(self) -> &'static str {
        match self {
            Variant::Calibrated => "calibrated",
            Variant::SelfCalibrated => "self_calibrated",
            Variant::Tailored => "tailored",
            Variant::TailoredSelfCalibrated => "tailored_self_calibrated",
            Variant::SelfCalibratedOnTraining => "self_calibrated_on_training",
        }
    }

    /// Whether it is set on an emulated bank (whose WLAN the report names).
    pub fn uses_bank(self) -> bool {
        matches!(self, Variant::SelfCalibrated | Variant::TailoredSelfCalibrated)
    }
}

/// Calibrations of each held-out model that [`receiver_cv`] scores besides the model itself.
#[derive(Clone, Debug)]
pub struct HeldOutCalibrations<'a> {
    /// The rows' feature layout.
    pub spec: &'a FeatureSpec,
    /// Calibrate on the first share of each of the receiver's captures, with its labels
    /// ([`Variant::Calibrated`]).
    pub share: Option<f64>,
    /// Calibrate on the bank's receivers nearest each capture, without the receiver's
    /// labels ([`Variant::SelfCalibrated`]).
    pub bank: Option<ReceiverBanks<'a>>,
    /// Fit each held-out model again tailored to the receiver ([`Variant::Tailored`]; with
    /// `bank` also [`Variant::TailoredSelfCalibrated`]).
    pub tailor: Option<Tailor>,
    /// Calibrate on the training receivers nearest each capture, without the receiver's labels
    /// ([`Variant::SelfCalibratedOnTraining`]).
    pub on_training: Option<super::bank::Likeness>,
}

/// How a model is tailored to one receiver without its labels (`train --like`): of the
/// training receivers ranked by likeness ([`super::bank::rank_receivers`]), every row of the
/// `receivers` nearest and one in `weight` of each other capture's (from its first).
///
/// The receivers chosen are too far from the target when their mean distance exceeds
/// `max_distance`; then the model is not tailored (the plain fit stands).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tailor {
    /// Nearest receivers kept whole (≥ 1).
    pub receivers: usize,
    /// Their weight: the others keep one row in this many (≥ 1).
    pub weight: usize,
    /// Farthest mean distance of the chosen receivers at which to tailor (`f64::INFINITY`:
    /// always).
    pub max_distance: f64,
}

/// [`Tailor::max_distance`] unless told otherwise: chosen leave one receiver out on
/// `datasets/receivers.toml` (models/README.md).
pub const DEFAULT_TAILOR_MAX_DISTANCE: f64 = 2.5;

/// The mean of distances (NaN for none).
pub fn mean_distance(d: &[f64]) -> f64 {
    d.iter().sum::<f64>() / d.len() as f64
}

/// What [`Tailor::select`] chose.
#[derive(Clone, Debug, PartialEq)]
pub struct Tailored {
    /// The nearest receivers (indices into the names) with their distances, nearest first.
    pub near: Vec<(u32, f64)>,
    /// The rows to fit on; `None` when the nearest lie too far ([`Tailor::admits`]) and the plain
    /// fit stands.
    pub keep: Option<Vec<usize>>,
}

impl Tailored {
    /// The mean distance of the receivers chosen.
    pub fn mean_distance(&self) -> f64 {
        mean_distance(&self.near.iter().map(|n| n.1).collect::<Vec<_>>())
    }
}

impl Tailor {
    /// Whether receivers whose distances to the target are `d` are near enough to tailor on
    /// (their mean within [`Tailor::max_distance`]; none, or NaN, never).
    pub fn admits(&self, d: &[f64]) -> bool {
        mean_distance(d) <= self.max_distance
    }

    /// Rank the receivers of `like_bank` by likeness to `target` (label-free:
    /// [`super::bank::rank_receivers`]), keep the [`Tailor::receivers`] nearest of those named in
    /// `names` that `may_train`, and — when they are near enough — the rows of `data` to fit on:
    /// of the rows whose receiver (`receiver_of_row`) may train, the nearest's whole and one in
    /// [`Tailor::weight`] of the others'.
    pub fn select(
        &self,
        like_bank: &super::bank::Bank,
        target: &Dataset,
        names: &[String],
        data: &Dataset,
        receiver_of_row: &dyn Fn(usize) -> Option<u32>,
        may_train: &dyn Fn(u32) -> bool,
    ) -> Result<Tailored, super::bank::Error> {
        let ranked = super::bank::rank_receivers(like_bank, target)?;
        let near: Vec<(u32, f64)> = ranked
            .iter()
            .filter_map(|(name, d)| names.iter().position(|n| n == name).map(|i| (i as u32, *d)))
            .filter(|&(o, _)| may_train(o))
            .take(self.receivers.max(1))
            .collect();
        if !self.admits(&near.iter().map(|c| c.1).collect::<Vec<_>>()) {
            return Ok(Tailored { near, keep: None });
        }
        let pool: Vec<usize> = (0..data.len())
            .filter(|&i| receiver_of_row(i).is_some_and(may_train))
            .collect();
        let keep = self.keep(data, &pool, |i| {
            receiver_of_row(i).is_some_and(|o| near.iter().any(|n| n.0 == o))
        });
        Ok(Tailored { near, keep: Some(keep) })
    }

    /// [`Tailor::select`] for `train --like`: the bank is `data`'s own captures grouped by
    /// receiver (`receiver_of_group`, `names`: [`receivers_of`]), and every receiver may train.
    pub fn select_in(
        &self,
        data: &Dataset,
        receiver_of_group: &[u32],
        names: &[String],
        target: &Dataset,
    ) -> Result<Tailored, super::bank::Error> {
        let bank = super::bank::Bank::of_captures(data, receiver_of_group, names);
        let of_row = |i: usize| receiver_of_group.get(data.group[i] as usize).copied();
        self.select(&bank, target, names, data, &of_row, &|_| true)
    }

    /// Of `rows` (row indices, contiguous per capture), those kept: `near(row)` whole, the
    /// others one in `weight` per capture run from its first.
    pub fn keep(&self, data: &Dataset, rows: &[usize], near: impl Fn(usize) -> bool) -> Vec<usize> {
        let w = self.weight.max(1);
        let mut keep = Vec::with_capacity(rows.len());
        let mut since = 0usize;
        let mut prev: Option<usize> = None;
        for &i in rows {
            if prev.is_none_or(|p| !data.same_run(p, i)) {
                since = 0;
            }
            prev = Some(i);
            if near(i) || since.is_multiple_of(w) {
                keep.push(i);
            }
            since += 1;
        }
        keep
    }
}

/// The banks label-free calibration uses in [`receiver_cv`]: one per receiver (by index; a
/// receiver past the end is not self-calibrated), emulated at that receiver's WLAN, with the
/// WLAN in words for the report ([`ReceiverReport::bank_wlan`]). Receivers of one WLAN share a
/// bank.
#[derive(Clone, Debug)]
pub struct ReceiverBanks<'a> {
    /// Per receiver: its bank and the bank's WLAN.
    pub of_receiver: Vec<(&'a super::bank::Bank, String)>,
    /// How near a bank receiver must be.
    pub like: super::bank::Likeness,
}

impl ReceiverRate {
    /// What not having seen the receiver cost (own-CV F1 − held-out F1; negative: nothing).
    pub fn loss(&self) -> f64 {
        self.own.f1 - self.held_out.f1
    }

    /// The score of a variant of the held-out model, if it was scored here.
    pub fn variant(&self, v: Variant) -> Option<Score> {
        self.variants.get(&v).copied()
    }
}

/// Leave-one-receiver-out results of one receiver.
#[derive(Clone, Debug, Serialize)]
pub struct ReceiverReport {
    /// Receiver name.
    pub receiver: String,
    /// A test receiver: in no training set at all, scored with the model fitted on every
    /// receiver that is not one (`train --test`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub test: bool,
    /// The WLAN the bank it was self-calibrated on was emulated at (with self-calibration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bank_wlan: Option<String>,
    /// The training receivers its tailored model weighted, with their distance to it (nearest
    /// first; with [`HeldOutCalibrations::tailor`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tailored_from: Vec<(String, f64)>,
    /// Per send rate.
    pub per_rate: Vec<ReceiverRate>,
}

/// Receivers as [`receiver_cv`] takes them: the distinct names in first-seen order and, per
/// group (input), its receiver's index. `Err(i)`: input `i` names no receiver.
pub fn receiver_groups(receivers: &[Option<String>]) -> Result<(Vec<String>, Vec<u32>), usize> {
    let mut names: Vec<String> = Vec::new();
    let mut of_group = Vec::with_capacity(receivers.len());
    for (i, r) in receivers.iter().enumerate() {
        let r = r.as_ref().ok_or(i)?;
        let idx = match names.iter().position(|n| n == r) {
            Some(k) => k,
            None => {
                names.push(r.clone());
                names.len() - 1
            }
        };
        of_group.push(idx as u32);
    }
    Ok((names, of_group))
}

/// Which receivers are test receivers: those of the groups from `trained_on` on (`--test`),
/// by receiver index among `n`. A receiver in both the training and the test groups is
/// refused: `Err((training group, test group))` names the first such pair.
pub fn test_receivers(receiver_of_group: &[u32], trained_on: usize, n: usize) -> Result<Vec<bool>, (usize, usize)> {
    let mut test = vec![false; n];
    for (g, &r) in receiver_of_group.iter().enumerate().skip(trained_on) {
        test[r as usize] = true;
        if let Some(t) = (0..trained_on).find(|&t| receiver_of_group[t] == r) {
            return Err((t, g));
        }
    }
    Ok(test)
}

/// An input that names no receiver, where one is needed.
#[derive(Debug, thiserror::Error)]
#[error("{}: which receiver? {why} needs a dataset folder whose manifest.json names each run's receiver \
         (datasets/receivers.toml) or captures written by aggrate simulate/dataset build", path.display())]
pub struct NoReceiver {
    /// The input.
    pub path: std::path::PathBuf,
    /// What needed it (a flag or command).
    pub why: &'static str,
}

/// The inputs' receivers as [`receiver_groups`] gives them; an input that names none is refused,
/// naming it and what (`why`) needed it.
pub fn receivers_of(
    files: &[crate::pipeline::Input],
    why: &'static str,
) -> Result<(Vec<String>, Vec<u32>), NoReceiver> {
    let receivers: Vec<Option<String>> = files.iter().map(|f| f.receiver.clone()).collect();
    receiver_groups(&receivers).map_err(|i| NoReceiver {
        path: files[i].path.clone(),
        why,
    })
}

/// Leave-one-receiver-out: for each receiver (rows whose capture maps to it in
/// `receiver_of_group`), fit `fit` (and the m = 1 threshold) on every other receiver's rows and
/// score on it; then cross-validate the same fitters on that receiver alone with `own_folds`
/// contiguous folds. No receiver's rows are ever in both a training and a test set. With
/// `calibrate` the held-out model is also calibrated for the receiver and scored
/// ([`HeldOutCalibrations`]). Receivers marked in `test` (by index; missing: false) are in no
/// training set at all: each is scored with the model fitted on every other kind of receiver,
/// like a receiver met after shipping.
#[allow(clippy::too_many_arguments)]
pub fn receiver_cv(
    data: &Dataset,
    receiver_of_group: &[u32],
    names: &[String],
    test: &[bool],
    own_folds: usize,
    n_max: u16,
    fit: Fitter,
    calibrate: Option<&HeldOutCalibrations>,
    progress: &mut dyn Progress,
) -> Result<Vec<ReceiverReport>, CvError> {
    let n = data.len();
    let recv_of_row = |i: usize| receiver_of_group.get(data.group[i] as usize).copied();
    if (0..n).any(|i| recv_of_row(i).is_none_or(|r| r as usize >= names.len())) {
        return Err(CvError::NoReceiver);
    }
    let is_test = |r: u32| test.get(r as usize).copied().unwrap_or(false);
    let present = receivers_present((0..n).filter_map(recv_of_row), &is_test)?;
    // Rows of test receivers: out of every training set.
    let test_rows: Vec<usize> = (0..n).filter(|&i| recv_of_row(i).is_some_and(is_test)).collect();
    // The m = 1 threshold works on feature 0: the newest gap (µs, or its log in a context row;
    // the log is monotone, so the threshold is the same rule).
    let warm = match fit {
        Fitter::Logistic(p) => Some(LogisticCv::new(data, &p)?),
        _ => None,
    };
    // The model and m = 1 threshold fitted without the rows `out`.
    let fit_without = |out: &[usize]| -> Result<(EstimatorModel, EstimatorModel), CvError> {
        let train = RowSet::from_indices(out).complement(n);
        let model = match &warm {
            Some(cv) => EstimatorModel::Logistic(cv.without(out)?),
            None => fit.fit(data, &train)?,
        };
        Ok((model, Fitter::Threshold.fit(data, &train)?))
    };
    // The test receivers share one model and threshold: every other receiver's rows.
    let for_tests = if test_rows.is_empty() {
        None
    } else {
        Some(fit_without(&test_rows)?)
    };
    // The training receivers' gap summaries, for each held-out receiver's distance to the
    // receivers its model trained on (its own runs excluded while it is measured).
    let train_rows: Vec<usize> = (0..n)
        .filter(|&i| recv_of_row(i).is_some_and(|r| !is_test(r)))
        .collect();
    let mut trained_on = super::bank::Bank::of_captures_among(data, &train_rows, receiver_of_group, names);
    let (like_bank, mut training_bank) = variant_banks(calibrate, data, &train_rows, receiver_of_group, names);
    progress.start("leaving one receiver out", present.len() as u64);
    let mut out = Vec::new();
    for &r in &present {
        let test: Vec<usize> = (0..n).filter(|&i| recv_of_row(i) == Some(r)).collect();
        let (model, thr) = match &for_tests {
            Some(fitted) if is_test(r) => fitted.clone(),
            // Held out with every test receiver.
            _ => fit_without(&[&test[..], &test_rows[..]].concat())?,
        };
        let (held, held_thr) = (scored(data, &test, &model, n_max), scored(data, &test, &thr, n_max));
        // Own CV on this receiver alone.
        let sub = data.select(&test);
        let calibrated = calibrated_with_labels(calibrate, &sub, &model)?;
        let bank = calibrate.and_then(|c| {
            let b = c.bank.as_ref()?;
            let (bank, wlan) = b.of_receiver.get(r as usize)?;
            Some((c.spec, *bank, wlan, b.like))
        });
        let bank_of = bank.map(|(spec, bank, _, like)| (spec, bank, like));
        let (self_calibrated, distances) = self_calibrate_on(bank_of, &sub, &model)?.unzip();
        // Tailored: the model fitted again with the receivers nearest this one weighing more,
        // or the held-out model when they lie too far.
        let (tailored, tailored_from) = match (calibrate.and_then(|c| c.tailor), &like_bank) {
            (Some(t), Some(lb)) => {
                let may_train = |o: u32| o != r && !is_test(o);
                let (m, from) = tailored_model(t, lb, data, &sub, names, &may_train, &recv_of_row, &model, fit)?;
                (Some(m), from)
            }
            _ => (None, Vec::new()),
        };
        let on_training = on_training_scores(training_bank.as_mut(), &names[r as usize], &sub, &model)?;
        let tailored_scores = tailored.as_ref().map(|m| scored(data, &test, m, n_max));
        let tailored_self_calibrated = match &tailored {
            Some(m) => self_calibrate_on(bank_of, &sub, m)?.map(|(rates, _)| rates),
            None => None,
        };
        trained_on.exclude(vec![names[r as usize].clone()]);
        // Runs too short to summarise, or without a rate: no distance.
        let training_distances = trained_on.likeness_of(&sub).unwrap_or_default();
        let (own, own_thr) = own_cv(&sub, fit, own_folds, n_max)?;
        let per_rate = receiver_rates(&HeldOutScores {
            held: &held,
            held_thr: &held_thr,
            own: &own,
            own_thr: &own_thr,
            calibrated: calibrated.as_deref(),
            self_calibrated: self_calibrated.as_deref(),
            tailored: tailored_scores.as_ref(),
            tailored_self_calibrated: tailored_self_calibrated.as_deref(),
            on_training: on_training.as_deref(),
            distances: distances.as_deref(),
            training_distances: &training_distances,
        });
        out.push(ReceiverReport {
            receiver: names[r as usize].clone(),
            test: is_test(r),
            bank_wlan: bank.map(|(_, _, w, _)| w.clone()),
            tailored_from,
            per_rate,
        });
        progress.inc();
    }
    progress.finish();
    Ok(out)
}

/// The receivers that have rows (ascending); at least two that are not test receivers.
fn receivers_present(of_rows: impl Iterator<Item = u32>, is_test: &dyn Fn(u32) -> bool) -> Result<Vec<u32>, CvError> {
    let mut present: Vec<u32> = of_rows.collect();
    present.sort_unstable();
    present.dedup();
    let trainable = present.iter().filter(|&&r| !is_test(r)).count();
    if trainable < 2 {
        return Err(CvError::TooFewReceivers(trainable));
    }
    Ok(present)
}

/// Per-rate scores of `model` on `rows`.
fn scored(data: &Dataset, rows: &[usize], model: &EstimatorModel, n_max: u16) -> PerRate {
    let mut s = PerRate::new();
    score(data, rows, model, n_max, &mut s);
    s
}

/// The held-out model calibrated with the receiver's labels (`--calibrate`): its scores on the
/// rest of each capture; none when not asked, or when the calibration part holds no start.
fn calibrated_with_labels(
    calibrate: Option<&HeldOutCalibrations>,
    sub: &Dataset,
    model: &EstimatorModel,
) -> Result<Option<Vec<RateReport>>, CvError> {
    match calibrate.and_then(|c| c.share.map(|s| (c.spec, s))) {
        Some((spec, share)) => match super::calibrate::calibrate(sub, model, spec, share) {
            Ok((_, c)) => Ok(Some(c.rates_after)),
            Err(super::calibrate::Error::NoStarts { .. }) => Ok(None),
            Err(e) => Err(CvError::Calibrate(e)),
        },
        None => Ok(None),
    }
}

/// A measured training bank, its likeness and the feature layout.
type TrainingBank<'a> = (super::bank::Bank, super::bank::Likeness, &'a FeatureSpec);

/// The banks the variants need: every capture's gap summary, to rank receivers by likeness
/// (tailored fits only); and every training receiver's rows (every other one), to
/// self-calibrate on measured receivers (each held-out receiver's own are excluded while it is
/// calibrated).
fn variant_banks<'a>(
    calibrate: Option<&HeldOutCalibrations<'a>>,
    data: &Dataset,
    train_rows: &[usize],
    receiver_of_group: &[u32],
    names: &[String],
) -> (Option<super::bank::Bank>, Option<TrainingBank<'a>>) {
    let like_bank = calibrate
        .and_then(|c| c.tailor)
        .map(|_| super::bank::Bank::of_captures(data, receiver_of_group, names));
    let training_bank = calibrate
        .and_then(|c| c.on_training.map(|like| (c.spec, like)))
        .map(|(spec, like)| {
            (
                super::bank::Bank::of_captures_with_rows(data, train_rows, receiver_of_group, names, 2),
                like,
                spec,
            )
        });
    (like_bank, training_bank)
}

/// A model self-calibrated on the receiver's bank (`bank`: layout, bank, likeness): its
/// per-rate scores, and the captures' distances to the bank; none without a bank.
#[allow(clippy::type_complexity)]
fn self_calibrate_on(
    bank: Option<(&FeatureSpec, &super::bank::Bank, super::bank::Likeness)>,
    sub: &Dataset,
    m: &EstimatorModel,
) -> Result<Option<(Vec<RateReport>, Vec<(f64, f64)>)>, CvError> {
    match bank {
        Some((spec, bank, like)) => {
            let (m, c) = super::bank::self_calibrate(sub, m, spec, bank, like)?;
            let d: Vec<(f64, f64)> = c.runs.iter().map(|r| (r.rate_mbps, r.distance)).collect();
            Ok(Some((evaluate(sub, &m, spec).rates, d)))
        }
        None => Ok(None),
    }
}

/// The held-out model self-calibrated on the measured training receivers but `receiver`
/// (excluded from the bank from now on): its per-rate scores.
fn on_training_scores(
    training_bank: Option<&mut TrainingBank>,
    receiver: &str,
    sub: &Dataset,
    model: &EstimatorModel,
) -> Result<Option<Vec<RateReport>>, CvError> {
    match training_bank {
        Some((bank, like, spec)) => {
            bank.exclude(vec![receiver.to_string()]);
            let (m, _) = super::bank::self_calibrate(sub, model, spec, bank, *like)?;
            Ok(Some(evaluate(sub, &m, spec).rates))
        }
        None => Ok(None),
    }
}

/// A held-out receiver's scores, per rate key, that [`receiver_rates`] puts side by side.
struct HeldOutScores<'a> {
    held: &'a PerRate,
    held_thr: &'a PerRate,
    own: &'a PerRate,
    own_thr: &'a PerRate,
    calibrated: Option<&'a [RateReport]>,
    self_calibrated: Option<&'a [RateReport]>,
    tailored: Option<&'a PerRate>,
    tailored_self_calibrated: Option<&'a [RateReport]>,
    on_training: Option<&'a [RateReport]>,
    /// (rate, distance) of each capture to the self-calibration bank.
    distances: Option<&'a [(f64, f64)]>,
    training_distances: &'a [super::bank::Nearest],
}

/// One [`ReceiverRate`] per rate the held-out model was scored at.
fn receiver_rates(s: &HeldOutScores) -> Vec<ReceiverRate> {
    s.held
        .iter()
        .map(|(key, (rate, b, a))| {
            let get = |m: &PerRate| m.get(key).map(|(_, b, a)| Score::of(b, a)).unwrap_or_default();
            ReceiverRate {
                rate_mbps: *rate,
                rows: b.tp + b.fp + b.tn + b.fn_,
                held_out: Score::of(b, a),
                own: get(s.own),
                threshold_held_out: get(s.held_thr),
                threshold_own: get(s.own_thr),
                variants: [
                    (Variant::Calibrated, at_rate(s.calibrated, *rate)),
                    (Variant::SelfCalibrated, at_rate(s.self_calibrated, *rate)),
                    (Variant::Tailored, s.tailored.map(get)),
                    (
                        Variant::TailoredSelfCalibrated,
                        at_rate(s.tailored_self_calibrated, *rate),
                    ),
                    (Variant::SelfCalibratedOnTraining, at_rate(s.on_training, *rate)),
                ]
                .into_iter()
                .filter_map(|(v, s)| Some((v, s?)))
                .collect(),
                // The nearest of the rate's captures (one per rate in a receivers dataset).
                self_calibration_distance: s
                    .distances
                    .into_iter()
                    .flatten()
                    .filter(|(r, _)| r == rate)
                    .map(|&(_, d)| d)
                    .min_by(f64::total_cmp),
                training_distance: s
                    .training_distances
                    .iter()
                    .filter(|x| x.rate_mbps == *rate)
                    .map(|x| x.distance)
                    .min_by(f64::total_cmp),
            }
        })
        .collect()
}

/// Contiguous-fold CV of `fit` and the m = 1 threshold on one receiver's rows alone.
fn own_cv(sub: &Dataset, fit: Fitter, own_folds: usize, n_max: u16) -> Result<(PerRate, PerRate), CvError> {
    let folds = contiguous_folds(&sub.group, own_folds.max(2))?;
    let own_warm = match fit {
        Fitter::Logistic(p) => Some(LogisticCv::new(sub, &p)?),
        _ => None,
    };
    let mut own = PerRate::new();
    let mut own_thr = PerRate::new();
    for f in &folds {
        let tr = RowSet::from_indices(f).complement(sub.len());
        let m = match &own_warm {
            Some(cv) => EstimatorModel::Logistic(cv.without(f)?),
            None => fit.fit(sub, &tr)?,
        };
        score(sub, f, &m, n_max, &mut own);
        let t = Fitter::Threshold.fit(sub, &tr)?;
        score(sub, f, &t, n_max, &mut own_thr);
    }
    Ok((own, own_thr))
}

/// `--like-held-out`: the model fitted again with the training receivers nearest the held-out
/// one (`sub`; `may_train`: the receivers its model may train on) weighing more, or the
/// held-out `model` when they lie too far; and the receivers chosen with their distances.
#[allow(clippy::too_many_arguments)]
fn tailored_model(
    t: Tailor,
    like_bank: &super::bank::Bank,
    data: &Dataset,
    sub: &Dataset,
    names: &[String],
    may_train: &dyn Fn(u32) -> bool,
    recv_of_row: &dyn Fn(usize) -> Option<u32>,
    model: &EstimatorModel,
    fit: Fitter,
) -> Result<(EstimatorModel, Vec<(String, f64)>), CvError> {
    let chosen = t.select(like_bank, sub, names, data, recv_of_row, may_train)?;
    let from = chosen
        .near
        .iter()
        .map(|&(o, d)| (names[o as usize].clone(), d))
        .collect();
    let m = match &chosen.keep {
        // Too far to tailor on: the held-out model stands.
        None => model.clone(),
        Some(keep) => fit.fit(data, &RowSet::from_indices(keep))?,
    };
    Ok((m, from))
}

/// The score at `rate` of per-rate reports, if they have that rate.
fn at_rate(reports: Option<&[RateReport]>, rate: f64) -> Option<Score> {
    reports?
        .iter()
        .find(|x| x.rate_mbps.to_bits() == rate.to_bits())
        .map(|x| Score {
            f1: x.f1,
            precision: x.precision,
            recall: x.recall,
            agg_rmse: x.agg_rmse,
        })
}

/// How a fitted model scores on rows it was not fitted on (`aggrate eval`).
#[derive(Clone, Debug)]
pub struct Evaluation {
    /// Frame starts over all rows.
    pub binary: BinaryMetrics,
    /// Per-packet aggregation level error over all rows.
    pub agg: AggMetrics,
    /// Per send rate (with the slot metrics when the model has a slot SVR).
    pub rates: Vec<RateReport>,
    /// The slot SVR's stage: `(slot rows, RMSE corrected, RMSE of the classifier alone)`.
    pub slots: Option<(usize, f64, f64)>,
}

/// Score `model` on every row of `data` (its spec's `n_max` caps the levels); with a slot SVR,
/// also per slot, corrected and uncorrected.
pub fn evaluate(data: &Dataset, model: &EstimatorModel, spec: &FeatureSpec) -> Evaluation {
    let idx: Vec<usize> = (0..data.len()).collect();
    let mut per_rate = PerRate::new();
    let (binary, agg) = score(data, &idx, model, spec.n_max, &mut per_rate);
    let mut rates = rate_reports(&per_rate);
    let slots = model.slot_svr().map(|svr| {
        let pred: Vec<bool> = (0..data.len()).map(|i| model.predict_row(data.row(i))).collect();
        let rows = slot_rows(data, &pred, spec);
        let corrected: Vec<f64> = (0..rows.len()).map(|i| svr.predict(rows.row(i))).collect();
        let base: Vec<f64> = (0..rows.len()).map(|i| rows.base_level(i)).collect();
        attach_slots(&mut rates, &slot_rate_reports(&rows, &corrected));
        (
            rows.len(),
            AggMetrics::from_values(&rows.target, &corrected).rmse(),
            AggMetrics::from_values(&rows.target, &base).rmse(),
        )
    });
    Evaluation {
        binary,
        agg,
        rates,
        slots,
    }
}

/// Per send rate: slot RMSE of the logistic alone (the rows' base level) and of `pred`.
pub fn slot_rate_reports(rows: &SlotRows, pred: &[f64]) -> Vec<SlotRateReport> {
    let mut per_rate = Vec::new();
    let mut keys: Vec<f32> = rows.rate_mbps.clone();
    keys.sort_by(|a, b| a.total_cmp(b));
    keys.dedup_by(|a, b| a.to_bits() == b.to_bits());
    for r in keys {
        let idx: Vec<usize> = (0..rows.len())
            .filter(|&i| rows.rate_mbps[i].to_bits() == r.to_bits())
            .collect();
        let t: Vec<f64> = idx.iter().map(|&i| rows.target[i]).collect();
        let b = AggMetrics::from_values(&t, &idx.iter().map(|&i| rows.base_level(i)).collect::<Vec<_>>());
        let v = AggMetrics::from_values(&t, &idx.iter().map(|&i| pred[i]).collect::<Vec<_>>());
        per_rate.push(SlotRateReport {
            rate_mbps: r as f64,
            slots: idx.len() as u64,
            base_rmse: b.rmse(),
            svr_rmse: v.rmse(),
            base_acc_within1: b.accuracy_within1(),
            svr_acc_within1: v.accuracy_within1(),
            true_mean_level: t.iter().sum::<f64>() / t.len().max(1) as f64,
        });
    }
    per_rate
}

/// Attach slot reports to the per-rate rows with the same rate.
pub fn attach_slots(rates: &mut [RateReport], slots: &[SlotRateReport]) {
    for r in rates {
        r.slot = slots
            .iter()
            .find(|s| s.rate_mbps.to_bits() == r.rate_mbps.to_bits() || (s.rate_mbps.is_nan() && r.rate_mbps.is_nan()))
            .cloned();
    }
}

/// One (C, γ, ε) point of the slot-SVR grid and its out-of-fold slot RMSE.
#[derive(Serialize, Clone, Debug)]
pub struct GridPoint {
    /// C.
    pub c: f64,
    /// γ.
    pub gamma: f64,
    /// ε.
    pub epsilon: f64,
    /// Slot RMSE of its out-of-fold predictions.
    pub slot_rmse: f64,
}

/// The slot SVR chosen by [`svr_stage`].
pub struct SvrStage {
    /// The slot rows (from out-of-fold packet predictions).
    pub rows: SlotRows,
    /// The chosen point.
    pub params: SvrParams,
    /// The SVR refitted on all slot rows at that point.
    pub model: SvrModel,
    /// Out-of-fold SVR predictions at the chosen parameters.
    pub pred: Vec<f64>,
    /// Per send rate: slot RMSE of the packet model alone and corrected.
    pub per_rate: Vec<SlotRateReport>,
    /// Slot RMSE of the chosen point.
    pub svr_rmse: f64,
    /// Slot RMSE of the packet model alone.
    pub base_rmse: f64,
    /// Folds used (at most the k asked for: as many as the shortest capture allows).
    pub folds: usize,
    /// Every grid point with its RMSE.
    pub grid: Vec<GridPoint>,
}

/// Slot rows from out-of-fold packet predictions → grid search of (C, γ, ε) by contiguous CV on
/// slot rows (points in parallel, each CV deterministic) → the SVR refitted on all slot rows
/// with the best point.
pub fn svr_stage(
    data: &Dataset,
    oof: &[bool],
    spec: &FeatureSpec,
    k: usize,
    grid: &[ValidSvrParams],
    progress: &mut dyn Progress,
) -> Result<SvrStage, CvError> {
    let rows = slot_rows(data, oof, spec);
    if rows.len() < 2 {
        return Err(CvError::TooFewSlotRows {
            rows: rows.len(),
            d: spec.d,
            slot_ms: spec.slot_ns / 1_000_000,
        });
    }
    if grid.is_empty() {
        return Err(CvError::EmptyGrid);
    }
    // As many folds as the shortest capture allows (at most k).
    let mut min_per_group = usize::MAX;
    let mut s = 0;
    while s < rows.group.len() {
        let e = (s..rows.group.len())
            .find(|&i| rows.group[i] != rows.group[s])
            .unwrap_or(rows.group.len());
        min_per_group = min_per_group.min(e - s);
        s = e;
    }
    let kf = k.min(min_per_group);
    if kf < 2 {
        return Err(CvError::ShortSlotCapture(min_per_group));
    }
    let folds = contiguous_folds(&rows.group, kf)?;
    progress.start("SVR grid search", grid.len() as u64);
    // Grid points spread over the cores; results come back to this thread for the progress
    // bar and are put back in grid order. A worker that panicked leaves its points empty (an
    // error below) instead of taking the process down with it.
    let threads = crate::parallel::all_cores().clamp(1, 8);
    let mut results: Vec<Option<Result<Vec<f64>, Error>>> = (0..grid.len()).map(|_| None).collect();
    crate::parallel::for_each(
        grid.len(),
        threads,
        |g| cv_predict_svr(&rows.x, rows.d, &rows.target, &folds, &grid[g]),
        |g, r| {
            results[g] = Some(r);
            progress.inc();
        },
    );
    progress.finish();
    let rmse = |pred: &[f64]| AggMetrics::from_values(&rows.target, pred).rmse();
    let mut points = Vec::new();
    let mut best: Option<(f64, usize, Vec<f64>)> = None;
    for (g, r) in results.into_iter().enumerate() {
        let pred = r.ok_or(CvError::GridWorker)??;
        let e = rmse(&pred);
        let p = grid[g].get();
        points.push(GridPoint {
            c: p.c,
            gamma: p.gamma,
            epsilon: p.epsilon,
            slot_rmse: e,
        });
        if best.as_ref().is_none_or(|b| e < b.0) {
            best = Some((e, g, pred));
        }
    }
    let (svr_rmse, g, pred) = best.ok_or(CvError::EmptyGrid)?;
    let model = fit_svr(&rows.x, rows.d, &rows.target, &grid[g])?;
    let base: Vec<f64> = (0..rows.len()).map(|i| rows.base_level(i)).collect();
    let base_rmse = rmse(&base);
    let per_rate = slot_rate_reports(&rows, &pred);
    Ok(SvrStage {
        params: *grid[g].get(),
        rows,
        model,
        pred,
        per_rate,
        svr_rmse,
        base_rmse,
        folds: kf,
        grid: points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::LogisticParams;

    #[test]
    fn a_tailor_keeps_near_rows_whole_and_thins_the_others_per_capture() {
        let mut d = Dataset::new(1);
        // Captures (groups) 0 and 1 of 5 rows each, capture 2 of 3 rows.
        for (g, n) in [(0u32, 5), (1, 5), (2, 3)] {
            for _ in 0..n {
                d.push(&[0.0], false, g, 100.0, 1);
            }
        }
        let t = Tailor {
            receivers: 1,
            weight: 2,
            max_distance: 1.0,
        };
        let all: Vec<usize> = (0..d.len()).collect();
        // Capture 1 near: whole; 0 and 2 from their first row, every second.
        let keep = t.keep(&d, &all, |i| d.group[i] == 1);
        assert_eq!(keep, [0, 2, 4, 5, 6, 7, 8, 9, 10, 12]);
        // A subset of rows: the count restarts at each capture it reaches.
        assert_eq!(t.keep(&d, &[1, 2, 3, 11, 12], |_| false), [1, 3, 11]);
        // Near enough on average, or not; nothing chosen or NaN: never.
        assert!(t.admits(&[0.5, 1.5]));
        assert!(!t.admits(&[0.5, 1.6]));
        assert!(!t.admits(&[]) && !t.admits(&[f64::NAN]));
    }

    #[test]
    fn test_receivers_are_never_trained_on() {
        assert_eq!(test_receivers(&[0, 1, 2, 2], 2, 3), Ok(vec![false, false, true]));
        assert_eq!(test_receivers(&[0, 1, 1], 2, 2), Err((1, 2)));
        assert_eq!(test_receivers(&[0, 1], 2, 2), Ok(vec![false, false]));
    }

    #[test]
    fn receiver_groups_name_each_receiver_once_in_first_seen_order() {
        let r = |s: &str| Some(s.to_string());
        let (names, of) = receiver_groups(&[r("b"), r("a"), r("b"), r("c"), r("a")]).unwrap();
        assert_eq!(names, ["b", "a", "c"]);
        assert_eq!(of, [0, 1, 0, 2, 1]);
        assert_eq!(receiver_groups(&[r("a"), None, r("b")]), Err(1));
    }

    /// Two receivers with different gap scales; labels from the gap relative to the receiver.
    fn two_receivers() -> (Dataset, Vec<u32>, Vec<String>) {
        let mut d = Dataset::new(1);
        for g in 0..4u32 {
            let scale = if g < 2 { 1.0 } else { 10.0 };
            for i in 0..400 {
                let start = i % 5 == 0;
                let gap = if start { 100.0 } else { 10.0 } * scale + (i % 7) as f64;
                d.push(&[gap], start, g, if g % 2 == 0 { 100.0 } else { 200.0 }, 5);
            }
        }
        (d, vec![0, 0, 1, 1], vec!["a".into(), "b".into()])
    }

    #[test]
    fn receiver_folds_never_train_on_the_held_out_receiver() {
        let (d, rog, names) = two_receivers();
        let p = LogisticParams::default().check().unwrap();
        let rep = receiver_cv(&d, &rog, &names, &[], 2, 64, Fitter::Logistic(p), None, &mut NoProgress).unwrap();
        assert_eq!(rep.len(), 2);
        assert_eq!(rep[0].receiver, "a");
        assert_eq!(rep[0].per_rate.len(), 2, "rates 100 and 200");
        for r in &rep {
            for pr in &r.per_rate {
                assert_eq!(pr.rows, 400);
                // Own CV learns each receiver's scale and separates it perfectly …
                assert!(pr.own.f1 > 0.99 && pr.threshold_own.f1 > 0.99, "{r:?}");
            }
        }
        // … while a gap threshold learnt on receiver b (starts at 1000 µs, others at 100 µs) calls
        // no start on receiver a (starts at 100 µs): nothing leaks from the test receiver.
        assert!(
            rep[0].per_rate.iter().all(|p| p.threshold_held_out.f1 < 0.1),
            "{:?}",
            rep[0]
        );
        assert!(rep[0].per_rate[0].loss() > 0.9);
        // One receiver only, and captures that name none: refused.
        let refused = |rog: &[u32]| {
            let e = receiver_cv(&d, rog, &names, &[], 2, 64, Fitter::Threshold, None, &mut NoProgress);
            e.unwrap_err().to_string()
        };
        let e = refused(&[0, 0, 0, 0]);
        assert!(e.contains("at least 2 receivers"), "{e}");
        let e = refused(&[0, 0]);
        assert!(e.contains("no receiver"), "{e}");
    }

    /// A test receiver is in no training set: the others' held-out models never see it, and it
    /// is scored with the model fitted on all the others.
    #[test]
    fn test_receivers_are_in_no_training_set() {
        let (mut d, _, _) = two_receivers();
        // Receiver c: a's scale again (groups 4, 5), after a (0, 1) and b (2, 3).
        let (a_rows, _) = (0..d.len()).partition::<Vec<usize>, _>(|&i| d.group[i] < 2);
        let mut c = d.select(&a_rows);
        c.group.iter_mut().for_each(|g| *g += 4);
        d.append(&c);
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let rog = [0, 0, 1, 1, 2, 2];
        let run = |test: &[bool]| receiver_cv(&d, &rog, &names, test, 2, 64, Fitter::Threshold, None, &mut NoProgress);
        let rep = run(&[false, true, false]).unwrap();
        assert_eq!(rep.iter().map(|r| r.test).collect::<Vec<_>>(), [false, true, false]);
        // a's held-out threshold comes from c alone (b is a test receiver): a's own scale.
        for p in &rep[0].per_rate {
            assert!(p.threshold_held_out.f1 > 0.99, "{p:?}");
        }
        // b is scored with the threshold of a and c (starts at 100 µs): every gap of b is a
        // start there, so precision is b's start share (1 in 5).
        for p in &rep[1].per_rate {
            assert!((p.threshold_held_out.precision - 0.2).abs() < 0.01, "{p:?}");
            assert!(p.threshold_own.f1 > 0.99, "its own CV still sees it");
        }
        // With b and c both test receivers one receiver is left to train on: refused.
        let e = run(&[false, true, true]).unwrap_err();
        assert!(e.to_string().contains("at least 2 receivers"), "{e}");
    }
}
