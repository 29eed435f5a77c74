//! Fitted models: what training produces and the runtime applies. Plain data with a decision
//! function each; fitting lives in the `aggrate` crate's `train` module.

use serde::{Deserialize, Serialize};

/// A parameter out of range (model hyper-parameters here, the controller's in `control`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field} = {value}: {allowed}")]
pub struct ParamError {
    /// The parameter, with its section (`svr.c`, `control.k0`).
    pub field: &'static str,
    /// Value.
    pub value: f64,
    /// Allowed.
    pub allowed: &'static str,
}

/// Feature standardisation (z-scores), fitted on training rows only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scaler {
    /// Means.
    pub mean: Vec<f64>,
    /// Standard deviations (1 where a feature is constant).
    pub std: Vec<f64>,
}

impl Scaler {
    /// w·z + b for the standardised row z = (x − mean)/std.
    pub fn linear(&self, w: &[f64], b: f64, x: &[f64]) -> f64 {
        let mut s = b;
        for ((v, m), (sd, w)) in x.iter().zip(&self.mean).zip(self.std.iter().zip(w)) {
            s += (v - m) / sd * w;
        }
        s
    }

    /// The linear function `w·((x − μ)/σ) + b` on raw features: `(w/σ, b − Σ wμ/σ)` (used
    /// by the online estimator and the ONNX export, so no division per row).
    pub fn fold(&self, w: &[f64], b: f64) -> (Vec<f64>, f64) {
        let wf: Vec<f64> = w.iter().zip(&self.std).map(|(w, s)| w / s).collect();
        let bf = b - wf.iter().zip(&self.mean).map(|(w, m)| w * m).sum::<f64>();
        (wf, bf)
    }

    /// Standardise `x` into `z` (which has room for at least `x.len()` values).
    pub fn standardize(&self, x: &[f64], z: &mut [f64]) {
        for (((zj, v), m), sd) in z.iter_mut().zip(x).zip(&self.mean).zip(&self.std) {
            *zj = (v - m) / sd;
        }
    }

    /// Fit on row-major rows of width `d`.
    pub fn fit_rows(x: &[f64], d: usize) -> Scaler {
        Scaler::fit_slices(std::iter::once(x), d)
    }

    /// Fit on row-major slices of rows of width `d`.
    pub fn fit_slices<'a>(slices: impl Iterator<Item = &'a [f64]>, d: usize) -> Scaler {
        let (rows, sum, sq) = Scaler::sums(slices, d);
        Scaler::from_sums(rows as f64, &sum, &sq)
    }

    /// Rows, column sums and column sums of squares of row-major slices of rows of width `d`:
    /// what [`Scaler::from_sums`] takes (sums of parts add).
    pub fn sums<'a>(slices: impl Iterator<Item = &'a [f64]>, d: usize) -> (usize, Vec<f64>, Vec<f64>) {
        let mut rows = 0usize;
        let mut sum = vec![0.0; d];
        let mut sq = vec![0.0; d];
        for x in slices {
            rows += x.len() / d.max(1);
            for row in x.chunks_exact(d.max(1)) {
                for (j, v) in row.iter().enumerate() {
                    sum[j] += v;
                    sq[j] += v * v;
                }
            }
        }
        (rows, sum, sq)
    }

    /// The scaler of `n` rows whose columns add up to `sum` and their squares to `sq`: what
    /// [`Scaler::fit_slices`] computes, from sums that may have been added elsewhere (a
    /// cluster's partitions). A column that does not vary gets σ = 1.
    pub fn from_sums(n: f64, sum: &[f64], sq: &[f64]) -> Scaler {
        let n = n.max(1.0);
        let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
        let std = mean
            .iter()
            .zip(sq)
            .map(|(m, q)| {
                let var = (q / n - m * m).max(0.0);
                if var > 1e-18 {
                    var.sqrt()
                } else {
                    1.0
                }
            })
            .collect();
        Scaler { mean, std }
    }
}

/// A fitted logistic model: P(first of frame) = σ(w·z + b), z = standardised row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogisticModel {
    /// Scaler fitted on the training rows.
    pub scaler: Scaler,
    /// Weights (standardised space).
    pub w: Vec<f64>,
    /// Bias.
    pub b: f64,
    /// Newton steps used.
    pub iterations: usize,
}

/// Predictions of a binary model.
pub trait Predict {
    /// Decision value of one row (> 0 means "first packet of a frame").
    fn decision(&self, x: &[f64]) -> f64;
    /// Label of one row.
    fn predict_row(&self, x: &[f64]) -> bool {
        self.decision(x) > 0.0
    }
}

impl Predict for LogisticModel {
    fn decision(&self, x: &[f64]) -> f64 {
        self.scaler.linear(&self.w, self.b, x)
    }
}

impl LogisticModel {
    /// Probability that `x` starts a frame.
    pub fn probability(&self, x: &[f64]) -> f64 {
        1.0 / (1.0 + (-self.decision(x)).exp())
    }
}

/// The m = 1 baseline: "first of frame" when the last gap exceeds a threshold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThresholdModel {
    /// Gap threshold (µs) on feature 0 (the most recent gap).
    pub threshold_us: f64,
}

impl Predict for ThresholdModel {
    fn decision(&self, x: &[f64]) -> f64 {
        x.first().copied().unwrap_or(0.0) - self.threshold_us
    }
}

/// Loss of the linear SVM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SvmLoss {
    /// max(0, 1 − y·f).
    Hinge,
    /// max(0, 1 − y·f)².
    SquaredHinge,
}

/// A fitted linear SVM: decision = w·z + b on standardised rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinearSvmModel {
    /// Scaler fitted on the training rows.
    pub scaler: Scaler,
    /// Weights.
    pub w: Vec<f64>,
    /// Bias.
    pub b: f64,
    /// Loss it was trained with.
    pub loss: SvmLoss,
    /// Solver iterations used (Newton steps for squared hinge, coordinate-descent epochs for hinge).
    pub epochs: usize,
}

impl Predict for LinearSvmModel {
    fn decision(&self, x: &[f64]) -> f64 {
        self.scaler.linear(&self.w, self.b, x)
    }
}

/// Hyper-parameters of the RBF ε-SVR (on standardised inputs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SvrParams {
    /// Box constraint C.
    pub c: f64,
    /// RBF γ: K(a, b) = exp(−γ‖a − b‖²).
    pub gamma: f64,
    /// Width of the ε-insensitive tube (in target units: MPDUs).
    pub epsilon: f64,
    /// Stopping tolerance on the KKT gap (libsvm's `eps`).
    pub tol: f64,
    /// Iteration cap.
    pub max_iter: usize,
}

impl Default for SvrParams {
    fn default() -> Self {
        SvrParams {
            c: 10.0,
            gamma: 0.1,
            epsilon: 0.5,
            tol: 1e-3,
            max_iter: 10_000_000,
        }
    }
}

/// Checked [`SvrParams`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidSvrParams(SvrParams);

impl ValidSvrParams {
    /// The parameters.
    pub fn get(&self) -> &SvrParams {
        &self.0
    }
}

impl SvrParams {
    /// Check ranges.
    pub fn check(self) -> Result<ValidSvrParams, ParamError> {
        let pos = |field, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(ParamError {
                    field,
                    value,
                    allowed: "a finite number > 0",
                })
            }
        };
        pos("svr.c", self.c)?;
        pos("svr.gamma", self.gamma)?;
        pos("svr.tol", self.tol)?;
        if !(self.epsilon.is_finite() && self.epsilon >= 0.0) {
            return Err(ParamError {
                field: "svr.epsilon",
                value: self.epsilon,
                allowed: "a finite number >= 0",
            });
        }
        if self.max_iter == 0 {
            return Err(ParamError {
                field: "svr.max_iter",
                value: 0.0,
                allowed: ">= 1",
            });
        }
        Ok(ValidSvrParams(self))
    }
}

/// A fitted RBF ε-SVR: f(x) = Σ coef_i · exp(−γ‖z − sv_i‖²) + b, z = standardised x.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SvrModel {
    /// Scaler fitted on the training rows.
    pub scaler: Scaler,
    /// γ.
    pub gamma: f64,
    /// Support vectors (standardised), row-major, `coef.len()` rows of `scaler.mean.len()`.
    pub support: Vec<f64>,
    /// Dual coefficients α_i − α*_i of the support vectors.
    pub coef: Vec<f64>,
    /// Bias.
    pub b: f64,
    /// The hyper-parameters it was fitted with.
    pub params: SvrParams,
    /// SMO iterations used.
    pub iterations: usize,
}

impl SvrModel {
    /// Features per row.
    pub fn width(&self) -> usize {
        self.scaler.mean.len()
    }

    /// Support vectors.
    pub fn n_support(&self) -> usize {
        self.coef.len()
    }

    /// Predicted target of one raw row.
    pub fn predict(&self, x: &[f64]) -> f64 {
        let d = self.width();
        let mut z = [0.0f64; 64];
        let z = if d <= 64 {
            &mut z[..d]
        } else {
            // Wider than any slot row we build; allocate rather than refuse.
            return self.predict_wide(x);
        };
        self.scaler.standardize(x, z);
        self.sum_kernel(z)
    }

    fn predict_wide(&self, x: &[f64]) -> f64 {
        let mut z = vec![0.0; self.width()];
        self.scaler.standardize(x, &mut z);
        self.sum_kernel(&z)
    }

    fn sum_kernel(&self, z: &[f64]) -> f64 {
        let d = z.len();
        let mut s = self.b;
        for (sv, c) in self.support.chunks_exact(d.max(1)).zip(&self.coef) {
            let dist: f64 = sv.iter().zip(z).map(|(a, b)| (a - b) * (a - b)).sum();
            s += c * (-self.gamma * dist).exp();
        }
        s
    }
}
