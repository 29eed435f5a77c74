//! `aggrate calibrate`: set a model's operating point for one receiver from a short labelled
//! stretch of it (a sniffer capture joined with the receiver's kernel log), and write the model.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::features::FeatureSpec;
use aggrate::train::bank::{build, calibrate_without_labels, parse_manifest, Bank, DEFAULT_BANK};
use aggrate::wlan::manifest::{DatasetManifest, WlanSettings};

use aggrate::model::ModelFile;
use aggrate::report::calibration_md;
use aggrate::train::calibrate::calibrate;

use super::progress::{Bars, Ui};
use super::rows::{inputs, load_rows, load_rows_with_truth, seen_wlan, Input};
use super::{all_cores, ensure_parent, Exit, FlowArgs};

/// Where label-free calibration finds its emulated receivers.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BankArgs {
    /// The bank of emulated receive paths for label-free calibration: a dataset manifest of
    /// model receivers (default: datasets/bank.toml, embedded; its rates are replaced by the
    /// receiver's).
    #[arg(long, value_name = "MANIFEST")]
    pub(crate) bank: Option<PathBuf>,
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
    /// The WLAN the flags ask the bank to be emulated at.
    pub(crate) fn wlan(&self) -> WlanSettings {
        WlanSettings {
            mcs: self.mcs,
            nss: self.nss,
            bw_mhz: self.bw,
            ip_len: self.ip_len,
        }
    }

    /// The likeness the flags ask for, for the emulated bank.
    pub(crate) fn likeness(&self) -> aggrate::train::bank::Likeness {
        aggrate::train::bank::Likeness {
            k: self.neighbours,
            max_distance: self.max_distance.unwrap_or(aggrate::train::bank::DEFAULT_MAX_DISTANCE),
        }
    }

    /// The likeness the flags ask for, for a bank of `k` measured receivers (no distance limit
    /// unless given).
    pub(crate) fn measured_likeness(&self, k: usize) -> aggrate::train::bank::Likeness {
        aggrate::train::bank::Likeness {
            k,
            max_distance: self.max_distance.unwrap_or(f64::INFINITY),
        }
    }

    /// `--max-distance`, if given, is a distance.
    pub(crate) fn check_distance(&self) -> Result<()> {
        match self.max_distance {
            Some(d) if d.is_nan() || d < 0.0 => bail!("--max-distance {d}: a distance is ≥ 0 (inf: no limit)"),
            _ => Ok(()),
        }
    }
}

/// The bank's manifest (`--bank`, or the embedded one) and a name for messages.
pub(crate) fn bank_manifest(a: &BankArgs) -> Result<(DatasetManifest, String)> {
    if a.neighbours == 0 {
        bail!("--neighbours 0: at least one bank receiver must set each threshold");
    }
    a.check_distance()?;
    let (text, name) = match &a.bank {
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (DEFAULT_BANK.to_string(), "datasets/bank.toml (embedded)".to_string()),
    };
    let mut manifest = parse_manifest(&text).with_context(|| format!("{name}: invalid bank manifest"))?;
    a.wlan()
        .apply(&mut manifest)
        .with_context(|| format!("{name}: the bank's WLAN (--mcs / --nss / --bw / --ip-len)"))?;
    Ok((manifest, name))
}

/// Emulate the bank at `rates` in `spec`'s layout with every run's rows, with a progress bar
/// (`train --self-calibrate`).
pub(crate) fn load_bank(ui: &Ui, a: &BankArgs, rates: &[f64], spec: &FeatureSpec) -> Result<Bank> {
    let (manifest, name) = bank_manifest(a)?;
    let bank = build(&manifest, rates, spec, all_cores(), &mut Bars::new(ui)).with_context(|| name.clone())?;
    ui.info(format!(
        "bank: {} emulated runs ({} rows) from {name} ({}) at {} Mb/s",
        bank.runs.len(),
        bank.data.len(),
        WlanSettings::of(&manifest).describe(),
        rates.iter().map(|r| format!("{r}")).collect::<Vec<_>>().join(", ")
    ));
    Ok(bank)
}

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
    /// Do not use the inputs' labels: set the operating point on the emulated receivers whose
    /// packet timing is most like each input's (`--bank`), or on measured ones (`--measured`,
    /// `--bank-dataset`). Inputs may then be the receiver's own
    /// captures, without A-MPDU ground truth; where they have it, it only scores the result.
    #[arg(long)]
    pub(crate) no_labels: bool,
    #[command(flatten)]
    pub(crate) bank: BankArgs,
    /// With --no-labels: calibrate on *measured* receivers instead of the emulated bank — the
    /// receivers of these dataset folders (e.g. data/receivers from datasets/receivers.toml, real
    /// kernel paths among them) whose captures time packets most like each input's, or of one
    /// summary of them for this model (`aggrate dataset summarise`: `.json` or `.json.xz`).
    /// Their WLAN is theirs: use data built at the receiver's.
    #[arg(long, num_args = 1.., value_name = "DATASET")]
    pub(crate) bank_dataset: Vec<PathBuf>,
    /// With --no-labels and the shipped model: calibrate on its own training receivers (the 56
    /// of datasets/receivers.toml, 22 real kernel paths among them), whose summary for it is
    /// embedded — `--bank-dataset data/receivers` without building the dataset. On real kernel
    /// receive paths at the paper's WLAN the better bank; at another WLAN the emulated one is
    /// (models/README.md).
    #[arg(long, conflicts_with = "bank_dataset")]
    pub(crate) measured: bool,
    /// With --measured or --bank-dataset: the nearest measured captures that set each threshold.
    #[arg(long, default_value_t = 5)]
    pub(crate) dataset_neighbours: usize,
    /// Send rate of each input in Mb/s (one for all, or one per input in order), where its file
    /// name has no `_<rate>mbps` tag (default then: the received packet rate × 1500 B).
    #[arg(long, num_args = 1.., value_name = "MBPS")]
    pub(crate) rate: Vec<f64>,
    /// The calibrated model file to write.
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

pub(crate) fn run(ui: &Ui, a: CalibrateArgs) -> Result<Exit> {
    let (mut file, name) = model_or_shipped(a.model.as_deref())?;
    let spec = file.spec;
    if a.no_labels {
        if a.share != 1.0 {
            bail!(
                "--share {}: the labelled share goes with labelled calibration, not with --no-labels",
                a.share
            );
        }
        return run_no_labels(ui, &a, file, &name);
    }
    if !a.rate.is_empty() {
        bail!("--rate sets the bank's rates: it goes with --no-labels");
    }
    if !a.bank_dataset.is_empty() || a.measured {
        bail!(
            "--{} is a bank to calibrate on without labels: it goes with --no-labels",
            if a.measured { "measured" } else { "bank-dataset" }
        );
    }
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
    let report = report_of(
        &a,
        &name,
        &files,
        serde_json::json!({ "calibration": cal, "half_split_check": check }),
    );
    let md = calibration_md(&name, &cal, check.as_ref());
    write_calibrated(ui, &a.output, file, report, &md)
}

/// The model file at `path` and its name (the file stem), or the shipped one embedded in the
/// binary.
fn model_or_shipped(path: Option<&Path>) -> Result<(ModelFile, String)> {
    Ok(match path {
        Some(p) => (
            ModelFile::load(p)?,
            p.file_stem()
                .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
        ),
        None => (
            ModelFile::shipped()?,
            aggrate::model::SHIPPED_NAME.trim_end_matches(".json").to_string(),
        ),
    })
}

/// The calibration report: where the model and the inputs came from, and `fields`.
fn report_of(a: &CalibrateArgs, name: &str, files: &[Input], fields: serde_json::Value) -> serde_json::Value {
    let mut r = serde_json::json!({
        "from": a.model.as_ref().map_or(format!("{name} (shipped)"), |p| p.display().to_string()),
        "captures": files.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
        "kernel_logs": files.iter().filter_map(|f| f.kernel.as_ref().map(|k| k.display().to_string())).collect::<Vec<_>>(),
    });
    if let (Some(r), serde_json::Value::Object(f)) = (r.as_object_mut(), fields) {
        r.extend(f);
    }
    r
}

/// Write the calibrated model (its report under `metrics.calibration`) and the Markdown beside
/// it (`<output>.calibration.md`), and print the Markdown unless quiet.
fn write_calibrated(ui: &Ui, output: &Path, mut file: ModelFile, report: serde_json::Value, md: &str) -> Result<Exit> {
    file.set_metric("calibration", report);
    ensure_parent(output)?;
    std::fs::write(output, file.to_json()).with_context(|| format!("writing {}", output.display()))?;
    let md_path = output.with_extension("calibration.md");
    std::fs::write(&md_path, md).with_context(|| format!("writing {}", md_path.display()))?;
    if !ui.quiet {
        out!("{md}");
    }
    ui.info(format!("wrote {} and {}", output.display(), md_path.display()));
    Ok(Exit::Ok)
}

/// `flags` with the WLAN the inputs show (`seen`) wherever the flags leave it open, said on
/// stderr: the bank is emulated at the receiver's WLAN. MCS, streams and width come together
/// from radiotap, or not at all.
fn with_seen_wlan(ui: &Ui, flags: &BankArgs, seen: WlanSettings) -> BankArgs {
    let (a, said) = bank_wlan(flags, seen);
    if !said.is_empty() {
        ui.info(format!(
            "bank WLAN from the inputs: {} (else give --mcs / --nss / --bw / --ip-len)",
            said.join("; ")
        ));
    }
    a
}

/// [`with_seen_wlan`] without a word: the flags with what the inputs show, and what was taken
/// from them, in words.
pub(crate) fn bank_wlan(flags: &BankArgs, seen: WlanSettings) -> (BankArgs, Vec<String>) {
    let mut a = flags.clone();
    let mut said = Vec::new();
    if let Some(l) = seen.ip_len.filter(|l| a.ip_len.is_none() && (64..=9000).contains(l)) {
        a.ip_len = Some(l);
        said.push(format!("{l}-byte packets (the flow's most common IP length)"));
    }
    if let (Some(mcs), Some(nss), (None, None, None)) = (seen.mcs, seen.nss, (a.mcs, a.nss, a.bw)) {
        (a.mcs, a.nss, a.bw) = (Some(mcs), Some(nss), seen.bw_mhz);
        let only_radio = WlanSettings { ip_len: None, ..seen };
        said.push(format!("{} (the radiotap headers)", only_radio.describe()));
    }
    (a, said)
}

/// Each input's send rate into its rows: `rates` (one for all, or one per input), else its
/// name's tag, else its packet rate at `bytes` per packet (said on stderr). A capture too short
/// to summarise is refused here, naming it.
pub(crate) fn set_rates(
    ui: &Ui,
    rates: &[f64],
    files: &[Input],
    data: &mut aggrate::dataset::Dataset,
    bytes: u16,
) -> Result<()> {
    let all: Vec<usize> = (0..data.len()).collect();
    for run in data.runs(&all) {
        let g = data.group[run.start] as usize;
        if run.len() <= aggrate::train::bank::MIN_GAPS {
            bail!(
                "{}: {} rows; calibrating without labels summarises the receiver's timing over {} packets or more",
                files[g].path.display(),
                run.len(),
                aggrate::train::bank::MIN_GAPS + 1
            );
        }
        let tagged = data.rate_mbps[run.start];
        let rate = if let Some(r) = rates.get(if rates.len() == 1 { 0 } else { g }) {
            *r
        } else if tagged.is_finite() {
            tagged as f64
        } else {
            let (t0, t1) = (data.host[run.start], data.host[run.end - 1]);
            let secs = t1.0.saturating_sub(t0.0) as f64 / 1e9;
            if secs <= 0.0 {
                bail!(
                    "{}: its receive times span no time; give its send rate with --rate",
                    files[g].path.display()
                );
            }
            let r = ((run.len() - 1) as f64 * bytes as f64 * 8.0 / secs / 1e6)
                .round()
                .max(1.0);
            ui.info(format!(
                "{}: no rate in its name; {r} Mb/s from its packet rate at {bytes} B (else give --rate)",
                files[g].path.display()
            ));
            r
        };
        data.rate_mbps[run].iter_mut().for_each(|x| *x = rate as f32);
    }
    Ok(())
}

/// `calibrate --no-labels`: the operating point from the emulated bank, by likeness of timing.
fn run_no_labels(ui: &Ui, a: &CalibrateArgs, mut file: ModelFile, name: &str) -> Result<Exit> {
    use aggrate::train::cv::evaluate;
    let spec = file.spec;
    let mut files = inputs(&a.inputs, false, &a.kernel)?;
    files.iter_mut().for_each(|f| f.truth_optional = true);
    if !(a.rate.is_empty() || a.rate.len() == 1 || a.rate.len() == files.len()) {
        bail!(
            "--rate: {} rates for {} inputs (give one for all, or one per input)",
            a.rate.len(),
            files.len()
        );
    }
    if let Some(r) = a.rate.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        bail!("--rate {r}: a send rate is a positive number of Mb/s");
    }
    let measured = a.measured || !a.bank_dataset.is_empty();
    a.bank.check_distance()?;
    if measured && a.dataset_neighbours == 0 {
        bail!("--dataset-neighbours 0: at least one measured capture must set each threshold");
    }
    let seen = seen_wlan(&files, &a.flow)?;
    // The shipped model's measured training receivers were sent over its training WLAN: how the
    // inputs' differs from it, where both are known.
    let trained: Option<WlanSettings> = file
        .metrics
        .get("training_wlan")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let unlike_training = trained.as_ref().map(|t| t.unlike(&seen)).unwrap_or_default();
    if a.measured && !unlike_training.is_empty() {
        ui.warn(format!(
            "these captures are {}: the measured receivers were sent over {}; the emulated bank \
             at the inputs' WLAN suits them better (leave out --measured)",
            unlike_training.join(", "),
            trained.map(|t| t.describe()).unwrap_or_default()
        ));
    }
    // The emulated bank is emulated at the inputs' WLAN; a measured one is at its own.
    let bank_args = if measured {
        bank_wlan(&a.bank, seen).0
    } else {
        with_seen_wlan(ui, &a.bank, seen)
    };
    let (mut data, truth) = load_rows_with_truth(ui, &files, &spec, &a.flow)?;
    set_rates(ui, &a.rate, &files, &mut data, bank_args.ip_len.unwrap_or(1500))?;
    let (model, cal, bank_name, labels, wlan) = if !measured {
        let (manifest, bank_name) = bank_manifest(&bank_args)?;
        let (model, cal) = calibrate_without_labels(
            &data,
            &file.model,
            &spec,
            &manifest,
            bank_args.likeness(),
            all_cores(),
            &mut Bars::new(ui),
        )
        .with_context(|| format!("calibrating on the bank {bank_name}"))?;
        let far = cal.runs.iter().filter(|r| r.too_far).count();
        let summarised_for_it = aggrate::train::bank::shipped_bank_for(&file.model, &spec).is_ok_and(|b| b.is_some());
        if far > 0 && summarised_for_it && unlike_training.is_empty() && a.bank.bank.is_none() {
            ui.info(format!(
                "{far} of {} inputs lie too far from every emulated receiver and keep the model's own threshold; \
                 the shipped model's measured training receivers (--measured: real kernel paths among them) are the \
                 better bank for real receive paths at its WLAN (models/README.md)",
                cal.runs.len()
            ));
        }
        let wlan = WlanSettings::of(&manifest).describe();
        (model, cal, bank_name, "none (emulated bank)", wlan)
    } else {
        let (bank, bank_name) = if a.measured {
            let s = aggrate::train::bank::shipped_summary().context("the embedded bank summary")?;
            let bank = Bank::of_summary(&s).context("the embedded bank summary")?;
            ui.info(format!(
                "bank: {} measured captures of the shipped model's training receivers (embedded summary of {})",
                bank.runs.len(),
                s.from.join(", ")
            ));
            (bank, format!("{} (embedded summary)", s.from.join(", ")))
        } else {
            let name = a
                .bank_dataset
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            (measured_bank(ui, &a.bank_dataset, &spec, &a.flow)?, name)
        };
        let like = bank_args.measured_likeness(a.dataset_neighbours);
        let (model, cal) = aggrate::train::bank::self_calibrate(&data, &file.model, &spec, &bank, like)
            .with_context(|| format!("calibrating on the measured receivers of {bank_name}"))?;
        (
            model,
            cal,
            bank_name,
            "none (measured bank)",
            "the bank datasets' own".to_string(),
        )
    };
    // Scores before and after, where the inputs have labels (they were not used above).
    let scores = truth.then(|| {
        (
            evaluate(&data, &file.model, &spec).rates,
            evaluate(&data, &model, &spec).rates,
        )
    });
    file.model = model;
    let report = report_of(
        a,
        name,
        &files,
        serde_json::json!({
            "labels": labels,
            "bank": bank_name,
            "bank_wlan": wlan,
            "self_calibration": cal,
            "scored_with_labels": scores.as_ref().map(|(b, a)| serde_json::json!({"before": b, "after": a})),
        }),
    );
    let mut md =
        aggrate::report::self_calibration_md(name, &cal, scores.as_ref().map(|(b, a)| (b.as_slice(), a.as_slice())));
    if !measured {
        md.push_str(&format!(
            "\nBank: {bank_name}, emulated at {wlan} (`--mcs`, `--nss`, `--bw`, `--ip-len`: the receiver's WLAN).\n"
        ));
    } else {
        md.push_str(&format!(
            "\nBank: the measured receivers of {bank_name} (`--{}`), at their own WLAN.\n",
            if a.measured { "measured" } else { "bank-dataset" }
        ));
    }
    write_calibrated(ui, &a.output, file, report, &md)
}

/// The receivers of dataset folders as a bank with rows ([`Bank::of_captures_with_rows`]), in
/// `spec`'s layout, every other row kept.
fn measured_bank(ui: &Ui, dirs: &[PathBuf], spec: &FeatureSpec, flow: &FlowArgs) -> Result<Bank> {
    if let Some(p) = dirs.iter().find(|p| is_summary_file(p)) {
        if dirs.len() > 1 {
            bail!(
                "--bank-dataset {}: a bank summary is a whole bank; give it alone, or dataset folders",
                p.display()
            );
        }
        let s = read_summary(p)?;
        let bank = Bank::of_summary(&s).with_context(|| p.display().to_string())?;
        ui.info(format!(
            "bank: {} measured captures summarised for {} (from {})",
            bank.runs.len(),
            s.model_name,
            s.from.join(", ")
        ));
        return Ok(bank);
    }
    let files = inputs(dirs, true, &[])?;
    let (names, receiver_of_group) = super::train::receivers_of(&files, "--bank-dataset")?;
    let data = load_rows(ui, &files, spec, flow)?;
    let all: Vec<usize> = (0..data.len()).collect();
    let bank = Bank::of_captures_with_rows(&data, &all, &receiver_of_group, &names, 2);
    ui.info(format!(
        "bank: {} measured captures of {} receivers ({} rows kept)",
        bank.runs.len(),
        names.len(),
        bank.data.len()
    ));
    Ok(bank)
}

/// Whether `p` names a bank summary file (`.json` or `.json.xz`) rather than a dataset folder.
fn is_summary_file(p: &Path) -> bool {
    let n = p.to_string_lossy();
    p.is_file() && (n.ends_with(".json") || n.ends_with(".json.xz"))
}

/// A bank summary file (`.json`, or xz-compressed `.json.xz`), parsed; errors name the file.
fn read_summary(p: &Path) -> Result<aggrate::train::bank::BankSummary> {
    let raw = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    aggrate::train::bank::parse_summary(&raw, p.to_string_lossy().ends_with(".xz"))
        .with_context(|| p.display().to_string())
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
    let (file, name) = model_or_shipped(a.model.as_deref())?;
    let out = a.output.to_string_lossy();
    if !(out.ends_with(".json") || out.ends_with(".json.xz")) {
        bail!("{}: a bank summary is written as .json or .json.xz", a.output.display());
    }
    let files = inputs(&a.datasets, true, &[])?;
    let (names, receiver_of_group) = super::train::receivers_of(&files, "summarise")?;
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
