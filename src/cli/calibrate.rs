//! `aggrate calibrate`: set a model's operating point for one receiver from a short labelled
//! stretch of it (a sniffer capture joined with the receiver's kernel log), and write the model.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::features::FeatureSpec;
use aggrate::train::bank::{calibrate_without_labels, Bank};
use aggrate::train::bank_source::BankSource;
use aggrate::wlan::manifest::WlanSettings;

use aggrate::model::ModelFile;
use aggrate::report::calibration_md;
use aggrate::train::calibrate::calibrate;

use super::progress::{Bars, Ui};
use super::{all_cores, ensure_parent, Exit, FlowArgs};
use super::{inputs, load_rows, load_rows_with_truth, set_rates};
use aggrate::pipeline::Input;

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
    pub(crate) bank: super::BankArgs,
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
    let (mut file, name) = super::model_or_shipped(a.model.as_deref())?;
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

/// `src` with the WLAN the inputs show (`seen`) wherever it leaves it open, said on stderr: the
/// bank is emulated at the receiver's WLAN.
fn with_seen_wlan(ui: &Ui, src: &BankSource, seen: WlanSettings) -> BankSource {
    let (a, said) = src.with_seen(seen);
    if !said.is_empty() {
        ui.info(format!(
            "bank WLAN from the inputs: {} (else give --mcs / --nss / --bw / --ip-len)",
            said.join("; ")
        ));
    }
    a
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
    a.bank.source().check_distance()?;
    if measured && a.dataset_neighbours == 0 {
        bail!("--dataset-neighbours 0: at least one measured capture must set each threshold");
    }
    let seen = a.flow.seen_wlan(&files)?;
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
        a.bank.source().with_seen(seen).0
    } else {
        with_seen_wlan(ui, &a.bank.source(), seen)
    };
    let (mut data, truth) = load_rows_with_truth(ui, &files, &spec, &a.flow)?;
    set_rates(ui, &a.rate, &files, &mut data, bank_args.wlan.ip_len.unwrap_or(1500))?;
    let (model, cal, bank_name, labels, wlan) = if !measured {
        let (manifest, bank_name) = bank_args.manifest()?;
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
        let (model, cal, bank_name) = on_measured(ui, a, &file, &data, &bank_args)?;
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

/// `--measured` / `--bank-dataset`: the operating point from measured receivers (the shipped
/// model's embedded summary, or the dataset folders'); the model, what was done, the bank's name.
fn on_measured(
    ui: &Ui,
    a: &CalibrateArgs,
    file: &ModelFile,
    data: &aggrate::dataset::Dataset,
    bank_args: &BankSource,
) -> Result<(
    aggrate::model::EstimatorModel,
    aggrate::train::bank::SelfCalibration,
    String,
)> {
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
        (measured_bank(ui, &a.bank_dataset, &file.spec, &a.flow)?, name)
    };
    let like = bank_args.measured_likeness(a.dataset_neighbours);
    let (model, cal) = aggrate::train::bank::self_calibrate(data, &file.model, &file.spec, &bank, like)
        .with_context(|| format!("calibrating on the measured receivers of {bank_name}"))?;
    Ok((model, cal, bank_name))
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
    let (names, receiver_of_group) = aggrate::train::cv::receivers_of(&files, "--bank-dataset")?;
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
