//! What the commands share: the inputs they read, the bank flags, and the glue that runs a
//! library call with a progress bar and says on stderr what it noticed. Commands import this
//! (through `super::`), never each other.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use aggrate::testbed::KernelPath;
use aggrate::wlan::noise::NoisePreset;
use aggrate::wlan::run::{RunSummary, Scenario, ValidScenario};
use aggrate::wlan::write;
use aggrate::wlan::WlanConfig;

use aggrate::dataset::Dataset;
use aggrate::features::FeatureSpec;
use aggrate::pipeline::Input;
use aggrate::train::bank::Bank;
use aggrate::train::bank_source::BankSource;
use aggrate::wlan::manifest::WlanSettings;

use super::progress::{self, ByteBars, Ui};
use super::{all_cores, FlowArgs};

/// Inputs named on the command line ([`aggrate::pipeline::inputs::resolve`]).
pub(crate) fn inputs(
    args: &[std::path::PathBuf],
    train_only: bool,
    kernel: &[std::path::PathBuf],
) -> Result<Vec<Input>> {
    Ok(aggrate::pipeline::inputs::resolve(args, train_only, kernel)?)
}

/// Rows of all inputs (group = input index), read on all cores (the result does not depend on
/// the thread count) with a progress bar; says how partial kernel-log joins went.
pub(crate) fn load_rows(ui: &Ui, inputs: &[Input], spec: &FeatureSpec, flow: &FlowArgs) -> Result<Dataset> {
    Ok(load_rows_with_truth(ui, inputs, spec, flow)?.0)
}

/// [`load_rows`], and whether every input carried A-MPDU ground truth.
pub(crate) fn load_rows_with_truth(
    ui: &Ui,
    inputs: &[Input],
    spec: &FeatureSpec,
    flow: &FlowArgs,
) -> Result<(Dataset, bool)> {
    let loaded = aggrate::pipeline::load_dataset(
        inputs,
        spec,
        &flow.filter(),
        flow.keep_going,
        all_cores(),
        &mut progress::Bars::new(ui),
    )?;
    for out in loaded.outcomes.iter().flatten() {
        if out
            .join
            .as_ref()
            .is_some_and(|(_, j)| j.unmatched_truth > 0 || j.unmatched_kernel > 0)
        {
            ui.join_report(out);
        }
    }
    let truth = loaded
        .outcomes
        .iter()
        .all(|o| o.as_ref().is_none_or(|o| o.ground_truth));
    Ok((loaded.data, truth))
}

/// Where label-free calibration finds its emulated receivers.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BankArgs {
    /// The bank of emulated receive paths for label-free calibration: a dataset manifest of
    /// model receivers (default: datasets/bank.toml, embedded; its rates are replaced by the
    /// receiver's).
    #[arg(long, value_name = "MANIFEST")]
    pub(crate) bank: Option<std::path::PathBuf>,
    /// Bank receivers nearest each capture whose rows set its threshold.
    #[arg(long, default_value_t = aggrate::train::bank::DEFAULT_K, value_parser = clap::value_parser!(usize))]
    pub(crate) neighbours: usize,
    /// A capture whose nearest bank receiver lies farther than this (each summary number in
    /// spreads over the bank) keeps the model's own threshold; `inf`: calibrate every capture
    /// (default: 3 for the emulated bank; no limit for measured receivers — `--measured`,
    /// `--bank-dataset`, `--self-calibrate-on-training` — where, measured leave one receiver
    /// out, a limit cost more than it kept out).
    #[arg(long, value_name = "SPREADS")]
    pub(crate) max_distance: Option<f64>,
    /// The receiver's WLAN, for the bank to be emulated at: VHT MCS of the access point's
    /// frames to it (default: `calibrate --no-labels` reads it from sniffer captures' radiotap
    /// headers, else the bank's, the paper's MCS 9).
    #[arg(long)]
    pub(crate) mcs: Option<u8>,
    /// The receiver's spatial streams (default: from radiotap as --mcs, else the bank's, 2).
    #[arg(long)]
    pub(crate) nss: Option<u8>,
    /// The receiver's channel width in MHz (default: from radiotap as --mcs, else the bank's, 80).
    #[arg(long, value_name = "MHZ")]
    pub(crate) bw: Option<u32>,
    /// IP packet bytes of the receiver's flow (default: `calibrate --no-labels` takes the flow's
    /// most common IP length, else the bank's, 1500).
    #[arg(long, value_name = "BYTES")]
    pub(crate) ip_len: Option<u16>,
}

impl BankArgs {
    /// The bank's source these flags name (checked when used).
    pub(crate) fn source(&self) -> BankSource {
        BankSource {
            manifest: self.bank.clone(),
            neighbours: self.neighbours,
            max_distance: self.max_distance,
            wlan: WlanSettings {
                mcs: self.mcs,
                nss: self.nss,
                bw_mhz: self.bw,
                ip_len: self.ip_len,
            },
        }
    }
}

/// Emulate the bank `src` names at `rates` in `spec`'s layout with every run's rows, with a
/// progress bar.
pub(crate) fn load_bank(ui: &Ui, src: &BankSource, rates: &[f64], spec: &FeatureSpec) -> Result<Bank> {
    let (manifest, name) = src.manifest()?;
    let bank = aggrate::train::bank::build(&manifest, rates, spec, all_cores(), &mut progress::Bars::new(ui))
        .with_context(|| name.clone())?;
    ui.info(format!(
        "bank: {} emulated runs ({} rows) from {name} ({}) at {} Mb/s",
        bank.runs.len(),
        bank.data.len(),
        WlanSettings::of(&manifest).describe(),
        rates.iter().map(|r| format!("{r}")).collect::<Vec<_>>().join(", ")
    ));
    Ok(bank)
}

/// Each input's send rate into its rows ([`aggrate::train::bank_source::set_rates`]), saying
/// which came from a packet rate.
pub(crate) fn set_rates(ui: &Ui, rates: &[f64], files: &[Input], data: &mut Dataset, bytes: u16) -> Result<()> {
    let paths: Vec<&std::path::Path> = files.iter().map(|f| f.path.as_path()).collect();
    for (g, r) in aggrate::train::bank_source::set_rates(rates, &paths, data, bytes)? {
        ui.info(format!(
            "{}: no rate in its name; {r} Mb/s from its packet rate at {bytes} B (else give --rate)",
            files[g].path.display()
        ));
    }
    Ok(())
}

/// Read every packet of `path` with a byte progress bar, calling `f` on each one that decodes,
/// then say what the read noticed; damage is in the returned stats (turn it into the command's
/// error with `ReadStats::fatal_damage` once partial results are written).
pub(crate) fn for_each_record(
    ui: &Ui,
    path: &std::path::Path,
    keep_going: bool,
    f: impl FnMut(&aggrate::capture::PacketRecord),
) -> Result<aggrate::pipeline::ReadStats> {
    let st = aggrate::pipeline::read_records(path, keep_going, &mut progress::ByteBars::new(ui), f)?;
    ui.read_report(path, &st);
    Ok(st)
}

/// One VHT MCS per station from `--mcs` (one value for all, or one per station).
pub(crate) fn mcs_per_station(mcs: &[u8], n: usize) -> Result<Vec<u8>> {
    Ok(match mcs.len() {
        1 => vec![mcs[0]; n],
        k if k == n => mcs.to_vec(),
        k => anyhow::bail!("--mcs has {k} values for {n} stations: give one or one per station"),
    })
}

/// [`aggrate::train::cv::svr_stage`] with a progress bar, saying when captures are too short
/// for the folds asked for.
pub(crate) fn svr_stage(
    ui: &Ui,
    data: &Dataset,
    oof: &[bool],
    spec: &FeatureSpec,
    k: usize,
    grid: &[aggrate::train::ValidSvrParams],
) -> Result<aggrate::train::cv::SvrStage> {
    let st = aggrate::train::cv::svr_stage(data, oof, spec, k, grid, &mut progress::Bars::new(ui))?;
    if st.folds < k {
        ui.warn(format!(
            "slot SVR: {}-fold CV (the shortest capture has too few slot rows for {k})",
            st.folds
        ));
    }
    ui.info(format!(
        "slot SVR: {} slot rows, {} grid points × {} folds",
        st.rows.len(),
        grid.len(),
        st.folds
    ));
    Ok(st)
}

/// The model file at `path` and its name (the file stem), or the shipped one embedded in the
/// binary.
pub(crate) fn model_or_shipped(path: Option<&std::path::Path>) -> Result<(aggrate::model::ModelFile, String)> {
    Ok(match path {
        Some(p) => (
            aggrate::model::ModelFile::load(p)?,
            p.file_stem()
                .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
        ),
        None => (
            aggrate::model::ModelFile::shipped()?,
            aggrate::model::SHIPPED_NAME.trim_end_matches(".json").to_string(),
        ),
    })
}

/// The snap length to write with ([`aggrate::wlan::write::snaplen_for`]), with a note on stderr
/// when A-MSDU subframes would be cut off.
pub(crate) fn snaplen_for(ui: &Ui, asked: Option<u32>, wlan: &WlanConfig) -> Result<u32> {
    let s = write::snaplen_for(asked, wlan)?;
    if wlan.amsdu_max_msdus > 1 && s < 65_535 {
        ui.info(format!(
            "note: snap length {s} with A-MSDUs: subframes past byte {s} of a frame cannot be read back"
        ));
    }
    Ok(s)
}

/// Run a checked scenario and write one capture per station.
pub(crate) fn simulate_to(
    ui: &Ui,
    scn: &ValidScenario,
    out: &Path,
    snaplen: Option<u32>,
) -> Result<(RunSummary, Vec<PathBuf>)> {
    let snaplen = snaplen_for(ui, snaplen, scn.wlan.config())?;
    Ok(write::simulate_to(scn, out, Some(snaplen), &mut ByteBars::new(ui))?)
}

/// Emulate with no noise model and take the receive times from the real kernel (loopback, or a
/// veth testbed with `kernel`'s settings): [`aggrate::testbed::emulated::simulate_replayed`].
pub(crate) fn simulate_replayed(
    ui: &Ui,
    mut s: Scenario,
    out: &Path,
    snaplen: Option<u32>,
    kernel: Option<&KernelPath>,
) -> Result<(RunSummary, Vec<PathBuf>)> {
    s.noise_preset = NoisePreset::None;
    s.noise = None;
    let scn = s.check().context("invalid scenario")?;
    let snaplen = snaplen_for(ui, snaplen, scn.wlan.config())?;
    Ok(aggrate::testbed::emulated::simulate_replayed(
        &scn,
        out,
        snaplen,
        kernel,
        &mut |m| ui.info(m),
    )?)
}

/// SIGINT and SIGTERM set the flag (instead of ending the process), so that what was set up
/// is removed.
pub(crate) fn stop_on_signals() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing the signal handler")?;
    }
    Ok(stop)
}

/// `--steer` (`sim`, `recv`): what the receivers report as the level the sender steers by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SteerArg {
    /// The receivers' level (learned when the model has one).
    Level,
    /// The level from airtime alone.
    Airtime,
    /// The frame count alone (packets ÷ predicted starts).
    FrameCount,
}

impl From<SteerArg> for aggrate::sim::Steer {
    fn from(a: SteerArg) -> Self {
        match a {
            SteerArg::Level => aggrate::sim::Steer::Level,
            SteerArg::Airtime => aggrate::sim::Steer::Airtime,
            SteerArg::FrameCount => aggrate::sim::Steer::FrameCount,
        }
    }
}

/// Others on the channel (`sim`, `testbed`): contending transmitters in the emulated medium.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OthersArgs {
    /// Others on the channel: contending transmitters at VHT MCS 7, 1 SS (0..=64); their packets
    /// exist only in the emulator, their airtime is real to every station.
    #[arg(long, default_value_t = 0)]
    pub(crate) contenders: u32,
    /// Offered load of each contender (Mb/s).
    #[arg(long, default_value_t = 10.0)]
    pub(crate) contender_mbps: f64,
    /// Frames a contender sends per transmit opportunity: 1 is a station's single frames, more
    /// a neighbouring network's AP aggregating its downlink (1..=64).
    #[arg(long, default_value_t = 1)]
    pub(crate) contender_ampdu: u16,
    /// How the contenders' frames arrive: `poisson`, `saturated` (always a frame queued:
    /// whatever EDCA gives it; --contender-mbps is then unused) or `on-off:ON_MS/OFF_MS` (bursts,
    /// e.g. a video stream's chunks, at the same mean load).
    #[arg(long, default_value = "poisson")]
    pub(crate) contender_arrivals: aggrate::wlan::Arrivals,
    /// Whose network the contenders are in: `other` (a neighbouring network on the channel) or
    /// `own` (other stations of this AP's network uploading to it). The medium is the same
    /// either way: it sets the addresses a sniffer's capture shows on their frames (`simulate
    /// --sniffer`), which `eval` reads.
    #[arg(long, default_value = "other")]
    pub(crate) contender_bss: aggrate::wlan::ContenderBss,
}

impl OthersArgs {
    /// Set the WLAN's contenders (checked with the rest of the WLAN).
    pub(crate) fn apply(&self, w: &mut WlanConfig) {
        w.contenders = self.contenders;
        w.contender_rate_mbps = self.contender_mbps;
        w.contender_ampdu = self.contender_ampdu;
        w.contender_arrivals = self.contender_arrivals;
        w.contender_bss = self.contender_bss;
    }

    /// Say that `--contender-bss own` changes nothing a command that writes no sniffer's capture
    /// shows (`sim`, `ap`, `testbed`: the medium is the same; only a capture's addresses differ).
    pub(crate) fn note_bss(&self, ui: &Ui) {
        if self.contender_bss == aggrate::wlan::ContenderBss::Own {
            ui.warn(
                "--contender-bss own sets only the addresses a sniffer's capture shows on the contenders' frames \
                 (simulate --sniffer, dataset recipes); the medium is the same, so this command runs as with other",
            );
        }
    }
}
