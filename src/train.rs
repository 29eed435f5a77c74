//! Training: fitted models from labelled feature rows, and cross-validation without leakage.
//!
//! Inputs: a [`Dataset`](crate::dataset::Dataset) (row-major features, labels, group = capture, per-row send rate and true
//! aggregation level). Outputs: owned, plain-data models ([`LogisticModel`], [`ThresholdModel`])
//! and per-fold metrics. Hyper-parameters go through `*Params::check()` once. Deterministic: no
//! randomness is used (folds are contiguous, solvers are exact).
//!
//! Why our own solvers: smartcore's logistic regression is 6–9× slower than scikit-learn on
//! 1M × 21 rows (../shared/STACK.md) and its SVMs hundreds of times slower. The logistic model
//! here is a Newton (IRLS) solver: each step is one pass over the data to build the 22×22
//! Hessian, then a Cholesky solve; it converges in 5–10 steps.

use serde::{Deserialize, Serialize};

use crate::dataset::Dataset;
use crate::features::FeatureSpec;

mod svr;
pub use svr::{cv_predict_svr, fit_svr, SvrModel, SvrParams, ValidSvrParams, MAX_SVR_ROWS};

/// Errors of training.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// A hyper-parameter is out of range.
    #[error("{name} = {value}: {allowed}")]
    BadParam {
        /// Parameter.
        name: &'static str,
        /// Value.
        value: f64,
        /// Allowed.
        allowed: &'static str,
    },
    /// Not enough data.
    #[error("cannot train on {rows} rows with {positives} positive labels: need both classes")]
    OneClass {
        /// Rows.
        rows: usize,
        /// Positives.
        positives: usize,
    },
    /// Not enough rows to fit.
    #[error("cannot train on {rows} rows: need at least {need}")]
    TooFewRows {
        /// Rows.
        rows: usize,
        /// Needed.
        need: usize,
    },
    /// Row widths disagree.
    #[error("dataset rows have {got} features, the model expects {want}")]
    Width {
        /// Given.
        got: usize,
        /// Expected.
        want: usize,
    },
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

    /// Fit on `data`.
    pub fn fit(data: &Dataset) -> Scaler {
        Scaler::fit_rows(&data.x, data.d)
    }

    /// Fit on row-major rows of width `d`.
    pub fn fit_rows(x: &[f64], d: usize) -> Scaler {
        let rows = x.len() / d.max(1);
        let n = rows.max(1) as f64;
        let mut mean = vec![0.0; d];
        let mut sq = vec![0.0; d];
        for row in x.chunks_exact(d.max(1)) {
            for (j, v) in row.iter().enumerate() {
                mean[j] += v;
                sq[j] += v * v;
            }
        }
        let std = (0..d)
            .map(|j| {
                let m = mean[j] / n;
                let var = (sq[j] / n - m * m).max(0.0);
                if var > 1e-18 {
                    var.sqrt()
                } else {
                    1.0
                }
            })
            .collect();
        mean.iter_mut().for_each(|m| *m /= n);
        Scaler { mean, std }
    }
}

/// Hyper-parameters of L2-regularised logistic regression.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogisticParams {
    /// L2 penalty on the (standardised) weights, as scikit-learn's 1/C per row-sum.
    pub l2: f64,
    /// Newton steps at most.
    pub max_iter: usize,
    /// Stop when the largest step change is below this.
    pub tol: f64,
    /// Weight positives so both classes count equally.
    pub balanced: bool,
}

impl Default for LogisticParams {
    fn default() -> Self {
        LogisticParams {
            l2: 1.0,
            max_iter: 25,
            tol: 1e-8,
            balanced: false,
        }
    }
}

/// Checked logistic parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidLogisticParams(LogisticParams);

impl LogisticParams {
    /// Check ranges.
    pub fn check(self) -> Result<ValidLogisticParams, Error> {
        if !(self.l2 >= 0.0 && self.l2.is_finite()) {
            return Err(Error::BadParam {
                name: "l2",
                value: self.l2,
                allowed: "finite and >= 0",
            });
        }
        if self.max_iter == 0 || self.max_iter > 1000 {
            return Err(Error::BadParam {
                name: "max_iter",
                value: self.max_iter as f64,
                allowed: "1..=1000",
            });
        }
        if self.tol.is_nan() || self.tol <= 0.0 {
            return Err(Error::BadParam {
                name: "tol",
                value: self.tol,
                allowed: "> 0",
            });
        }
        Ok(ValidLogisticParams(self))
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

fn cholesky_solve(a: &mut [f64], b: &mut [f64], n: usize) -> bool {
    // In-place Cholesky (lower) of the n×n SPD matrix a, then solve a·x = b into b.
    for j in 0..n {
        let mut s = a[j * n + j];
        for k in 0..j {
            s -= a[j * n + k] * a[j * n + k];
        }
        if s <= 0.0 {
            return false;
        }
        let d = s.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i {
            s -= a[i * n + k] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = b[i];
        for k in i + 1..n {
            s -= a[k * n + i] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    true
}

/// Rows and positives, or an error when only one class is present.
fn two_classes(data: &Dataset) -> Result<(usize, usize), Error> {
    let n = data.len();
    let pos = data.y.iter().filter(|y| **y).count();
    if pos == 0 || pos == n {
        return Err(Error::OneClass {
            rows: n,
            positives: pos,
        });
    }
    Ok((n, pos))
}

/// One pass over the data: gradient and Hessian of Σ loss(s_i, y_i) in β, with s_i = β·[z_i, 1]
/// and `f(s, y) = (∂loss/∂s, ∂²loss/∂s²)`. Rows are cut into a fixed number of contiguous chunks
/// whose partial sums are added in chunk order, so the result is the same whatever the number
/// of threads (the chunks are shared among them). Returns the full (symmetric) m×m Hessian.
fn newton_pass(
    data: &Dataset,
    scaler: &Scaler,
    beta: &[f64],
    f: impl Fn(f64, bool) -> (f64, f64) + Sync,
) -> (Vec<f64>, Vec<f64>) {
    pass(data, scaler, beta, f, true)
}

/// [`newton_pass`] with the Hessian optional (`hessian = false`: gradient only, ~10× cheaper).
fn pass(
    data: &Dataset,
    scaler: &Scaler,
    beta: &[f64],
    f: impl Fn(f64, bool) -> (f64, f64) + Sync,
    hessian: bool,
) -> (Vec<f64>, Vec<f64>) {
    const CHUNKS: usize = 8;
    let n = data.len();
    let d = data.d;
    let m = d + 1;
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, CHUNKS);
    let chunk = n.div_ceil(CHUNKS);
    let f = &f;
    // Multiply by 1/σ instead of dividing per row: divisions were ~40 % of a pass.
    let inv: Vec<f64> = scaler.std.iter().map(|s| 1.0 / s).collect();
    let (inv, mean) = (&inv, &scaler.mean);
    let mut parts: Vec<(usize, Vec<f64>, Vec<f64>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    let mut out = Vec::new();
                    for c in (t..CHUNKS).step_by(threads) {
                        let mut h = vec![0.0; m * m];
                        let mut g = vec![0.0; m];
                        let mut z = vec![0.0; m];
                        for i in c * chunk..((c + 1) * chunk).min(n) {
                            for (((zj, x), mu), iv) in z.iter_mut().zip(data.row(i)).zip(mean).zip(inv) {
                                *zj = (x - mu) * iv;
                            }
                            z[d] = 1.0;
                            let s: f64 = z.iter().zip(beta).map(|(a, b)| a * b).sum();
                            let (r, wgt) = f(s, data.y[i]);
                            if r == 0.0 && wgt == 0.0 {
                                continue;
                            }
                            if !hessian {
                                for (ga, za) in g.iter_mut().zip(&z) {
                                    *ga += r * za;
                                }
                                continue;
                            }
                            for a in 0..m {
                                g[a] += r * z[a];
                                let wa = wgt * z[a];
                                let row = &mut h[a * m..a * m + a + 1];
                                for (hb, zb) in row.iter_mut().zip(&z[..=a]) {
                                    *hb += wa * zb;
                                }
                            }
                        }
                        out.push((c, h, g));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("Newton pass worker"))
            .collect()
    });
    parts.sort_by_key(|p| p.0);
    let mut h = vec![0.0; m * m];
    let mut g = vec![0.0; m];
    for (_, ph, pg) in parts {
        h.iter_mut().zip(ph).for_each(|(a, b)| *a += b);
        g.iter_mut().zip(pg).for_each(|(a, b)| *a += b);
    }
    for a in 0..m {
        for b in 0..a {
            h[b * m + a] = h[a * m + b];
        }
    }
    (h, g)
}

/// Σ loss(s_i, y_i) over all rows (chunked like [`newton_pass`], same order).
fn loss_pass(data: &Dataset, scaler: &Scaler, beta: &[f64], loss: impl Fn(f64, bool) -> f64 + Sync) -> f64 {
    let d = data.d;
    let mut z = vec![0.0; d + 1];
    let mut total = 0.0;
    for i in 0..data.len() {
        scaler.standardize(data.row(i), &mut z);
        z[d] = 1.0;
        let s: f64 = z.iter().zip(beta).map(|(a, b)| a * b).sum();
        total += loss(s, data.y[i]);
    }
    total
}

/// Fit logistic regression by Newton's method (IRLS) on standardised features.
pub fn fit_logistic(data: &Dataset, p: &ValidLogisticParams) -> Result<LogisticModel, Error> {
    fit_logistic_from(data, p, None)
}

/// [`fit_logistic`] started from `init` (e.g. the model fitted on all rows, when fitting CV
/// folds that share most of their rows with it): the start is `init`'s decision function
/// re-expressed for this data's scaler, so Newton needs only a few steps. Same optimum.
pub fn fit_logistic_from(
    data: &Dataset,
    p: &ValidLogisticParams,
    init: Option<&LogisticModel>,
) -> Result<LogisticModel, Error> {
    let p = p.0;
    let (n, pos) = two_classes(data)?;
    let scaler = Scaler::fit(data);
    let d = data.d;
    let m = d + 1; // + bias (last)
    let (w_pos, w_neg) = if p.balanced {
        (n as f64 / (2.0 * pos as f64), n as f64 / (2.0 * (n - pos) as f64))
    } else {
        (1.0, 1.0)
    };
    let mut beta = vec![0.0; m];
    if let Some(init) = init.filter(|i| i.w.len() == d) {
        // w·(x − μ)/σ + b  =  w'·(x − μ')/σ' + b'  with  w' = w σ'/σ,  b' = b + Σ w (μ' − μ)/σ.
        for j in 0..d {
            let (w, mu, sd) = (init.w[j], init.scaler.mean[j], init.scaler.std[j]);
            beta[j] = w * scaler.std[j] / sd;
            beta[d] += w * (scaler.mean[j] - mu) / sd;
        }
        beta[d] += init.b;
    }
    let loss = |s: f64, y: bool| {
        let prob = 1.0 / (1.0 + (-s).exp());
        let (target, cw) = if y { (1.0, w_pos) } else { (0.0, w_neg) };
        (cw * (prob - target), (cw * prob * (1.0 - prob)).max(1e-12))
    };
    // Warm starts (CV folds) reuse the Hessian of their first pass: later passes compute the
    // gradient only (chord Newton). The fixed point is the same (gradient zero); convergence is
    // linear with a tiny rate because the start is already close. A step that grows instead of
    // shrinking switches back to full Newton.
    let mut frozen: Option<Vec<f64>> = None;
    let mut last_step = f64::INFINITY;
    let mut iterations = 0;
    for it in 0..p.max_iter {
        iterations = it + 1;
        let (mut h, mut g) = match &frozen {
            Some(h) => (h.clone(), pass(data, &scaler, &beta, loss, false).1),
            None => newton_pass(data, &scaler, &beta, loss),
        };
        for j in 0..d {
            g[j] += p.l2 * beta[j];
        }
        if frozen.is_none() {
            for j in 0..d {
                h[j * m + j] += p.l2;
            }
            h[d * m + d] += 1e-9;
            if init.is_some() {
                frozen = Some(h.clone());
            }
        }
        if !cholesky_solve(&mut h, &mut g, m) {
            break;
        }
        let mut step = 0.0f64;
        for j in 0..m {
            beta[j] -= g[j];
            step = step.max(g[j].abs());
        }
        if step < p.tol {
            break;
        }
        if frozen.is_some() && step > 0.5 * last_step {
            frozen = None; // not contracting fast: full Newton from here
        }
        last_step = step;
    }
    Ok(LogisticModel {
        scaler,
        w: beta[..d].to_vec(),
        b: beta[d],
        iterations,
    })
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

/// The threshold on feature 0 that maximises training accuracy (exact: sort once, sweep).
pub fn fit_threshold(data: &Dataset) -> Result<ThresholdModel, Error> {
    let (n, pos) = two_classes(data)?;
    let mut v: Vec<(f64, bool)> = (0..n).map(|i| (data.row(i)[0], data.y[i])).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Threshold below everything: all predicted positive → correct = pos.
    let mut best = (pos, f64::NEG_INFINITY);
    let mut correct = pos;
    for i in 0..n {
        // Move v[i] to the negative side.
        if v[i].1 {
            correct -= 1;
        } else {
            correct += 1;
        }
        let next_differs = i + 1 == n || v[i + 1].0 > v[i].0;
        if next_differs && correct > best.0 {
            let t = if i + 1 < n { (v[i].0 + v[i + 1].0) / 2.0 } else { v[i].0 };
            best = (correct, t);
        }
    }
    Ok(ThresholdModel { threshold_us: best.1 })
}

/// Aggregation levels implied by predicted frame starts: a run from one predicted start to the
/// next is one frame; each row gets its run's length, capped at `n_max`.
pub fn levels_from_starts(starts: &[bool], n_max: u16) -> Vec<u16> {
    let mut out = vec![0u16; starts.len()];
    let mut a = 0;
    while a < starts.len() {
        let b = (a + 1..starts.len()).find(|&i| starts[i]).unwrap_or(starts.len());
        let lvl = ((b - a).min(n_max as usize)) as u16;
        out[a..b].iter_mut().for_each(|l| *l = lvl);
        a = b;
    }
    out
}

/// Check that a dataset's rows fit a feature spec.
pub fn check_width(data: &Dataset, spec: &FeatureSpec) -> Result<(), Error> {
    if data.d != spec.width() {
        return Err(Error::Width {
            got: data.d,
            want: spec.width(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logistic_separates_and_threshold_finds_the_gap() {
        let mut d = Dataset::new(2);
        for i in 0..400 {
            let big = i % 4 == 0;
            let g = if big {
                200.0 + (i % 7) as f64
            } else {
                5.0 + (i % 5) as f64
            };
            d.push(&[g, (i % 3) as f64], big, 0, 100.0, 4);
        }
        let m = fit_logistic(
            &d,
            &LogisticParams {
                l2: 0.01,
                ..LogisticParams::default()
            }
            .check()
            .unwrap(),
        )
        .unwrap();
        assert!((0..d.len()).all(|i| m.predict_row(d.row(i)) == d.y[i]));
        assert!(m.iterations < 25);
        let t = fit_threshold(&d).unwrap();
        assert!(t.threshold_us > 9.0 && t.threshold_us < 200.0, "{}", t.threshold_us);
        assert!(LogisticParams {
            l2: -1.0,
            ..LogisticParams::default()
        }
        .check()
        .is_err());
    }

    #[test]
    fn warm_start_reaches_the_same_optimum_faster() {
        let mut d = Dataset::new(3);
        for i in 0..3000u64 {
            let y = i % 5 == 0;
            let noise = ((i * 2654435761) % 1000) as f64 / 10.0;
            let g = if y { 120.0 + noise } else { 20.0 + noise };
            d.push(&[g, noise, (i % 7) as f64], y, 0, 300.0, 5);
        }
        let p = LogisticParams::default().check().unwrap();
        let all = fit_logistic(&d, &p).unwrap();
        let idx: Vec<usize> = (150..3000).collect();
        let part = d.select(&idx);
        let cold = fit_logistic(&part, &p).unwrap();
        let warm = fit_logistic_from(&part, &p, Some(&all)).unwrap();
        assert!(
            warm.iterations < cold.iterations,
            "{} vs {}",
            warm.iterations,
            cold.iterations
        );
        for (a, b) in warm.w.iter().zip(&cold.w) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert!((warm.b - cold.b).abs() < 1e-6);
    }

    #[test]
    fn levels_follow_predicted_starts() {
        let s = [true, false, false, true, true, false];
        assert_eq!(levels_from_starts(&s, 64), vec![3, 3, 3, 1, 2, 2]);
        assert_eq!(levels_from_starts(&s, 2), vec![2, 2, 2, 1, 2, 2]);
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

/// Hyper-parameters of the linear SVM.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SvmParams {
    /// Cost C.
    pub c: f64,
    /// Loss.
    pub loss: SvmLoss,
    /// Epochs at most (passes over the active rows).
    pub max_epochs: usize,
    /// Stop when the projected-gradient spread (max − min over all rows) is at most `tol`
    /// (liblinear's criterion and default, 0.1).
    pub tol: f64,
    /// Seed of the coordinate order.
    pub seed: u64,
}

impl Default for SvmParams {
    fn default() -> Self {
        SvmParams {
            c: 1.0,
            loss: SvmLoss::SquaredHinge,
            max_epochs: 1000,
            tol: 0.1,
            seed: 1,
        }
    }
}

/// Checked SVM parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidSvmParams(SvmParams);

impl SvmParams {
    /// Check ranges.
    pub fn check(self) -> Result<ValidSvmParams, Error> {
        if !(self.c > 0.0 && self.c.is_finite()) {
            return Err(Error::BadParam {
                name: "c",
                value: self.c,
                allowed: "finite and > 0",
            });
        }
        if self.max_epochs == 0 {
            return Err(Error::BadParam {
                name: "max_epochs",
                value: 0.0,
                allowed: ">= 1",
            });
        }
        if self.tol.is_nan() || self.tol <= 0.0 {
            return Err(Error::BadParam {
                name: "tol",
                value: self.tol,
                allowed: "> 0",
            });
        }
        Ok(ValidSvmParams(self))
    }
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

/// Fit a linear SVM by dual coordinate descent (Hsieh et al., ICML 2008 — liblinear's solver),
/// the bias as an extra constant feature. Our own because smartcore/linfa solve the kernel SVM
/// (hundreds of times slower, ../shared/STACK.md) and the `liblinear` crate needs the deprecated
/// `failure` crate.
pub fn fit_linear_svm(data: &Dataset, p: &ValidSvmParams) -> Result<LinearSvmModel, Error> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let p = p.0;
    let (n, _) = two_classes(data)?;
    let scaler = Scaler::fit(data);
    if p.loss == SvmLoss::SquaredHinge {
        return Ok(fit_sq_hinge_primal(data, scaler, &p));
    }
    let d = data.d;
    let m = d + 1;
    let mut z = vec![0.0; n * m];
    for i in 0..n {
        scaler.standardize(data.row(i), &mut z[i * m..]);
        z[i * m + d] = 1.0;
    }
    let (upper, diag) = match p.loss {
        SvmLoss::Hinge => (p.c, 0.0),
        SvmLoss::SquaredHinge => (f64::INFINITY, 0.5 / p.c),
    };
    let qii: Vec<f64> = (0..n)
        .map(|i| z[i * m..(i + 1) * m].iter().map(|v| v * v).sum::<f64>() + diag)
        .collect();
    let mut alpha = vec![0.0; n];
    let mut w = vec![0.0; m];
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(p.seed);
    let mut epochs = 0;
    // Shrinking (Hsieh et al. 2008, §3.2): a variable at a bound whose gradient points out of the
    // box by more than last epoch's projected-gradient extremes leaves the active set; when the
    // active set has converged, every variable is checked once more before stopping.
    let mut active = n;
    let (mut pg_max_old, mut pg_min_old) = (f64::INFINITY, f64::NEG_INFINITY);
    while epochs < p.max_epochs {
        epochs += 1;
        order[..active].shuffle(&mut rng);
        let (mut pg_max, mut pg_min) = (f64::NEG_INFINITY, f64::INFINITY);
        let mut s = 0;
        while s < active {
            let i = order[s];
            let zi = &z[i * m..(i + 1) * m];
            let yi = if data.y[i] { 1.0 } else { -1.0 };
            let g = yi * zi.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() - 1.0 + diag * alpha[i];
            let pg = if alpha[i] == 0.0 {
                if g > pg_max_old {
                    active -= 1;
                    order.swap(s, active);
                    continue;
                }
                g.min(0.0)
            } else if alpha[i] >= upper {
                if g < pg_min_old {
                    active -= 1;
                    order.swap(s, active);
                    continue;
                }
                g.max(0.0)
            } else {
                g
            };
            pg_max = pg_max.max(pg);
            pg_min = pg_min.min(pg);
            if pg.abs() > 1e-12 {
                let old = alpha[i];
                alpha[i] = (old - g / qii[i]).clamp(0.0, upper);
                let delta = (alpha[i] - old) * yi;
                for (wj, zj) in w.iter_mut().zip(zi) {
                    *wj += delta * zj;
                }
            }
            s += 1;
        }
        if pg_max - pg_min <= p.tol {
            if active == n {
                break;
            }
            active = n;
            (pg_max_old, pg_min_old) = (f64::INFINITY, f64::NEG_INFINITY);
            continue;
        }
        pg_max_old = if pg_max <= 0.0 { f64::INFINITY } else { pg_max };
        pg_min_old = if pg_min >= 0.0 { f64::NEG_INFINITY } else { pg_min };
    }
    Ok(LinearSvmModel {
        scaler,
        w: w[..d].to_vec(),
        b: w[d],
        loss: p.loss,
        epochs,
    })
}

/// Squared hinge in the primal by generalised Newton with backtracking (the approach of
/// liblinear's `-s 2`, which scikit-learn's LinearSVC uses when rows outnumber features):
/// minimise ½‖w‖² + C·Σ max(0, 1 − y·s)². With 22 unknowns each step is one data pass and a
/// 22×22 solve, so it converges in ~10 passes where dual coordinate descent needs hundreds of
/// epochs on overlapping classes. The bias is not regularised.
fn fit_sq_hinge_primal(data: &Dataset, scaler: Scaler, p: &SvmParams) -> LinearSvmModel {
    let d = data.d;
    let m = d + 1;
    let c = p.c;
    let sign = |y: bool| if y { 1.0 } else { -1.0 };
    let loss = |s: f64, y: bool| {
        let v = (1.0 - sign(y) * s).max(0.0);
        c * v * v
    };
    let objective =
        |beta: &[f64]| 0.5 * beta[..d].iter().map(|w| w * w).sum::<f64>() + loss_pass(data, &scaler, beta, loss);
    let mut beta = vec![0.0; m];
    let mut f_old = objective(&beta);
    let mut iterations = 0;
    while iterations < p.max_epochs {
        iterations += 1;
        let (mut h, mut g) = newton_pass(data, &scaler, &beta, |s, y| {
            let ys = sign(y) * s;
            if ys < 1.0 {
                (2.0 * c * (s - sign(y)), 2.0 * c)
            } else {
                (0.0, 0.0)
            }
        });
        for j in 0..d {
            g[j] += beta[j];
            h[j * m + j] += 1.0;
        }
        h[d * m + d] += 1e-9;
        let grad_norm = g.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        if grad_norm < 1e-6 * (1.0 + f_old.abs()) || !cholesky_solve(&mut h, &mut g, m) {
            break;
        }
        // Backtracking on the objective (piecewise quadratic: full steps are usually taken).
        let mut t = 1.0;
        let mut accepted = false;
        while t > 1e-6 {
            let trial: Vec<f64> = beta.iter().zip(&g).map(|(b, s)| b - t * s).collect();
            let f = objective(&trial);
            if f <= f_old {
                let gain = f_old - f;
                beta = trial;
                f_old = f;
                accepted = true;
                if gain <= p.tol * 1e-4 * f.abs().max(1.0) {
                    t = 0.0; // converged: the step no longer improves the objective
                }
                break;
            }
            t *= 0.5;
        }
        if !accepted || t == 0.0 {
            break;
        }
    }
    LinearSvmModel {
        scaler,
        w: beta[..d].to_vec(),
        b: beta[d],
        loss: SvmLoss::SquaredHinge,
        epochs: iterations,
    }
}

#[cfg(test)]
mod svm_tests {
    use super::*;

    #[test]
    fn linear_svm_separates_both_losses() {
        let mut d = Dataset::new(2);
        for i in 0..300 {
            let pos = i % 3 == 0;
            let g = if pos {
                150.0 + (i % 11) as f64
            } else {
                8.0 + (i % 13) as f64
            };
            d.push(&[g, ((i * 7) % 5) as f64], pos, 0, 100.0, 3);
        }
        for loss in [SvmLoss::Hinge, SvmLoss::SquaredHinge] {
            let p = SvmParams {
                loss,
                ..SvmParams::default()
            }
            .check()
            .unwrap();
            let m = fit_linear_svm(&d, &p).unwrap();
            let acc = (0..d.len()).filter(|&i| m.predict_row(d.row(i)) == d.y[i]).count();
            assert_eq!(acc, d.len(), "{loss:?}");
            // Same seed, same model.
            assert_eq!(fit_linear_svm(&d, &p).unwrap(), m);
        }
        assert!(SvmParams {
            c: 0.0,
            ..SvmParams::default()
        }
        .check()
        .is_err());
    }
}
