//! Scores as data, below everything that computes them (`train`, `sim`, `eval`) and above
//! nothing: confusion counts and F1 of the frame-start label ([`BinaryMetrics`]), errors of
//! per-packet aggregation levels ([`AggMetrics`]), mean ± std over folds ([`mean_std`]), the
//! error of an estimated mean aggregation level μ_N per report interval against the truth, and
//! the truth per interval itself from labelled packets.
//!
//! A controller steers by μ_N per interval, not by per-packet decisions, so this is the score
//! that says whether it steers right: a model can score 0.85 F1 with balanced errors and be
//! unbiased, or 0.95 and be 20 % off.
//!
//! No clock, no IO; times are the receive clock's [`Ts`].

use serde::{Deserialize, Serialize};

use crate::time::Ts;

/// Confusion counts and scores of the "first packet of a frame" label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BinaryMetrics {
    /// True positives.
    pub tp: u64,
    /// False positives.
    pub fp: u64,
    /// True negatives.
    pub tn: u64,
    /// False negatives.
    pub fn_: u64,
}

impl BinaryMetrics {
    /// Count predictions against truth.
    pub fn from_labels(truth: &[bool], pred: &[bool]) -> BinaryMetrics {
        let mut m = BinaryMetrics::default();
        for (t, p) in truth.iter().zip(pred) {
            match (t, p) {
                (true, true) => m.tp += 1,
                (false, true) => m.fp += 1,
                (false, false) => m.tn += 1,
                (true, false) => m.fn_ += 1,
            }
        }
        m
    }
    /// Sum of two confusion tables.
    pub fn add(&mut self, o: &BinaryMetrics) {
        self.tp += o.tp;
        self.fp += o.fp;
        self.tn += o.tn;
        self.fn_ += o.fn_;
    }
    /// Precision (1 when nothing was predicted positive).
    pub fn precision(&self) -> f64 {
        if self.tp + self.fp == 0 {
            1.0
        } else {
            self.tp as f64 / (self.tp + self.fp) as f64
        }
    }
    /// Recall (1 when there are no positives).
    pub fn recall(&self) -> f64 {
        if self.tp + self.fn_ == 0 {
            1.0
        } else {
            self.tp as f64 / (self.tp + self.fn_) as f64
        }
    }
    /// F1.
    pub fn f1(&self) -> f64 {
        let d = 2 * self.tp + self.fp + self.fn_;
        if d == 0 {
            1.0
        } else {
            2.0 * self.tp as f64 / d as f64
        }
    }
    /// Accuracy.
    pub fn accuracy(&self) -> f64 {
        let n = self.tp + self.fp + self.tn + self.fn_;
        if n == 0 {
            1.0
        } else {
            (self.tp + self.tn) as f64 / n as f64
        }
    }
}

/// Errors of per-packet aggregation levels derived from predicted starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AggMetrics {
    /// Rows compared.
    pub n: u64,
    /// Sum of squared errors.
    pub sse: f64,
    /// Sum of errors (predicted − true).
    pub se: f64,
    /// Exactly right.
    pub exact: u64,
    /// Within ±1.
    pub within1: u64,
}

impl AggMetrics {
    /// Compare predicted levels with true ones.
    pub fn from_levels(truth: &[u16], pred: &[u16]) -> AggMetrics {
        let mut m = AggMetrics::default();
        for (t, p) in truth.iter().zip(pred) {
            let e = *p as f64 - *t as f64;
            m.n += 1;
            m.sse += e * e;
            m.se += e;
            m.exact += (e == 0.0) as u64;
            m.within1 += (e.abs() <= 1.0) as u64;
        }
        m
    }
    /// Compare predicted mean levels with true ones (slot means): "exact" is within ±0.5.
    pub fn from_values(truth: &[f64], pred: &[f64]) -> AggMetrics {
        let mut m = AggMetrics::default();
        for (t, p) in truth.iter().zip(pred) {
            let e = p - t;
            m.n += 1;
            m.sse += e * e;
            m.se += e;
            m.exact += (e.abs() <= 0.5) as u64;
            m.within1 += (e.abs() <= 1.0) as u64;
        }
        m
    }
    /// Merge.
    pub fn add(&mut self, o: &AggMetrics) {
        self.n += o.n;
        self.sse += o.sse;
        self.se += o.se;
        self.exact += o.exact;
        self.within1 += o.within1;
    }
    /// RMSE.
    pub fn rmse(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            (self.sse / self.n as f64).sqrt()
        }
    }
    /// Mean error.
    pub fn mean_error(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.se / self.n as f64
        }
    }
    /// Fraction exactly right.
    pub fn accuracy(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.exact as f64 / self.n as f64
        }
    }
    /// Fraction within ±1.
    pub fn accuracy_within1(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.within1 as f64 / self.n as f64
        }
    }
}

/// Mean and (population) standard deviation.
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
    (m, var.sqrt())
}

/// One report interval: the estimate and the truth.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelPair {
    /// Interval start.
    pub start: Ts,
    /// The estimated μ_N.
    pub estimate: f64,
    /// The true μ_N (MPDUs ÷ A-MPDUs of the interval).
    pub truth: f64,
    /// True A-MPDUs in the interval.
    pub ampdus: u64,
}

impl LevelPair {
    /// (estimate − truth) / truth.
    pub fn rel_error(&self) -> f64 {
        (self.estimate - self.truth) / self.truth
    }
}

/// Intervals with fewer true A-MPDUs than this are not scored (a partial interval at the start
/// or end of a run, or a pause).
pub const MIN_AMPDUS: u64 = 5;

/// The error of μ_N over report intervals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelError {
    /// Intervals scored.
    pub intervals: u64,
    /// Mean relative error (estimate − truth) / truth: the bias.
    pub bias: f64,
    /// Median absolute relative error.
    pub mae_rel_median: f64,
    /// 95th percentile of the absolute relative error.
    pub err_rel_p95: f64,
    /// Mean true μ_N of the scored intervals.
    pub truth_mean: f64,
    /// Mean estimated μ_N of the scored intervals.
    pub estimate_mean: f64,
}

impl LevelError {
    /// Score the pairs with at least [`MIN_AMPDUS`] true A-MPDUs and a finite estimate; `None`
    /// when none qualifies.
    pub fn of<'a>(pairs: impl IntoIterator<Item = &'a LevelPair>) -> Option<LevelError> {
        let mut errs = Vec::new();
        let (mut t, mut e) = (0.0, 0.0);
        for p in pairs {
            if p.ampdus < MIN_AMPDUS || p.truth.is_nan() || p.truth <= 0.0 || !p.estimate.is_finite() {
                continue;
            }
            errs.push(p.rel_error());
            t += p.truth;
            e += p.estimate;
        }
        if errs.is_empty() {
            return None;
        }
        let n = errs.len() as f64;
        let bias = errs.iter().sum::<f64>() / n;
        let mut abs: Vec<f64> = errs.iter().map(|x| x.abs()).collect();
        abs.sort_by(f64::total_cmp);
        Some(LevelError {
            intervals: errs.len() as u64,
            bias,
            mae_rel_median: quantile(&abs, 0.5),
            err_rel_p95: quantile(&abs, 0.95),
            truth_mean: t / n,
            estimate_mean: e / n,
        })
    }

    /// Within the study's bounds for a receiver: |bias| ≤ 5 % and median |relative error| ≤ 10 %.
    pub fn holds(&self) -> bool {
        self.bias.abs() <= 0.05 && self.mae_rel_median <= 0.10
    }
}

/// Linear-interpolated quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let x = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (x - lo as f64)
}

/// The report interval cross-validation scores μ_N over: a receiver's default (100 ms).
pub const CV_REPORT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// μ_N per interval of one run of packets in receive order, as a receiver that counts frames
/// would report it — packets received in the interval ÷ predicted frame starts in it — beside
/// the truth ([`truth_per_interval`] of the true starts). An interval without a predicted start
/// has an infinite estimate ([`LevelError::of`] leaves it out, as it does intervals with fewer
/// than [`MIN_AMPDUS`] true A-MPDUs).
pub fn count_pairs(host: &[Ts], truth: &[bool], pred: &[bool], interval: std::time::Duration) -> Vec<LevelPair> {
    let step = interval.as_nanos().max(1) as u64;
    let n = host.len().min(truth.len()).min(pred.len());
    let mut counts: Vec<(Ts, u64, u64)> = Vec::new(); // (interval start, packets, predicted starts)
    for i in 0..n {
        let start = Ts(host[i].as_nanos() - host[i].as_nanos() % step);
        if counts.last().is_none_or(|c| c.0 != start) {
            counts.push((start, 0, 0));
        }
        let c = counts.last_mut().expect("pushed above");
        c.1 += 1;
        c.2 += u64::from(pred[i]);
    }
    let truths = truth_per_interval(host[..n].iter().copied().zip(truth[..n].iter().copied()), interval);
    let mut k = 0;
    let mut out = Vec::with_capacity(truths.len());
    for (start, mpdus, ampdus) in truths {
        while k < counts.len() && counts[k].0 < start {
            k += 1;
        }
        let estimate = match counts.get(k) {
            Some(&(s, packets, starts)) if s == start && starts > 0 => packets as f64 / starts as f64,
            _ => f64::INFINITY,
        };
        out.push(LevelPair {
            start,
            estimate,
            truth: if ampdus > 0 {
                mpdus as f64 / ampdus as f64
            } else {
                f64::NAN
            },
            ampdus,
        });
    }
    out
}

/// The true μ_N per interval of a receive clock's grid of `interval` (aligned to multiples of it,
/// as the online estimator's reports are): each A-MPDU counts in the interval where its first
/// packet was received, with all its packets. `packets` are (receive time, starts an A-MPDU) in
/// receive order; returns (interval start, MPDUs, A-MPDUs) for every interval with packets.
pub fn truth_per_interval(
    packets: impl IntoIterator<Item = (Ts, bool)>,
    interval: std::time::Duration,
) -> Vec<(Ts, u64, u64)> {
    let step = interval.as_nanos().max(1) as u64;
    let mut out: Vec<(Ts, u64, u64)> = Vec::new();
    // The interval of the A-MPDU now open (its packets count there).
    let mut open: Option<usize> = None;
    for (t, first) in packets {
        if first || open.is_none() {
            let start = Ts(t.as_nanos() - t.as_nanos() % step);
            if out.last().is_none_or(|l| l.0 != start) {
                out.push((start, 0, 0));
            }
            let i = out.len() - 1;
            out[i].2 += 1;
            open = Some(i);
        }
        if let Some(i) = open {
            out[i].1 += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_pairs_divide_packets_by_predicted_starts_per_interval() {
        // Two 100 ms intervals: A-MPDUs of 4 packets every 10 ms, the truth 4 in both. The
        // prediction misses every other start in the first interval (level 8 there) and finds
        // all in the second.
        let mut host = Vec::new();
        let (mut truth, mut pred) = (Vec::new(), Vec::new());
        for k in 0..20u64 {
            for j in 0..4u64 {
                host.push(Ts(k * 10_000_000 + j * 1_000));
                truth.push(j == 0);
                pred.push(j == 0 && (k >= 10 || k % 2 == 0));
            }
        }
        let pairs = count_pairs(&host, &truth, &pred, CV_REPORT_INTERVAL);
        assert_eq!(pairs.len(), 2);
        assert_eq!((pairs[0].truth, pairs[0].estimate, pairs[0].ampdus), (4.0, 8.0, 10));
        assert_eq!((pairs[1].truth, pairs[1].estimate), (4.0, 4.0));
        let e = LevelError::of(&pairs).unwrap();
        assert!((e.bias - 0.5).abs() < 1e-12 && e.intervals == 2);
        // No predicted start at all: an infinite estimate, left out of the error.
        let none = count_pairs(&host, &truth, &vec![false; host.len()], CV_REPORT_INTERVAL);
        assert!(none.iter().all(|p| p.estimate.is_infinite()) && LevelError::of(&none).is_none());
    }

    #[test]
    fn scores() {
        let m = BinaryMetrics::from_labels(&[true, true, false, false, true], &[true, false, true, false, true]);
        assert_eq!((m.tp, m.fp, m.tn, m.fn_), (2, 1, 1, 1));
        assert!((m.f1() - 2.0 / 3.0).abs() < 1e-12);
        assert!((m.accuracy() - 0.6).abs() < 1e-12);
        let a = AggMetrics::from_levels(&[4, 4, 2], &[4, 5, 4]);
        assert!((a.rmse() - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((a.exact, a.within1), (1, 2));
        assert_eq!(mean_std(&[1.0, 3.0]), (2.0, 1.0));
    }
    use std::time::Duration;

    fn pair(estimate: f64, truth: f64) -> LevelPair {
        LevelPair {
            start: Ts::ZERO,
            estimate,
            truth,
            ampdus: 100,
        }
    }

    #[test]
    fn bias_median_and_p95() {
        let pairs: Vec<LevelPair> = [1.1, 0.9, 1.2, 1.0, 0.95]
            .iter()
            .map(|&f| pair(20.0 * f, 20.0))
            .collect();
        let e = LevelError::of(&pairs).unwrap();
        assert_eq!(e.intervals, 5);
        assert!((e.bias - 0.03).abs() < 1e-12, "{}", e.bias);
        assert!((e.mae_rel_median - 0.1).abs() < 1e-12);
        assert!((e.err_rel_p95 - 0.18).abs() < 1e-9, "{}", e.err_rel_p95);
        assert!(e.holds());
        let off: Vec<LevelPair> = (0..10).map(|_| pair(26.0, 20.0)).collect();
        assert!(!LevelError::of(&off).unwrap().holds());
        // Too few A-MPDUs, no truth or no estimate: not scored.
        let skipped = [
            LevelPair {
                ampdus: 2,
                ..pair(1.0, 1.0)
            },
            pair(f64::NAN, 2.0),
            pair(3.0, 0.0),
        ];
        assert_eq!(LevelError::of(&skipped), None);
    }

    #[test]
    fn truth_counts_each_ampdu_where_it_starts() {
        let ms = Duration::from_millis(1);
        // A-MPDUs of 4 packets every 300 µs; the one starting at 900 µs spills into the next ms.
        let mut pkts = Vec::new();
        for f in 0..10u64 {
            for k in 0..4u64 {
                pkts.push((Ts::from_micros(f * 300 + k * 40), k == 0));
            }
        }
        let t = truth_per_interval(pkts, ms);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0], (Ts::ZERO, 16, 4), "0, 300, 600, 900 start in the first ms");
        assert_eq!(t[1], (Ts::from_millis(1), 12, 3));
        assert_eq!(t[2], (Ts::from_millis(2), 12, 3));
        // Packets before the first start count as an A-MPDU of their own.
        let t = truth_per_interval([(Ts::from_micros(5), false), (Ts::from_micros(6), false)], ms);
        assert_eq!(t, vec![(Ts::ZERO, 2, 1)]);
    }
}
