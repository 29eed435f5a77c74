//! ONNX export checked by real ONNX Runtime (the onnxruntime Python wheel, installed into a venv
//! by scripts/test.sh; the interpreter comes from AGGRATE_PYTHON). Predictions must match ours
//! within 1e-5 on real feature rows.
#![cfg(feature = "onnx")]

mod common;

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
    std::fs::write(dir.path().join("rows.csv"), csv).unwrap();
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
