//! The report of `aggrate sweep` (the study's Figure 13): its points, `sweep.json`, `sweep.csv`
//! and the panels (a) F1 vs m, (b) F1 vs send rate, (c) slot aggregation error vs send rate,
//! (d) predicted vs actual slot level, plus the slot SVR's error vs d.

use std::path::{Path, PathBuf};

use super::plot::{self, Series};
use super::{write_file, WriteError};
use crate::train::cv::SvrStage;

/// One estimator × window of the sweep.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// "logistic", "svm_hinge", "svm_sqhinge" or "threshold".
    pub model: String,
    /// Gaps per row.
    pub m: usize,
    /// With σ.
    pub sigma: bool,
    /// F1, mean over folds.
    pub f1_mean: f64,
    /// F1, standard deviation over folds.
    pub f1_std: f64,
    /// (rate, F1) per send rate.
    pub per_rate_f1: Vec<(f64, f64)>,
}

/// The slot SVR at one d.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DPoint {
    /// Slots per row.
    pub d: usize,
    /// CV slot RMSE with the SVR.
    pub slot_rmse: f64,
    /// CV slot RMSE of the classifier alone.
    pub base_slot_rmse: f64,
    /// Chosen C.
    pub c: f64,
    /// Chosen γ.
    pub gamma: f64,
    /// Chosen ε.
    pub epsilon: f64,
}

/// `sweep.json` (`json`), `sweep.csv` and the PNG panels in `dir`; panels (c) and (d) from the
/// slot SVR stage at d = 5 when there is one. Returns the paths.
pub fn write_sweep(
    dir: &Path,
    json: &serde_json::Value,
    points: &[Point],
    d5: Option<&SvrStage>,
    dpoints: &[DPoint],
) -> Result<Vec<PathBuf>, WriteError> {
    let out = |f: &str| dir.join(f);
    let mut written = vec![write_file(
        dir,
        "sweep.json",
        serde_json::to_string_pretty(json).unwrap_or_default().into_bytes(),
    )?];
    let mut csv = String::from("model,m,sigma,f1_mean,f1_std\n");
    for p in points {
        csv.push_str(&format!("{},{},{},{},{}\n", p.model, p.m, p.sigma, p.f1_mean, p.f1_std));
    }
    written.push(write_file(dir, "sweep.csv", csv.into_bytes())?);
    written.push(fig13a(points, &out("fig13a_f1_vs_m.png"))?);
    // (b) F1 vs send rate: m = 20 + σ and m = 1.
    let series: Vec<Series> = points
        .iter()
        .filter(|p| (p.model == "logistic" && p.m == 20 && p.sigma) || p.model == "threshold")
        .map(|p| {
            let label = if p.model == "threshold" {
                "threshold, m = 1"
            } else {
                "logistic, m = 20 + σ"
            };
            Series::new(label, p.per_rate_f1.clone())
        })
        .collect();
    plot::lines(
        &out("fig13b_f1_vs_rate.png"),
        "(b) F1 vs send rate",
        "send rate (Mb/s)",
        "F1",
        &series,
        Some((0.0, 1.0)),
    )?;
    written.push(out("fig13b_f1_vs_rate.png"));
    if let Some(st) = d5 {
        let pr: Vec<_> = st.per_rate.iter().filter(|r| !r.rate_mbps.is_nan()).collect();
        plot::lines(
            &out("fig13c_agg_vs_rate.png"),
            "(c) slot aggregation RMSE and ±1 accuracy vs send rate",
            "send rate (Mb/s)",
            "RMSE (MPDUs) | accuracy ×10",
            &[
                Series::new(
                    "RMSE, logistic",
                    pr.iter().map(|r| (r.rate_mbps, r.base_rmse)).collect(),
                ),
                Series::new(
                    "RMSE, logistic + SVR",
                    pr.iter().map(|r| (r.rate_mbps, r.svr_rmse)).collect(),
                ),
                Series::new(
                    "±1 accuracy ×10, logistic",
                    pr.iter().map(|r| (r.rate_mbps, 10.0 * r.base_acc_within1)).collect(),
                ),
                Series::new(
                    "±1 accuracy ×10, logistic + SVR",
                    pr.iter().map(|r| (r.rate_mbps, 10.0 * r.svr_acc_within1)).collect(),
                ),
            ],
            None,
        )?;
        written.push(out("fig13c_agg_vs_rate.png"));
        let n = st.rows.len();
        plot::scatter(
            &out("fig13d_pred_vs_actual.png"),
            "(d) predicted vs actual mean aggregation level per slot",
            "actual level",
            "predicted level",
            &[
                Series::new(
                    "logistic",
                    (0..n).map(|i| (st.rows.target[i], st.rows.base_level(i))).collect(),
                ),
                Series::new(
                    "logistic + SVR",
                    (0..n).map(|i| (st.rows.target[i], st.pred[i])).collect(),
                ),
            ],
        )?;
        written.push(out("fig13d_pred_vs_actual.png"));
    }
    if !dpoints.is_empty() {
        plot::lines(
            &out("svr_rmse_vs_d.png"),
            "slot SVR: CV slot RMSE vs d",
            "d (slots per row)",
            "slot RMSE (MPDUs)",
            &[
                Series::new(
                    "logistic + SVR",
                    dpoints.iter().map(|p| (p.d as f64, p.slot_rmse)).collect(),
                ),
                Series::new(
                    "logistic",
                    dpoints.iter().map(|p| (p.d as f64, p.base_slot_rmse)).collect(),
                ),
            ],
            None,
        )?;
        written.push(out("svr_rmse_vs_d.png"));
    }
    Ok(written)
}

/// Panel (a) from the sweep's points: one line per estimator and σ, y zoomed to the data (the
/// differences between m are small).
pub fn fig13a(points: &[Point], path: &Path) -> Result<PathBuf, WriteError> {
    let mut names: Vec<&str> = points
        .iter()
        .filter(|p| p.model != "threshold")
        .map(|p| p.model.as_str())
        .collect();
    names.dedup();
    let mut series = Vec::new();
    for name in names {
        for sigma in [true, false] {
            series.push(Series::new(
                format!("{name}{}", if sigma { " + σ" } else { "" }),
                points
                    .iter()
                    .filter(|p| p.model == name && p.sigma == sigma)
                    .map(|p| (p.m as f64, p.f1_mean))
                    .collect(),
            ));
        }
    }
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| (a.min(y), b.max(y)));
    let range = if lo.is_finite() {
        let pad = ((hi - lo) * 0.2).max(0.002);
        Some((lo - pad, hi + pad))
    } else {
        None
    };
    plot::lines(
        path,
        "(a) F1 vs window length m (mean over folds)",
        "m (gaps)",
        "F1",
        &series,
        range,
    )?;
    Ok(path.to_path_buf())
}
