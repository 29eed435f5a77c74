//! What `train`, `eval` and `sweep` read: captures (with the receiver each one came through and,
//! optionally, a receiver's kernel log joined by sequence number), dataset folders, or the
//! feature tables `aggrate features` writes — turned into one [`Dataset`].

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::dataset::Dataset;
use aggrate::features::FeatureSpec;
pub(crate) use aggrate::pipeline::Input;
use aggrate::pipeline::{load_dataset, receiver_from_comment};

use super::progress::{Bars, Ui};
use super::FlowArgs;

fn is_capture(p: &Path) -> bool {
    p.extension()
        .is_some_and(|e| e == "pcapng" || e == "pcap" || e == "gz" || e == "xz")
}

/// Inputs from the command line: dataset folders (their manifest's runs — training runs only
/// when `train_only` — else every capture in them), captures and feature tables. `kernel`: one
/// log per capture in order, or one folder holding `<capture stem>.csv` (or `.kernel.csv`,
/// `.pcap`, `.pcapng`) per capture.
pub(crate) fn inputs(args: &[PathBuf], train_only: bool, kernel: &[PathBuf]) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            let manifest = a.join("manifest.json");
            if manifest.exists() {
                let v: serde_json::Value = serde_json::from_str(
                    &std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?,
                )
                .with_context(|| format!("{}: not JSON", manifest.display()))?;
                for r in v["runs"].as_array().into_iter().flatten() {
                    if train_only && r["role"] != "train" {
                        continue;
                    }
                    for s in r["stations"].as_array().into_iter().flatten() {
                        if let Some(f) = s["file"].as_str() {
                            out.push(Input {
                                path: a.join(f),
                                receiver: r["receiver"].as_str().map(str::to_string),
                                kernel: s["kernel"].as_str().map(|k| a.join(k)),
                                truth_optional: false,
                            });
                        }
                    }
                }
            } else {
                let mut v: Vec<PathBuf> = std::fs::read_dir(a)
                    .with_context(|| format!("reading {}", a.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| is_capture(p))
                    .collect();
                v.sort();
                out.extend(v.into_iter().map(|path| Input {
                    path,
                    receiver: None,
                    kernel: None,
                    truth_optional: false,
                }));
            }
        } else {
            out.push(Input {
                path: a.clone(),
                receiver: None,
                kernel: None,
                truth_optional: false,
            });
        }
    }
    if out.is_empty() {
        bail!("no capture files in {:?}", args);
    }
    for i in &mut out {
        if i.receiver.is_none() && !i.is_table() {
            i.receiver = receiver_from_comment(&i.path);
        }
    }
    match kernel {
        [] => {}
        [dir] if dir.is_dir() => {
            for i in &mut out {
                let name = i.name();
                let stem = name.split('.').next().unwrap_or(&name).to_string();
                let found = [".csv", ".kernel.csv", ".pcapng", ".pcap"]
                    .iter()
                    .map(|ext| dir.join(format!("{stem}{ext}")))
                    .find(|p| p.is_file());
                match found {
                    Some(k) => i.kernel = Some(k),
                    None => bail!(
                        "--kernel {}: no log for {} (looked for {stem}.csv, {stem}.kernel.csv, {stem}.pcapng, {stem}.pcap)",
                        dir.display(),
                        i.path.display()
                    ),
                }
            }
        }
        logs => {
            if logs.len() != out.len() {
                bail!(
                    "--kernel: {} logs for {} captures (give one per capture, in order, or a folder of logs named after the captures)",
                    logs.len(),
                    out.len()
                );
            }
            for (i, k) in out.iter_mut().zip(logs) {
                i.kernel = Some(k.clone());
            }
        }
    }
    if let Some(t) = out.iter().find(|i| i.is_table() && i.kernel.is_some()) {
        bail!(
            "{}: a feature table already carries its times; --kernel joins captures only",
            t.path.display()
        );
    }
    Ok(out)
}

/// Rows of all inputs (group = input index), read on all cores (the result does not depend on
/// the thread count); notes partial kernel-log joins.
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
    let threads = super::all_cores();
    let loaded = load_dataset(
        inputs,
        spec,
        &flow.filter(),
        flow.keep_going,
        threads,
        &mut Bars::new(ui),
    )?;
    for out in loaded.outcomes.iter().flatten() {
        if out
            .join
            .as_ref()
            .is_some_and(|(_, j)| j.unmatched_truth > 0 || j.unmatched_kernel > 0)
        {
            super::features::report_join(ui, out);
        }
    }
    let truth = loaded
        .outcomes
        .iter()
        .all(|o| o.as_ref().is_none_or(|o| o.ground_truth));
    Ok((loaded.data, truth))
}
