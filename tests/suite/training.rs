//! Training end to end on the small emulator dataset: contiguous 20-fold CV, reports, model files.

use crate::common;

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

#[test]
fn slot_svr_corrects_the_level_at_high_load_and_writes_plots() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/small.toml");
    let o = aggrate(
        dir.path(),
        &["-q", "dataset", "build", manifest.to_str().unwrap(), "--out", "small"],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    // The small captures last 0.4–2.4 s: 20 ms slots, d = 3.
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "train",
            "--dataset",
            "small",
            "--model",
            "svr",
            "--slot-ms",
            "20",
            "--d",
            "3",
            // 4 folds, not the captures' 17: the SVR's CV is most of this test's time.
            "--folds",
            "4",
            "-o",
            "models",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let name = "slot_svr_m20_sigma_d3";
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("models/{name}.report.json"))).unwrap())
            .unwrap();
    assert_eq!(r["kind"], "slot_svr");
    let s = &r["slot_svr"];
    assert!(
        s["grid"].as_array().unwrap().len() == 48,
        "default grid: 4 C × 4 γ × 3 ε"
    );
    // The SVR is chosen by CV RMSE: never worse than any grid point, and better than no
    // correction overall.
    let best = s["slot_rmse"].as_f64().unwrap();
    assert!(s["grid"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["slot_rmse"].as_f64().unwrap() >= best));
    assert!(best < s["base_slot_rmse"].as_f64().unwrap());
    // Past the knee (500–600 Mb/s) the correction cuts the slot RMSE severalfold.
    for p in r["per_rate"].as_array().unwrap() {
        let rate = p["rate_mbps"].as_f64().unwrap();
        let sl = &p["slot"];
        let (base, svr) = (sl["base_rmse"].as_f64().unwrap(), sl["svr_rmse"].as_f64().unwrap());
        if rate >= 500.0 {
            assert!(base > 2.0 * svr, "{rate} Mb/s: logistic {base}, SVR {svr}");
        }
    }
    // Per-rate CSV: header + 6 rates; plots are real PNGs.
    let csv = std::fs::read_to_string(dir.path().join(format!("models/{name}.per_rate.csv"))).unwrap();
    assert_eq!(csv.lines().count(), 7);
    assert!(csv.lines().nth(1).unwrap().starts_with("100,"));
    for png in ["f1_vs_rate", "agg_vs_rate", "pred_vs_actual"] {
        let b = std::fs::read(dir.path().join(format!("models/{name}.{png}.png"))).unwrap();
        assert!(
            b.starts_with(b"\x89PNG") && b.len() > 10_000,
            "{png}: {} bytes",
            b.len()
        );
    }
    // The model file carries both parts, loads, and `eval` reports slot metrics with it.
    let m = ModelFile::load(&dir.path().join(format!("models/{name}.json"))).unwrap();
    let svr = m.model.slot_svr().expect("slot SVR inside");
    assert_eq!(svr.width(), 9);
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "eval",
            "--model",
            &format!("models/{name}.json"),
            "small",
            "-o",
            "ev",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("ev/{name}.eval.json"))).unwrap())
            .unwrap();
    assert!(e["slot_svr"]["rows"].as_u64().unwrap() > 100);
    assert!(e["slot_svr"]["slot_rmse"].as_f64().unwrap() < e["slot_svr"]["base_slot_rmse"].as_f64().unwrap());
    // Too-short captures for the slot layout: a clear error, not a panic.
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "train",
            "--dataset",
            "small",
            "--model",
            "svr",
            "--slot-ms",
            "1000",
            "-o",
            "m2",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o).1);
    assert!(text(&o).1.contains("slot"), "{}", text(&o).1);
}
