//! `aggrate eval`: score a trained model on captures or datasets it did not train on (e.g. the
//! evaluation rates of `datasets/paper.toml`), per send rate.

use std::path::PathBuf;

use anyhow::{Context, Result};

use aggrate::model::ModelFile;

use super::progress::Ui;
use aggrate::train::cv::evaluate;

use super::{inputs, load_rows};
use super::{Exit, FlowArgs};
use aggrate::report::{rates_csv, rates_md};

#[derive(Debug, clap::Args)]
pub(crate) struct EvalArgs {
    /// Model file written by `aggrate train`.
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// Capture files, dataset folders (all runs of a dataset: training and evaluation), or
    /// feature tables written by `aggrate features` with the model's --m/--context.
    #[arg(required = true)]
    pub(crate) inputs: Vec<PathBuf>,
    /// Kernel receive times to join to the captures by sequence number: one `seq,host_ns` CSV
    /// or receiver-side capture per capture (in order), or a folder of them named after the
    /// captures. A log sharing no sequence number with its capture is refused.
    #[arg(long, num_args = 1..)]
    pub(crate) kernel: Vec<PathBuf>,
    /// Output folder for the report.
    #[arg(short, long, default_value = "eval")]
    pub(crate) output: PathBuf,
    /// Report interval for the μ_N error (ms): each capture is replayed through the online
    /// estimator as `recv` runs it (whose default interval this is).
    #[arg(long, default_value_t = 500)]
    pub(crate) interval_ms: u64,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

pub(crate) fn run(ui: &Ui, a: EvalArgs) -> Result<Exit> {
    let file = ModelFile::load(&a.model)?;
    let spec = file.spec;
    let files = inputs(&a.inputs, false, &a.kernel)?;
    let data = load_rows(ui, &files, &spec, &a.flow)?;
    // A model learned on one WLAN misjudges the airtime gaps of another (models/README.md,
    // "Another WLAN"): say so when the inputs show a different one.
    let trained: Option<aggrate::wlan::manifest::WlanSettings> = file
        .metrics
        .get("training_wlan")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let wlan = match trained {
        Some(t) => {
            let seen = a.flow.seen_wlan(&files)?;
            let unlike = t.unlike(&seen);
            if !unlike.is_empty() {
                ui.warn(format!(
                    "these captures are {}: the model was trained on {}; expect it to miss frame starts \
                     (calibrate it for this WLAN: aggrate calibrate --no-labels)",
                    unlike.join(", "),
                    t.describe()
                ));
            }
            serde_json::json!({ "model": t, "inputs": seen, "unlike": unlike })
        }
        None => serde_json::Value::Null,
    };
    let likeness = training_likeness(ui, &file, &data, &files);
    let levels = replay_levels(ui, &file, &files, a.interval_ms, &a.flow)?;
    let (mu, mu_count) = aggrate::train::levels::pooled(&levels);
    let ev = evaluate(&data, &file.model, &spec);
    let (bm, agg, rates) = (ev.binary, ev.agg, ev.rates);
    let slot_json = match ev.slots {
        Some((rows, slot_rmse, base_slot_rmse)) => serde_json::json!({
            "rows": rows,
            "slot_rmse": slot_rmse,
            "base_slot_rmse": base_slot_rmse,
        }),
        None => serde_json::Value::Null,
    };
    let name = a
        .model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    let report = serde_json::json!({
        "model": name,
        "model_file": a.model.display().to_string(),
        "spec": spec,
        "rows": data.len(),
        "f1": bm.f1(),
        "precision": bm.precision(),
        "recall": bm.recall(),
        "accuracy": bm.accuracy(),
        "agg_rmse": agg.rmse(),
        "interval_ms": a.interval_ms,
        "mu_bias": mu.map(|e| e.bias),
        "mu_mae_rel_median": mu.map(|e| e.mae_rel_median),
        "mu_err_rel_p95": mu.map(|e| e.err_rel_p95),
        "mu": mu,
        "mu_frame_count": mu_count,
        "mu_per_capture": levels.iter().map(|c| serde_json::json!({
            "capture": c.path.display().to_string(),
            "receiver": c.receiver,
            "rate_mbps": c.rate_mbps,
            "level": c.level,
            "level_surveyed": c.level_surveyed,
            "frame_count": c.count,
        })).collect::<Vec<_>>(),
        "mu_per_contention": aggrate::train::levels::by_contention(&levels),
        "per_rate": rates,
        "slot_svr": slot_json,
        "wlan": wlan,
        "training_likeness": likeness.as_ref().map(|(v, _)| v.clone()),
        "captures": files.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
        "kernel_logs": files.iter().filter_map(|f| f.kernel.as_ref().map(|k| k.display().to_string())).collect::<Vec<_>>(),
    });
    let json_path = a.output.join(format!("{name}.eval.json"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    let mut md = rates_md(
        &format!("{name} (evaluation)"),
        &format!("F1 over all {} rows: {:.4}", data.len(), bm.f1()),
        &rates,
    );
    if let Some((_, m)) = &likeness {
        md.push_str(m);
    }
    if !levels.is_empty() {
        md.push_str(&aggrate::report::levels_md(a.interval_ms, &levels));
        let csv = a.output.join(format!("{name}.eval.intervals.csv"));
        std::fs::write(&csv, aggrate::report::levels_csv(&levels))
            .with_context(|| format!("writing {}", csv.display()))?;
        aggrate::report::levels_png(&a.output.join(format!("{name}.eval.mu.png")), &levels)?;
    }
    let csv_path = a.output.join(format!("{name}.eval.per_rate.csv"));
    std::fs::write(&csv_path, rates_csv(&rates)).with_context(|| format!("writing {}", csv_path.display()))?;
    let md_path = a.output.join(format!("{name}.eval.md"));
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    if !ui.quiet {
        out!("{md}");
    }
    ui.info(format!("wrote {} and {}", json_path.display(), md_path.display()));
    Ok(Exit::Ok)
}

/// How alike the shipped model's training receivers time packets to each input, without labels
/// (`Bank::likeness_of` on the embedded summary): the JSON for the report and a Markdown
/// section, and a warning for inputs farther than `FAMILIAR_DISTANCE` from all of them — where
/// the model failed most on receivers it never saw. `None` for another model (nothing is known
/// of its training receivers here) or inputs it cannot place (no send rate, too short: said).
/// Every capture input replayed through the online estimator (in parallel), in input order.
fn replay_levels(
    ui: &Ui,
    file: &ModelFile,
    files: &[aggrate::pipeline::Input],
    interval_ms: u64,
    flow: &FlowArgs,
) -> Result<Vec<aggrate::train::levels::CaptureLevels>> {
    if !(10..=60_000).contains(&interval_ms) {
        anyhow::bail!("--interval-ms {interval_ms}: between 10 and 60000");
    }
    let interval = std::time::Duration::from_millis(interval_ms);
    let caps: Vec<&aggrate::pipeline::Input> = files.iter().filter(|f| !f.is_table()).collect();
    if caps.len() < files.len() {
        ui.warn("feature tables carry no packets to replay: μ_N per interval is scored on the captures only");
    }
    let filter = flow.filter();
    let mut out: Vec<Option<Result<aggrate::train::levels::CaptureLevels, aggrate::train::levels::Error>>> =
        (0..caps.len()).map(|_| None).collect();
    aggrate::parallel::for_each(
        caps.len(),
        aggrate::parallel::all_cores(),
        |i| aggrate::train::levels::replay_levels(caps[i], file, interval, &filter, flow.keep_going),
        |i, r| out[i] = Some(r),
    );
    let levels: Vec<aggrate::train::levels::CaptureLevels> = out
        .into_iter()
        .map(|r| {
            r.expect("every input replayed")
                .context("replaying a capture through the online estimator")
        })
        .collect::<Result<_>>()?;
    for c in levels.iter().filter(|c| c.others_without_rate > 0) {
        ui.warn(format!(
            "{}: {} frames of others carry no rate (no radiotap rate, HT or VHT field): their air is not in the \
             share of others (others_share_sniffed), which reads low by it",
            c.path.display(),
            c.others_without_rate
        ));
    }
    Ok(levels)
}

fn training_likeness(
    ui: &Ui,
    file: &ModelFile,
    data: &aggrate::dataset::Dataset,
    files: &[aggrate::pipeline::Input],
) -> Option<(serde_json::Value, String)> {
    use aggrate::train::bank::{shipped_bank_for, FAMILIAR_DISTANCE};
    let bank = shipped_bank_for(&file.model, &file.spec).ok()??;
    let near = match bank.likeness_of(data) {
        Ok(n) => n,
        Err(e) => {
            ui.info(format!("not compared with the training receivers: {e}"));
            return None;
        }
    };
    let name = |g: u32| {
        files
            .get(g as usize)
            .map_or_else(|| format!("run {g}"), |f| f.path.display().to_string())
    };
    let far: Vec<&aggrate::train::bank::Nearest> = near.iter().filter(|n| !n.familiar()).collect();
    if !far.is_empty() {
        ui.warn(format!(
            "{} of {} inputs time packets unlike every receiver the model was trained on (nearest more than {FAMILIAR_DISTANCE} \
             spread away; {}): on receivers like that it missed its own-CV F1 at a quarter to a third of the points tested \
             (models/README.md). Calibrate it for this receiver without labels (aggrate calibrate --no-labels --measured) \
             or train on it",
            far.len(),
            near.len(),
            far.iter()
                .take(3)
                .map(|n| format!("{} at {} Mb/s: {:.1}", name(n.group), n.rate_mbps, n.distance))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let mut md = String::from(
        "\n## Like the training receivers?\n\nEach input's nearest receiver among the model's training receivers, by \
         how it times packets (quantiles and autocorrelation of the log gap, each in spreads over them at the nearest \
         rate; no label read). Within 1 the model held its own-CV F1 at 73 of 73 points of the receivers it was \
         tested on and never trained on, and at 157 of 175 of its training receivers each held out; beyond 1, \
         it missed at a quarter to a third of them (15 of 47; 26 of 105; models/README.md).\n\n| input | rate Mb/s | nearest training receiver | at Mb/s | distance |\n| --- | --- | --- | --- | --- |\n",
    );
    for n in &near {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {:.2}{} |\n",
            name(n.group),
            n.rate_mbps,
            n.receiver,
            n.bank_rate_mbps,
            n.distance,
            if n.familiar() { "" } else { " (far)" }
        ));
    }
    let json = serde_json::json!({
        "familiar_distance": FAMILIAR_DISTANCE,
        "inputs": near.iter().map(|n| n.to_json(name(n.group).into())).collect::<Vec<_>>(),
    });
    Some((json, md))
}
