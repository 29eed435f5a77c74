//! What `train`, `eval` and `sweep` read: captures (with the receiver each one came through and,
//! optionally, a receiver's kernel log joined by sequence number), dataset folders, or the
//! feature tables `aggrate features` writes — turned into one [`Dataset`].

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::dataset::Dataset;
use aggrate::features::FeatureSpec;
pub(crate) use aggrate::pipeline::Input;
use aggrate::pipeline::{load_dataset, receiver_from_comment};
pub(crate) use aggrate::wlan::manifest::WlanSettings;

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

/// What captures say of the WLAN they were sent over, from one pass over each (the flow
/// `load_rows` will read): the most common IP length, and the most common VHT MCS / streams /
/// width of the radiotap headers (sniffer captures only). Feature tables say nothing and are
/// skipped.
pub(crate) fn seen_wlan(files: &[Input], flow: &FlowArgs) -> Result<WlanSettings> {
    use aggrate::pipeline::{pick_flow, read_records};
    use aggrate::progress::NoProgress;
    use std::collections::HashMap;
    let mut ip: HashMap<u16, u64> = HashMap::new();
    let mut vht: HashMap<(u8, u8, Option<u16>), u64> = HashMap::new();
    for f in files.iter().filter(|f| !f.is_table()) {
        let pick = pick_flow(&f.path, &flow.filter(), flow.keep_going, &mut NoProgress)
            .with_context(|| format!("{}: reading its flow", f.path.display()))?;
        read_records(&f.path, flow.keep_going, &mut NoProgress, |r| {
            if !pick.filter.matches(r) {
                return;
            }
            if let Some(l) = r.l3 {
                *ip.entry(l.ip_len.min(u16::MAX as u32) as u16).or_default() += 1;
            }
            if let Some(v) = r.radio.and_then(|x| x.vht).filter(|v| v.nss > 0) {
                *vht.entry((v.mcs, v.nss, v.bw_mhz)).or_default() += 1;
            }
        })
        .with_context(|| format!("{}: reading its packet sizes", f.path.display()))?;
    }
    // The most common value; ties to the smallest, so that the answer does not depend on
    // hashing order.
    fn mode<K: Ord + Copy>(m: HashMap<K, u64>) -> Option<K> {
        m.into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(k, _)| k)
    }
    let v = mode(vht);
    Ok(WlanSettings {
        ip_len: mode(ip),
        mcs: v.map(|v| v.0),
        nss: v.map(|v| v.1),
        bw_mhz: v.and_then(|v| v.2).map(u32::from),
    })
}
