//! notebooks/training.ipynb runs headless (nbclient, in the venv scripts/test.sh sets up, with the
//! `aggrate` Python package it installs) on the small dataset: the captures (read in the notebook
//! by `aggrate.read_capture`), a slot-SVR report and a reduced sweep made here by the CLI. A
//! renamed column, package function or report field fails this test.

use crate::common;

use std::process::Command;

use common::{aggrate, text};

#[test]
fn training_notebook_executes_on_the_small_dataset() {
    let py = std::env::var("AGGRATE_PYTHON")
        .expect("AGGRATE_PYTHON is not set: run scripts/test.sh, which sets up a venv with nbclient and polars");
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = root.join("datasets/small.toml");
    let run = |args: &[&str]| {
        let o = aggrate(dir.path(), args);
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
    };
    run(&["-q", "dataset", "build", manifest.to_str().unwrap(), "--out", "small"]);
    let captures: Vec<String> = std::fs::read_dir(dir.path().join("small"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng"))
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(captures.len(), 9);
    run(&[
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
        "--folds",
        "4",
        "-o",
        "models",
    ]);
    run(&[
        "-q",
        "sweep",
        "--dataset",
        "small",
        "--m",
        "1,5,20",
        "--models",
        "logistic",
        "--d",
        "3",
        "--slot-ms",
        "20",
        "--folds",
        "5",
        "-o",
        "sweep",
    ]);
    let out = Command::new(&py)
        .arg(root.join("tests/run_notebook.py"))
        .arg(root.join("notebooks/training.ipynb"))
        .arg(dir.path().join("executed.ipynb"))
        .arg(dir.path())
        .env("AGGRATE_CAPTURES", dir.path().join("small"))
        .env(
            "AGGRATE_REPORT",
            dir.path().join("models/slot_svr_m20_sigma_d3.report.json"),
        )
        .env("AGGRATE_SWEEP", dir.path().join("sweep/sweep.json"))
        .env("AGGRATE_NB_OUT", dir.path().join("figures"))
        .output()
        .expect("running the notebook");
    assert!(
        out.status.success(),
        "notebook failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["gaps_per_rate", "fig13a", "fig13b", "fig13c", "fig13d"] {
        let b = std::fs::read(dir.path().join(format!("figures/{f}.png"))).unwrap();
        assert!(b.starts_with(b"\x89PNG") && b.len() > 5_000, "{f}");
    }
    // The sweep's own PNG panels too.
    for f in [
        "fig13a_f1_vs_m",
        "fig13b_f1_vs_rate",
        "fig13c_agg_vs_rate",
        "fig13d_pred_vs_actual",
    ] {
        let b = std::fs::read(dir.path().join(format!("sweep/{f}.png"))).unwrap();
        assert!(b.starts_with(b"\x89PNG"), "{f}");
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sweep/sweep.json")).unwrap()).unwrap();
    // 3 m × 2 σ logistic + the threshold.
    assert_eq!(s["points"].as_array().unwrap().len(), 7);
}
