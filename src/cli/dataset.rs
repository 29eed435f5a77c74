//! `aggrate dataset build MANIFEST`: regenerate a dataset of emulator captures from a TOML recipe
//! into `data/<name>/`, with a `manifest.json` of what was built.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use aggrate::wlan::manifest::{DatasetManifest, Role};

use super::progress::Ui;
use super::simulate::simulate_to;
use super::Exit;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum DatasetCommand {
    /// Build a dataset from its manifest (e.g. datasets/small.toml).
    Build {
        /// The manifest.
        manifest: PathBuf,
        /// Output folder (default: data/<name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Snap length of the written frames.
        #[arg(long, default_value_t = 128)]
        snaplen: u32,
    },
}

#[derive(serde::Serialize)]
struct BuiltStation {
    sta: u16,
    mcs: u8,
    file: String,
    delivered: u64,
    ampdus: u64,
    mean_agg: f64,
    received_mbps: f64,
}

#[derive(serde::Serialize)]
struct BuiltRun {
    name: String,
    role: Role,
    rate_mbps: f64,
    seed: u64,
    duration_s: f64,
    stations: Vec<BuiltStation>,
}

#[derive(serde::Serialize)]
struct Built {
    name: String,
    description: String,
    manifest: String,
    aggrate_version: &'static str,
    seed: u64,
    snaplen: u32,
    noise_preset: String,
    packets_per_run: u64,
    runs: Vec<BuiltRun>,
    total_packets: u64,
}

/// Read and parse a manifest (errors name the file and the field).
pub(crate) fn read_manifest(path: &Path) -> Result<DatasetManifest> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_manifest(&text, path)
}

pub(crate) fn parse_manifest(text: &str, path: &Path) -> Result<DatasetManifest> {
    toml::from_str(text).with_context(|| format!("{}: invalid dataset manifest", path.display()))
}

/// Build `m` into `out`; returns the output folder.
pub(crate) fn build(
    ui: &Ui,
    m: &DatasetManifest,
    source: &Path,
    out: Option<PathBuf>,
    snaplen: u32,
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
    let bar = ui.count_bar(runs.len() as u64, "{msg:30} [{bar:30}] {pos}/{len} runs, eta {eta}");
    let mut built = Vec::new();
    let mut total = 0;
    let quiet = Ui { quiet: true };
    for (r, scn) in runs.iter().zip(&checked) {
        bar.set_message(r.name.clone());
        let path = out.join(format!("{}.pcapng", r.name));
        let (summary, paths) = simulate_to(&quiet, scn, &path, snaplen)?;
        total += summary.delivered;
        built.push(BuiltRun {
            name: r.name.clone(),
            role: r.role,
            rate_mbps: r.rate_mbps,
            seed: r.scenario.seed,
            duration_s: r.scenario.duration_s,
            stations: summary
                .stations
                .iter()
                .zip(&paths)
                .map(|(s, p)| BuiltStation {
                    sta: s.sta,
                    mcs: r.scenario.wlan.stations[s.sta as usize].mcs,
                    file: p
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    delivered: s.delivered,
                    ampdus: s.ampdus,
                    mean_agg: s.mean_agg,
                    received_mbps: s.received_mbps,
                })
                .collect(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let record = Built {
        name: m.name.clone(),
        description: m.description.clone(),
        manifest: source.display().to_string(),
        aggrate_version: env!("CARGO_PKG_VERSION"),
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
    }
}
