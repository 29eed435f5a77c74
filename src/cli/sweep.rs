//! `aggrate sweep`: the study's sweeps in one run, and its Figure 13.
//!
//! Reads the captures once at the widest m, then for every m (with and without σ) and every
//! estimator (logistic, linear SVM with hinge and squared hinge, and the m = 1 threshold) runs
//! the contiguous k-fold CV; then, on the out-of-fold predictions of logistic m = 20 + σ, the
//! slot SVR for every d. Writes sweep.json, sweep.csv and the four panels:
//! (a) F1 vs m, (b) F1 vs send rate for m = 20 and m = 1, (c) slot aggregation RMSE and ±1
//! accuracy vs send rate with and without the SVR, (d) predicted vs actual slot level.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use aggrate::features::FeatureSpec;
use aggrate::metrics::mean_std;
use aggrate::train::{LogisticParams, SvmLoss, SvmParams, SVR_GRID_C, SVR_GRID_EPSILON, SVR_GRID_GAMMA};

use super::progress::Ui;
use aggrate::report::sweep::{DPoint, Point};
use aggrate::train::cv::{packet_cv, rate_reports, Fitter, PacketCv};

use super::progress::Bars;
use super::{inputs, load_rows, svr_stage};
use super::{Exit, FlowArgs};
use aggrate::train::cv::SvrStage;

/// Estimators a sweep can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SweepModel {
    /// Logistic regression.
    Logistic,
    /// Linear SVM, hinge loss.
    SvmHinge,
    /// Linear SVM, squared hinge loss.
    SvmSqhinge,
}

impl SweepModel {
    fn name(self) -> &'static str {
        match self {
            SweepModel::Logistic => "logistic",
            SweepModel::SvmHinge => "svm_hinge",
            SweepModel::SvmSqhinge => "svm_sqhinge",
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct SweepArgs {
    /// A dataset folder (its manifest's training runs) or capture files.
    #[arg(long, required = true, num_args = 1..)]
    pub(crate) dataset: Vec<PathBuf>,
    /// Output folder.
    #[arg(short, long, default_value = "sweep")]
    pub(crate) output: PathBuf,
    /// Folds (contiguous blocks per capture).
    #[arg(long, default_value_t = 20)]
    pub(crate) folds: usize,
    /// Values of m.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 5, 10, 20, 30, 40, 50])]
    pub(crate) m: Vec<usize>,
    /// Estimators.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [SweepModel::Logistic, SweepModel::SvmHinge, SweepModel::SvmSqhinge])]
    pub(crate) models: Vec<SweepModel>,
    /// Slots per SVR row (d) to try, on logistic m = 20 + σ.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 3, 5, 8])]
    pub(crate) d: Vec<usize>,
    /// Slot length (ms).
    #[arg(long, default_value_t = 100)]
    pub(crate) slot_ms: u64,
    /// SVM epochs cap (dual coordinate descent).
    #[arg(long, default_value_t = 50)]
    pub(crate) svm_epochs: usize,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

pub(crate) fn run(ui: &Ui, a: SweepArgs) -> Result<Exit> {
    if a.m.is_empty() || a.models.is_empty() {
        bail!("--m and --models need at least one value each");
    }
    if !(2..=100).contains(&a.folds) {
        bail!("--folds = {}: 2..=100", a.folds);
    }
    let wide_m = *a.m.iter().max().unwrap_or(&20).max(&20);
    let wide = FeatureSpec {
        m: wide_m,
        sigma: false,
        n_max: a.flow.n_max,
        slot_ns: a.slot_ms.max(1) * 1_000_000,
        ..FeatureSpec::default()
    }
    .check()?;
    for &d in &a.d {
        FeatureSpec { d, ..wide }.check()?;
    }
    let files = inputs(&a.dataset, true, &[])?;
    ui.info(format!("reading {} captures at m = {wide_m}", files.len()));
    let data = load_rows(ui, &files, &wide, &a.flow)?;
    ui.info(format!("{} rows", data.len()));
    let logistic = LogisticParams::default().check()?;
    let mut points = Vec::new();
    let mut oof_m20 = None;
    let configs: Vec<(SweepModel, usize, bool)> = a
        .models
        .iter()
        .flat_map(|&mo| a.m.iter().flat_map(move |&m| [(mo, m, true), (mo, m, false)]))
        .collect();
    let total = configs.len() + 1;
    for (k, (mo, m, sigma)) in configs.into_iter().enumerate() {
        ui.info(format!(
            "[{}/{total}] {} m = {m}{}",
            k + 1,
            mo.name(),
            if sigma { " + σ" } else { "" }
        ));
        let sub = data.narrowed(wide_m, m, sigma);
        let svm = |loss| {
            SvmParams {
                loss,
                max_epochs: a.svm_epochs,
                ..SvmParams::default()
            }
            .check()
        };
        let (hinge, sq) = (svm(SvmLoss::Hinge)?, svm(SvmLoss::SquaredHinge)?);
        let how = match mo {
            SweepModel::Logistic => Fitter::Logistic(logistic),
            SweepModel::SvmHinge => Fitter::Svm(hinge),
            SweepModel::SvmSqhinge => Fitter::Svm(sq),
        };
        let cv = packet_cv(&sub, a.folds, wide.n_max, how, &mut Bars::new(ui))?;
        points.push(point(mo.name(), m, sigma, &cv));
        if mo == SweepModel::Logistic && m == 20 && sigma {
            oof_m20 = Some(cv.oof);
        }
    }
    ui.info(format!("[{total}/{total}] threshold m = 1"));
    let sub = data.narrowed(wide_m, 1, false);
    let cv = packet_cv(&sub, a.folds, wide.n_max, Fitter::Threshold, &mut Bars::new(ui))?;
    points.push(point("threshold", 1, false, &cv));

    // The slot SVR over d, on logistic m = 20 + σ.
    let grid = aggrate::train::svr_grid(&SVR_GRID_C, &SVR_GRID_GAMMA, &SVR_GRID_EPSILON)?;
    let (dpoints, d5) = svr_over_d(ui, &a, &data, &wide, oof_m20.as_deref(), &grid);

    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    let json = serde_json::json!({
        "folds": a.folds,
        "rows": data.len(),
        "points": points,
        "svr_d": dpoints,
        "captures": files.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
    });
    aggrate::report::sweep::write_sweep(&a.output, &json, &points, d5.as_ref(), &dpoints)?;
    if !ui.quiet {
        outln!("| model | m | σ | F1 (mean ± std over folds) |");
        outln!("| --- | --- | --- | --- |");
        for p in &points {
            outln!(
                "| {} | {} | {} | {:.4} ± {:.4} |",
                p.model,
                p.m,
                if p.sigma { "yes" } else { "no" },
                p.f1_mean,
                p.f1_std
            );
        }
        for p in &dpoints {
            outln!(
                "slot SVR d = {}: slot RMSE {:.3} (logistic alone {:.3}; C = {}, γ = {}, ε = {})",
                p.d,
                p.slot_rmse,
                p.base_slot_rmse,
                p.c,
                p.gamma,
                p.epsilon
            );
        }
    }
    ui.info(format!(
        "wrote sweep.json, sweep.csv and figures to {}",
        a.output.display()
    ));
    Ok(Exit::Ok)
}

/// The slot SVR stage at each `--d` on the logistic m = 20 + σ out-of-fold predictions (panels
/// c and d): a point per d, and the stage at d = 5 (else the first) for the plots.
fn svr_over_d(
    ui: &Ui,
    a: &SweepArgs,
    data: &aggrate::dataset::Dataset,
    wide: &FeatureSpec,
    oof: Option<&[bool]>,
    grid: &[aggrate::train::ValidSvrParams],
) -> (Vec<DPoint>, Option<SvrStage>) {
    let mut dpoints = Vec::new();
    let mut d5: Option<SvrStage> = None;
    if let Some(oof) = oof {
        for &d in &a.d {
            ui.info(format!("slot SVR d = {d}"));
            let spec = FeatureSpec { d, ..*wide };
            match svr_stage(ui, data, oof, &spec, a.folds, grid) {
                Ok(st) => {
                    dpoints.push(DPoint {
                        d,
                        slot_rmse: st.svr_rmse,
                        base_slot_rmse: st.base_rmse,
                        c: st.params.c,
                        gamma: st.params.gamma,
                        epsilon: st.params.epsilon,
                    });
                    if d == 5 || d5.is_none() {
                        d5 = Some(st);
                    }
                }
                Err(e) => ui.warn(format!("slot SVR d = {d}: {e:#}")),
            }
        }
    } else {
        ui.warn("no logistic m = 20 + σ in the sweep: skipping the slot SVR (panels c, d)");
    }

    (dpoints, d5)
}

fn point(model: &str, m: usize, sigma: bool, cv: &PacketCv) -> Point {
    let (f1_mean, f1_std) = mean_std(&cv.folds.iter().map(|f| f.f1).collect::<Vec<_>>());
    Point {
        model: model.into(),
        m,
        sigma,
        f1_mean,
        f1_std,
        per_rate_f1: rate_reports(&cv.per_rate)
            .iter()
            .filter(|r| !r.rate_mbps.is_nan())
            .map(|r| (r.rate_mbps, r.f1))
            .collect(),
    }
}
