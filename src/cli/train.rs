//! `aggrate train`: captures → labelled rows → contiguous k-fold CV → report.json / report.md →
//! the final model fitted on all rows, saved as a versioned model file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use aggrate::dataset::RowExtractor;
use aggrate::dataset::{contiguous_folds, Dataset};
use aggrate::features::FeatureSpec;
use aggrate::model::{EstimatorModel, ModelFile, TrainingSummary};
use aggrate::report::{mean_std, AggMetrics, BinaryMetrics};
use aggrate::train::{
    fit_linear_svm, fit_logistic_from, fit_threshold, levels_from_starts, LogisticParams, Predict, SvmLoss, SvmParams,
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
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
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

/// Rows of all captures (group = capture index).
pub(crate) fn load_rows(ui: &Ui, files: &[PathBuf], spec: &FeatureSpec, flow: &FlowArgs) -> Result<Dataset> {
    let mut data = Dataset::new(spec.width());
    for (g, path) in files.iter().enumerate() {
        let filter = pick_flow(&Ui { quiet: true }, path, flow)?;
        let rate = rate_from_name(path).map_or(f32::NAN, |r| r as f32);
        let mut ex = RowExtractor::new(*spec, 0)?;
        let mut sink =
            |m: &aggrate::dataset::RowMeta, x: &[f64]| data.push(x, m.first_of_frame, g as u32, rate, m.level);
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
    }
    Ok(data)
}

#[derive(serde::Serialize, Clone)]
struct FoldReport {
    fold: usize,
    rows: u64,
    f1: f64,
    precision: f64,
    recall: f64,
    accuracy: f64,
    agg_rmse: f64,
}

#[derive(serde::Serialize)]
pub(crate) struct RateReport {
    rate_mbps: f64,
    rows: u64,
    f1: f64,
    precision: f64,
    recall: f64,
    accuracy: f64,
    agg_rmse: f64,
    agg_acc: f64,
    agg_acc_within1: f64,
    agg_mean_error: f64,
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
        })
        .collect()
}

pub(crate) fn run(ui: &Ui, a: TrainArgs) -> Result<Exit> {
    let spec = match a.model {
        ModelKind::Logistic | ModelKind::Svm => FeatureSpec {
            m: a.m,
            sigma: !a.no_sigma,
            n_max: a.flow.n_max,
            ..FeatureSpec::default()
        },
        ModelKind::Threshold => FeatureSpec {
            m: 1,
            sigma: false,
            n_max: a.flow.n_max,
            ..FeatureSpec::default()
        },
    }
    .check()?;
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
    let files = dataset_files(&a.dataset, true)?;
    ui.info(format!("reading {} captures", files.len()));
    let data = load_rows(ui, &files, &spec, &a.flow)?;
    ui.info(format!(
        "{} rows, {} frame starts",
        data.len(),
        data.y.iter().filter(|y| **y).count()
    ));
    let folds = contiguous_folds(&data.group, a.folds)?;
    // The model on all rows comes first: it is the result, and the warm start of every fold
    // (each fold's training rows are 95% the same), which cuts Newton steps.
    let fit = |d: &Dataset, warm: Option<&EstimatorModel>| -> Result<EstimatorModel> {
        let init = match warm {
            Some(EstimatorModel::Logistic(m)) => Some(m),
            _ => None,
        };
        Ok(match a.model {
            ModelKind::Logistic => EstimatorModel::Logistic(fit_logistic_from(d, &params, init)?),
            ModelKind::Svm => EstimatorModel::LinearSvm(fit_linear_svm(d, &svm)?),
            ModelKind::Threshold => EstimatorModel::Threshold(fit_threshold(d)?),
        })
    };
    let final_model = fit(&data, None)?;
    let bar = ui.count_bar(
        folds.len() as u64,
        "cross-validating [{bar:30}] fold {pos}/{len}, eta {eta}",
    );
    let mut fold_reports = Vec::new();
    let mut per_rate = PerRate::new();
    let n = data.len();
    let mut in_test = vec![false; n];
    for (fi, test) in folds.iter().enumerate() {
        test.iter().for_each(|&i| in_test[i] = true);
        let train_idx: Vec<usize> = (0..n).filter(|&i| !in_test[i]).collect();
        test.iter().for_each(|&i| in_test[i] = false);
        let model = fit(&data.select(&train_idx), Some(&final_model))?;
        let (bm, agg) = score(&data, test, &model, spec.n_max, &mut per_rate);
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
    let (f1_mean, f1_std) = mean_std(&fold_reports.iter().map(|f| f.f1).collect::<Vec<_>>());
    let (acc_mean, acc_std) = mean_std(&fold_reports.iter().map(|f| f.accuracy).collect::<Vec<_>>());
    let rates = rate_reports(&per_rate);

    let name = match a.model {
        ModelKind::Logistic => format!("logistic_m{}{}", spec.m, if spec.sigma { "_sigma" } else { "" }),
        ModelKind::Svm => format!(
            "svm_{}_m{}{}",
            if loss == SvmLoss::Hinge { "hinge" } else { "sqhinge" },
            spec.m,
            if spec.sigma { "_sigma" } else { "" }
        ),
        ModelKind::Threshold => "threshold_m1".to_string(),
    };
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
    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    let model_path = a.output.join(format!("{name}.json"));
    std::fs::write(&model_path, file.to_json()).with_context(|| format!("writing {}", model_path.display()))?;
    let report = serde_json::json!({
        "model": name,
        "model_file": model_path.display().to_string(),
        "spec": spec,
        "folds": fold_reports,
        "f1_mean": f1_mean,
        "f1_std": f1_std,
        "accuracy_mean": acc_mean,
        "accuracy_std": acc_std,
        "per_rate": rates,
        "rows": data.len(),
        "captures": file.training.captures,
    });
    let report_path = a.output.join(format!("{name}.report.json"));
    std::fs::write(&report_path, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", report_path.display()))?;
    let md = render_md(
        &name,
        &format!("{}-fold contiguous CV: F1 {f1_mean:.4} ± {f1_std:.4}", a.folds),
        &rates,
    );
    let md_path = a.output.join(format!("{name}.report.md"));
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    if !ui.quiet {
        print!("{md}");
    }
    ui.info(format!(
        "wrote {}, {}, {}",
        model_path.display(),
        report_path.display(),
        md_path.display()
    ));
    Ok(Exit::Ok)
}

pub(crate) fn render_md(name: &str, headline: &str, rates: &[RateReport]) -> String {
    let mut s = format!("# {name}\n\n{headline}\n\n");
    s.push_str("| rate Mb/s | rows | F1 | precision | recall | accuracy | agg RMSE | agg exact | agg ±1 |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for r in rates {
        s.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.2} | {:.3} | {:.3} |\n",
            if r.rate_mbps.is_nan() {
                "?".into()
            } else {
                format!("{}", r.rate_mbps)
            },
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
    s
}
