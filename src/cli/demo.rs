//! `aggrate demo`: the main job on embedded defaults — inspect the embedded ns-3 802.11ac sample,
//! write its feature table, build the small emulator dataset, train and cross-validate the
//! logistic estimator, the m = 1 baseline and the slot SVR on it, export the logistic model to
//! ONNX (default feature `onnx`), run the closed loop on a virtual clock against a Cubic-like
//! baseline, then a live closed loop over loopback UDP through `aggrate ap` — both loops
//! estimating with the shipped model embedded in the binary.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::features::FeaturesArgs;
use super::inspect::InspectArgs;
use super::progress::Ui;
use super::train::TrainArgs;
use super::{Exit, FlowArgs};

/// The ns-3.37 802.11ac sample (VHT MCS 9, 2 SS, 80 MHz, SGI, 300 Mb/s UDP), xz-compressed.
const SAMPLE: &[u8] = include_bytes!("../../tests/data/ns3_vht_mcs9_2ss_300mbps.pcap.xz");
/// The demo dataset recipe.
const SMALL: &str = include_str!("../../datasets/small.toml");

#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Where to write the demo's files.
    #[arg(long, default_value = "aggrate-demo")]
    pub(crate) out: PathBuf,
    /// Seconds of the live loop over loopback (0: skip it).
    #[arg(long, default_value_t = 20.0)]
    pub(crate) live_seconds: f64,
    /// Folds of the cross-validation (contiguous blocks per capture; 2..=20).
    #[arg(long, default_value_t = 20)]
    pub(crate) folds: usize,
}

pub(crate) fn run(ui: &Ui, a: DemoArgs) -> Result<Exit> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let capture = a.out.join("ns3_vht_mcs9_2ss_300mbps.pcap.xz");
    std::fs::write(&capture, SAMPLE).with_context(|| format!("writing {}", capture.display()))?;
    let flow = FlowArgs {
        mac: None,
        ip: None,
        port: None,
        proto: None,
        n_max: 64,
        keep_going: false,
    };
    ui.info(format!("== 1. inspect the ns-3 sample {}", capture.display()));
    super::inspect::run(
        ui,
        InspectArgs {
            capture: capture.clone(),
            json: false,
            flow: flow.clone(),
        },
    )?;
    let output = a.out.join("ns3_features.parquet");
    ui.info(format!("== 2. its features → {}", output.display()));
    super::features::run(
        ui,
        FeaturesArgs {
            captures: vec![capture],
            output,
            format: None,
            compression: super::features::CompressionArg::Zstd,
            m: 20,
            no_sigma: false,
            context: 0,
            rate_mbps: None,
            kernel: None,
            seq_offset: 0,
            flow: flow.clone(),
        },
    )?;
    let data = a.out.join("data/small");
    ui.info(format!(
        "== 3. emulate the small dataset (datasets/small.toml) → {}",
        data.display()
    ));
    let m = super::dataset::parse_manifest(SMALL, std::path::Path::new("datasets/small.toml"))?;
    super::dataset::build(
        ui,
        &m,
        std::path::Path::new("datasets/small.toml"),
        Some(data.clone()),
        None,
    )?;
    if !(2..=20).contains(&a.folds) {
        anyhow::bail!("--folds {}: 2..=20", a.folds);
    }
    let models = a.out.join("models");
    for (model, extra) in [
        ("logistic", &[][..]),
        ("threshold", &[][..]),
        // The small dataset's captures last 0.4–2.4 s: shorter slots than the paper's 100 ms.
        ("svr", &["--slot-ms", "20", "--d", "3"][..]),
    ] {
        ui.info(format!("== 4. train + {}-fold CV: {model}", a.folds));
        let mut argv: Vec<String> = ["train", "--model", model, "--folds", &a.folds.to_string(), "--dataset"]
            .map(String::from)
            .to_vec();
        argv.push(data.display().to_string());
        argv.push("-o".into());
        argv.push(models.display().to_string());
        argv.extend(extra.iter().map(|s| s.to_string()));
        super::train::run(ui, TrainArgs::from_argv(&argv)?)?;
    }
    #[cfg(feature = "onnx")]
    {
        let logistic = models.join("logistic_m20_sigma.json");
        ui.info("== 5. export the logistic model to ONNX");
        let f = aggrate::model::ModelFile::load(&logistic)?;
        let bytes = aggrate::model::onnx::export(&f)?;
        let p = models.join("logistic_m20_sigma.onnx");
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
    }
    #[cfg(not(feature = "onnx"))]
    ui.info("== 5. ONNX export skipped: this binary was built without the `onnx` feature (on by default)");
    // The closed loops use the shipped model (trained across receivers, embedded in the binary);
    // the one trained above has seen a single receiver.
    let shipped = models.join(aggrate::model::SHIPPED_NAME);
    std::fs::write(&shipped, aggrate::model::SHIPPED_JSON).with_context(|| format!("writing {}", shipped.display()))?;
    ui.info(format!(
        "== 6. closed loop on a virtual clock: aggrate vs a Cubic-like sender, 1 station, 30 s, phone kernel noise, estimator {}",
        shipped.display()
    ));
    let mut argv: Vec<String> = ["sim", "--compare", "--duration", "30", "--noise", "phone", "--model"]
        .map(String::from)
        .to_vec();
    argv.push(shipped.display().to_string());
    argv.push("-o".into());
    argv.push(a.out.join("sim").display().to_string());
    super::sim::run_cmd(ui, super::sim::SimArgs::from_argv(&argv)?)?;
    if a.live_seconds > 0.0 {
        ui.info(format!(
            "== 7. live loop over loopback for {} s: sender → aggrate ap (VHT MCS 9) → receiver (shipped model)",
            a.live_seconds
        ));
        let rows = super::live::live_loop(
            ui,
            None,
            9,
            std::time::Duration::from_secs_f64(a.live_seconds),
            &a.out.join("live"),
        )?;
        if rows.is_empty() {
            ui.warn("the live loop produced no reports");
        }
    }
    ui.info(format!("demo done: everything is in {}", a.out.display()));
    Ok(Exit::Ok)
}
