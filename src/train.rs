//! Training: fitted models from labelled feature rows, and cross-validation without leakage.
//!
//! Inputs: a [`Dataset`] (row-major features, labels, group = capture, per-row send rate and true
//! aggregation level). Outputs: owned, plain-data models ([`LogisticModel`], [`ThresholdModel`])
//! and per-fold metrics. Hyper-parameters go through `*Params::check()` once. Deterministic: no
//! randomness is used (folds are contiguous, solvers are exact).
//!
//! Why our own solvers: smartcore's logistic regression is 6–9× slower than scikit-learn on
//! 1M × 21 rows (measured when the stack was chosen) and its SVMs hundreds of times slower. The logistic model
//! here is a Newton (IRLS) solver: each step is one pass over the data to build the 22×22
//! Hessian, then a Cholesky solve, damped by backtracking; it converges in 5–10 steps. For
//! cross-validation ([`LogisticCv`]) the folds read their rows in place ([`RowSet`]) and start
//! from the all-rows fit, whose Hessian (minus the test rows') serves every step after BFGS
//! refinement, so a fold costs a few gradient passes.

use serde::{Deserialize, Serialize};

use crate::dataset::{Dataset, RowSet};
use crate::features::FeatureSpec;
use crate::model::{EstimatorModel, MlpModel};

pub mod bank;
pub mod bank_source;
pub mod calibrate;
pub mod cv;
pub mod lbfgs;
pub mod levels;
pub mod mlp;
pub mod newton;
pub mod online;
mod svr;
pub mod verdict;
pub use mlp::{fit_mlp, MlpParams, MlpSolver, ValidMlpParams};
pub use svr::{cv_predict_svr, fit_svr, MAX_SVR_ROWS};
// The fitted models live in the core crate (the runtime applies them without this module).
pub use aggrate_core::model::fitted::{
    LinearSvmModel, LogisticModel, Predict, Scaler, SvmLoss, SvrModel, SvrParams, ThresholdModel, ValidSvrParams,
};

/// A [`Scaler`] fitted on all rows of `data`.
pub fn fit_scaler(data: &Dataset) -> Scaler {
    Scaler::fit_rows(&data.x, data.d)
}

/// A [`Scaler`] fitted on the rows of `rows` only.
pub fn fit_scaler_set(data: &Dataset, rows: &RowSet) -> Scaler {
    let d = data.d;
    Scaler::fit_slices(rows.ranges().iter().map(|r| &data.x[r.start * d..r.end * d]), d)
}

impl From<aggrate_core::model::ParamError> for Error {
    fn from(e: aggrate_core::model::ParamError) -> Error {
        Error::BadParam {
            name: e.field,
            value: e.value,
            allowed: e.allowed,
        }
    }
}

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

/// The slot SVR's grid searched by cross-validation, per axis: the study's, searched by `sweep`
/// and by `train` unless its flags say otherwise.
pub const SVR_GRID_C: [f64; 4] = [1.0, 10.0, 100.0, 1000.0];
/// γ values of the grid (on standardised slot features).
pub const SVR_GRID_GAMMA: [f64; 4] = [0.003, 0.01, 0.03, 0.1];
/// ε values of the grid (MPDUs).
pub const SVR_GRID_EPSILON: [f64; 3] = [0.05, 0.1, 0.5];

/// Every (C, γ, ε) of the three axes (C outermost), each point checked; an empty axis is
/// refused.
pub fn svr_grid(c: &[f64], gamma: &[f64], epsilon: &[f64]) -> Result<Vec<ValidSvrParams>, Error> {
    if c.is_empty() || gamma.is_empty() || epsilon.is_empty() {
        return Err(Error::BadParam {
            name: "SVR grid",
            value: 0.0,
            allowed: "at least one value of each of C, γ and ε",
        });
    }
    let mut grid = Vec::with_capacity(c.len() * gamma.len() * epsilon.len());
    for &c in c {
        for &gamma in gamma {
            for &epsilon in epsilon {
                grid.push(
                    SvrParams {
                        c,
                        gamma,
                        epsilon,
                        ..SvrParams::default()
                    }
                    .check()?,
                );
            }
        }
    }
    Ok(grid)
}

/// Hyper-parameters of L2-regularised logistic regression.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogisticParams {
    /// L2 penalty on the (standardised) weights, as scikit-learn's 1/C per row-sum.
    pub l2: f64,
    /// Data passes at most (Newton steps, backtracking trials and chord steps).
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
            max_iter: 50,
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
    two_classes_in(data, &RowSet::all(data.len()))
}

/// [`two_classes`] over the rows of `rows`.
fn two_classes_in(data: &Dataset, rows: &RowSet) -> Result<(usize, usize), Error> {
    let n = rows.len();
    let pos = rows
        .ranges()
        .iter()
        .map(|r| data.y[r.clone()].iter().filter(|y| **y).count())
        .sum();
    if pos == 0 || pos == n {
        return Err(Error::OneClass {
            rows: n,
            positives: pos,
        });
    }
    Ok((n, pos))
}

/// One pass over the rows of `rows`: gradient and Hessian of Σ loss(s_i, y_i) in β, with
/// s_i = β·[z_i, 1] and `f(s, y) = (∂loss/∂s, ∂²loss/∂s²)`; returns the full (symmetric) m×m
/// Hessian, or zeros when `hessian = false` (gradient only, ~10× cheaper). Rows are cut into a fixed number of chunks of equal length
/// whose partial sums are added in chunk order, so the result is the same whatever the number
/// of threads (the chunks are shared among them).
fn pass(
    data: &Dataset,
    rows: &RowSet,
    scaler: &Scaler,
    beta: &[f64],
    f: impl Fn(f64, bool) -> (f64, f64) + Sync,
    hessian: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (h, g, _) = pass_with_loss(data, rows, scaler, beta, f, hessian, None::<fn(f64, bool) -> f64>);
    (h, g)
}

/// [`pass`] that also sums `loss(s_i, y_i)` when given (0 otherwise).
fn pass_with_loss(
    data: &Dataset,
    rows: &RowSet,
    scaler: &Scaler,
    beta: &[f64],
    f: impl Fn(f64, bool) -> (f64, f64) + Sync,
    hessian: bool,
    loss: Option<impl Fn(f64, bool) -> f64 + Sync>,
) -> (Vec<f64>, Vec<f64>, f64) {
    const CHUNKS: usize = 8;
    let n = rows.len();
    let d = data.d;
    let m = d + 1;
    let threads = crate::parallel::all_cores().clamp(1, CHUNKS);
    let chunk = n.div_ceil(CHUNKS);
    let f = &f;
    // Multiply by 1/σ instead of dividing per row: divisions were ~40 % of a pass.
    let inv: Vec<f64> = scaler.std.iter().map(|s| 1.0 / s).collect();
    let (inv, mean) = (&inv, &scaler.mean);
    let loss = loss.as_ref();
    let mut parts: Vec<(usize, Vec<f64>, Vec<f64>, f64)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    let mut out = Vec::new();
                    for c in (t..CHUNKS).step_by(threads) {
                        let mut sums = newton::PassSums::zeros(d);
                        let mut z = vec![0.0; m];
                        newton::accumulate(
                            rows.spans(c * chunk, (c + 1) * chunk)
                                .flatten()
                                .map(|i| (data.row(i), data.y[i])),
                            mean,
                            inv,
                            beta,
                            f,
                            loss.map(|l| l as &dyn Fn(f64, bool) -> f64),
                            hessian,
                            &mut z,
                            &mut sums,
                        );
                        let newton::PassSums { h, g, loss: total } = sums;
                        out.push((c, h, g, total));
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
    let mut total = 0.0;
    for (_, ph, pg, pl) in parts {
        h.iter_mut().zip(ph).for_each(|(a, b)| *a += b);
        g.iter_mut().zip(pg).for_each(|(a, b)| *a += b);
        total += pl;
    }
    newton::symmetrize(&mut h, m);
    (h, g, total)
}

/// Σ loss(s_i, y_i) over the rows of `rows`.
fn loss_pass(
    data: &Dataset,
    rows: &RowSet,
    scaler: &Scaler,
    beta: &[f64],
    loss: impl Fn(f64, bool) -> f64 + Sync,
) -> f64 {
    let d = data.d;
    let mut z = vec![0.0; d + 1];
    let mut total = 0.0;
    for i in rows.iter() {
        scaler.standardize(data.row(i), &mut z);
        z[d] = 1.0;
        let s: f64 = z.iter().zip(beta).map(|(a, b)| a * b).sum();
        total += loss(s, data.y[i]);
    }
    total
}

/// Checked hyper-parameters that fit one kind of model on some rows of a dataset: the one way
/// training code (the CV drivers, the CLI, the Python package) fits anything. The fitted model is
/// plain data from the core ([`Predict`], and an [`EstimatorModel`] to save or run).
pub trait Fit {
    /// What the fit produces.
    type Model: Predict + Into<EstimatorModel>;
    /// Fit on the rows `rows` of `data` (all of them: [`RowSet::all`]).
    fn fit(&self, data: &Dataset, rows: &RowSet) -> Result<Self::Model, Error>;
}

impl Fit for ValidLogisticParams {
    type Model = LogisticModel;
    fn fit(&self, data: &Dataset, rows: &RowSet) -> Result<LogisticModel, Error> {
        Ok(fit_logistic_rows(data, rows, self, None)?.model)
    }
}

impl Fit for ValidSvmParams {
    type Model = LinearSvmModel;
    fn fit(&self, data: &Dataset, rows: &RowSet) -> Result<LinearSvmModel, Error> {
        Ok(fit_svm_rows(data, rows, &self.0, None)?.model)
    }
}

/// The m = 1 threshold has no hyper-parameters: this is its [`Fit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThresholdFit;

impl Fit for ThresholdFit {
    type Model = ThresholdModel;
    fn fit(&self, data: &Dataset, rows: &RowSet) -> Result<ThresholdModel, Error> {
        if rows.len() == data.len() {
            return fit_threshold(data);
        }
        fit_threshold(&data.select(&rows.iter().collect::<Vec<_>>()))
    }
}

impl Fit for ValidMlpParams {
    type Model = MlpModel;
    fn fit(&self, data: &Dataset, rows: &RowSet) -> Result<MlpModel, Error> {
        fit_mlp(data, rows, self)
    }
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
    Ok(fit_logistic_rows(data, &RowSet::all(data.len()), p, init)?.model)
}

/// Rows from which a cold fit first solves a strided 1/[`SUBSAMPLE`] subsample (with the
/// penalty scaled to match) and starts the full fit there: the ~10 Newton steps from zero then
/// cost ~1.3 full passes instead of ~10. Same optimum (the full fit converges to the same tol).
const SUBSAMPLE_FROM_ROWS: usize = 200_000;
const SUBSAMPLE: usize = 8;

/// A logistic fit and the Hessian of its last full Newton pass (its own standardised
/// coordinates, bias last, without the L2 term), from which CV folds start.
struct LogisticFit {
    model: LogisticModel,
    hessian: Vec<f64>,
    /// Class weights `(positive, negative)` the fit (and its Hessian) used.
    weights: (f64, f64),
}

/// Loss derivatives of class-weighted logistic regression: `(∂/∂s, ∂²/∂s²)`.
fn logistic_derivs(w_pos: f64, w_neg: f64) -> impl Fn(f64, bool) -> (f64, f64) + Sync + Copy {
    move |s: f64, y: bool| {
        let prob = 1.0 / (1.0 + (-s).exp());
        let (target, cw) = if y { (1.0, w_pos) } else { (0.0, w_neg) };
        (cw * (prob - target), (cw * prob * (1.0 - prob)).max(1e-12))
    }
}

/// Class-weighted logistic loss: `cw · softplus(∓s)`, computed without overflow.
fn logistic_loss(w_pos: f64, w_neg: f64) -> impl Fn(f64, bool) -> f64 + Sync + Copy {
    move |s: f64, y: bool| {
        let (x, cw) = if y { (-s, w_pos) } else { (s, w_neg) };
        cw * (x.max(0.0) + (-x.abs()).exp().ln_1p())
    }
}

/// Class weights `(positive, negative)`.
fn class_weights(balanced: bool, n: usize, pos: usize) -> (f64, f64) {
    if balanced {
        (n as f64 / (2.0 * pos as f64), n as f64 / (2.0 * (n - pos) as f64))
    } else {
        (1.0, 1.0)
    }
}

/// Standardised coefficients `(w, b)` under `from` re-expressed for `to`, bias last:
/// w·(x − μ)/σ + b  =  w'·(x − μ')/σ' + b'  with  w' = w σ'/σ,  b' = b + Σ w (μ' − μ)/σ.
fn rescaled_linear(w: &[f64], b: f64, from: &Scaler, to: &Scaler) -> Vec<f64> {
    let d = w.len();
    let mut beta = vec![0.0; d + 1];
    for j in 0..d {
        let (wj, mu, sd) = (w[j], from.mean[j], from.std[j]);
        beta[j] = wj * to.std[j] / sd;
        beta[d] += wj * (to.mean[j] - mu) / sd;
    }
    beta[d] += b;
    beta
}

/// A Hessian `h` in `from`'s standardised coordinates (bias last) moved to `to`'s: with
/// z' = T z (T_jj = σ_j/σ'_j, T_jd = (μ_j − μ'_j)/σ'_j, T_dd = 1), H' = T H Tᵀ.
fn move_hessian(h: &[f64], from: &Scaler, to: &Scaler) -> Vec<f64> {
    let d = from.mean.len();
    let m = d + 1;
    let t = |a: usize| -> [(usize, f64); 2] {
        if a == d {
            [(d, 1.0), (d, 0.0)]
        } else {
            [
                (a, from.std[a] / to.std[a]),
                (d, (from.mean[a] - to.mean[a]) / to.std[a]),
            ]
        }
    };
    let mut out = vec![0.0; m * m];
    for a in 0..m {
        for b in 0..m {
            let mut s = 0.0;
            for (c, tac) in t(a) {
                for (e, tbe) in t(b) {
                    s += tac * h[c * m + e] * tbe;
                }
            }
            out[a * m + b] = s;
        }
    }
    out
}

/// BFGS update of the Hessian approximation `h` (m×m) after the step `s` changed the gradient
/// by `y`: h ← h − (h s)(h s)ᵀ/(sᵀ h s) + y yᵀ/(yᵀ s). Skipped unless both curvatures are > 0.
fn bfgs_update(h: &mut [f64], s: &[f64], y: &[f64]) {
    let m = s.len();
    let hs: Vec<f64> = (0..m).map(|a| (0..m).map(|b| h[a * m + b] * s[b]).sum()).collect();
    let shs: f64 = hs.iter().zip(s).map(|(a, b)| a * b).sum();
    let ys: f64 = y.iter().zip(s).map(|(a, b)| a * b).sum();
    if !(shs > 0.0 && ys > 0.0 && shs.is_finite() && ys.is_finite()) {
        return;
    }
    for a in 0..m {
        for b in 0..m {
            h[a * m + b] += y[a] * y[b] / ys - hs[a] * hs[b] / shs;
        }
    }
}

/// [`newton::Newton`] from `beta` on `rows`, each pass on this machine's threads. Returns the
/// passes made and the Hessian of the last full pass (without L2), if any.
#[allow(clippy::too_many_arguments)]
fn newton_iterate(
    data: &Dataset,
    rows: &RowSet,
    scaler: &Scaler,
    beta: &mut [f64],
    p: &LogisticParams,
    f: impl Fn(f64, bool) -> (f64, f64) + Sync + Copy,
    loss: impl Fn(f64, bool) -> f64 + Sync + Copy,
    frozen: Option<Vec<f64>>,
    freeze_first: bool,
) -> Result<(usize, Option<Vec<f64>>), Error> {
    let mut solver = newton::Newton::new(*p, beta.to_vec(), frozen, freeze_first);
    while let Some((at, full)) = solver.ask() {
        let (h, g, loss) = pass_with_loss(data, rows, scaler, at, f, full, full.then_some(loss));
        solver.tell(newton::PassSums { h, g, loss });
    }
    if solver.failed() {
        return Err(Error::BadParam {
            name: "features",
            value: f64::NAN,
            allowed: "finite: a Newton pass summed to NaN or infinity (NaN or infinite values in the rows)",
        });
    }
    let (end, passes, last_full) = solver.into_parts();
    beta.copy_from_slice(&end);
    Ok((passes, last_full))
}

/// The logistic fit on the rows of `rows`, from `init` or (cold) from zero.
fn fit_logistic_rows(
    data: &Dataset,
    rows: &RowSet,
    p: &ValidLogisticParams,
    init: Option<&LogisticModel>,
) -> Result<LogisticFit, Error> {
    let p = p.0;
    let (n, pos) = two_classes_in(data, rows)?;
    let scaler = fit_scaler_set(data, rows);
    let d = data.d;
    let (w_pos, w_neg) = class_weights(p.balanced, n, pos);
    let (f, loss) = (logistic_derivs(w_pos, w_neg), logistic_loss(w_pos, w_neg));
    let init = init.filter(|i| i.w.len() == d);
    let mut pre = None;
    if init.is_none() && n >= SUBSAMPLE_FROM_ROWS {
        let idx: Vec<usize> = rows.iter().step_by(SUBSAMPLE).collect();
        let sub = data.select(&idx);
        let sub_p = LogisticParams {
            l2: p.l2 / SUBSAMPLE as f64,
            ..p
        };
        if let Ok(fit) = fit_logistic_rows(&sub, &RowSet::all(sub.len()), &ValidLogisticParams(sub_p), None) {
            pre = Some(fit.model);
        }
    }
    let init_or_pre = init.or(pre.as_ref());
    let mut beta = match init_or_pre {
        Some(init) => rescaled_linear(&init.w, init.b, &init.scaler, &scaler),
        None => vec![0.0; d + 1],
    };
    // A caller's warm start (a CV fold) is close: freeze its first Hessian. A subsample's
    // optimum is farther (correlated gaps move it): full Newton steps.
    let freeze = init.is_some();
    let (iterations, hessian) = newton_iterate(data, rows, &scaler, &mut beta, &p, f, loss, None, freeze)?;
    Ok(LogisticFit {
        model: LogisticModel {
            scaler,
            w: beta[..d].to_vec(),
            b: beta[d],
            iterations,
        },
        hessian: hessian.unwrap_or_default(),
        weights: (w_pos, w_neg),
    })
}

/// Logistic regression for cross-validation: the model on all rows, then each fold's model
/// (all rows but a test block) started from it. A fold's first Hessian is not a pass over its
/// ~95 % training rows but the all-rows Hessian minus the test rows' (a pass over ~5 %), moved
/// to the fold's scaler; every later step needs the gradient only (chord Newton). Each fold
/// still converges to its own optimum (gradient zero, same `tol`), without copying rows.
pub struct LogisticCv<'a> {
    data: &'a Dataset,
    p: ValidLogisticParams,
    all: LogisticFit,
}

impl<'a> LogisticCv<'a> {
    /// Fit on all rows of `data`.
    pub fn new(data: &'a Dataset, p: &ValidLogisticParams) -> Result<LogisticCv<'a>, Error> {
        let all = fit_logistic_rows(data, &RowSet::all(data.len()), p, None)?;
        Ok(LogisticCv { data, p: *p, all })
    }

    /// The model on all rows.
    pub fn model(&self) -> &LogisticModel {
        &self.all.model
    }

    /// The model on all rows except `test`.
    pub fn without(&self, test: &[usize]) -> Result<LogisticModel, Error> {
        let (data, p) = (self.data, self.p.0);
        let test = RowSet::from_indices(test);
        let train = test.complement(data.len());
        let (n, pos) = two_classes_in(data, &train)?;
        let scaler = fit_scaler_set(data, &train);
        let all = &self.all.model;
        let mut beta = rescaled_linear(&all.w, all.b, &all.scaler, &scaler);
        let frozen = if self.all.hessian.is_empty() {
            None
        } else {
            let (wp, wn) = self.all.weights;
            let mut beta_all = all.w.clone();
            beta_all.push(all.b);
            let (h_test, _) = pass(data, &test, &all.scaler, &beta_all, logistic_derivs(wp, wn), true);
            let h: Vec<f64> = self.all.hessian.iter().zip(&h_test).map(|(a, b)| a - b).collect();
            let d = data.d;
            let m = d + 1;
            let mut h = move_hessian(&h, &all.scaler, &scaler);
            for j in 0..d {
                h[j * m + j] += p.l2;
            }
            h[d * m + d] += 1e-9;
            Some(h)
        };
        let (wp, wn) = class_weights(p.balanced, n, pos);
        let freeze_first = frozen.is_none();
        let (iterations, _) = newton_iterate(
            data,
            &train,
            &scaler,
            &mut beta,
            &p,
            logistic_derivs(wp, wn),
            logistic_loss(wp, wn),
            frozen,
            freeze_first,
        )?;
        let d = data.d;
        Ok(LogisticModel {
            scaler,
            w: beta[..d].to_vec(),
            b: beta[d],
            iterations,
        })
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

    /// Fitting through [`Fit`] on some rows (read in place) gives the model fitted on those rows
    /// copied out: the same for the logistic model and the threshold, and an SVM that decides
    /// the same way.
    #[test]
    fn fit_on_a_row_set_equals_fit_on_the_rows_copied_out() {
        let mut d = Dataset::new(2);
        for i in 0..600u32 {
            let big = i % 5 == 0;
            let g = if big { 60.0 } else { 8.0 } + ((i * 37) % 23) as f64;
            d.push(&[g, ((i * 13) % 7) as f64], big, i / 100, 100.0, 5);
        }
        let rows = RowSet::from_indices(&(0..600).filter(|i| (i / 100) % 2 == 0).collect::<Vec<_>>());
        let sub = d.select(&rows.iter().collect::<Vec<_>>());
        let lp = LogisticParams::default().check().unwrap();
        assert_eq!(lp.fit(&d, &rows).unwrap(), fit_logistic(&sub, &lp).unwrap());
        assert_eq!(ThresholdFit.fit(&d, &rows).unwrap(), fit_threshold(&sub).unwrap());
        let sp = SvmParams::default().check().unwrap();
        let (a, b) = (sp.fit(&d, &rows).unwrap(), fit_linear_svm(&sub, &sp).unwrap());
        assert!((0..d.len()).all(|i| a.predict_row(d.row(i)) == b.predict_row(d.row(i))));
        let all: EstimatorModel = lp.fit(&d, &RowSet::all(d.len())).unwrap().into();
        assert_eq!(all.kind(), "logistic");
    }

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
        let d = noisy_rows(3000);
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

    /// Rows whose label depends noisily on three features, in two groups (captures).
    fn noisy_rows(n: u64) -> Dataset {
        let mut d = Dataset::new(3);
        for i in 0..n {
            let y = i % 5 == 0;
            let noise = ((i * 2654435761) % 1000) as f64 / 10.0;
            let g = if y { 120.0 + noise } else { 20.0 + noise };
            d.push(&[g, noise, (i % 7) as f64], y, (i * 2 / n) as u32, 300.0, 5);
        }
        d
    }

    #[test]
    fn cv_folds_reach_the_optimum_of_their_training_rows() {
        let d = noisy_rows(4000);
        for balanced in [false, true] {
            let p = LogisticParams {
                balanced,
                ..LogisticParams::default()
            }
            .check()
            .unwrap();
            let cv = LogisticCv::new(&d, &p).unwrap();
            let folds = crate::dataset::contiguous_folds(&d.group, 20).unwrap();
            for test in &folds {
                let fold = cv.without(test).unwrap();
                let train: Vec<usize> = RowSet::from_indices(test).complement(d.len()).iter().collect();
                let cold = fit_logistic(&d.select(&train), &p).unwrap();
                assert!(
                    fold.iterations < cold.iterations,
                    "{} vs {}",
                    fold.iterations,
                    cold.iterations
                );
                for (a, b) in fold.w.iter().zip(&cold.w).chain([(&fold.b, &cold.b)]) {
                    assert!((a - b).abs() < 1e-6, "{a} vs {b}");
                }
                assert_eq!(fold.scaler, fit_scaler(&d.select(&train)));
            }
        }
        let one_class = Dataset {
            y: vec![false; 4000],
            ..d.clone()
        };
        assert!(LogisticCv::new(&one_class, &LogisticParams::default().check().unwrap()).is_err());
    }

    /// Unweighted full Newton on all rows of `d` from `start` (no subsample, no chord):
    /// the coefficients and the passes it took.
    fn newton_from(d: &Dataset, p: &LogisticParams, start: &[f64]) -> (Vec<f64>, usize) {
        let mut beta = start.to_vec();
        let (steps, _) = newton_iterate(
            d,
            &RowSet::all(d.len()),
            &fit_scaler(d),
            &mut beta,
            p,
            logistic_derivs(1.0, 1.0),
            logistic_loss(1.0, 1.0),
            None,
            false,
        )
        .unwrap();
        (beta, steps)
    }

    #[test]
    fn subsampled_start_reaches_the_optimum_from_zero() {
        let d = noisy_rows(SUBSAMPLE_FROM_ROWS as u64 + 1000);
        let p = LogisticParams::default().check().unwrap();
        let fast = fit_logistic(&d, &p).unwrap();
        let (beta, steps) = newton_from(&d, &p.0, &[0.0; 4]);
        assert!(fast.iterations < steps, "{} vs {steps}", fast.iterations);
        for (a, b) in fast.w.iter().zip(&beta).chain([(&fast.b, &beta[3])]) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn rows_with_nan_are_an_error_not_a_model() {
        let mut d = noisy_rows(2_000);
        d.x[7] = f64::NAN;
        let p = LogisticParams::default().check().unwrap();
        let e = fit_logistic(&d, &p).unwrap_err();
        assert!(matches!(e, Error::BadParam { name: "features", .. }), "{e}");
    }

    #[test]
    fn damped_newton_converges_from_a_saturated_start() {
        // Heavy-tailed gaps (like real ones): far from the optimum most rows are saturated and
        // an undamped Newton step overshoots.
        let mut d = Dataset::new(2);
        for i in 0..20_000u64 {
            let y = i % 6 == 0;
            let u = ((i * 2654435761) % 10_000) as f64 / 10_000.0;
            let tail = -(1.0 - u).ln() * 60.0;
            let g = if y { 40.0 + 3.0 * tail } else { 10.0 + tail };
            d.push(&[g, u * 10.0], y, 0, 500.0, 6);
        }
        let p = LogisticParams::default().check().unwrap();
        let (zero, _) = newton_from(&d, &p.0, &[0.0; 3]);
        for start in [[30.0, -5.0, 20.0], [-20.0, 8.0, -15.0]] {
            let (beta, steps) = newton_from(&d, &p.0, &start);
            assert!(steps < p.0.max_iter, "no convergence from {start:?}");
            for (a, b) in beta.iter().zip(&zero) {
                assert!((a - b).abs() < 1e-6, "from {start:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn levels_follow_predicted_starts() {
        let s = [true, false, false, true, true, false];
        assert_eq!(levels_from_starts(&s, 64), vec![3, 3, 3, 1, 2, 2]);
        assert_eq!(levels_from_starts(&s, 2), vec![2, 2, 2, 1, 2, 2]);
    }
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

/// Fit a linear SVM by dual coordinate descent (Hsieh et al., ICML 2008 — liblinear's solver),
/// the bias as an extra constant feature. Our own because smartcore/linfa solve the kernel SVM
/// (hundreds of times slower, measured when the stack was chosen) and the `liblinear` crate needs the deprecated
/// `failure` crate.
pub fn fit_linear_svm(data: &Dataset, p: &ValidSvmParams) -> Result<LinearSvmModel, Error> {
    Ok(fit_svm_rows(data, &RowSet::all(data.len()), &p.0, None)?.model)
}

/// An SVM fit and, for the hinge loss, its dual variables (one per row of the fit, in order):
/// what CV folds start from.
struct SvmFit {
    model: LinearSvmModel,
    alpha: Vec<f64>,
}

/// The SVM fit on the rows of `rows`; `warm` (fitted on all rows of `data`) gives the start:
/// its dual variables for hinge, its weights for squared hinge. Same optimum either way.
fn fit_svm_rows(data: &Dataset, rows: &RowSet, p: &SvmParams, warm: Option<&SvmFit>) -> Result<SvmFit, Error> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let (n, _) = two_classes_in(data, rows)?;
    let scaler = fit_scaler_set(data, rows);
    if p.loss == SvmLoss::SquaredHinge {
        let init = warm.map(|w| {
            let m = &w.model;
            rescaled_linear(&m.w, m.b, &m.scaler, &scaler)
        });
        return Ok(SvmFit {
            model: fit_sq_hinge_primal(data, rows, scaler, p, init),
            alpha: Vec::new(),
        });
    }
    let d = data.d;
    let m = d + 1;
    let mut z = vec![0.0; n * m];
    for (k, i) in rows.iter().enumerate() {
        scaler.standardize(data.row(i), &mut z[k * m..]);
        z[k * m + d] = 1.0;
    }
    let y: Vec<f64> = rows.iter().map(|i| if data.y[i] { 1.0 } else { -1.0 }).collect();
    let (upper, diag) = match p.loss {
        SvmLoss::Hinge => (p.c, 0.0),
        SvmLoss::SquaredHinge => (f64::INFINITY, 0.5 / p.c),
    };
    let qii: Vec<f64> = (0..n)
        .map(|k| z[k * m..(k + 1) * m].iter().map(|v| v * v).sum::<f64>() + diag)
        .collect();
    // Warm start (a CV fold): the all-rows dual variables of this fold's rows, which are
    // feasible here too (0 ≤ α ≤ C; no equality constraint with the bias as a feature), and
    // w = Σ α y z in this fold's coordinates.
    let mut alpha: Vec<f64> = match warm.filter(|w| w.alpha.len() == data.len()) {
        Some(w) => rows.iter().map(|i| w.alpha[i]).collect(),
        None => vec![0.0; n],
    };
    let mut w = vec![0.0; m];
    for k in 0..n {
        if alpha[k] != 0.0 {
            let a = alpha[k] * y[k];
            for (wj, zj) in w.iter_mut().zip(&z[k * m..(k + 1) * m]) {
                *wj += a * zj;
            }
        }
    }
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
            let k = order[s];
            let zk = &z[k * m..(k + 1) * m];
            let yk = y[k];
            let g = yk * zk.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() - 1.0 + diag * alpha[k];
            let pg = if alpha[k] == 0.0 {
                if g > pg_max_old {
                    active -= 1;
                    order.swap(s, active);
                    continue;
                }
                g.min(0.0)
            } else if alpha[k] >= upper {
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
                let old = alpha[k];
                alpha[k] = (old - g / qii[k]).clamp(0.0, upper);
                let delta = (alpha[k] - old) * yk;
                for (wj, zj) in w.iter_mut().zip(zk) {
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
    Ok(SvmFit {
        model: LinearSvmModel {
            scaler,
            w: w[..d].to_vec(),
            b: w[d],
            loss: p.loss,
            epochs,
        },
        alpha,
    })
}

/// Linear SVM for cross-validation: the model on all rows, then each fold's model started from
/// it (hinge: from the all-rows dual variables, so coordinate descent needs a few epochs where
/// a cold start needs hundreds; squared hinge: from its weights).
pub struct SvmCv<'a> {
    data: &'a Dataset,
    p: SvmParams,
    all: SvmFit,
}

impl<'a> SvmCv<'a> {
    /// Fit on all rows of `data`.
    pub fn new(data: &'a Dataset, p: &ValidSvmParams) -> Result<SvmCv<'a>, Error> {
        let all = fit_svm_rows(data, &RowSet::all(data.len()), &p.0, None)?;
        Ok(SvmCv { data, p: p.0, all })
    }

    /// The model on all rows.
    pub fn model(&self) -> &LinearSvmModel {
        &self.all.model
    }

    /// The model on all rows except `test`.
    pub fn without(&self, test: &[usize]) -> Result<LinearSvmModel, Error> {
        let train = RowSet::from_indices(test).complement(self.data.len());
        Ok(fit_svm_rows(self.data, &train, &self.p, Some(&self.all))?.model)
    }
}

/// Squared hinge in the primal by generalised Newton with backtracking (the approach of
/// liblinear's `-s 2`, which scikit-learn's LinearSVC uses when rows outnumber features):
/// minimise ½‖w‖² + C·Σ max(0, 1 − y·s)². With 22 unknowns each step is one data pass and a
/// 22×22 solve, so it converges in ~10 passes where dual coordinate descent needs hundreds of
/// epochs on overlapping classes. The bias is not regularised. Starts from `init` (standardised
/// coefficients, bias last) when given.
fn fit_sq_hinge_primal(
    data: &Dataset,
    rows: &RowSet,
    scaler: Scaler,
    p: &SvmParams,
    init: Option<Vec<f64>>,
) -> LinearSvmModel {
    let d = data.d;
    let m = d + 1;
    let c = p.c;
    let sign = |y: bool| if y { 1.0 } else { -1.0 };
    let loss = |s: f64, y: bool| {
        let v = (1.0 - sign(y) * s).max(0.0);
        c * v * v
    };
    let objective =
        |beta: &[f64]| 0.5 * beta[..d].iter().map(|w| w * w).sum::<f64>() + loss_pass(data, rows, &scaler, beta, loss);
    let mut beta = init.filter(|b| b.len() == m).unwrap_or_else(|| vec![0.0; m]);
    let mut f_old = objective(&beta);
    let mut iterations = 0;
    while iterations < p.max_epochs {
        iterations += 1;
        let (mut h, mut g) = pass(
            data,
            rows,
            &scaler,
            &beta,
            |s, y| {
                let ys = sign(y) * s;
                if ys < 1.0 {
                    (2.0 * c * (s - sign(y)), 2.0 * c)
                } else {
                    (0.0, 0.0)
                }
            },
            true,
        );
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

    /// ½‖w‖² + C·Σ loss on the rows at `idx` (standardised by the model's own scaler).
    fn primal(m: &LinearSvmModel, d: &Dataset, idx: &[usize], c: f64) -> f64 {
        let hinge: f64 = idx
            .iter()
            .map(|&i| {
                let y = if d.y[i] { 1.0 } else { -1.0 };
                let v = (1.0 - y * m.decision(d.row(i))).max(0.0);
                if m.loss == SvmLoss::Hinge {
                    v
                } else {
                    v * v
                }
            })
            .sum();
        0.5 * m.w.iter().map(|w| w * w).sum::<f64>() + c * hinge
    }

    #[test]
    fn cv_folds_start_from_the_all_rows_fit_and_reach_the_same_optimum() {
        // Overlapping classes, so many dual variables end strictly inside (0, C).
        let mut d = Dataset::new(3);
        for i in 0..6000u64 {
            let y = i % 5 == 0;
            let noise = ((i * 2654435761) % 1000) as f64 / 10.0;
            let g = if y { 60.0 + noise } else { 20.0 + noise * 0.6 };
            d.push(&[g, noise, (i % 7) as f64], y, (i * 2 / 6000) as u32, 300.0, 5);
        }
        let folds = crate::dataset::contiguous_folds(&d.group, 20).unwrap();
        for loss in [SvmLoss::Hinge, SvmLoss::SquaredHinge] {
            let p = SvmParams {
                loss,
                tol: 0.01,
                ..SvmParams::default()
            }
            .check()
            .unwrap();
            let cv = SvmCv::new(&d, &p).unwrap();
            assert_eq!(cv.model(), &fit_linear_svm(&d, &p).unwrap());
            for test in folds.iter().take(4) {
                let train: Vec<usize> = RowSet::from_indices(test).complement(d.len()).iter().collect();
                let warm = cv.without(test).unwrap();
                let cold = fit_linear_svm(&d.select(&train), &p).unwrap();
                assert!(
                    warm.epochs <= cold.epochs,
                    "{loss:?}: {} vs {}",
                    warm.epochs,
                    cold.epochs
                );
                let (fw, fc) = (primal(&warm, &d, &train, 1.0), primal(&cold, &d, &train, 1.0));
                assert!((fw - fc).abs() <= 1e-3 * fc, "{loss:?}: objective {fw} vs {fc}");
                let agree = train
                    .iter()
                    .filter(|&&i| warm.predict_row(d.row(i)) == cold.predict_row(d.row(i)))
                    .count();
                assert!(
                    agree as f64 >= 0.998 * train.len() as f64,
                    "{loss:?}: {agree}/{}",
                    train.len()
                );
            }
        }
    }
}
