//! Metrics as data: binary classification (F1, precision, recall, accuracy), aggregation-level
//! errors, mean ± std over folds. Renderers live in the CLI.

use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
