//! `aggrate export`: a model file → ONNX (build with `--features onnx`).

use std::path::PathBuf;

#[cfg(feature = "onnx")]
use anyhow::Context;
use anyhow::Result;

use aggrate::model::ModelFile;

use super::progress::Ui;
use super::Exit;

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// Model file written by `aggrate train`.
    pub(crate) model: PathBuf,
    /// Write an ONNX model here.
    #[arg(long)]
    pub(crate) onnx: PathBuf,
}

#[cfg(feature = "onnx")]
pub(crate) fn run(ui: &Ui, a: ExportArgs) -> Result<Exit> {
    let file = ModelFile::load(&a.model)?;
    let bytes = aggrate::model::onnx::export(&file).with_context(|| a.model.display().to_string())?;
    super::ensure_parent(&a.onnx)?;
    std::fs::write(&a.onnx, &bytes).with_context(|| format!("writing {}", a.onnx.display()))?;
    ui.info(format!(
        "wrote {} ({} bytes): input x double[N, {}]",
        a.onnx.display(),
        bytes.len(),
        file.spec.width()
    ));
    Ok(Exit::Ok)
}

#[cfg(not(feature = "onnx"))]
pub(crate) fn run(_ui: &Ui, a: ExportArgs) -> Result<Exit> {
    let _ = ModelFile::load(&a.model)?;
    anyhow::bail!("this aggrate was built without ONNX export: rebuild with `--features onnx`")
}
