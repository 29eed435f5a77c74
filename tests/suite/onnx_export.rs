//! ONNX export checked by real ONNX Runtime (the onnxruntime Python wheel, installed into a venv
//! by scripts/test.sh; the interpreter comes from AGGRATE_PYTHON). Predictions must match ours
//! within 1e-5 on real feature rows.
#![cfg(feature = "onnx")]

use crate::common;

use std::process::Command;

use aggrate::capture::filter::FlowFilter;
use aggrate::capture::io::open_path;
use aggrate::dataset::Dataset;
use aggrate::dataset::RowExtractor;
use aggrate::features::FeatureSpec;
use aggrate::model::{onnx, EstimatorModel, ModelFile, TrainingSummary};
use aggrate::train::{fit_linear_svm, fit_logistic, fit_threshold, LogisticParams, Predict, SvmParams};

fn python() -> String {
    std::env::var("AGGRATE_PYTHON").unwrap_or_else(|_| {
        panic!("AGGRATE_PYTHON is not set: run scripts/test.sh, which sets up a venv with onnxruntime")
    })
}

fn rows(spec: &FeatureSpec) -> Dataset {
    // Rows from the ns-3 sample, with synthetic jitter so that gaps are not all zero inside
    // frames (deterministic: a fixed pattern).
    let mut data = Dataset::new(spec.width());
    let mut ex = RowExtractor::new(*spec, 0).unwrap();
    let f = FlowFilter {
        port: Some(5001),
        ..FlowFilter::default()
    };
    let mut k = 0u64;
    let mut sink = |m: &aggrate::dataset::RowMeta, x: &[f64]| data.push(x, m.first_of_frame, 0, 300.0, m.level);
    for r in open_path(&common::data("ns3_vht_mcs9_2ss_300mbps.pcap.xz"))
        .unwrap()
        .reader
    {
        let r = r.unwrap();
        if f.matches(&r) && k < 6000 {
            k += 1;
            let host = aggrate::Ts(r.host.as_nanos() + (k * 7919 % 5000));
            ex.push(&r, Some(host), &mut sink);
        }
    }
    ex.finish(&mut sink);
    data
}

/// The rows as CSV at full precision (what tests/onnx_check.py reads).
fn write_rows_csv(data: &Dataset, path: &std::path::Path) {
    let csv: String = (0..data.len())
        .map(|i| {
            data.row(i)
                .iter()
                .map(|v| format!("{v:.17e}"))
                .collect::<Vec<_>>()
                .join(",")
                + "\n"
        })
        .collect();
    std::fs::write(path, csv).unwrap();
}

#[test]
fn onnx_runtime_matches_our_predictions() {
    let dir = tempfile::tempdir().unwrap();
    let spec = FeatureSpec::default();
    let data = rows(&spec);
    assert!(data.len() > 5000);
    let models = [
        (
            "logistic",
            EstimatorModel::Logistic(fit_logistic(&data, &LogisticParams::default().check().unwrap()).unwrap()),
        ),
        (
            "svm",
            EstimatorModel::LinearSvm(fit_linear_svm(&data, &SvmParams::default().check().unwrap()).unwrap()),
        ),
        ("threshold", EstimatorModel::Threshold(fit_threshold(&data).unwrap())),
    ];
    write_rows_csv(&data, &dir.path().join("rows.csv"));
    for (name, model) in models {
        let file = ModelFile::new(spec, model, TrainingSummary::default());
        let bytes = onnx::export(&file).unwrap();
        let path = dir.path().join(format!("{name}.onnx"));
        std::fs::write(&path, bytes).unwrap();
        let out = Command::new(python())
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/onnx_check.py"))
            .arg(&path)
            .arg(dir.path().join("rows.csv"))
            .output()
            .expect("running the ONNX Runtime check");
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), data.len());
        let mut worst = 0.0f64;
        for (i, l) in lines.iter().enumerate() {
            let vals: Vec<f64> = l.split(',').map(|v| v.parse().unwrap()).collect();
            let ours = file.model.decision(data.row(i));
            worst = worst.max((vals[0] - ours).abs() / ours.abs().max(1.0));
            if let EstimatorModel::Logistic(m) = &file.model {
                assert!((vals[1] - m.probability(data.row(i))).abs() < 1e-5, "{name} row {i}");
            }
        }
        assert!(worst < 1e-5, "{name}: worst relative decision difference {worst}");
    }
}

#[test]
fn onnx_runtime_matches_our_slot_svr() {
    use aggrate::model::SlotSvrModel;
    use aggrate::train::{fit_svr, SvrParams};
    let dir = tempfile::tempdir().unwrap();
    let spec = FeatureSpec {
        d: 3,
        ..FeatureSpec::default()
    };
    let base = fit_logistic(&rows(&spec), &LogisticParams::default().check().unwrap()).unwrap();
    // Slot rows: [mean, var, count] × 3 with a smooth target (deterministic pattern).
    let n = 300;
    let mut x = Vec::new();
    let mut y = Vec::new();
    for i in 0..n {
        let t = i as f64;
        for s in 0..3 {
            let lvl = 5.0 + 20.0 * ((t + s as f64) / 40.0).sin().abs();
            x.extend_from_slice(&[lvl, 1.0 + (t * 0.37).cos().abs() * 4.0, 100.0 / lvl]);
        }
        y.push(x[i * 9] * 0.9 + 2.0);
    }
    let svr = fit_svr(
        &x,
        9,
        &y,
        &SvrParams {
            c: 10.0,
            gamma: 0.1,
            epsilon: 0.2,
            ..SvrParams::default()
        }
        .check()
        .unwrap(),
    )
    .unwrap();
    assert!(svr.n_support() > 10);
    let csv: String = x
        .chunks(9)
        .map(|r| r.iter().map(|v| format!("{v:.17e}")).collect::<Vec<_>>().join(",") + "\n")
        .collect();
    std::fs::write(dir.path().join("slots.csv"), csv).unwrap();
    let file = ModelFile::new(
        spec,
        EstimatorModel::SlotSvr(SlotSvrModel { base, svr: svr.clone() }),
        TrainingSummary::default(),
    );
    let path = dir.path().join("svr.onnx");
    std::fs::write(&path, onnx::export(&file).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/onnx_check.py"))
        .arg(&path)
        .arg(dir.path().join("slots.csv"))
        .output()
        .expect("running the ONNX Runtime check");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), n);
    for (i, l) in text.lines().enumerate() {
        let theirs: f64 = l.parse().unwrap();
        let ours = svr.predict(&x[i * 9..(i + 1) * 9]);
        assert!((theirs - ours).abs() < 1e-5, "row {i}: ORT {theirs}, ours {ours}");
    }
}

#[test]
fn onnx_runtime_matches_the_shipped_perceptron() {
    perceptron_matches(ModelFile::shipped().unwrap());
}

/// A calibrated perceptron (a threshold per load, as `aggrate calibrate` writes it) in ONNX
/// Runtime: the offset's ramps over the context's `lmean` give the runtime's decisions.
#[test]
fn onnx_runtime_matches_a_calibrated_perceptron() {
    let mut file = ModelFile::shipped().unwrap();
    let data = rows(&file.spec);
    let li = file.spec.width() - 1;
    // Knots inside the rows' load range, so rows fall below, between and above them.
    let mut loads: Vec<f64> = (0..data.len()).map(|i| data.row(i)[li]).collect();
    loads.sort_by(f64::total_cmp);
    let q = |p: f64| loads[((loads.len() - 1) as f64 * p) as usize];
    let knots = vec![[q(0.2), -0.7], [q(0.5) + 1e-3, 0.9], [q(0.8) + 2e-3, 0.1]];
    assert!(knots.windows(2).all(|w| w[0][0] < w[1][0]), "{knots:?}");
    let aggrate::model::EstimatorModel::Mlp(m) = &mut file.model else {
        panic!("the shipped model is a perceptron")
    };
    m.load_offset = Some(aggrate::model::LoadOffset { input: li, knots });
    let shipped = ModelFile::shipped().unwrap();
    let moved = (0..data.len())
        .filter(|&i| (file.model.decision(data.row(i)) - shipped.model.decision(data.row(i))).abs() > 0.05)
        .count();
    assert!(moved > data.len() / 2, "the offset moves most decisions: {moved}");
    perceptron_matches(file);
}

fn perceptron_matches(file: ModelFile) {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(file.model.kind(), "mlp");
    let data = rows(&file.spec);
    assert!(data.len() > 5000);
    write_rows_csv(&data, &dir.path().join("rows.csv"));
    let path = dir.path().join("mlp.onnx");
    std::fs::write(&path, onnx::export(&file).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/onnx_check.py"))
        .arg(&path)
        .arg(dir.path().join("rows.csv"))
        .output()
        .expect("running the ONNX Runtime check");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), data.len());
    let (mut worst, mut flips) = (0.0f64, 0);
    for (i, l) in lines.iter().enumerate() {
        let theirs: f64 = l.split(',').next().unwrap().parse().unwrap();
        let ours = file.model.decision(data.row(i));
        worst = worst.max((theirs - ours).abs() / ours.abs().max(1.0));
        flips += usize::from((theirs > 0.0) != (ours > 0.0) && ours.abs() > 1e-4);
    }
    // An f32 network: sums in another order differ in the last bits, never in a decision.
    assert!(worst < 1e-4, "worst relative decision difference {worst}");
    assert_eq!(flips, 0);
}
