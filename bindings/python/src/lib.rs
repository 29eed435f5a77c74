//! `aggrate._aggrate`: the Rust half of the Python package (the Python half, in `python/aggrate`,
//! builds polars DataFrames, the exceptions and the scikit-learn estimators around it).
//!
//! Arrays cross as little-endian byte buffers (`bytes` here, `numpy.frombuffer` there), one copy
//! per column and never a Python list. Not pyo3-polars: it pins pyo3 0.29 and imports Arrow
//! arrays through Python polars' private API (tied to the installed polars version), and its
//! `polars-error/python` feature rebuilds polars a second time. Long work (reading captures,
//! fitting, simulating) releases the GIL.

mod distributed;

use std::path::PathBuf;
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use aggrate::capture::filter::FlowFilter;
use aggrate::dataset::Dataset;
use aggrate::dataset::RowSet;
use aggrate::features::FeatureSpec;
use aggrate::model::{EstimatorModel, ModelFile, Predict, TrainingSummary};
use aggrate::pipeline::table::Columns;
use aggrate::pipeline::{capture_rows, RowsOptions};
use aggrate::progress::NoProgress;
use aggrate::runtime::{OnlineEstimator, RxPacket};
use aggrate::train::{Fit, LogisticParams, SvmParams, ThresholdFit};
use aggrate::Ts;

create_exception!(_aggrate, AggrateError, PyException, "Base of aggrate's errors.");
create_exception!(
    _aggrate,
    InputError,
    AggrateError,
    "The input data is at fault: a damaged or unreadable capture, no flow, no ground truth, a log that does not match."
);
create_exception!(
    _aggrate,
    ModelError,
    AggrateError,
    "A model file or model parameters are invalid."
);

/// `n` rows of receive timing, little-endian: per row its capture (`run`, u32), send rate
/// (`rate`, f32) and receive time (`host`, u64 ns), with features `x[i·d..(i+1)·d]` (`d` = 0:
/// none). Unlabelled. Buffers of the wrong length are a ValueError naming them.
fn timing_rows(x: &[f64], d: usize, n: usize, run: &[u8], rate: &[u8], host: &[u8]) -> PyResult<Dataset> {
    for (what, got, each) in [("run", run.len(), 4), ("rate", rate.len(), 4), ("host", host.len(), 8)] {
        if n.checked_mul(each) != Some(got) {
            return Err(PyValueError::new_err(format!(
                "{what}: {got} bytes for {n} rows of {each}"
            )));
        }
    }
    let mut data = Dataset::new(d);
    for i in 0..n {
        let le4 = |b: &[u8]| [b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]];
        let mut h = [0u8; 8];
        h.copy_from_slice(&host[8 * i..8 * i + 8]);
        data.push_at(
            Ts(u64::from_le_bytes(h)),
            &x[i * d..(i + 1) * d],
            false,
            u32::from_le_bytes(le4(run)),
            f32::from_le_bytes(le4(rate)),
            0,
        );
    }
    Ok(data)
}

fn model_err(e: impl std::fmt::Display) -> PyErr {
    ModelError::new_err(e.to_string())
}

/// An error and its causes in one line (`a: b: c`), skipping causes the message already holds.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s = format!("{s}: {m}");
        }
        cur = c.source();
    }
    s
}

/// f64s from a little-endian byte buffer of `n × d` values.
fn f64s(buf: &[u8], n: usize, d: usize, what: &str) -> PyResult<Vec<f64>> {
    let want = n.checked_mul(d).and_then(|v| v.checked_mul(8));
    if want != Some(buf.len()) {
        return Err(PyValueError::new_err(format!(
            "{what}: {} bytes for {n} rows × {d} float64 columns (expected {})",
            buf.len(),
            want.map_or("an overflow".to_string(), |w| w.to_string())
        )));
    }
    Ok(buf
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

fn bytes_of<T: Copy, const N: usize>(py: Python<'_>, v: &[T], f: impl Fn(T) -> [u8; N]) -> Py<PyBytes> {
    let mut out = Vec::with_capacity(v.len() * N);
    for x in v {
        out.extend_from_slice(&f(*x));
    }
    PyBytes::new(py, &out).unbind()
}

/// A column: (numpy dtype, data, validity or None).
type Col = (&'static str, Py<PyBytes>, Option<Py<PyBytes>>);

fn opt_col<T: Copy + Default, const N: usize>(
    py: Python<'_>,
    dtype: &'static str,
    v: &[Option<T>],
    f: impl Fn(T) -> [u8; N],
) -> Col {
    let data: Vec<T> = v.iter().map(|x| x.unwrap_or_default()).collect();
    let valid = if v.iter().all(Option::is_some) {
        None
    } else {
        Some(bytes_of(py, v, |x| [u8::from(x.is_some())]))
    };
    (dtype, bytes_of(py, &data, f), valid)
}

fn columns_dict<'py>(py: Python<'py>, c: &Columns, names: &[String]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(
        "number",
        ("<u8", bytes_of(py, &c.number, u64::to_le_bytes), None::<Py<PyBytes>>),
    )?;
    d.set_item(
        "host_ns",
        ("<u8", bytes_of(py, &c.host_ns, u64::to_le_bytes), None::<Py<PyBytes>>),
    )?;
    d.set_item("tsft_us", opt_col(py, "<u8", &c.tsft_us, u64::to_le_bytes))?;
    d.set_item("seq", opt_col(py, "<u4", &c.seq, u32::to_le_bytes))?;
    d.set_item("y", ("|b1", bytes_of(py, &c.y, |b| [u8::from(b)]), None::<Py<PyBytes>>))?;
    d.set_item(
        "frame_id",
        ("<u8", bytes_of(py, &c.frame_id, u64::to_le_bytes), None::<Py<PyBytes>>),
    )?;
    d.set_item(
        "agg_level",
        ("<u4", bytes_of(py, &c.agg_level, u32::to_le_bytes), None::<Py<PyBytes>>),
    )?;
    d.set_item("phy_rate_bps", opt_col(py, "<u8", &c.phy_rate_bps, u64::to_le_bytes))?;
    for (name, col) in names.iter().zip(&c.x) {
        d.set_item(name, ("<f8", bytes_of(py, col, f64::to_le_bytes), None::<Py<PyBytes>>))?;
    }
    Ok(d)
}

fn spec_from(m: usize, sigma: bool, context: u32, n_max: u16) -> PyResult<FeatureSpec> {
    FeatureSpec {
        m,
        sigma: sigma && context == 0,
        context,
        n_max,
        ..FeatureSpec::default()
    }
    .check()
    .map_err(|e| PyValueError::new_err(format!("feature spec: {e}")))
}

/// A feature layout: `(spec as JSON, feature column names)`.
#[pyfunction]
#[pyo3(signature = (m=20, sigma=true, context=0, n_max=64))]
fn layout(m: usize, sigma: bool, context: u32, n_max: u16) -> PyResult<(String, Vec<String>)> {
    let spec = spec_from(m, sigma, context, n_max)?;
    Ok((serde_json::to_string(&spec).unwrap_or_default(), spec.column_names()))
}

/// `(columns, info, error)` of [`read_capture`].
type CaptureRows<'py> = (Bound<'py, PyDict>, Bound<'py, PyDict>, Option<Bound<'py, PyDict>>);

/// Labelled feature rows of one capture: `(columns, info, error)`. `columns` maps each column to
/// `(dtype, data, validity)`; `error` is `None` or a dict (`kind`, `message`, `path`, `offset`) —
/// the rows read before the error are in `columns` either way.
#[pyfunction]
#[pyo3(signature = (path, kernel=None, m=20, sigma=true, context=0, n_max=64, seq_offset=0, keep_going=false, port=None, proto=None))]
#[allow(clippy::too_many_arguments)]
fn read_capture<'py>(
    py: Python<'py>,
    path: PathBuf,
    kernel: Option<PathBuf>,
    m: usize,
    sigma: bool,
    context: u32,
    n_max: u16,
    seq_offset: usize,
    keep_going: bool,
    port: Option<u16>,
    proto: Option<u8>,
) -> PyResult<CaptureRows<'py>> {
    let spec = spec_from(m, sigma, context, n_max)?;
    if seq_offset > 8 {
        return Err(PyValueError::new_err(format!("seq_offset = {seq_offset}: 0..=8")));
    }
    let opts = RowsOptions {
        spec,
        filter: FlowFilter {
            port,
            proto,
            ..FlowFilter::default()
        },
        seq_offset,
        keep_going,
        kernel,
    };
    let (cols, result) = py.detach(|| {
        let mut cols = Columns::new(&spec);
        let r = capture_rows(&path, &opts, &mut NoProgress, |meta, x| cols.push(meta, x)).and_then(|o| o.check());
        (cols, r)
    });
    let columns = columns_dict(py, &cols, &spec.column_names())?;
    let info = PyDict::new(py);
    info.set_item("rows", cols.len())?;
    let error = match result {
        Ok(out) => {
            info.set_item("packets", out.packets)?;
            info.set_item("frames", out.frames)?;
            info.set_item("duplicates_dropped", out.duplicates_dropped)?;
            info.set_item("skipped", out.read.skipped)?;
            info.set_item("flow", out.pick.picked.map(|(f, _)| f.to_string()))?;
            if let Some((_, j)) = out.join {
                info.set_item("joined", j.matched)?;
                info.set_item("capture_packets_without_kernel_time", j.unmatched_truth)?;
                info.set_item("log_entries_unmatched", j.unmatched_kernel)?;
            }
            None
        }
        Err(e) => {
            let d = PyDict::new(py);
            d.set_item("kind", if e.is_bad_input() { "input" } else { "io" })?;
            d.set_item("message", chain(&e))?;
            d.set_item("path", e.path().map(|p| p.to_path_buf()))?;
            d.set_item("offset", e.offset())?;
            Some(d)
        }
    };
    Ok((columns, info, error))
}

/// The receiver a capture names in its pcapng section comment (written by `simulate` and
/// `dataset build`), if any.
#[pyfunction]
fn receiver_of(path: PathBuf) -> Option<String> {
    aggrate::pipeline::receiver_from_comment(&path)
}

/// A fitted estimator model with the feature layout it expects (a model file).
#[pyclass(name = "Model", module = "aggrate._aggrate", frozen)]
struct PyModel {
    file: ModelFile,
}

#[pymethods]
impl PyModel {
    /// A model from the JSON text of a model file (`name` names it in errors).
    #[staticmethod]
    #[pyo3(signature = (text, name="<json>"))]
    fn from_json(text: &str, name: &str) -> PyResult<PyModel> {
        Ok(PyModel {
            file: ModelFile::from_json(text, name).map_err(|e| model_err(chain(&e)))?,
        })
    }
    /// A model file from disk.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<PyModel> {
        Ok(PyModel {
            file: ModelFile::load(&path).map_err(|e| model_err(chain(&e)))?,
        })
    }
    /// The model shipped in the package (the one `aggrate recv` uses by default).
    #[staticmethod]
    fn shipped() -> PyResult<PyModel> {
        Ok(PyModel {
            file: ModelFile::shipped().map_err(|e| model_err(chain(&e)))?,
        })
    }
    /// The model file as JSON.
    fn to_json(&self) -> String {
        self.file.to_json()
    }
    /// Write the model file.
    fn save(&self, path: PathBuf) -> PyResult<()> {
        std::fs::write(&path, self.file.to_json())
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display())))
    }
    /// "logistic", "svm", "threshold", "mlp", …
    #[getter]
    fn kind(&self) -> &'static str {
        self.file.model.kind()
    }
    /// The feature spec as JSON.
    #[getter]
    fn spec_json(&self) -> String {
        serde_json::to_string(&self.file.spec).unwrap_or_default()
    }
    /// Feature column names, in order.
    #[getter]
    fn feature_names(&self) -> Vec<String> {
        self.file.spec.column_names()
    }
    /// Features per row.
    #[getter]
    fn width(&self) -> usize {
        self.file.spec.width()
    }
    /// Decision values (> 0: frame start) of `n` rows of float64 features (row-major bytes).
    fn decision_function<'py>(&self, py: Python<'py>, x: &[u8], n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let d = self.file.spec.width();
        let x = f64s(x, n, d, "features")?;
        let out: Vec<f64> = py.detach(|| x.chunks_exact(d.max(1)).map(|r| self.file.model.decision(r)).collect());
        let mut b = Vec::with_capacity(out.len() * 8);
        for v in out {
            b.extend_from_slice(&v.to_le_bytes());
        }
        Ok(PyBytes::new(py, &b))
    }
    /// This model calibrated for one receiver (`aggrate calibrate`): `n` rows of float64 features
    /// `x` (row-major bytes), labels `y` (a byte per row), and per row its capture (`run`, u32),
    /// send rate (`rate`, f32, NaN unknown) and true aggregation level (`level`, u16), all
    /// little-endian. Returns the calibrated model and the calibration report as JSON.
    #[pyo3(signature = (x, y, n, run, rate, level, share=1.0))]
    #[allow(clippy::too_many_arguments)]
    fn calibrate(
        &self,
        py: Python<'_>,
        x: &[u8],
        y: &[u8],
        n: usize,
        run: &[u8],
        rate: &[u8],
        level: &[u8],
        share: f64,
    ) -> PyResult<(PyModel, String)> {
        let d = self.file.spec.width();
        let x = f64s(x, n, d, "features")?;
        let want = |what: &str, got: usize, each: usize| {
            if got == n * each {
                Ok(())
            } else {
                Err(PyValueError::new_err(format!(
                    "{what}: {got} bytes for {n} rows of {each}"
                )))
            }
        };
        want("y", y.len(), 1)?;
        want("run", run.len(), 4)?;
        want("rate", rate.len(), 4)?;
        want("level", level.len(), 2)?;
        let mut data = Dataset::new(d);
        for (i, row) in x.chunks_exact(d.max(1)).enumerate() {
            let le4 = |b: &[u8]| [b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]];
            data.push(
                row,
                y[i] != 0,
                u32::from_le_bytes(le4(run)),
                f32::from_le_bytes(le4(rate)),
                u16::from_le_bytes([level[2 * i], level[2 * i + 1]]),
            );
        }
        let spec = self.file.spec;
        let (model, cal) = py
            .detach(|| aggrate::train::calibrate::calibrate(&data, &self.file.model, &spec, share))
            .map_err(|e| model_err(chain(&e)))?;
        let report = serde_json::to_value(&cal).map_err(model_err)?;
        let mut file = self.file.clone();
        file.model = model;
        file.set_metric("calibration", report.clone());
        Ok((PyModel { file }, report.to_string()))
    }
    /// This model calibrated for one receiver *without its labels* (`aggrate calibrate
    /// --no-labels`): on the emulated receivers (the bank: a dataset manifest's text, default
    /// `datasets/bank.toml`) whose packet timing is most like each of the receiver's captures —
    /// or, with `measured`, on the shipped model's own training receivers (`--measured`: their
    /// embedded summary; the shipped model only). `n` rows of float64 features `x`, and per row
    /// its capture (`run`, u32), send rate (`rate`, f32) and receive time (`host`, u64 ns),
    /// little-endian. `neighbours` defaults to 20 emulated or 5 measured receivers,
    /// `max_distance` to 3 or none (as the CLI's). Returns the calibrated model and the report
    /// as JSON.
    #[pyo3(signature = (x, n, run, rate, host, bank=None, neighbours=None, max_distance=None, mcs=None, nss=None,
                        bw=None, ip_len=None, measured=false))]
    #[allow(clippy::too_many_arguments)]
    fn self_calibrate(
        &self,
        py: Python<'_>,
        x: &[u8],
        n: usize,
        run: &[u8],
        rate: &[u8],
        host: &[u8],
        bank: Option<&str>,
        neighbours: Option<usize>,
        max_distance: Option<f64>,
        mcs: Option<u8>,
        nss: Option<u8>,
        bw: Option<u32>,
        ip_len: Option<u16>,
        measured: bool,
    ) -> PyResult<(PyModel, String)> {
        use aggrate::train::bank::{calibrate_without_labels, parse_manifest, DEFAULT_BANK};
        let d = self.file.spec.width();
        let x = f64s(x, n, d, "features")?;
        let data = timing_rows(&x, d, n, run, rate, host)?;
        if measured
            && (bank.is_some()
                || [mcs.map(u32::from), nss.map(u32::from), bw, ip_len.map(u32::from)]
                    .iter()
                    .any(Option::is_some))
        {
            return Err(PyValueError::new_err(
                "measured: the shipped model's training receivers are a bank of their own, at their own WLAN; \
                 bank, mcs, nss, bw and ip_len are for the emulated bank",
            ));
        }
        let (neighbours, max_distance) = if measured {
            (neighbours.unwrap_or(5), max_distance.unwrap_or(f64::INFINITY))
        } else {
            (
                neighbours.unwrap_or(aggrate::train::bank::DEFAULT_K),
                max_distance.unwrap_or(aggrate::train::bank::DEFAULT_MAX_DISTANCE),
            )
        };
        if neighbours == 0 {
            return Err(PyValueError::new_err(
                "neighbours: at least one bank receiver must set each threshold",
            ));
        }
        if max_distance.is_nan() || max_distance < 0.0 {
            return Err(PyValueError::new_err(format!(
                "max_distance: {max_distance}; a distance is ≥ 0 (inf: no limit)"
            )));
        }
        let like = aggrate::train::bank::Likeness {
            k: neighbours,
            max_distance,
        };
        let mut manifest = parse_manifest(bank.unwrap_or(DEFAULT_BANK))
            .map_err(|e| PyValueError::new_err(format!("bank manifest: {e}")))?;
        let wlan = aggrate::wlan::manifest::WlanSettings {
            mcs,
            nss,
            bw_mhz: bw,
            ip_len,
        };
        wlan.apply(&mut manifest)
            .map_err(|e| PyValueError::new_err(format!("the bank's WLAN (mcs / nss / bw / ip_len): {e}")))?;
        if let Some(r) = data.rate_mbps.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(PyValueError::new_err(format!(
                "rate: {r} Mb/s; every row needs its capture's send rate to emulate the bank at"
            )));
        }
        let spec = self.file.spec;
        let model = &self.file.model;
        let threads = aggrate::parallel::all_cores();
        let (model, cal) = if measured {
            let bank = aggrate::train::bank::shipped_summary()
                .and_then(|s| aggrate::train::bank::Bank::of_summary(&s))
                .map_err(|e| model_err(chain(&e)))?;
            py.detach(|| aggrate::train::bank::self_calibrate(&data, model, &spec, &bank, like))
        } else {
            py.detach(|| calibrate_without_labels(&data, model, &spec, &manifest, like, threads, &mut NoProgress))
        }
        .map_err(|e| model_err(chain(&e)))?;
        let report = serde_json::to_value(&cal).map_err(model_err)?;
        let mut file = self.file.clone();
        file.model = model;
        let labels = if measured {
            "none (measured bank)"
        } else {
            "none (emulated bank)"
        };
        file.set_metric(
            "calibration",
            serde_json::json!({ "labels": labels, "self_calibration": report }),
        );
        Ok((PyModel { file }, report.to_string()))
    }
    /// How like the shipped model's training receivers each capture times packets, without
    /// labels (`aggrate eval`'s `training_likeness`): per capture (`run`, u32) its send rate
    /// (`rate`, f32) and receive times (`host`, u64 ns), little-endian, `n` rows. Returns JSON:
    /// per capture its `capture` (the `run` number), `rate_mbps`, nearest training receiver, the rate it was taken at,
    /// the `distance` and whether it is `familiar` (within 1). The shipped model (or a calibrated
    /// copy) only: another is a ModelError.
    fn training_likeness(&self, py: Python<'_>, n: usize, run: &[u8], rate: &[u8], host: &[u8]) -> PyResult<String> {
        let data = timing_rows(&[], 0, n, run, rate, host)?;
        let bank = aggrate::train::bank::shipped_bank_for(&self.file.model, &self.file.spec)
            .map_err(|e| model_err(chain(&e)))?
            .ok_or_else(|| {
                model_err(
                    "only the shipped model's training receivers are known (their summary is embedded); this is another model",
                )
            })?;
        let near = py
            .detach(|| bank.likeness_of(&data))
            .map_err(|e| model_err(chain(&e)))?;
        let out: Vec<serde_json::Value> = near.iter().map(|m| m.to_json(m.group.into())).collect();
        Ok(serde_json::Value::from(out).to_string())
    }

    fn __repr__(&self) -> String {
        format!(
            "Model(kind={:?}, m={}, sigma={}, context={}, rows={})",
            self.file.model.kind(),
            self.file.spec.m,
            self.file.spec.sigma,
            self.file.spec.context,
            self.file.training.rows
        )
    }
}

/// Fit `kind` ("logistic", "svm", "threshold") with the project's solvers on `n` rows of float64
/// features `x` (row-major bytes, the spec's width) and labels `y` (one byte per row). `params`:
/// JSON of the solver's parameters (missing fields: defaults); `spec`: JSON of the feature spec.
#[pyfunction]
#[pyo3(signature = (kind, x, y, n, spec, params="{}"))]
fn fit(py: Python<'_>, kind: &str, x: &[u8], y: &[u8], n: usize, spec: &str, params: &str) -> PyResult<PyModel> {
    let spec: FeatureSpec = serde_json::from_str(spec).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    let spec = spec.check().map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    let d = spec.width();
    let x = f64s(x, n, d, "X")?;
    if y.len() != n {
        return Err(PyValueError::new_err(format!("y has {} labels for {n} rows", y.len())));
    }
    let mut data = Dataset::new(d);
    for (i, row) in x.chunks_exact(d.max(1)).enumerate() {
        data.push(row, y[i] != 0, 0, f32::NAN, 1);
    }
    let all = RowSet::all(n);
    let bad = |e: serde_json::Error| model_err(format!("{kind} parameters: {e}"));
    let model = match kind {
        "logistic" => {
            let p: LogisticParams = merge(LogisticParams::default(), params).map_err(bad)?;
            let p = p.check().map_err(model_err)?;
            py.detach(|| p.fit(&data, &all).map(EstimatorModel::from))
        }
        "svm" => {
            let p: SvmParams = merge(SvmParams::default(), params).map_err(bad)?;
            let p = p.check().map_err(model_err)?;
            py.detach(|| p.fit(&data, &all).map(EstimatorModel::from))
        }
        "threshold" => py.detach(|| ThresholdFit.fit(&data, &all).map(EstimatorModel::from)),
        other => {
            return Err(PyValueError::new_err(format!(
                "kind {other:?}: logistic, svm or threshold"
            )))
        }
    }
    .map_err(model_err)?;
    let positives = data.y.iter().filter(|&&v| v).count() as u64;
    Ok(PyModel {
        file: ModelFile::new(
            spec,
            model,
            TrainingSummary {
                rows: n as u64,
                positives,
                captures: Vec::new(),
                rates_mbps: Vec::new(),
            },
        ),
    })
}

/// `defaults` with the fields given in the JSON object `given` replaced (unknown fields refused).
fn merge<T: serde::Serialize + serde::de::DeserializeOwned>(defaults: T, given: &str) -> Result<T, serde_json::Error> {
    let mut v = serde_json::to_value(defaults)?;
    let g: serde_json::Value = serde_json::from_str(given)?;
    if let (Some(base), Some(over)) = (v.as_object_mut(), g.as_object()) {
        for (k, x) in over {
            if !base.contains_key(k) {
                return Err(serde::de::Error::custom(format!(
                    "unknown field `{k}` (known: {})",
                    base.keys().cloned().collect::<Vec<_>>().join(", ")
                )));
            }
            base.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v)
}

/// The receiver's online estimator: push packets as they arrive (sequence number, kernel receive
/// time in ns), take a report of the mean aggregation level μ_N every interval.
#[pyclass(name = "OnlineEstimator", module = "aggrate._aggrate")]
struct PyEstimator {
    est: OnlineEstimator,
    last_ns: Option<u64>,
    /// `recv --self-calibrate`'s calibrator, when asked for.
    cal: Option<aggrate::train::online::OnlineCalibrator>,
}

fn report_dict<'py>(py: Python<'py>, r: &aggrate::runtime::AggReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("start_ns", r.start.as_nanos())?;
    d.set_item("end_ns", r.end.as_nanos())?;
    d.set_item("frames", r.frames)?;
    d.set_item("packets", r.packets)?;
    d.set_item("mean_agg", r.mean_agg)?;
    d.set_item("corrected_agg", r.corrected_agg)?;
    d.set_item("level", r.level())?;
    d.set_item("rx_rate_bps", r.rx_rate_bps)?;
    d.set_item("lost", r.lost)?;
    d.set_item("loss_rate", r.loss_rate)?;
    d.set_item("owd_mean_ms", r.owd_mean_ms)?;
    d.set_item("owd_p95_ms", r.owd_p95_ms)?;
    Ok(d)
}

#[pymethods]
impl PyEstimator {
    /// An estimator for `model` (default: the shipped model), reporting every `interval_ms`;
    /// with `phy_mbps` (the link's PHY rate) its reports' `level` is the level from airtime (packet
    /// lengths are UDP payloads over IPv4, as `recv` takes them); with `self_calibrate`, it sets
    /// its operating point from the receive times as it goes (`recv --self-calibrate`: windows
    /// nearer than `max_distance` to a measured receiver; by default none at the training WLAN's
    /// PHY rate, else 1), on `bank` — the JSON bytes of a summary of measured receivers made for
    /// the model — or, without it, the shipped model's embedded one.
    #[new]
    #[pyo3(signature = (model=None, interval_ms=100.0, self_calibrate=false, max_distance=None, phy_mbps=None, bank=None))]
    fn new(
        model: Option<&PyModel>,
        interval_ms: f64,
        self_calibrate: bool,
        max_distance: Option<f64>,
        phy_mbps: Option<f64>,
        bank: Option<&[u8]>,
    ) -> PyResult<PyEstimator> {
        let file = match model {
            Some(m) => m.file.clone(),
            None => ModelFile::shipped().map_err(|e| model_err(chain(&e)))?,
        };
        if !(interval_ms.is_finite() && (10.0..=60_000.0).contains(&interval_ms)) {
            return Err(PyValueError::new_err(format!(
                "interval_ms = {interval_ms}: 10..=60000"
            )));
        }
        let mut est = OnlineEstimator::from_model(&file, Duration::from_secs_f64(interval_ms / 1e3))
            .map_err(|e| model_err(chain(&e)))?;
        if let Some(m) = phy_mbps.filter(|m| !(m.is_finite() && *m > 0.0 && *m <= 9607.8)) {
            return Err(PyValueError::new_err(format!(
                "phy_mbps = {m}: a PHY rate in Mb/s, above 0 and at most 9607.8"
            )));
        }
        let phy = phy_mbps.map(|m| (m * 1e6) as u64);
        let mut level = est.level_config().clone();
        level.phy_rate_bps = phy;
        level.l3_overhead_bytes = 28;
        est.set_level_config(level).map_err(|e| model_err(chain(&e)))?;
        let cal = match (self_calibrate, bank) {
            (false, Some(_)) => return Err(PyValueError::new_err("bank is for self_calibrate=True")),
            (false, None) => None,
            (true, bank) => {
                use aggrate::train::online::{for_receiver, DistanceLimit};
                let limit = DistanceLimit::given(max_distance)
                    .map_err(|e| PyValueError::new_err(format!("max_distance = {max_distance:?}: {e}")))?;
                Some(match bank {
                    None => for_receiver(&file, limit, phy).map_err(|e| model_err(chain(&e)))?,
                    Some(b) => {
                        let bank = aggrate::train::online::SummaryBank::from_json(b)
                            .map_err(|e| model_err(format!("bank: {e}")))?;
                        aggrate::train::online::OnlineCalibrator::for_receiver(bank, &file, limit, phy)
                            .map_err(|e| model_err(chain(&e)))?
                    }
                })
            }
        };
        Ok(PyEstimator {
            est,
            last_ns: None,
            cal,
        })
    }
    /// What self-calibration did (None without it): windows used and not used, the last
    /// window's step and the operating point's knots, as JSON.
    fn calibration(&self) -> Option<String> {
        serde_json::to_string(&self.cal.as_ref()?.summary()).ok()
    }
    /// One packet; returns `(start_ns, level)` when it closed a frame, else None. Receive times
    /// must not go backwards (ValueError).
    #[pyo3(signature = (seq, kernel_ns, length=1448, sent_ns=None))]
    fn push(
        &mut self,
        seq: Option<u64>,
        kernel_ns: u64,
        length: u32,
        sent_ns: Option<u64>,
    ) -> PyResult<Option<(u64, u16)>> {
        if let Some(prev) = self.last_ns.filter(|&p| kernel_ns < p) {
            return Err(PyValueError::new_err(format!(
                "kernel_ns {kernel_ns} is before the previous packet's {prev} (seq {seq:?})"
            )));
        }
        self.last_ns = Some(kernel_ns);
        let closed = self
            .est
            .push(&RxPacket {
                host: Ts(kernel_ns),
                seq,
                sent: sent_ns.map(Ts),
                len: length,
                ..RxPacket::default()
            })
            .map(|f| (f.start.as_nanos(), f.level));
        if let Some(c) = &mut self.cal {
            c.feed(&mut self.est, Ts(kernel_ns), length);
        }
        Ok(closed)
    }
    /// The next finished report at receive time `now_ns`, if one is due (a dict).
    fn poll_report<'py>(&mut self, py: Python<'py>, now_ns: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.est
            .poll_report(Ts(now_ns))
            .map(|r| report_dict(py, &r))
            .transpose()
    }
    /// Run a whole trace: `kernel_ns` (uint64 bytes) and optional `seq` (uint64 bytes); every
    /// report due along the way, as a list of dicts.
    #[pyo3(signature = (kernel_ns, seq=None))]
    fn run<'py>(&mut self, py: Python<'py>, kernel_ns: &[u8], seq: Option<&[u8]>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let u64s = |b: &[u8]| -> Vec<u64> {
            b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect()
        };
        if !kernel_ns.len().is_multiple_of(8) || seq.is_some_and(|s| s.len() != kernel_ns.len()) {
            return Err(PyValueError::new_err(
                "kernel_ns and seq must be uint64 buffers of the same length",
            ));
        }
        let ts = u64s(kernel_ns);
        let seqs = seq.map(u64s);
        let mut out = Vec::new();
        for (i, &t) in ts.iter().enumerate() {
            self.push(seqs.as_ref().map(|s| s[i]), t, 1448, None)?;
            while let Some(r) = self.est.poll_report(Ts(t)) {
                out.push(report_dict(py, &r)?);
            }
        }
        Ok(out)
    }
}

/// Run the 802.11ac emulator and write one capture per station (`output`, or `STEM.staK.EXT`);
/// `scenario`: JSON of a scenario (the TOML of `aggrate simulate --config`, as JSON). Returns the
/// run summary as JSON.
#[pyfunction]
fn simulate(py: Python<'_>, output: PathBuf, scenario: &str) -> PyResult<(String, Vec<PathBuf>)> {
    let s: aggrate::wlan::run::Scenario =
        serde_json::from_str(scenario).map_err(|e| PyValueError::new_err(format!("scenario: {e}")))?;
    let scn = s
        .check()
        .map_err(|e| PyValueError::new_err(format!("scenario: {}", chain(&e))))?;
    let (summary, paths) = py
        .detach(|| aggrate::wlan::write::simulate_to(&scn, &output, None, &mut NoProgress))
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(chain(&e)))?;
    Ok((serde_json::to_string(&summary).unwrap_or_default(), paths))
}

/// Describe a capture as `aggrate inspect --json` does: its format, flows, frame types and the
/// aggregation summary of one flow (the one `port`/`proto` select, else the largest UDP, else TCP
/// flow). Returns JSON. A capture that cannot be opened raises `InputError`; damage stops the
/// read and is in the result (`complete`, `error`, naming the byte offset).
#[pyfunction]
#[pyo3(signature = (path, port=None, proto=None, n_max=64, keep_going=false))]
fn inspect(
    py: Python<'_>,
    path: PathBuf,
    port: Option<u16>,
    proto: Option<u8>,
    n_max: u16,
    keep_going: bool,
) -> PyResult<String> {
    let filter = FlowFilter {
        port,
        proto,
        ..FlowFilter::default()
    };
    let words = [port.map(|p| format!("port {p}")), proto.map(|p| format!("proto {p}"))]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
    let (report, _) = py
        .detach(|| aggrate::pipeline::summary::inspect(&path, filter, words, n_max, keep_going, &mut NoProgress))
        .map_err(|e| InputError::new_err(chain(&e)))?;
    serde_json::to_string(&report).map_err(|e| AggrateError::new_err(e.to_string()))
}

/// The Rust half of the `aggrate` Python package.
#[pymodule]
fn _aggrate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("AggrateError", m.py().get_type::<AggrateError>())?;
    m.add("InputError", m.py().get_type::<InputError>())?;
    m.add("ModelError", m.py().get_type::<ModelError>())?;
    m.add_function(wrap_pyfunction!(read_capture, m)?)?;
    m.add_function(wrap_pyfunction!(fit, m)?)?;
    m.add_function(wrap_pyfunction!(layout, m)?)?;
    m.add_function(wrap_pyfunction!(receiver_of, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::scaler_sums, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::scaler_from_sums, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::logistic_sums, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::mlp_sums, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::level_errors, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::scores, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::count_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::level_error, m)?)?;
    m.add_class::<distributed::LogisticSolver>()?;
    m.add_class::<distributed::MlpSolver>()?;
    m.add_class::<PyModel>()?;
    m.add_class::<PyEstimator>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
