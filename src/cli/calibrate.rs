//! `aggrate calibrate`: set a model's operating point for one receiver from a short labelled
//! stretch of it (a sniffer capture joined with the receiver's kernel log), and write the model.

use std::path::PathBuf;

use anyhow::{Context, Result};

use aggrate::model::ModelFile;
use aggrate::report::calibration_md;
use aggrate::train::calibrate::calibrate;

use super::progress::Ui;
use super::rows::{inputs, load_rows};
use super::{ensure_parent, Exit, FlowArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct CalibrateArgs {
    /// Model to calibrate (default: the shipped estimator embedded in the binary).
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// Sniffer captures of the receiver (with radiotap A-MPDU ground truth), dataset folders or
    /// feature tables; a few seconds at each rate the receiver will see is enough.
    #[arg(required = true)]
    pub(crate) inputs: Vec<PathBuf>,
    /// The receiver's kernel receive times, joined to the captures by sequence number: one
    /// `seq,host_ns` CSV or receiver-side capture per capture (in order), or a folder of them
    /// named after the captures. Without it the captures' own timestamps are the receiver's.
    #[arg(long, num_args = 1..)]
    pub(crate) kernel: Vec<PathBuf>,
    /// Share of each capture (its first rows) to set the threshold on. Below 1 the rest scores
    /// the model before and after, on packets the threshold was not chosen on.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) share: f64,
    /// The calibrated model file to write.
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

pub(crate) fn run(ui: &Ui, a: CalibrateArgs) -> Result<Exit> {
    let (mut file, name) = match &a.model {
        Some(p) => (
            ModelFile::load(p)?,
            p.file_stem()
                .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
        ),
        None => (
            ModelFile::shipped()?,
            aggrate::model::SHIPPED_NAME.trim_end_matches(".json").to_string(),
        ),
    };
    let spec = file.spec;
    let files = inputs(&a.inputs, false, &a.kernel)?;
    let data = load_rows(ui, &files, &spec, &a.flow)?;
    let (model, cal) = calibrate(&data, &file.model, &spec, a.share).context("calibrating")?;
    // With the threshold from every row, the gain is measured on the rows it was chosen on:
    // check it on a split too (first half of each capture → second half).
    let check = if a.share >= 1.0 {
        calibrate(&data, &file.model, &spec, 0.5).ok().map(|(_, c)| c)
    } else {
        None
    };
    file.model = model;
    let report = serde_json::json!({
        "from": a.model.as_ref().map_or(format!("{name} (shipped)"), |p| p.display().to_string()),
        "captures": files.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
        "kernel_logs": files.iter().filter_map(|f| f.kernel.as_ref().map(|k| k.display().to_string())).collect::<Vec<_>>(),
        "calibration": cal,
        "half_split_check": check,
    });
    file.set_metric("calibration", report);
    ensure_parent(&a.output)?;
    std::fs::write(&a.output, file.to_json()).with_context(|| format!("writing {}", a.output.display()))?;
    let md = calibration_md(&name, &cal, check.as_ref());
    let md_path = a.output.with_extension("calibration.md");
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    if !ui.quiet {
        print!("{md}");
    }
    ui.info(format!("wrote {} and {}", a.output.display(), md_path.display()));
    Ok(Exit::Ok)
}
