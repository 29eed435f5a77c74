//! Training end to end on the small emulator dataset: contiguous 20-fold CV, reports, model files.

mod common;

use aggrate::model::ModelFile;
use aggrate::train::Predict;
use common::{aggrate, text};

#[test]
fn train_logistic_and_threshold_on_the_small_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/small.toml");
    let o = aggrate(
        dir.path(),
        &["-q", "dataset", "build", manifest.to_str().unwrap(), "--out", "small"],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    for (kind, file) in [("logistic", "logistic_m20_sigma"), ("threshold", "threshold_m1")] {
        let o = aggrate(
            dir.path(),
            &["-q", "train", "--dataset", "small", "--model", kind, "-o", "models"],
        );
        assert!(o.status.success(), "{kind}: {}", text(&o).1);
        let r: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(format!("models/{file}.report.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(r["model"], file);
        assert_eq!(r["folds"].as_array().unwrap().len(), 20);
        // Only the manifest's training runs (100–600 Mb/s), each one a rate row.
        let rates: Vec<f64> = r["per_rate"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["rate_mbps"].as_f64().unwrap())
            .collect();
        assert_eq!(rates, vec![100.0, 200.0, 300.0, 400.0, 500.0, 600.0]);
        for p in r["per_rate"].as_array().unwrap() {
            let (rate, f1) = (p["rate_mbps"].as_f64().unwrap(), p["f1"].as_f64().unwrap());
            assert!(p["agg_rmse"].as_f64().unwrap() >= 0.0);
            if rate <= 300.0 {
                assert!(f1 >= 0.95, "{kind} F1 {f1} at {rate} Mb/s");
            }
            if rate >= 600.0 {
                assert!(f1 < 0.9, "{kind}: past the phone noise knee F1 should drop, got {f1}");
            }
        }
        let f1_mean = r["f1_mean"].as_f64().unwrap();
        assert!(f1_mean > 0.9 && r["f1_std"].as_f64().unwrap() >= 0.0);
        // The model file loads, is small, and predicts.
        let path = dir.path().join(format!("models/{file}.json"));
        assert!(std::fs::metadata(&path).unwrap().len() < 2048);
        let m = ModelFile::load(&path).unwrap();
        let w = m.spec.width();
        let mut row = vec![3.0; w];
        assert!(!m.model.predict_row(&row), "{kind}: small gaps are not a frame start");
        row[0] = 500.0;
        assert!(m.model.predict_row(&row), "{kind}: a 500 µs gap is");
    }
    // Evaluation on the whole dataset (training and held-out rates).
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "eval",
            "--model",
            "models/logistic_m20_sigma.json",
            "small",
            "-o",
            "ev",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("ev/logistic_m20_sigma.eval.json")).unwrap())
            .unwrap();
    let rates: Vec<f64> = r["per_rate"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["rate_mbps"].as_f64().unwrap())
        .collect();
    assert_eq!(
        rates,
        vec![50.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0]
    );
    let f1 = |rate: f64| {
        r["per_rate"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["rate_mbps"] == rate)
            .unwrap()["f1"]
            .as_f64()
            .unwrap()
    };
    assert!(
        f1(50.0) > 0.95 && f1(800.0) < 0.5,
        "50: {}, 800: {}",
        f1(50.0),
        f1(800.0)
    );
    // A missing model file is named in the error.
    let o = aggrate(dir.path(), &["eval", "--model", "missing.json", "small"]);
    assert!(!o.status.success() && text(&o).1.contains("missing.json"));

    // A corrupt model file is refused with its name.
    std::fs::write(
        dir.path().join("bad.json"),
        "{\"format\":\"aggrate-model\",\"version\":1,\"spec\":3}",
    )
    .unwrap();
    let e = ModelFile::load(&dir.path().join("bad.json")).unwrap_err().to_string();
    assert!(e.contains("bad.json"), "{e}");
}
