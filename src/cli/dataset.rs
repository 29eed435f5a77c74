//! `aggrate dataset build MANIFEST`: regenerate a dataset of emulator captures from a TOML recipe
//! into `data/<name>/`, with a `manifest.json` of what was built.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::testbed::KernelPath;
use aggrate::wlan::manifest::{BuiltDataset, BuiltRun, DatasetManifest, PlannedReceiver};
use aggrate::wlan::run::RunSummary;

use super::progress::Ui;
use super::{ensure_parent, inputs, load_rows, Exit, FlowArgs};
use super::{simulate_replayed, simulate_to};
use aggrate::train::bank::Bank;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum DatasetCommand {
    /// Build a dataset from its manifest (e.g. datasets/small.toml).
    Build {
        /// The manifest.
        manifest: PathBuf,
        /// Output folder (default: data/<name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Snap length of the written frames (default 128; 65535 for runs with A-MSDUs).
        #[arg(long)]
        snaplen: Option<u32>,
    },
    /// Summarise datasets' receivers for label-free calibration of one model without their
    /// captures: per capture its gap summary and the model's decisions on it, binned by label
    /// (`calibrate --no-labels --bank-dataset FILE`). A few hundred kB for 50 receivers.
    Summarise(SummariseArgs),
}

/// Read and parse a manifest (errors name the file and the field).
pub(crate) fn read_manifest(path: &Path) -> Result<DatasetManifest> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_manifest(&text, path)
}

pub(crate) fn parse_manifest(text: &str, path: &Path) -> Result<DatasetManifest> {
    toml::from_str(text).with_context(|| format!("{}: invalid dataset manifest", path.display()))
}

/// One run's summary and capture paths.
type Built1 = (RunSummary, Vec<PathBuf>);

/// Build `m` into `out`; returns the output folder.
pub(crate) fn build(
    ui: &Ui,
    m: &DatasetManifest,
    source: &Path,
    out: Option<PathBuf>,
    snaplen: Option<u32>,
) -> Result<PathBuf> {
    let runs = m.expand().with_context(|| format!("{}", source.display()))?;
    // Check every run before any work starts.
    let checked = runs
        .iter()
        .map(|r| {
            r.scenario
                .clone()
                .check()
                .with_context(|| format!("{}: run {}", source.display(), r.name))
        })
        .collect::<Result<Vec<_>>>()?;
    let out = out.unwrap_or_else(|| Path::new("data").join(&m.name));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    // Real-kernel runs replay in real time: check for root and the settings before anything.
    let kernel_paths: Vec<Option<KernelPath>> = runs
        .iter()
        .map(|r| match &r.receiver {
            Some(PlannedReceiver::Kernel { name, settings }) => {
                let mut k: KernelPath = settings
                    .parse()
                    .with_context(|| format!("{}: receiver {name}: kernel = {settings:?}", source.display()))?;
                k.name = name.clone();
                Ok(Some(k))
            }
            _ => Ok(None),
        })
        .collect::<Result<_>>()?;
    if kernel_paths.iter().any(|k| k.is_some()) && !aggrate::testbed::is_root() {
        anyhow::bail!(
            "{}: its real-kernel receivers need root (network namespaces); run as root or remove the `kernel` receivers",
            source.display()
        );
    }
    let bar = ui.count_bar(runs.len() as u64, "{msg:30} [{bar:30}] {pos}/{len} runs, eta {eta}");
    let quiet = Ui { quiet: true };
    // Emulator runs on all cores (each writes its own files), then the real-kernel runs one by
    // one with nothing else running (they are timing measurements).
    let model_idx: Vec<usize> = (0..runs.len()).filter(|&i| kernel_paths[i].is_none()).collect();
    let mut results: Vec<Option<Result<Built1>>> = (0..runs.len()).map(|_| None).collect();
    aggrate::parallel::for_each(
        model_idx.len(),
        super::all_cores().clamp(1, 8),
        |k| {
            let i = model_idx[k];
            let path = out.join(format!("{}.pcapng", runs[i].name));
            simulate_to(&quiet, &checked[i], &path, snaplen)
        },
        |k, r| {
            let i = model_idx[k];
            bar.set_message(runs[i].name.clone());
            bar.inc(1);
            results[i] = Some(r);
        },
    );
    for (i, k) in kernel_paths.iter().enumerate() {
        let Some(k) = k else { continue };
        bar.set_message(runs[i].name.clone());
        let path = out.join(format!("{}.pcapng", runs[i].name));
        results[i] = Some(simulate_replayed(
            &quiet,
            runs[i].scenario.clone(),
            &path,
            snaplen,
            Some(k),
        ));
        bar.inc(1);
    }
    let mut built = Vec::new();
    let mut total = 0;
    for ((r, scn), res) in runs.iter().zip(&checked).zip(results) {
        let (summary, paths) = res.unwrap_or_else(|| Err(anyhow::anyhow!("run {} did not run", r.name)))?;
        total += summary.delivered;
        built.push(BuiltRun::new(r, scn, &summary, &paths));
    }
    bar.finish_and_clear();
    let record = BuiltDataset {
        name: m.name.clone(),
        description: m.description.clone(),
        manifest: source.display().to_string(),
        aggrate_version: env!("CARGO_PKG_VERSION").to_string(),
        seed: m.seed,
        snaplen,
        noise_preset: format!("{:?}", m.base.noise_preset).to_lowercase(),
        packets_per_run: m.packets,
        runs: built,
        total_packets: total,
    };
    let mpath = out.join("manifest.json");
    std::fs::write(&mpath, serde_json::to_string_pretty(&record)?)
        .with_context(|| format!("writing {}", mpath.display()))?;
    ui.info(format!(
        "built {} runs, {} packets into {} (see manifest.json)",
        record.runs.len(),
        total,
        out.display()
    ));
    Ok(out)
}

pub(crate) fn run(ui: &Ui, c: DatasetCommand) -> Result<Exit> {
    match c {
        DatasetCommand::Build { manifest, out, snaplen } => {
            let m = read_manifest(&manifest)?;
            build(ui, &m, &manifest, out, snaplen)?;
            Ok(Exit::Ok)
        }
        DatasetCommand::Summarise(a) => summarise(ui, a),
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct SummariseArgs {
    /// Dataset folders whose manifest.json names each capture's receiver (e.g. data/receivers).
    #[arg(required = true)]
    pub(crate) datasets: Vec<PathBuf>,
    /// The model to summarise for (default: the shipped estimator embedded in the binary).
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// The summary to write (`.json`, or `.json.xz` compressed).
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

/// `aggrate dataset summarise`: the datasets' receivers as a [`BankSummary`] for one model.
///
/// [`BankSummary`]: aggrate::train::bank::BankSummary
pub(crate) fn summarise(ui: &Ui, a: SummariseArgs) -> Result<Exit> {
    use std::io::Write;
    let (file, name) = super::model_or_shipped(a.model.as_deref())?;
    let out = a.output.to_string_lossy();
    if !(out.ends_with(".json") || out.ends_with(".json.xz")) {
        bail!("{}: a bank summary is written as .json or .json.xz", a.output.display());
    }
    let files = inputs(&a.datasets, true, &[])?;
    let (names, receiver_of_group) = aggrate::train::cv::receivers_of(&files, "summarise")?;
    let data = load_rows(ui, &files, &file.spec, &a.flow)?;
    let all: Vec<usize> = (0..data.len()).collect();
    let from = a
        .datasets
        .iter()
        .map(|p| {
            p.file_name()
                .map_or(p.display().to_string(), |n| n.to_string_lossy().into_owned())
        })
        .collect();
    let s = Bank::summary(
        &data,
        &all,
        &receiver_of_group,
        &names,
        &file.model,
        &file.spec,
        &name,
        from,
    )
    .context("summarising the datasets")?;
    let json = serde_json::to_vec(&s)?;
    ensure_parent(&a.output)?;
    let f = std::fs::File::create(&a.output).with_context(|| format!("writing {}", a.output.display()))?;
    if out.ends_with(".xz") {
        let mut xz = xz2::write::XzEncoder::new(f, 9);
        xz.write_all(&json)
            .and_then(|_| xz.finish().map(drop))
            .with_context(|| format!("writing {}", a.output.display()))?;
    } else {
        let mut f = f;
        f.write_all(&json)
            .with_context(|| format!("writing {}", a.output.display()))?;
    }
    ui.info(format!(
        "wrote {}: {} captures of {} receivers summarised for {name} ({} bins)",
        a.output.display(),
        s.runs.len(),
        names.len(),
        s.runs.iter().map(|r| r.bins.len()).sum::<usize>()
    ));
    Ok(Exit::Ok)
}
