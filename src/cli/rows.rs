//! What `train`, `eval` and `sweep` read: captures (with the receiver each one came through and,
//! optionally, a receiver's kernel log joined by sequence number), dataset folders, or the
//! feature tables `aggrate features` writes — turned into one [`Dataset`].

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::capture::io::{open_path, read_seq_log};
use aggrate::dataset::{Dataset, Join, RowExtractor};
use aggrate::features::FeatureSpec;

use super::features::{pick_flow, rate_from_name};
use super::ingest::for_each_record;
use super::progress::Ui;
use super::{FlowArgs, InputError};

/// One input of a training or evaluation run.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    /// A capture (pcap/pcapng, optionally .gz/.xz) or a feature table (.parquet/.csv).
    pub(crate) path: PathBuf,
    /// The receiver it came through (manifest `receiver`, the capture's pcapng comment, or none).
    pub(crate) receiver: Option<String>,
    /// Kernel receive times to join (a `seq,host_ns` CSV or a receiver-side capture).
    pub(crate) kernel: Option<PathBuf>,
}

impl Input {
    pub(crate) fn is_table(&self) -> bool {
        matches!(
            self.path
                .extension()
                .and_then(|e| e.to_str())
                .map(|e| e.to_ascii_lowercase())
                .as_deref(),
            Some("parquet" | "pq" | "csv")
        )
    }
    pub(crate) fn name(&self) -> String {
        self.path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

fn is_capture(p: &Path) -> bool {
    p.extension()
        .is_some_and(|e| e == "pcapng" || e == "pcap" || e == "gz" || e == "xz")
}

/// The receiver named in a capture's pcapng section comment (written by `simulate` and
/// `dataset build`), if any.
pub(crate) fn receiver_from_comment(path: &Path) -> Option<String> {
    let f = open_path(path).ok()?;
    for c in f.reader.section_comments() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&c) {
            if let Some(r) = v["receiver"].as_str().or_else(|| v["replay"]["receiver"].as_str()) {
                return Some(r.to_string());
            }
        }
    }
    None
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
                }));
            }
        } else {
            out.push(Input {
                path: a.clone(),
                receiver: None,
                kernel: None,
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

/// Kernel receive times from a `seq,host_ns` CSV or a receiver-side capture (its flow picked
/// like the capture's; sequence numbers at `seq_offset` in the UDP payload).
pub(crate) fn load_kernel(ui: &Ui, path: &Path, flow: &FlowArgs, seq_offset: usize) -> Result<Join> {
    let is_csv = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    if is_csv {
        return Ok(Join::new(read_seq_log(path)?));
    }
    let filter = pick_flow(ui, path, flow)?;
    let mut pairs = Vec::new();
    let out = for_each_record(ui, path, flow.keep_going, |r| {
        if filter.matches(r) {
            if let Some(s) = r.payload_seq(seq_offset) {
                pairs.push((s, r.host.as_nanos()));
            }
        }
    })?;
    out.into_result()?;
    Ok(Join::new(pairs))
}

/// Rows of all inputs (group = input index). Inputs are read on all cores, each into its own
/// block, and concatenated in input order (the result does not depend on the thread count).
pub(crate) fn load_rows(ui: &Ui, inputs: &[Input], spec: &FeatureSpec, flow: &FlowArgs) -> Result<Dataset> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, inputs.len().max(1));
    if threads == 1 {
        let mut data = Dataset::new(spec.width());
        for (g, input) in inputs.iter().enumerate() {
            load_input(ui, input, g as u32, spec, flow, &mut data)?;
        }
        return Ok(data);
    }
    let bar = ui.count_bar(
        inputs.len() as u64,
        "reading captures [{bar:30}] {pos}/{len}, eta {eta}",
    );
    let next = std::sync::atomic::AtomicUsize::new(0);
    let quiet = Ui { quiet: true };
    let mut parts: Vec<(usize, Result<Dataset>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (next, bar, quiet) = (&next, &bar, &quiet);
                sc.spawn(move || {
                    let mut out = Vec::new();
                    loop {
                        let g = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(input) = inputs.get(g) else { break };
                        let mut d = Dataset::new(spec.width());
                        let r = load_input(quiet, input, g as u32, spec, flow, &mut d).map(|_| d);
                        bar.inc(1);
                        out.push((g, r));
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    bar.finish_and_clear();
    parts.sort_by_key(|p| p.0);
    if parts.len() != inputs.len() {
        bail!("a capture reader thread failed");
    }
    let mut data = Dataset::new(spec.width());
    for (_, part) in parts {
        data.append(&part?);
    }
    Ok(data)
}

/// One input's rows appended to `data` as group `g`.
fn load_input(ui: &Ui, input: &Input, g: u32, spec: &FeatureSpec, flow: &FlowArgs, data: &mut Dataset) -> Result<()> {
    if input.is_table() {
        return super::table::read_rows(&input.path, spec, g, data);
    }
    let path = &input.path;
    let filter = pick_flow(&Ui { quiet: true }, path, flow)?;
    let rate = rate_from_name(path).map_or(f32::NAN, |r| r as f32);
    let mut join = match &input.kernel {
        Some(k) => {
            Some(load_kernel(&Ui { quiet: true }, k, flow, 0).with_context(|| format!("kernel log {}", k.display()))?)
        }
        None => None,
    };
    let mut ex = RowExtractor::new(*spec, 0)?;
    let mut sink =
        |m: &aggrate::dataset::RowMeta, x: &[f64]| data.push_at(m.host, x, m.first_of_frame, g, rate, m.level);
    let out = for_each_record(ui, path, flow.keep_going, |r| {
        if filter.matches(r) {
            let host = match join.as_mut() {
                Some(j) => j.lookup(r.payload_seq(0)),
                None => Some(r.host),
            };
            ex.push(r, host, &mut sink);
        }
    })?;
    ex.finish(&mut sink);
    out.into_result()?;
    if !ex.has_ground_truth() {
        return Err(aggrate::label::Error::NoGroundTruth { packets: ex.packets_in })
            .with_context(|| path.display().to_string());
    }
    if let (Some(j), Some(k)) = (&join, &input.kernel) {
        if j.matched == 0 {
            return Err(InputError(format!(
                "{}: no sequence number in common with the {} packets of {}'s flow ({} log entries): a log of another flow or capture?",
                k.display(),
                j.unmatched_truth,
                path.display(),
                j.len()
            ))
            .into());
        }
        if j.unmatched_truth > 0 || j.unmatched_kernel() > 0 {
            ui.info(format!(
                "{}: joined {} packets; {} capture packets without a kernel time, {} log entries without a capture packet",
                path.display(),
                j.matched,
                j.unmatched_truth,
                j.unmatched_kernel()
            ));
        }
    }
    Ok(())
}
