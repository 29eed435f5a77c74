//! `aggrate train`: captures → labelled rows → contiguous k-fold CV → report.json / report.md →
//! the final model fitted on all rows, saved as a versioned model file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::dataset::RowExtractor;
use aggrate::dataset::{contiguous_folds, slot_rows, Dataset, RowSet, SlotRows};
use aggrate::features::FeatureSpec;
use aggrate::model::{EstimatorModel, ModelFile, SlotSvrModel, TrainingSummary};
use aggrate::report::{mean_std, AggMetrics, BinaryMetrics};
use aggrate::train::{
    cv_predict_svr, fit_svr, fit_threshold, levels_from_starts, LogisticCv, LogisticParams, Predict, SvmCv, SvmLoss,
    SvmParams, SvrModel, SvrParams, ValidLogisticParams, ValidSvmParams, ValidSvrParams,
};

use super::features::{pick_flow, rate_from_name};
use super::ingest::for_each_record;
use super::progress::Ui;
use super::{Exit, FlowArgs};

/// Which estimator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModelKind {
    /// Logistic regression on m gaps (+ σ).
    Logistic,
    /// Linear SVM (dual coordinate descent).
    Svm,
    /// The m = 1 gap threshold baseline.
    Threshold,
    /// Logistic per packet + RBF ε-SVR per slot correcting the aggregation level.
    Svr,
}

/// SVM loss flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LossArg {
    /// Hinge.
    Hinge,
    /// Squared hinge.
    SquaredHinge,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TrainArgs {
    /// A dataset folder (its manifest.json's training runs, else every capture in it) or capture
    /// files.
    #[arg(long, required = true, num_args = 1..)]
    pub(crate) dataset: Vec<PathBuf>,
    /// Estimator.
    #[arg(long, value_enum, default_value_t = ModelKind::Logistic)]
    pub(crate) model: ModelKind,
    /// Output folder for the model file and reports.
    #[arg(short, long, default_value = "models")]
    pub(crate) output: PathBuf,
    /// Folds (contiguous blocks per capture).
    #[arg(long, default_value_t = 20)]
    pub(crate) folds: usize,
    /// Gaps per row (the threshold baseline always uses 1).
    #[arg(long, default_value_t = 20)]
    pub(crate) m: usize,
    /// Leave out σ.
    #[arg(long)]
    pub(crate) no_sigma: bool,
    /// L2 penalty of the logistic regression.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) l2: f64,
    /// Weight the classes equally (logistic).
    #[arg(long)]
    pub(crate) balanced: bool,
    /// SVM cost C.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) c: f64,
    /// SVM loss: hinge or squared-hinge.
    #[arg(long, value_enum, default_value_t = LossArg::SquaredHinge)]
    pub(crate) loss: LossArg,
    /// Slot length for the SVR (ms).
    #[arg(long, default_value_t = 100)]
    pub(crate) slot_ms: u64,
    /// Slots per SVR row (d).
    #[arg(long, default_value_t = 5)]
    pub(crate) d: usize,
    /// SVR C values tried by CV.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 10.0, 100.0, 1000.0])]
    pub(crate) svr_c: Vec<f64>,
    /// SVR γ values tried by CV (on standardised slot features).
    #[arg(long, value_delimiter = ',', default_values_t = [0.003, 0.01, 0.03, 0.1])]
    pub(crate) svr_gamma: Vec<f64>,
    /// SVR ε values tried by CV (MPDUs).
    #[arg(long, value_delimiter = ',', default_values_t = [0.05, 0.1, 0.5])]
    pub(crate) svr_epsilon: Vec<f64>,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

impl TrainArgs {
    /// Arguments as `aggrate train` would parse them from `argv` (starting with "train"), with
    /// every default the command line has.
    pub(crate) fn from_argv(argv: &[String]) -> Result<TrainArgs> {
        use clap::Parser;
        let args = super::Args::try_parse_from(std::iter::once("aggrate".to_string()).chain(argv.iter().cloned()))?;
        match args.command {
            super::Command::Train(t) => Ok(t),
            _ => bail!("internal: {argv:?} is not a train command"),
        }
    }
}

/// Capture files of a dataset argument.
pub(crate) fn dataset_files(args: &[PathBuf], train_only: bool) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            let manifest = a.join("manifest.json");
            if manifest.exists() {
                let v: serde_json::Value = serde_json::from_str(
                    &std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?,
                )
                .with_context(|| format!("{}: not JSON", manifest.display()))?;
                for r in v["runs"].as_array().into_iter().flatten() {
                    if train_only && r["role"] != "train" {
                        continue;
                    }
                    for s in r["stations"].as_array().into_iter().flatten() {
                        if let Some(f) = s["file"].as_str() {
                            out.push(a.join(f));
                        }
                    }
                }
            } else {
                let mut v: Vec<PathBuf> = std::fs::read_dir(a)
                    .with_context(|| format!("reading {}", a.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.extension()
                            .is_some_and(|e| e == "pcapng" || e == "pcap" || e == "gz" || e == "xz")
                    })
                    .collect();
                v.sort();
                out.extend(v);
            }
        } else {
            out.push(a.clone());
        }
    }
    if out.is_empty() {
        bail!("no capture files in {:?}", args);
    }
    Ok(out)
}

/// Rows of all captures (group = capture index). Captures are read on all cores, each into its
/// own block, and concatenated in file order (the result does not depend on the thread count).
pub(crate) fn load_rows(ui: &Ui, files: &[PathBuf], spec: &FeatureSpec, flow: &FlowArgs) -> Result<Dataset> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, files.len().max(1));
    if threads == 1 {
        let mut data = Dataset::new(spec.width());
        for (g, path) in files.iter().enumerate() {
            load_capture(ui, path, g as u32, spec, flow, &mut data)?;
        }
        return Ok(data);
    }
    let bar = ui.count_bar(files.len() as u64, "reading captures [{bar:30}] {pos}/{len}, eta {eta}");
    let next = std::sync::atomic::AtomicUsize::new(0);
    let quiet = Ui { quiet: true };
    let mut parts: Vec<(usize, Result<Dataset>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (next, bar, quiet) = (&next, &bar, &quiet);
                sc.spawn(move || {
                    let mut out = Vec::new();
                    loop {
                        let g = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(path) = files.get(g) else { break };
                        let mut d = Dataset::new(spec.width());
                        let r = load_capture(quiet, path, g as u32, spec, flow, &mut d).map(|_| d);
                        bar.inc(1);
                        out.push((g, r));
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    bar.finish_and_clear();
    parts.sort_by_key(|p| p.0);
    if parts.len() != files.len() {
        bail!("a capture reader thread failed");
    }
    let mut data = Dataset::new(spec.width());
    for (_, part) in parts {
        let part = part?;
        data.x.extend_from_slice(&part.x);
        data.y.extend_from_slice(&part.y);
        data.group.extend_from_slice(&part.group);
        data.rate_mbps.extend_from_slice(&part.rate_mbps);
        data.level.extend_from_slice(&part.level);
        data.host.extend_from_slice(&part.host);
    }
    Ok(data)
}

/// One capture's rows appended to `data` as group `g`.
fn load_capture(ui: &Ui, path: &Path, g: u32, spec: &FeatureSpec, flow: &FlowArgs, data: &mut Dataset) -> Result<()> {
    let filter = pick_flow(&Ui { quiet: true }, path, flow)?;
    let rate = rate_from_name(path).map_or(f32::NAN, |r| r as f32);
    let mut ex = RowExtractor::new(*spec, 0)?;
    let mut sink =
        |m: &aggrate::dataset::RowMeta, x: &[f64]| data.push_at(m.host, x, m.first_of_frame, g, rate, m.level);
    let out = for_each_record(ui, path, flow.keep_going, |r| {
        if filter.matches(r) {
            ex.push(r, Some(r.host), &mut sink);
        }
    })?;
    ex.finish(&mut sink);
    out.into_result()?;
    if !ex.has_ground_truth() {
        return Err(aggrate::label::Error::NoGroundTruth { packets: ex.packets_in })
            .with_context(|| path.display().to_string());
    }
    Ok(())
}

#[derive(serde::Serialize, Clone)]
pub(crate) struct FoldReport {
    fold: usize,
    rows: u64,
    pub(crate) f1: f64,
    precision: f64,
    recall: f64,
    accuracy: f64,
    agg_rmse: f64,
}

#[derive(serde::Serialize)]
pub(crate) struct RateReport {
    pub(crate) rate_mbps: f64,
    rows: u64,
    pub(crate) f1: f64,
    precision: f64,
    recall: f64,
    accuracy: f64,
    agg_rmse: f64,
    agg_acc: f64,
    agg_acc_within1: f64,
    agg_mean_error: f64,
    /// Slot-level metrics (slot SVR models only).
    #[serde(skip_serializing_if = "Option::is_none")]
    slot: Option<SlotRateReport>,
}

/// Metrics per send rate: (rate, labels, levels).
pub(crate) type PerRate = BTreeMap<i64, (f64, BinaryMetrics, AggMetrics)>;

/// Predict the rows `idx` (contiguous per capture, in capture order) and score them: labels, and
/// levels from predicted starts within each capture's block; also added into `per_rate`.
pub(crate) fn score(
    data: &Dataset,
    idx: &[usize],
    model: &impl Predict,
    n_max: u16,
    per_rate: &mut PerRate,
) -> (BinaryMetrics, AggMetrics) {
    let pred: Vec<bool> = idx.iter().map(|&i| model.predict_row(data.row(i))).collect();
    let truth: Vec<bool> = idx.iter().map(|&i| data.y[i]).collect();
    let bm = BinaryMetrics::from_labels(&truth, &pred);
    let mut agg = AggMetrics::default();
    let mut s = 0;
    while s < idx.len() {
        let g = data.group[idx[s]];
        let e = (s..idx.len()).find(|&k| data.group[idx[k]] != g).unwrap_or(idx.len());
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
        s = e;
    }
    (bm, agg)
}

/// Per-rate rows of a report.
pub(crate) fn rate_reports(per_rate: &PerRate) -> Vec<RateReport> {
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
pub(crate) struct PacketCv {
    pub(crate) final_model: EstimatorModel,
    pub(crate) folds: Vec<FoldReport>,
    pub(crate) per_rate: PerRate,
    /// Out-of-fold predicted starts, per row.
    pub(crate) oof: Vec<bool>,
}

/// What [`packet_cv`] fits.
pub(crate) enum CvFit<'f> {
    /// Logistic regression: each fold starts from the all-rows fit and reads its training rows
    /// in place ([`LogisticCv`]).
    Logistic(ValidLogisticParams),
    /// Linear SVM: each fold starts from the all-rows fit ([`SvmCv`]).
    Svm(ValidSvmParams),
    /// Any other model: fitted on all rows, then on each fold's training rows (copied).
    Rows(&'f dyn Fn(&Dataset) -> Result<EstimatorModel>),
}

/// Fit on all rows, then k contiguous folds.
pub(crate) fn packet_cv(ui: &Ui, data: &Dataset, k: usize, n_max: u16, fit: CvFit) -> Result<PacketCv> {
    let folds = contiguous_folds(&data.group, k)?;
    // The model on all rows comes first: it is the result, and (logistic, SVM) the start of
    // every fold, whose training rows are 95 % the same.
    enum Warm<'d> {
        Logistic(LogisticCv<'d>),
        Svm(SvmCv<'d>),
        Rows(&'d dyn Fn(&Dataset) -> Result<EstimatorModel>),
    }
    let spin = ui.spinner("fitting on all rows");
    let warm = match fit {
        CvFit::Logistic(p) => Warm::Logistic(LogisticCv::new(data, &p)?),
        CvFit::Svm(p) => Warm::Svm(SvmCv::new(data, &p)?),
        CvFit::Rows(f) => Warm::Rows(f),
    };
    let final_model = match &warm {
        Warm::Logistic(cv) => EstimatorModel::Logistic(cv.model().clone()),
        Warm::Svm(cv) => EstimatorModel::LinearSvm(cv.model().clone()),
        Warm::Rows(f) => f(data)?,
    };
    spin.finish_and_clear();
    let bar = ui.count_bar(
        folds.len() as u64,
        "cross-validating [{bar:30}] fold {pos}/{len}, eta {eta}",
    );
    let mut fold_reports = Vec::new();
    let mut per_rate = PerRate::new();
    let n = data.len();
    let mut oof = vec![false; n];
    for (fi, test) in folds.iter().enumerate() {
        let model = match &warm {
            Warm::Logistic(cv) => EstimatorModel::Logistic(cv.without(test)?),
            Warm::Svm(cv) => EstimatorModel::LinearSvm(cv.without(test)?),
            Warm::Rows(f) => {
                let train: Vec<usize> = RowSet::from_indices(test).complement(n).iter().collect();
                f(&data.select(&train))?
            }
        };
        let (bm, agg) = score(data, test, &model, n_max, &mut per_rate);
        for &i in test {
            oof[i] = model.predict_row(data.row(i));
        }
        fold_reports.push(FoldReport {
            fold: fi,
            rows: test.len() as u64,
            f1: bm.f1(),
            precision: bm.precision(),
            recall: bm.recall(),
            accuracy: bm.accuracy(),
            agg_rmse: agg.rmse(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(PacketCv {
        final_model,
        folds: fold_reports,
        per_rate,
        oof,
    })
}

/// The checked feature spec for a model kind and its flags.
fn spec_for(a: &TrainArgs) -> Result<FeatureSpec> {
    let (m, sigma) = match a.model {
        ModelKind::Threshold => (1, false),
        _ => (a.m, !a.no_sigma),
    };
    if a.slot_ms == 0 || a.slot_ms > 60_000 {
        bail!("--slot-ms = {}: 1..=60000", a.slot_ms);
    }
    Ok(FeatureSpec {
        m,
        sigma,
        n_max: a.flow.n_max,
        slot_ns: a.slot_ms * 1_000_000,
        d: a.d,
        ..FeatureSpec::default()
    }
    .check()?)
}

/// File stem of a trained model.
fn model_name(a: &TrainArgs, spec: &FeatureSpec, loss: SvmLoss) -> String {
    let sig = if spec.sigma { "_sigma" } else { "" };
    match a.model {
        ModelKind::Logistic => format!("logistic_m{}{sig}", spec.m),
        ModelKind::Svm => format!(
            "svm_{}_m{}{sig}",
            if loss == SvmLoss::Hinge { "hinge" } else { "sqhinge" },
            spec.m
        ),
        ModelKind::Threshold => "threshold_m1".to_string(),
        ModelKind::Svr => format!("slot_svr_m{}{sig}_d{}", spec.m, spec.d),
    }
}

pub(crate) fn run(ui: &Ui, a: TrainArgs) -> Result<Exit> {
    let spec = spec_for(&a)?;
    let params = LogisticParams {
        l2: a.l2,
        balanced: a.balanced,
        ..LogisticParams::default()
    }
    .check()?;
    let loss = match a.loss {
        LossArg::Hinge => SvmLoss::Hinge,
        LossArg::SquaredHinge => SvmLoss::SquaredHinge,
    };
    let svm = SvmParams {
        c: a.c,
        loss,
        ..SvmParams::default()
    }
    .check()?;
    if !(2..=100).contains(&a.folds) {
        bail!("--folds = {}: 2..=100", a.folds);
    }
    let grid = if a.model == ModelKind::Svr {
        svr_grid(&a)?
    } else {
        Vec::new()
    };
    let files = dataset_files(&a.dataset, true)?;
    ui.info(format!("reading {} captures", files.len()));
    let data = load_rows(ui, &files, &spec, &a.flow)?;
    ui.info(format!(
        "{} rows, {} frame starts",
        data.len(),
        data.y.iter().filter(|y| **y).count()
    ));
    let threshold = |d: &Dataset| Ok(EstimatorModel::Threshold(fit_threshold(d)?));
    let how = match a.model {
        ModelKind::Logistic | ModelKind::Svr => CvFit::Logistic(params),
        ModelKind::Svm => CvFit::Svm(svm),
        ModelKind::Threshold => CvFit::Rows(&threshold),
    };
    let cv = packet_cv(ui, &data, a.folds, spec.n_max, how)?;
    let (f1_mean, f1_std) = mean_std(&cv.folds.iter().map(|f| f.f1).collect::<Vec<_>>());
    let (acc_mean, acc_std) = mean_std(&cv.folds.iter().map(|f| f.accuracy).collect::<Vec<_>>());
    let mut rates = rate_reports(&cv.per_rate);
    let name = model_name(&a, &spec, loss);

    let mut final_model = cv.final_model;
    let mut slot_json = serde_json::Value::Null;
    let mut headline = format!("{}-fold contiguous CV: F1 {f1_mean:.4} ± {f1_std:.4}", a.folds);
    let mut slot_stage = None;
    if a.model == ModelKind::Svr {
        let EstimatorModel::Logistic(base) = final_model else {
            bail!("internal: the SVR's base model is not logistic");
        };
        let st = svr_stage(ui, &data, &cv.oof, &spec, a.folds, &grid)?;
        attach_slots(&mut rates, &st.per_rate);
        headline = format!(
            "{headline}; slot SVR (C = {}, γ = {}, ε = {}): slot RMSE {:.2} vs {:.2} for logistic alone",
            st.params.c, st.params.gamma, st.params.epsilon, st.svr_rmse, st.base_rmse
        );
        slot_json = serde_json::json!({
            "slot_ms": a.slot_ms,
            "d": spec.d,
            "rows": st.rows.len(),
            "folds": st.folds,
            "chosen": st.params,
            "support_vectors": st.model.n_support(),
            "slot_rmse": st.svr_rmse,
            "base_slot_rmse": st.base_rmse,
            "grid": st.grid,
        });
        final_model = EstimatorModel::SlotSvr(SlotSvrModel {
            base,
            svr: st.model.clone(),
        });
        slot_stage = Some(st);
    }

    let mut rates_seen: Vec<f64> = rates.iter().map(|r| r.rate_mbps).filter(|r| !r.is_nan()).collect();
    rates_seen.dedup();
    let mut file = ModelFile::new(
        spec,
        final_model,
        TrainingSummary {
            rows: data.len() as u64,
            positives: data.y.iter().filter(|y| **y).count() as u64,
            captures: files
                .iter()
                .map(|f| {
                    f.file_name()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .collect(),
            rates_mbps: rates_seen,
        },
    );
    file.metrics =
        serde_json::json!({ "cv_folds": a.folds, "f1_mean": f1_mean, "f1_std": f1_std, "accuracy_mean": acc_mean });
    if let Some(st) = &slot_stage {
        file.metrics["slot_rmse"] = st.svr_rmse.into();
        file.metrics["base_slot_rmse"] = st.base_rmse.into();
    }
    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    let model_path = a.output.join(format!("{name}.json"));
    std::fs::write(&model_path, file.to_json()).with_context(|| format!("writing {}", model_path.display()))?;
    let report = serde_json::json!({
        "model": name,
        "kind": file.model.kind(),
        "model_file": model_path.display().to_string(),
        "spec": spec,
        "folds": cv.folds,
        "f1_mean": f1_mean,
        "f1_std": f1_std,
        "accuracy_mean": acc_mean,
        "accuracy_std": acc_std,
        "per_rate": rates,
        "slot_svr": slot_json,
        "rows": data.len(),
        "captures": file.training.captures,
    });
    let written = write_reports(&a.output, &name, &headline, &report, &rates, slot_stage.as_ref())?;
    if !ui.quiet {
        print!("{}", render_md(&name, &headline, &rates));
    }
    ui.info(format!(
        "wrote {} and {}",
        model_path.display(),
        written
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(Exit::Ok)
}

/// The (C, γ, ε) grid from the flags, each point checked.
fn svr_grid(a: &TrainArgs) -> Result<Vec<ValidSvrParams>> {
    let mut grid = Vec::new();
    for &c in &a.svr_c {
        for &gamma in &a.svr_gamma {
            for &epsilon in &a.svr_epsilon {
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
    if grid.is_empty() {
        bail!("--svr-c / --svr-gamma / --svr-epsilon: give at least one value each");
    }
    Ok(grid)
}

/// Slot metrics of one send rate: logistic alone vs corrected by the SVR.
#[derive(serde::Serialize, Clone, Debug)]
pub(crate) struct SlotRateReport {
    pub(crate) rate_mbps: f64,
    pub(crate) slots: u64,
    pub(crate) base_rmse: f64,
    pub(crate) svr_rmse: f64,
    pub(crate) base_acc_within1: f64,
    pub(crate) svr_acc_within1: f64,
    pub(crate) true_mean_level: f64,
}

#[derive(serde::Serialize, Clone, Debug)]
struct GridPoint {
    c: f64,
    gamma: f64,
    epsilon: f64,
    slot_rmse: f64,
}

pub(crate) struct SvrStage {
    pub(crate) rows: SlotRows,
    pub(crate) params: SvrParams,
    pub(crate) model: SvrModel,
    /// Out-of-fold SVR predictions at the chosen parameters.
    pub(crate) pred: Vec<f64>,
    pub(crate) per_rate: Vec<SlotRateReport>,
    pub(crate) svr_rmse: f64,
    pub(crate) base_rmse: f64,
    folds: usize,
    grid: Vec<GridPoint>,
}

/// Per send rate: slot RMSE of the logistic alone (the rows' base level) and of `pred`.
pub(crate) fn slot_rate_reports(rows: &SlotRows, pred: &[f64]) -> Vec<SlotRateReport> {
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
pub(crate) fn attach_slots(rates: &mut [RateReport], slots: &[SlotRateReport]) {
    for r in rates {
        r.slot = slots
            .iter()
            .find(|s| s.rate_mbps.to_bits() == r.rate_mbps.to_bits() || (s.rate_mbps.is_nan() && r.rate_mbps.is_nan()))
            .cloned();
    }
}

/// Slot rows from out-of-fold packet predictions → grid search of (C, γ, ε) by contiguous CV on
/// slot rows → the SVR refitted on all slot rows with the best point.
pub(crate) fn svr_stage(
    ui: &Ui,
    data: &Dataset,
    oof: &[bool],
    spec: &FeatureSpec,
    k: usize,
    grid: &[ValidSvrParams],
) -> Result<SvrStage> {
    let rows = slot_rows(data, oof, spec);
    if rows.len() < 2 {
        bail!(
            "only {} slot rows: the captures are too short for d = {} slots of {} ms (try --slot-ms or --d)",
            rows.len(),
            spec.d,
            spec.slot_ns / 1_000_000
        );
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
        bail!(
            "a capture has {min_per_group} slot row(s): SVR cross-validation needs 2 per capture (try a shorter --slot-ms or --d)"
        );
    }
    if kf < k {
        ui.warn(format!(
            "slot SVR: {kf}-fold CV (the shortest capture has {min_per_group} slot rows)"
        ));
    }
    let folds = contiguous_folds(&rows.group, kf)?;
    ui.info(format!(
        "slot SVR: {} slot rows, {} grid points × {kf} folds",
        rows.len(),
        grid.len()
    ));
    let bar = ui.count_bar(grid.len() as u64, "SVR grid search [{bar:30}] {pos}/{len}, eta {eta}");
    // Grid points in parallel (2 cores here); each CV is independent and deterministic.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let results: Vec<Result<Vec<f64>, aggrate::train::Error>> = std::thread::scope(|sc| {
        let chunks: Vec<_> = (0..threads)
            .map(|t| {
                let (rows, folds, bar) = (&rows, &folds, &bar);
                sc.spawn(move || {
                    (t..grid.len())
                        .step_by(threads)
                        .map(|g| {
                            let r = cv_predict_svr(&rows.x, rows.d, &rows.target, folds, &grid[g]);
                            bar.inc(1);
                            (g, r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(usize, Result<Vec<f64>, aggrate::train::Error>)> =
            chunks.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect();
        all.sort_by_key(|(g, _)| *g);
        all.into_iter().map(|(_, r)| r).collect()
    });
    bar.finish_and_clear();
    if results.len() != grid.len() {
        bail!("slot SVR: a grid worker failed");
    }
    let rmse = |pred: &[f64]| AggMetrics::from_values(&rows.target, pred).rmse();
    let mut points = Vec::new();
    let mut best: Option<(f64, usize, Vec<f64>)> = None;
    for (g, r) in results.into_iter().enumerate() {
        let pred = r?;
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
    let Some((svr_rmse, g, pred)) = best else {
        bail!("slot SVR: empty grid");
    };
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

pub(crate) fn render_md(name: &str, headline: &str, rates: &[RateReport]) -> String {
    let mut s = format!("# {name}\n\n{headline}\n\n");
    s.push_str("| rate Mb/s | rows | F1 | precision | recall | accuracy | agg RMSE | agg exact | agg ±1 |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for r in rates {
        s.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.2} | {:.3} | {:.3} |\n",
            rate_label(r.rate_mbps),
            r.rows,
            r.f1,
            r.precision,
            r.recall,
            r.accuracy,
            r.agg_rmse,
            r.agg_acc,
            r.agg_acc_within1
        ));
    }
    if rates.iter().any(|r| r.slot.is_some()) {
        s.push_str("\nPer slot: true mean level vs the logistic model's mean predicted level and the SVR's.\n\n");
        s.push_str(
            "| rate Mb/s | slots | true level | logistic RMSE | SVR RMSE | RMSE ratio | logistic ±1 | SVR ±1 |\n",
        );
        s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for r in rates {
            if let Some(sl) = &r.slot {
                s.push_str(&format!(
                    "| {} | {} | {:.1} | {:.2} | {:.2} | {:.1}× | {:.3} | {:.3} |\n",
                    rate_label(r.rate_mbps),
                    sl.slots,
                    sl.true_mean_level,
                    sl.base_rmse,
                    sl.svr_rmse,
                    sl.base_rmse / sl.svr_rmse.max(1e-9),
                    sl.base_acc_within1,
                    sl.svr_acc_within1
                ));
            }
        }
    }
    s
}

fn rate_label(r: f64) -> String {
    if r.is_nan() {
        "?".into()
    } else {
        format!("{r}")
    }
}

/// Per-rate CSV (one line per send rate; slot columns empty for packet-only models).
pub(crate) fn per_rate_csv(rates: &[RateReport]) -> String {
    let mut s = String::from(
        "rate_mbps,rows,f1,precision,recall,accuracy,agg_rmse,agg_acc,agg_acc_within1,agg_mean_error,slots,slot_true_level,slot_base_rmse,slot_svr_rmse\n",
    );
    for r in rates {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{}",
            if r.rate_mbps.is_nan() {
                String::new()
            } else {
                r.rate_mbps.to_string()
            },
            r.rows,
            r.f1,
            r.precision,
            r.recall,
            r.accuracy,
            r.agg_rmse,
            r.agg_acc,
            r.agg_acc_within1,
            r.agg_mean_error
        ));
        match &r.slot {
            Some(sl) => s.push_str(&format!(
                ",{},{},{},{}\n",
                sl.slots, sl.true_mean_level, sl.base_rmse, sl.svr_rmse
            )),
            None => s.push_str(",,,,\n"),
        }
    }
    s
}

/// report.json, report.md, per_rate.csv and the PNG plots of one model; returns the paths.
pub(crate) fn write_reports(
    dir: &std::path::Path,
    name: &str,
    headline: &str,
    report: &serde_json::Value,
    rates: &[RateReport],
    slots: Option<&SvrStage>,
) -> Result<Vec<PathBuf>> {
    use super::plots::{self, Series};
    let mut out = Vec::new();
    let write = |out: &mut Vec<PathBuf>, file: String, bytes: Vec<u8>| -> Result<()> {
        let p = dir.join(file);
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
        out.push(p);
        Ok(())
    };
    write(
        &mut out,
        format!("{name}.report.json"),
        serde_json::to_string_pretty(report)?.into_bytes(),
    )?;
    write(
        &mut out,
        format!("{name}.report.md"),
        render_md(name, headline, rates).into_bytes(),
    )?;
    write(
        &mut out,
        format!("{name}.per_rate.csv"),
        per_rate_csv(rates).into_bytes(),
    )?;
    let known: Vec<&RateReport> = rates.iter().filter(|r| !r.rate_mbps.is_nan()).collect();
    let png = dir.join(format!("{name}.f1_vs_rate.png"));
    plots::lines(
        &png,
        &format!("{name}: F1 per send rate"),
        "send rate (Mb/s)",
        "F1",
        &[Series::new("F1", known.iter().map(|r| (r.rate_mbps, r.f1)).collect())],
        Some((0.0, 1.0)),
    )?;
    out.push(png);
    if let Some(st) = slots {
        // The slot rows themselves too (most recent slot first), for peers and notebooks.
        let mut csv = String::from("group,rate_mbps,slot_start_ns,true_level,logistic_level,svr_level");
        for k in 1..=st.rows.d / 3 {
            csv.push_str(&format!(",mean_{k},var_{k},count_{k}"));
        }
        csv.push('\n');
        for i in 0..st.rows.len() {
            csv.push_str(&format!(
                "{},{},{},{},{},{}",
                st.rows.group[i],
                st.rows.rate_mbps[i],
                st.rows.slot_start[i].as_nanos(),
                st.rows.target[i],
                st.rows.base_level(i),
                st.pred[i]
            ));
            for v in st.rows.row(i) {
                csv.push_str(&format!(",{v}"));
            }
            csv.push('\n');
        }
        write(&mut out, format!("{name}.slots.csv"), csv.into_bytes())?;
        let pr: Vec<&SlotRateReport> = st.per_rate.iter().filter(|r| !r.rate_mbps.is_nan()).collect();
        let png = dir.join(format!("{name}.agg_vs_rate.png"));
        plots::lines(
            &png,
            "slot aggregation RMSE per send rate",
            "send rate (Mb/s)",
            "RMSE (MPDUs per A-MPDU)",
            &[
                Series::new("logistic", pr.iter().map(|r| (r.rate_mbps, r.base_rmse)).collect()),
                Series::new("logistic + SVR", pr.iter().map(|r| (r.rate_mbps, r.svr_rmse)).collect()),
            ],
            None,
        )?;
        out.push(png);
        let png = dir.join(format!("{name}.pred_vs_actual.png"));
        plots::scatter(
            &png,
            "predicted vs actual mean aggregation level per slot",
            "actual level",
            "predicted level",
            &[
                Series::new(
                    "logistic",
                    (0..st.rows.len())
                        .map(|i| (st.rows.target[i], st.rows.base_level(i)))
                        .collect(),
                ),
                Series::new(
                    "logistic + SVR",
                    (0..st.rows.len()).map(|i| (st.rows.target[i], st.pred[i])).collect(),
                ),
            ],
        )?;
        out.push(png);
    }
    Ok(out)
}
