//! The pieces a cluster needs to train as `aggrate train` does (`python -m aggrate.spark`): the
//! solvers as step machines on the driver ([`LogisticSolver`], [`MlpSolver`]), the sums one
//! partition contributes to a step on the executors ([`logistic_sums`], [`mlp_sums`],
//! [`scaler_sums`]), and the scores of a held-out block ([`level_errors`]). The steps are the
//! library's own (`aggrate::train::newton`, `aggrate::train::lbfgs`): only who adds the sums
//! differs.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use aggrate::features::FeatureSpec;
use aggrate::model::{EstimatorModel, ModelFile, TrainingSummary};
use aggrate::train::lbfgs::{MlpLbfgs, MlpSums};
use aggrate::train::mlp::Layout;
use aggrate::train::newton::{Newton, PassSums};
use aggrate::train::{LogisticModel, LogisticParams, MlpParams, Scaler};

use super::{f64s, merge, model_err, PyModel};

fn le_bytes<'py>(py: Python<'py>, v: &[f64]) -> Bound<'py, PyBytes> {
    let mut b = Vec::with_capacity(v.len() * 8);
    for x in v {
        b.extend_from_slice(&x.to_le_bytes());
    }
    PyBytes::new(py, &b)
}

fn labels(y: &[u8], n: usize) -> PyResult<Vec<bool>> {
    if y.len() != n {
        return Err(PyValueError::new_err(format!("y has {} labels for {n} rows", y.len())));
    }
    Ok(y.iter().map(|&v| v != 0).collect())
}

fn scaler(mean: Vec<f64>, std: Vec<f64>, d: usize) -> PyResult<Scaler> {
    if mean.len() != d || std.len() != d || std.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(PyValueError::new_err(format!(
            "scaler: {} means and {} positive standard deviations for {d} features",
            mean.len(),
            std.len()
        )));
    }
    Ok(Scaler { mean, std })
}

fn spec(text: &str) -> PyResult<FeatureSpec> {
    let s: FeatureSpec = serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    s.check().map_err(|e| PyValueError::new_err(format!("spec: {e}")))
}

/// Column sums and sums of squares of `n` row-major float64 rows of width `d`: `(sum, sq)`, from
/// which the driver builds the scaler `aggrate train` fits ([`scaler_from_sums`]).
#[pyfunction]
pub(crate) fn scaler_sums(x: &[u8], n: usize, d: usize) -> PyResult<(Vec<f64>, Vec<f64>)> {
    let x = f64s(x, n, d, "X")?;
    let (_, sum, sq) = Scaler::sums(std::iter::once(&x[..]), d);
    Ok((sum, sq))
}

/// The scaler of `n` rows with column sums `sum` and sums of squares `sq`: `(mean, std)`.
#[pyfunction]
pub(crate) fn scaler_from_sums(n: f64, sum: Vec<f64>, sq: Vec<f64>) -> PyResult<(Vec<f64>, Vec<f64>)> {
    if sum.len() != sq.len() {
        return Err(PyValueError::new_err("sum and sq differ in length"));
    }
    let s = Scaler::from_sums(n, &sum, &sq);
    Ok((s.mean, s.std))
}

/// One partition's share of a Newton step: `(h, g, loss)` (h: (d+1)² float64 bytes, symmetric;
/// g: d+1) over `n` rows `x` (row-major float64 bytes) with labels `y` (a byte each), at `beta`
/// (standardised, bias last) for class weights `(w_pos, w_neg)`.
#[pyfunction]
#[pyo3(signature = (x, y, n, d, mean, std, beta, w_pos, w_neg, hessian))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn logistic_sums<'py>(
    py: Python<'py>,
    x: &[u8],
    y: &[u8],
    n: usize,
    d: usize,
    mean: Vec<f64>,
    std: Vec<f64>,
    beta: Vec<f64>,
    w_pos: f64,
    w_neg: f64,
    hessian: bool,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, f64)> {
    let x = f64s(x, n, d, "X")?;
    let y = labels(y, n)?;
    let sc = scaler(mean, std, d)?;
    if beta.len() != d + 1 {
        return Err(PyValueError::new_err(format!(
            "beta: {} values for {d} features + bias",
            beta.len()
        )));
    }
    let s = py.detach(|| aggrate::train::newton::logistic_sums(&x, &y, &sc, &beta, (w_pos, w_neg), hessian));
    Ok((le_bytes(py, &s.h), le_bytes(py, &s.g), s.loss))
}

/// `aggrate train`'s logistic Newton solver, stepped by sums added elsewhere: `ask()` gives the
/// coefficients of the next pass and whether it needs the Hessian (None when done), `tell(h, g,
/// loss)` takes the pass's sums over all training rows.
#[pyclass(name = "LogisticSolver", module = "aggrate._aggrate")]
pub(crate) struct LogisticSolver {
    newton: Newton,
    d: usize,
}

#[pymethods]
impl LogisticSolver {
    /// For `d` features; `params`: JSON of the logistic parameters (`l2`, `max_iter`, `tol`,
    /// `balanced`; missing fields: `aggrate train`'s defaults). Starts from zero, or from `start`
    /// (d + 1 standardised coefficients, bias last: a warm start, e.g. the all-rows model
    /// re-expressed for a fold's scaler; same optimum, fewer passes).
    #[new]
    #[pyo3(signature = (d, params="{}", start=None))]
    fn new(d: usize, params: &str, start: Option<Vec<f64>>) -> PyResult<LogisticSolver> {
        let p: LogisticParams =
            merge(LogisticParams::default(), params).map_err(|e| model_err(format!("logistic parameters: {e}")))?;
        p.check().map_err(model_err)?;
        let start = start.unwrap_or_else(|| vec![0.0; d + 1]);
        if start.len() != d + 1 || start.iter().any(|v| !v.is_finite()) {
            return Err(PyValueError::new_err(format!(
                "start: {} finite values for {d} features + bias",
                start.len()
            )));
        }
        Ok(LogisticSolver {
            newton: Newton::new(p, start, None, false),
            d,
        })
    }
    /// `(beta, hessian)` of the next pass, or None when converged or out of passes.
    fn ask(&self) -> Option<(Vec<f64>, bool)> {
        self.newton.ask().map(|(b, h)| (b.to_vec(), h))
    }
    /// The sums of the pass `ask()` named.
    fn tell(&mut self, h: &[u8], g: &[u8], loss: f64) -> PyResult<()> {
        let m = self.d + 1;
        let (h, g) = (f64s(h, m, m, "h")?, f64s(g, m, 1, "g")?);
        self.newton.tell(PassSums { h, g, loss });
        Ok(())
    }
    /// Passes taken.
    #[getter]
    fn passes(&self) -> usize {
        self.newton.passes()
    }
    /// Whether the last step was below the tolerance.
    #[getter]
    fn converged(&self) -> bool {
        self.newton.converged()
    }
    /// Whether a pass's sums were not finite (NaN or infinite features): no model.
    #[getter]
    fn failed(&self) -> bool {
        self.newton.failed()
    }
    /// The model file of the current coefficients under the scaler `(mean, std)`, for feature
    /// spec `spec_json`, trained on `rows` rows with `positives` starts (the caller adds the
    /// captures and rates to the file's training summary).
    fn model(&self, spec_json: &str, mean: Vec<f64>, std: Vec<f64>, rows: u64, positives: u64) -> PyResult<PyModel> {
        let spec = spec(spec_json)?;
        let sc = scaler(mean, std, self.d)?;
        let beta = self.newton.beta();
        let model = LogisticModel {
            scaler: sc,
            w: beta[..self.d].to_vec(),
            b: beta[self.d],
            iterations: self.newton.passes(),
        };
        file(spec, model.into(), rows, positives)
    }
}

fn file(spec: FeatureSpec, model: EstimatorModel, rows: u64, positives: u64) -> PyResult<PyModel> {
    if spec.width() != model_width(&model) {
        return Err(model_err(format!(
            "the spec has {} features, the model {}",
            spec.width(),
            model_width(&model)
        )));
    }
    Ok(PyModel {
        file: ModelFile::new(
            spec,
            model,
            TrainingSummary {
                rows,
                positives,
                captures: Vec::new(),
                rates_mbps: Vec::new(),
            },
        ),
    })
}

fn model_width(m: &EstimatorModel) -> usize {
    match m {
        EstimatorModel::Logistic(l) => l.w.len(),
        EstimatorModel::Mlp(p) => p.inputs,
        _ => 0,
    }
}

/// One partition's share of a perceptron evaluation: `(loss, g)` (g: float64 bytes in the
/// solver's parameter order) over `n` rows at parameters `w` (float64 bytes).
#[pyfunction]
#[pyo3(signature = (x, y, n, d, mean, std, hidden, skip, w, w_pos, w_neg))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mlp_sums<'py>(
    py: Python<'py>,
    x: &[u8],
    y: &[u8],
    n: usize,
    d: usize,
    mean: Vec<f64>,
    std: Vec<f64>,
    hidden: usize,
    skip: bool,
    w: &[u8],
    w_pos: f64,
    w_neg: f64,
) -> PyResult<(f64, Bound<'py, PyBytes>)> {
    let x = f64s(x, n, d, "X")?;
    let y = labels(y, n)?;
    let sc = scaler(mean, std, d)?;
    let layout = Layout { d, h: hidden, skip };
    let w = f64s(w, layout.params(), 1, "w")?;
    let s = py.detach(|| {
        aggrate::train::lbfgs::mlp_sums(
            x.chunks_exact(d.max(1)).zip(y.iter().copied()),
            &sc,
            &layout,
            &w,
            (w_pos, w_neg),
        )
    });
    Ok((s.loss, le_bytes(py, &s.g)))
}

/// `aggrate train --model mlp --solver lbfgs`'s steps, stepped by sums added elsewhere.
#[pyclass(name = "MlpSolver", module = "aggrate._aggrate")]
pub(crate) struct MlpSolver {
    fit: MlpLbfgs,
}

#[pymethods]
impl MlpSolver {
    /// For `n` training rows of width `d` with `positives` starts; `params`: JSON of the
    /// perceptron's parameters (`hidden`, `seed`, `weight_decay`, `max_iter`, `skip`,
    /// `balanced`, `slow_inputs`; missing: `aggrate train`'s defaults; the solver is L-BFGS).
    /// `context`: the feature spec's (> 0: the trailing context inputs are the slow ones, as
    /// `aggrate train` records them).
    #[new]
    #[pyo3(signature = (d, n, positives, params="{}", context=0))]
    fn new(d: usize, n: usize, positives: usize, params: &str, context: u32) -> PyResult<MlpSolver> {
        let mut p: MlpParams =
            merge(MlpParams::default(), params).map_err(|e| model_err(format!("perceptron parameters: {e}")))?;
        p.solver = aggrate::train::MlpSolver::Lbfgs;
        if context > 0 {
            p.slow_inputs = aggrate::features::CONTEXT_EXTRA;
        }
        let p = p.check().map_err(model_err)?;
        Ok(MlpSolver {
            fit: MlpLbfgs::new(&p, d, n, positives).map_err(model_err)?,
        })
    }
    /// `(hidden, skip, w_pos, w_neg)`: what the sums need besides the parameters.
    #[getter]
    fn sums_args(&self) -> (usize, bool, f64, f64) {
        let l = self.fit.layout();
        let (wp, wn) = self.fit.class_weights();
        (l.h, l.skip, wp, wn)
    }
    /// Parameters of the next evaluation (float64 bytes), or None when done.
    fn ask<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.fit.ask().map(|w| le_bytes(py, w))
    }
    /// The sums of the evaluation `ask()` named.
    fn tell(&mut self, loss: f64, g: &[u8]) -> PyResult<()> {
        let g = f64s(g, self.fit.layout().params(), 1, "g")?;
        self.fit.tell(MlpSums { loss, g });
        Ok(())
    }
    /// `(steps, evaluations, objective)` so far.
    #[getter]
    fn progress(&self) -> (usize, usize, f64) {
        self.fit.progress()
    }
    /// The model file at the best point (see `LogisticSolver.model`).
    fn model(&self, spec_json: &str, mean: Vec<f64>, std: Vec<f64>, rows: u64, positives: u64) -> PyResult<PyModel> {
        let spec = spec(spec_json)?;
        let sc = scaler(mean, std, self.fit.layout().d)?;
        let m = self.fit.model(&sc).map_err(model_err)?;
        file(spec, m.into(), rows, positives)
    }
}

/// The scores of summed counts with `aggrate train`'s conventions (`aggrate::metrics`): F1,
/// precision, recall, accuracy (1 when there is nothing to score) and the per-packet level
/// errors (RMSE, exact and ±1 shares, mean error; 0 without rows) as a JSON object.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn scores(
    tp: u64,
    fp: u64,
    tn: u64,
    fn_: u64,
    n: u64,
    sse: f64,
    se: f64,
    exact: u64,
    within1: u64,
) -> String {
    let b = aggrate::metrics::BinaryMetrics { tp, fp, tn, fn_ };
    let a = aggrate::metrics::AggMetrics {
        n,
        sse,
        se,
        exact,
        within1,
    };
    serde_json::json!({
        "rows": tp + fp + tn + fn_,
        "f1": b.f1(), "precision": b.precision(), "recall": b.recall(), "accuracy": b.accuracy(),
        "agg_rmse": a.rmse(), "agg_acc": a.accuracy(), "agg_acc_within1": a.accuracy_within1(),
        "agg_mean_error": a.mean_error(),
    })
    .to_string()
}

/// The per-packet aggregation level errors of one contiguous block of a capture, as `aggrate
/// train`'s CV scores a fold: levels from the predicted starts `pred` (a byte per row) against
/// the true levels `level` (u32 little-endian per row). `(n, sse, se, exact, within1)`.
#[pyfunction]
pub(crate) fn level_errors(pred: &[u8], level: &[u8], n_max: u16) -> PyResult<(u64, f64, f64, u64, u64)> {
    if level.len() != pred.len() * 4 {
        return Err(PyValueError::new_err(format!(
            "level: {} bytes for {} rows of u32",
            level.len(),
            pred.len()
        )));
    }
    let starts: Vec<bool> = pred.iter().map(|&p| p != 0).collect();
    let lv = aggrate::train::levels_from_starts(&starts, n_max);
    let truth: Vec<u16> = level
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]).min(u16::MAX as u32) as u16)
        .collect();
    let m = aggrate::metrics::AggMetrics::from_levels(&truth, &lv);
    Ok((m.n, m.sse, m.se, m.exact, m.within1))
}

/// μ_N per 100 ms report interval of one contiguous block of a capture, as `aggrate train`'s CV
/// scores it (`aggrate::metrics::count_pairs`: packets ÷ predicted starts against the truth):
/// receive times `host` (u64 ns little-endian per row), true starts `y` and predicted starts
/// `pred` (a byte per row). Float64 triples (estimate, truth, true A-MPDUs) per interval.
#[pyfunction]
pub(crate) fn count_pairs<'py>(py: Python<'py>, host: &[u8], y: &[u8], pred: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let n = y.len();
    if host.len() != n * 8 || pred.len() != n {
        return Err(PyValueError::new_err(format!(
            "host: {} bytes, y: {n}, pred: {} for {n} rows",
            host.len(),
            pred.len()
        )));
    }
    let ts: Vec<aggrate::Ts> = host
        .chunks_exact(8)
        .map(|c| aggrate::Ts(u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))))
        .collect();
    let truth: Vec<bool> = y.iter().map(|&v| v != 0).collect();
    let p: Vec<bool> = pred.iter().map(|&v| v != 0).collect();
    let pairs = aggrate::metrics::count_pairs(&ts, &truth, &p, aggrate::metrics::CV_REPORT_INTERVAL);
    let flat: Vec<f64> = pairs
        .iter()
        .flat_map(|q| [q.estimate, q.truth, q.ampdus as f64])
        .collect();
    Ok(le_bytes(py, &flat))
}

/// The μ_N error (`bias`, `mae_rel_median`, `err_rel_p95`, `intervals`, `truth_mean`,
/// `estimate_mean`) of float64 triples from [`count_pairs`] pooled, as JSON; None when no
/// interval qualifies.
#[pyfunction]
pub(crate) fn level_error(pairs: &[u8]) -> PyResult<Option<String>> {
    let v = f64s(pairs, pairs.len() / 24, 3, "pairs")?;
    let pairs: Vec<aggrate::metrics::LevelPair> = v
        .chunks_exact(3)
        .map(|c| aggrate::metrics::LevelPair {
            start: aggrate::Ts::ZERO,
            estimate: c[0],
            truth: c[1],
            ampdus: c[2] as u64,
        })
        .collect();
    Ok(aggrate::metrics::LevelError::of(&pairs).map(|e| serde_json::to_string(&e).unwrap_or_default()))
}
