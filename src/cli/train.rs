//! `aggrate train`: captures → labelled rows → contiguous k-fold CV → report.json / report.md →
//! the final model fitted on all rows, saved as a versioned model file.

use anyhow::{bail, Context, Result};

use aggrate::dataset::Dataset;
use aggrate::features::FeatureSpec;
use aggrate::metrics::mean_std;
use aggrate::model::{EstimatorModel, ModelFile, SlotSvrModel, TrainingSummary};
use aggrate::train::cv::{packet_cv, rate_reports, receiver_cv, Fitter};
use aggrate::train::{LogisticParams, MlpParams, MlpSolver, SvmLoss, SvmParams};
use aggrate::wlan::manifest::WlanSettings;

use super::progress::{Bars, Ui};
use super::{inputs, load_rows, svr_stage};
use super::{Exit, FlowArgs};

mod args;
mod receivers;
use aggrate::pipeline::Input;
pub(crate) use args::TrainArgs;
use args::{GroupBy, LossArg, ModelKind, SolverArg};
use receivers::{like_selection, receiver_run};

/// The checked feature spec for a model kind and its flags.
fn spec_for(a: &TrainArgs) -> Result<FeatureSpec> {
    let context = a.context.unwrap_or(if a.model == ModelKind::Mlp { 1024 } else { 0 });
    let (m, sigma) = match a.model {
        ModelKind::Threshold => (1, false),
        _ => (a.m, !a.no_sigma && context == 0),
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
        context,
        ..FeatureSpec::default()
    }
    .check()?)
}

/// File stem of a trained model.
fn model_name(a: &TrainArgs, spec: &FeatureSpec, loss: SvmLoss) -> String {
    let sig = if spec.sigma {
        "_sigma".to_string()
    } else if spec.context > 0 {
        format!("_ctx{}", spec.context)
    } else {
        String::new()
    };
    match a.model {
        ModelKind::Logistic => format!("logistic_m{}{sig}", spec.m),
        ModelKind::Svm => format!(
            "svm_{}_m{}{sig}",
            if loss == SvmLoss::Hinge { "hinge" } else { "sqhinge" },
            spec.m
        ),
        ModelKind::Threshold => "threshold_m1".to_string(),
        ModelKind::Svr => format!("slot_svr_m{}{sig}_d{}", spec.m, spec.d),
        ModelKind::Mlp => format!("mlp{}_m{}{sig}", a.hidden, spec.m),
    }
}

/// The fitter the flags ask for, each hyper-parameter checked; the slot SVR's grid (empty for
/// the other kinds) and the SVM loss (for the model's name).
fn fitter(a: &TrainArgs, spec: &FeatureSpec) -> Result<(Fitter, Vec<aggrate::train::ValidSvrParams>, SvmLoss)> {
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
        aggrate::train::svr_grid(&a.svr_c, &a.svr_gamma, &a.svr_epsilon)?
    } else {
        Vec::new()
    };
    let mlp = MlpParams {
        hidden: a.hidden,
        epochs: a.epochs,
        max_rows_per_epoch: a.max_rows,
        seed: a.seed,
        balanced: a.balanced,
        weight_decay: a.weight_decay,
        skip: a.skip,
        solver: match a.solver {
            SolverArg::Adam => MlpSolver::Adam,
            SolverArg::Lbfgs => MlpSolver::Lbfgs,
        },
        max_iter: a.max_iter,
        slow_inputs: if spec.context > 0 {
            aggrate::features::CONTEXT_EXTRA
        } else {
            0
        },
        ..MlpParams::default()
    }
    .check()?;
    let how = match a.model {
        ModelKind::Logistic | ModelKind::Svr => Fitter::Logistic(params),
        ModelKind::Svm => Fitter::Svm(svm),
        ModelKind::Threshold => Fitter::Threshold,
        ModelKind::Mlp => Fitter::Mlp(mlp),
    };
    Ok((how, grid, loss))
}

pub(crate) fn run(ui: &Ui, a: TrainArgs) -> Result<Exit> {
    let spec = spec_for(&a)?;
    a.check()?;
    let (how, grid, loss) = fitter(&a, &spec)?;
    let mut files = inputs(&a.dataset, true, &a.kernel)?;
    // Test receivers' inputs follow the training ones (`receiver_run` tells them apart by index).
    let trained_on = files.len();
    if !a.test.is_empty() {
        files.extend(inputs(&a.test, true, &[])?);
    }
    ui.info(format!("reading {} captures", files.len()));
    let data = load_rows(ui, &files, &spec, &a.flow)?;
    ui.info(format!(
        "{} rows, {} frame starts",
        data.len(),
        data.y.iter().filter(|y| **y).count()
    ));
    let (data, like) = if a.like.is_empty() {
        (data, None)
    } else {
        let (d, l) = like_selection(ui, &a, &spec, &files, data)?;
        (d, Some(l))
    };
    if a.group_by == GroupBy::Receiver {
        if a.model == ModelKind::Svr {
            bail!("--group-by receiver scores per-packet models; train the slot SVR with --group-by capture");
        }
        return receiver_run(ui, &a, &spec, (&files, trained_on), &data, how);
    }
    capture_run(ui, &a, &spec, &files, &data, like, how, &grid, loss)
}

/// `--group-by capture`: contiguous-fold CV, the final model (with the slot SVR stage), the
/// model file and its reports.
#[allow(clippy::too_many_arguments)]
fn capture_run(
    ui: &Ui,
    a: &TrainArgs,
    spec: &FeatureSpec,
    files: &[Input],
    data: &Dataset,
    like: Option<serde_json::Value>,
    how: Fitter,
    grid: &[aggrate::train::ValidSvrParams],
    loss: SvmLoss,
) -> Result<Exit> {
    let cv = packet_cv(data, a.folds, spec.n_max, how, &mut Bars::new(ui))?;
    let (f1_mean, f1_std) = mean_std(&cv.folds.iter().map(|f| f.f1).collect::<Vec<_>>());
    let (acc_mean, acc_std) = mean_std(&cv.folds.iter().map(|f| f.accuracy).collect::<Vec<_>>());
    let mut rates = rate_reports(&cv.per_rate);
    let name = model_name(a, spec, loss);

    let mut final_model = cv.final_model;
    let mut slot_json = serde_json::Value::Null;
    let mut headline = format!("{}-fold contiguous CV: F1 {f1_mean:.4} ± {f1_std:.4}", a.folds);
    if let Some(mu) = &cv.mu_n {
        headline = format!(
            "{headline}; μ_N per 100 ms (packets ÷ predicted starts): bias {:+.1} %, median |error| {:.1} %",
            100.0 * mu.bias,
            100.0 * mu.mae_rel_median
        );
    }
    let mut slot_stage = None;
    if a.model == ModelKind::Svr {
        let EstimatorModel::Logistic(base) = final_model else {
            bail!("internal: the SVR's base model is not logistic");
        };
        let st = svr_stage(ui, data, &cv.oof, spec, a.folds, grid)?;
        aggrate::train::cv::attach_slots(&mut rates, &st.per_rate);
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
        *spec,
        final_model,
        TrainingSummary {
            rows: data.len() as u64,
            positives: data.y.iter().filter(|y| **y).count() as u64,
            captures: files.iter().map(|f| f.name()).collect(),
            rates_mbps: rates_seen,
        },
    );
    file.metrics =
        serde_json::json!({ "cv_folds": a.folds, "f1_mean": f1_mean, "f1_std": f1_std, "accuracy_mean": acc_mean });
    if let Some(l) = like {
        file.metrics["like"] = l;
    }
    note_training_wlan(&mut file, files, &a.flow)?;
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
        "mu_n": cv.mu_n,
        "per_rate": rates,
        "slot_svr": slot_json,
        "rows": data.len(),
        "captures": file.training.captures,
    });
    let written =
        aggrate::report::write_model_reports(&a.output, &name, &headline, &report, &rates, slot_stage.as_ref())?;
    if !ui.quiet {
        out!("{}", aggrate::report::rates_md(&name, &headline, &rates));
    }
    ui.info(format!("wrote {} and {}", model_path.display(), list(&written)));
    Ok(Exit::Ok)
}

/// Record the WLAN the training captures were sent over (`metrics.training_wlan`), where they
/// say it, so that `eval` can warn when it scores the model on another.
fn note_training_wlan(file: &mut ModelFile, files: &[Input], flow: &FlowArgs) -> Result<()> {
    let seen = flow.seen_wlan(files)?;
    if !seen.is_empty() {
        file.metrics["training_wlan"] = serde_json::to_value(seen)?;
    }
    Ok(())
}

/// Paths as "a, b, c" for the closing line.
pub(super) fn list(paths: &[std::path::PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
