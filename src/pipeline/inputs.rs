//! What `train`, `eval`, `sweep` and `calibrate` read, resolved from what a user names: dataset
//! folders (their manifest's runs, or every capture in them), captures and feature tables, each
//! with the receiver it came through and, optionally, a receiver's kernel log to join by
//! sequence number; and what the captures say of the WLAN they were sent over.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{pick_flow, read_records, receiver_from_comment, Input};
use crate::capture::filter::FlowFilter;
use crate::progress::NoProgress;
use crate::wlan::manifest::WlanSettings;

/// Inputs that cannot be resolved; each names the file or the flag.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A folder or manifest cannot be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A dataset manifest is not JSON.
    #[error("{}: not JSON: {source}", path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// Nothing to read.
    #[error("no capture files in {0:?}")]
    Empty(Vec<PathBuf>),
    /// A folder of kernel logs lacks one for a capture.
    #[error("--kernel {}: no log for {} (looked for {stem}.csv, {stem}.kernel.csv, {stem}.pcapng, {stem}.pcap)", dir.display(), capture.display())]
    NoLog {
        /// The folder.
        dir: PathBuf,
        /// The capture.
        capture: PathBuf,
        /// Its name up to the first dot.
        stem: String,
    },
    /// Logs given one per capture, but not as many as captures.
    #[error("--kernel: {logs} logs for {captures} captures (give one per capture, in order, or a folder of logs named after the captures)")]
    LogCount {
        /// Logs given.
        logs: usize,
        /// Captures.
        captures: usize,
    },
    /// A feature table was given a kernel log.
    #[error("{}: a feature table already carries its times; --kernel joins captures only", .0.display())]
    TableWithLog(PathBuf),
    /// A capture cannot be read to see its WLAN.
    #[error("{}: reading its {what}: {source}", path.display())]
    Read {
        /// The capture.
        path: PathBuf,
        /// "flow" or "packet sizes".
        what: &'static str,
        /// Why.
        source: Box<super::Error>,
    },
}

fn is_capture(p: &Path) -> bool {
    p.extension()
        .is_some_and(|e| e == "pcapng" || e == "pcap" || e == "gz" || e == "xz")
}

/// Inputs from the command line: dataset folders (their manifest's runs — training runs only
/// when `train_only` — else every capture in them), captures and feature tables. `kernel`: one
/// log per capture in order, or one folder holding `<capture stem>.csv` (or `.kernel.csv`,
/// `.pcap`, `.pcapng`) per capture. A capture's receiver comes from the manifest or, failing
/// that, from its pcapng comment.
pub fn resolve(args: &[PathBuf], train_only: bool, kernel: &[PathBuf]) -> Result<Vec<Input>, InputError> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            out.extend(folder(a, train_only)?);
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
        return Err(InputError::Empty(args.to_vec()));
    }
    for i in &mut out {
        if i.receiver.is_none() && !i.is_table() {
            i.receiver = receiver_from_comment(&i.path);
        }
    }
    join_logs(&mut out, kernel)?;
    if let Some(t) = out.iter().find(|i| i.is_table() && i.kernel.is_some()) {
        return Err(InputError::TableWithLog(t.path.clone()));
    }
    Ok(out)
}

/// A dataset folder's inputs: its manifest's runs, or every capture in it (sorted).
fn folder(a: &Path, train_only: bool) -> Result<Vec<Input>, InputError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InputError::Io { path, source }
    };
    let manifest = a.join("manifest.json");
    let mut out = Vec::new();
    if manifest.exists() {
        let text = std::fs::read_to_string(&manifest).map_err(io(&manifest))?;
        let built: crate::wlan::manifest::BuiltDataset =
            serde_json::from_str(&text).map_err(|source| InputError::Manifest {
                path: manifest.clone(),
                source,
            })?;
        for r in built.runs {
            if train_only && r.role != crate::wlan::manifest::Role::Train {
                continue;
            }
            for s in &r.stations {
                out.push(Input {
                    path: a.join(&s.file),
                    receiver: Some(r.receiver.clone()),
                    kernel: None,
                    truth_optional: false,
                });
            }
        }
    } else {
        let mut v: Vec<PathBuf> = std::fs::read_dir(a)
            .map_err(io(a))?
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
    Ok(out)
}

/// Each input's kernel log: one per input in order, or found by name in one folder.
fn join_logs(out: &mut [Input], kernel: &[PathBuf]) -> Result<(), InputError> {
    match kernel {
        [] => {}
        [dir] if dir.is_dir() => {
            for i in out.iter_mut() {
                let name = i.name();
                let stem = name.split('.').next().unwrap_or(&name).to_string();
                let found = [".csv", ".kernel.csv", ".pcapng", ".pcap"]
                    .iter()
                    .map(|ext| dir.join(format!("{stem}{ext}")))
                    .find(|p| p.is_file());
                match found {
                    Some(k) => i.kernel = Some(k),
                    None => {
                        return Err(InputError::NoLog {
                            dir: dir.clone(),
                            capture: i.path.clone(),
                            stem,
                        })
                    }
                }
            }
        }
        logs => {
            if logs.len() != out.len() {
                return Err(InputError::LogCount {
                    logs: logs.len(),
                    captures: out.len(),
                });
            }
            for (i, k) in out.iter_mut().zip(logs) {
                i.kernel = Some(k.clone());
            }
        }
    }
    Ok(())
}

/// What captures say of the WLAN they were sent over, from one pass over each (the flow the
/// rows will be read from): the most common IP length, and the most common VHT MCS / streams /
/// width of the radiotap headers (sniffer captures only). Feature tables say nothing and are
/// skipped.
pub fn seen_wlan(files: &[Input], filter: &FlowFilter, keep_going: bool) -> Result<WlanSettings, InputError> {
    let mut ip: HashMap<u16, u64> = HashMap::new();
    let mut vht: HashMap<(u8, u8, Option<u16>), u64> = HashMap::new();
    for f in files.iter().filter(|f| !f.is_table()) {
        let read = |what| {
            let path = f.path.clone();
            move |e| InputError::Read {
                path,
                what,
                source: Box::new(e),
            }
        };
        let pick = pick_flow(&f.path, filter, keep_going, &mut NoProgress).map_err(read("flow"))?;
        read_records(&f.path, keep_going, &mut NoProgress, |r| {
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
        .map_err(read("packet sizes"))?;
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
