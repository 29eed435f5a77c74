//! One receiver's operating point for a fitted model, from a short labelled stretch of that
//! receiver: a sniffer capture joined with the receiver's kernel log (`aggrate calibrate`).
//!
//! Why: held out of training, the shipped model ranks a new receiver's packets about as well as
//! a model fitted on that receiver, but its threshold is off — the best one runs from 0.003 to
//! 0.91 in probability across the 50 receivers of `datasets/receivers.toml` (models/README.md).
//! A threshold is one number per receiver, so a few seconds of labelled packets pin it down; the
//! model's weights stay as they are. [`calibrate`] picks the decision threshold with the best F1
//! on the first part of each capture and scores the rest with and without it, so the gain it
//! reports is measured on packets it did not see.

use serde::Serialize;

use crate::dataset::Dataset;
use crate::features::FeatureSpec;
use crate::metrics::BinaryMetrics;
use crate::model::{EstimatorModel, LoadOffset};
use crate::train::cv::{rate_reports, score, PerRate, RateReport};
use crate::train::Predict;

/// Why a model cannot be calibrated on these rows.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// The labelled share is not in (0, 1].
    #[error("the calibration share of each capture is {0}: it must be in (0, 1]")]
    Share(f64),
    /// No calibration rows (empty input).
    #[error("no rows to calibrate on")]
    NoRows,
    /// The calibration rows hold no frame start, so no threshold has an F1.
    #[error("the {rows} calibration rows hold no frame start (a capture without aggregation ground truth, or too short a stretch)")]
    NoStarts {
        /// Calibration rows.
        rows: usize,
    },
    /// A decision is not a number (the model file is damaged or does not fit the rows).
    #[error("the model's decision on row {row} is not a number")]
    NotANumber {
        /// The row.
        row: usize,
    },
    /// The threshold cannot be written into the model.
    #[error(transparent)]
    Shift(#[from] crate::model::ParamError),
}

/// The threshold on decisions `dec` with the best F1 for labels `y` ("start" when the decision is
/// above it), and the counts there: exact, one sort. The threshold lies halfway between the
/// lowest decision called a start and the highest one not called (below every decision when all
/// are called). Ties in F1 go to the higher threshold. `None` without a positive label.
pub fn best_threshold(dec: &[f64], y: &[bool]) -> Option<(f64, BinaryMetrics)> {
    best_threshold_weighted(dec, y, &vec![1; dec.len()])
}

/// [`best_threshold`] where decision `i` stands for `w[i]` rows of label `y[i]` (a histogram of
/// decisions: each bin's centre once per label, with its count). A weight of 0 counts nothing.
/// `None` without a positive row, or when the lengths differ.
pub fn best_threshold_weighted(dec: &[f64], y: &[bool], w: &[u64]) -> Option<(f64, BinaryMetrics)> {
    aggrate_core::selfcal::best_threshold_weighted(dec, y, w).map(|t| {
        (
            t.threshold,
            BinaryMetrics {
                tp: t.tp,
                fp: t.fp,
                fn_: t.fn_,
                tn: t.tn,
            },
        )
    })
}

/// How a calibration went: the operating point, and the model's scores before and after it.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    /// One decision threshold for every load (models without a receiver context).
    pub threshold: Option<f64>,
    /// The threshold per load: `[load, threshold]` per calibrated capture, by load (the
    /// perceptron on a receiver context: the load is its mean log-gap `lmean`).
    pub knots: Vec<[f64; 2]>,
    /// The share of each capture calibrated on (its first rows).
    pub share: f64,
    /// Calibration rows.
    pub fit_rows: usize,
    /// On the calibration rows, before.
    pub fit_before: BinaryMetrics,
    /// On the calibration rows, after.
    pub fit_after: BinaryMetrics,
    /// Rows after each capture's calibration stretch (none when the share is 1).
    pub rest_rows: usize,
    /// On the rest, before.
    pub rest_before: Option<BinaryMetrics>,
    /// On the rest, after.
    pub rest_after: Option<BinaryMetrics>,
    /// Per send rate on the rest (the calibration rows when the share is 1), before.
    pub rates_before: Vec<RateReport>,
    /// The same, after.
    pub rates_after: Vec<RateReport>,
}

/// The first `share` of each capture's rows (at least one row of each), and the rest; both in
/// row order. A capture is a run of rows of one group and rate ([`Dataset::same_run`]).
pub fn split_heads(data: &Dataset, share: f64) -> (Vec<usize>, Vec<usize>) {
    let (mut head, mut rest) = (Vec::new(), Vec::new());
    let all: Vec<usize> = (0..data.len()).collect();
    for run in data.runs(&all) {
        let k = ((run.len() as f64 * share).ceil() as usize).clamp(1, run.len());
        head.extend(run.start..run.start + k);
        rest.extend(run.start + k..run.end);
    }
    (head, rest)
}

pub use aggrate_core::selfcal::{load_input, median_load, without_offset};

/// Calibrate `model` on the first `share` of each capture of `data` and return it with the
/// best-F1 operating point there, and the scores before and after (on the other rows when there
/// are any).
///
/// A perceptron on a receiver context gets a threshold per capture, placed at the capture's
/// median load (`lmean`) and interpolated between ([`LoadOffset`]; captures of one load share
/// one threshold); it replaces any the model had. Other models get one threshold, best over
/// all calibration rows. Captures whose calibration rows hold no frame start set nothing.
pub fn calibrate(
    data: &Dataset,
    model: &EstimatorModel,
    spec: &FeatureSpec,
    share: f64,
) -> Result<(EstimatorModel, Calibration), Error> {
    if !(share > 0.0 && share <= 1.0) {
        return Err(Error::Share(share));
    }
    let (head, rest) = split_heads(data, share);
    if head.is_empty() {
        return Err(Error::NoRows);
    }
    let model = without_offset(model);
    let mut dec = Vec::with_capacity(head.len());
    for &i in &head {
        let d = model.decision(data.row(i));
        if d.is_nan() {
            return Err(Error::NotANumber { row: i });
        }
        dec.push(d);
    }
    let y: Vec<bool> = head.iter().map(|&i| data.y[i]).collect();
    let no_starts = Error::NoStarts { rows: head.len() };
    let mut shifted = model.clone();
    let (threshold, knots) = match (load_input(&model, spec), &mut shifted) {
        (Some(li), EstimatorModel::Mlp(m)) => {
            let knots = load_knots(data, &head, &dec, &y, li).ok_or(no_starts)?;
            m.load_offset = Some(LoadOffset {
                input: li,
                knots: knots.clone(),
            });
            (None, knots)
        }
        _ => {
            let (t, _) = best_threshold(&dec, &y).ok_or(no_starts)?;
            shifted.shift(t)?;
            (Some(t), Vec::new())
        }
    };
    // Scored with the calibrated model itself (what the file will do).
    let scored = |m: &EstimatorModel, idx: &[usize]| {
        let mut per_rate = PerRate::new();
        let (bm, _) = score(data, idx, m, spec.n_max, &mut per_rate);
        (bm, rate_reports(&per_rate))
    };
    let (fit_before, head_rates_before) = scored(&model, &head);
    let (fit_after, head_rates_after) = scored(&shifted, &head);
    let (rest_before, rest_after, rates_before, rates_after) = if rest.is_empty() {
        (None, None, head_rates_before, head_rates_after)
    } else {
        let (b, rb) = scored(&model, &rest);
        let (a, ra) = scored(&shifted, &rest);
        (Some(b), Some(a), rb, ra)
    };
    Ok((
        shifted,
        Calibration {
            threshold,
            knots,
            share,
            fit_rows: head.len(),
            fit_before,
            fit_after,
            rest_rows: rest.len(),
            rest_before,
            rest_after,
            rates_before,
            rates_after,
        },
    ))
}

/// One `[load, threshold]` knot per distinct median load of the captures' calibration rows
/// (`head`, with decisions `dec` and labels `y`), by load; `None` when no capture has a start.
fn load_knots(data: &Dataset, head: &[usize], dec: &[f64], y: &[bool], li: usize) -> Option<Vec<[f64; 2]>> {
    // (median load, positions in `head`) per capture.
    let mut runs: Vec<(f64, Vec<usize>)> = Vec::new();
    for run in data.runs(head) {
        let median = median_load(head[run.clone()].iter().map(|&i| data.row(i)[li]).collect());
        match runs.iter_mut().find(|r| r.0 == median) {
            Some(r) => r.1.extend(run),
            None => runs.push((median, run.collect())),
        }
    }
    let mut knots: Vec<[f64; 2]> = runs
        .iter()
        .filter(|(x, _)| x.is_finite())
        .filter_map(|(x, pos)| {
            let d: Vec<f64> = pos.iter().map(|&k| dec[k]).collect();
            let l: Vec<bool> = pos.iter().map(|&k| y[k]).collect();
            best_threshold(&d, &l).map(|(t, _)| [*x, t])
        })
        .collect();
    knots.sort_unstable_by(|a, b| a[0].total_cmp(&b[0]));
    knots.truncate(crate::model::mlp::MAX_KNOTS);
    (!knots.is_empty()).then_some(knots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MlpModel;
    use crate::model::ThresholdModel;

    /// Brute force: the best F1 over every threshold between distinct decisions and below all.
    fn brute(dec: &[f64], y: &[bool]) -> f64 {
        let mut cands: Vec<f64> = dec.to_vec();
        cands.push(f64::NEG_INFINITY);
        cands
            .iter()
            .map(|&c| {
                let pred: Vec<bool> = dec.iter().map(|&d| d > c || (c == f64::NEG_INFINITY)).collect();
                BinaryMetrics::from_labels(y, &pred).f1()
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn best_threshold_is_exact_and_separates_the_calls() {
        // A small deterministic generator (no rand in tests that do not need it).
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for case in 0..200 {
            let n = 1 + case % 37;
            let dec: Vec<f64> = (0..n).map(|_| (next() % 9) as f64 * 0.5 - 2.0).collect(); // many ties
            let y: Vec<bool> = dec
                .iter()
                .map(|&d| (next() % 10) as f64 / 10.0 < 0.3 + d * 0.1)
                .collect();
            match best_threshold(&dec, &y) {
                None => assert!(!y.contains(&true)),
                Some((t, bm)) => {
                    let pred: Vec<bool> = dec.iter().map(|&d| d > t).collect();
                    let at_t = BinaryMetrics::from_labels(&y, &pred);
                    assert_eq!(at_t, bm, "case {case}: the counts are the threshold's");
                    assert!((bm.f1() - brute(&dec, &y)).abs() < 1e-12, "case {case}");
                }
            }
        }
    }

    #[test]
    fn calibrating_a_threshold_model_moves_it_to_the_receivers_gap() {
        let spec = FeatureSpec {
            m: 1,
            sigma: false,
            ..FeatureSpec::default()
        };
        // Frames of 4 packets: 10 µs inside, 50 µs before a start. A model at 80 µs calls none.
        let mut d = Dataset::new(1);
        for g in 0..2u32 {
            for i in 0..400 {
                let start = i % 4 == 0;
                d.push(&[if start { 50.0 } else { 10.0 }], start, g, 300.0, 4);
            }
        }
        let model = EstimatorModel::Threshold(ThresholdModel { threshold_us: 80.0 });
        let (m, c) = calibrate(&d, &model, &spec, 0.1).unwrap();
        assert_eq!(c.fit_rows, 80);
        assert_eq!(c.rest_rows, 720);
        assert_eq!(c.fit_before.tp, 0);
        assert_eq!(c.rest_after.unwrap().f1(), 1.0);
        assert_eq!(c.rest_before.unwrap().f1(), 0.0);
        assert!(c.knots.is_empty());
        let EstimatorModel::Threshold(t) = m else {
            panic!("kind changed")
        };
        assert!(t.threshold_us > 10.0 && t.threshold_us < 50.0, "{}", t.threshold_us);
        assert_eq!(c.rates_after.len(), 1);
        assert_eq!(c.rates_after[0].f1, 1.0);
        // The same rows without a start cannot be calibrated; nor a share outside (0, 1].
        let mut none = Dataset::new(1);
        (0..10).for_each(|_| none.push(&[10.0], false, 0, 300.0, 1));
        assert_eq!(
            calibrate(&none, &model, &spec, 0.5).unwrap_err(),
            Error::NoStarts { rows: 5 }
        );
        assert_eq!(calibrate(&d, &model, &spec, 0.0).unwrap_err(), Error::Share(0.0));
        assert_eq!(
            calibrate(&Dataset::new(1), &model, &spec, 1.0).unwrap_err(),
            Error::NoRows
        );
    }

    /// A receiver whose right threshold moves with its load: at the light load starts score 5
    /// and other packets 3, at the heavy load 2 and 0 — no single threshold separates both, a
    /// threshold per load does. Two captures in one group (a feature table) are told apart by
    /// their rates.
    #[test]
    fn a_context_perceptron_gets_a_threshold_per_load() {
        let spec = FeatureSpec {
            m: 1,
            sigma: false,
            context: 64,
            ..FeatureSpec::default()
        }
        .check()
        .unwrap();
        assert_eq!(spec.width(), 6);
        // decision = x₀ (the skip path); the hidden unit is silent. lmean is input 5 (slow).
        let model = EstimatorModel::Mlp(MlpModel {
            inputs: 6,
            hidden: 1,
            w1: vec![0.0; 6],
            b1: vec![-1.0],
            w2: vec![0.0],
            b2: 0.0,
            skip: vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            slow_inputs: 4,
            epochs: 1,
            load_offset: None,
        });
        let mut d = Dataset::new(6);
        for (rate, lmean, hi, lo) in [(200.0, 1.0, 5.0, 3.0), (400.0, 2.0, 2.0, 0.0)] {
            for i in 0..200 {
                let start = i % 4 == 0;
                d.push(
                    &[if start { hi } else { lo }, 0.0, 0.0, 0.0, 0.0, lmean],
                    start,
                    0,
                    rate,
                    4,
                );
            }
        }
        let (m, c) = calibrate(&d, &model, &spec, 0.25).unwrap();
        assert_eq!(c.threshold, None);
        assert_eq!(c.knots.len(), 2);
        assert_eq!(c.knots[0][0], 1.0);
        assert!(c.knots[0][1] > 3.0 && c.knots[0][1] < 5.0, "{:?}", c.knots);
        assert!(c.knots[1][1] > 0.0 && c.knots[1][1] < 2.0, "{:?}", c.knots);
        assert_eq!(c.rest_after.unwrap().f1(), 1.0);
        assert!(c.rest_before.unwrap().f1() < 0.8);
        for r in &c.rates_after {
            assert_eq!(r.f1, 1.0, "rate {}", r.rate_mbps);
        }
        let EstimatorModel::Mlp(mm) = &m else {
            panic!("kind changed")
        };
        assert!(mm.check(6).is_ok(), "the calibrated model passes the model-file check");
        // Calibrating again replaces the offset instead of stacking a second one on it.
        let (again, c2) = calibrate(&d, &m, &spec, 0.25).unwrap();
        assert_eq!(c2.knots, c.knots);
        assert_eq!(again, m);
        // One threshold for all loads cannot do it: the best single one loses F1.
        let (_, pooled) = calibrate(&d, &model, &FeatureSpec { context: 0, ..spec }, 0.25).unwrap();
        assert!(pooled.threshold.is_some());
        assert!(pooled.rest_after.unwrap().f1() < 0.9);
    }

    #[test]
    fn shift_moves_every_kind_by_the_same_decision() {
        use crate::model::{LogisticModel, Scaler};
        let x = [3.0, -1.0];
        let scaler = Scaler {
            mean: vec![1.0, 0.0],
            std: vec![2.0, 1.0],
        };
        let models = [
            EstimatorModel::Threshold(ThresholdModel { threshold_us: 2.0 }),
            EstimatorModel::Logistic(LogisticModel {
                scaler,
                w: vec![0.5, 1.5],
                b: 0.25,
                iterations: 1,
            }),
            EstimatorModel::Mlp(MlpModel {
                inputs: 2,
                hidden: 2,
                w1: vec![0.5, -0.25, 1.0, 0.75],
                b1: vec![0.1, 0.2],
                w2: vec![1.0, -2.0],
                b2: 0.5,
                skip: vec![],
                slow_inputs: 0,
                epochs: 1,
                load_offset: None,
            }),
        ];
        for m in models {
            let mut s = m.clone();
            s.shift(0.75).unwrap();
            assert!((s.decision(&x) - (m.decision(&x) - 0.75)).abs() < 1e-6, "{}", m.kind());
            assert!(s.clone().shift(f64::NAN).is_err());
        }
    }
}
