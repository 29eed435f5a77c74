//! Emulator runs written as captures: what each station's monitor interface would record
//! (radiotap + 802.11 frames, kernel receive times as the record times), one file per station,
//! the receive path in the pcapng section comment. `aggrate simulate`, `aggrate dataset build`
//! and the Python package's `simulate` write through [`simulate_to`].

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use super::run::{run_heard, Heard, MpduFrames, OtherFrames, OtherSenders, RunSummary, ValidScenario};
use super::WlanConfig;
use crate::capture::writer::{CaptureWriter, OutFormat};
use crate::progress::Progress;

/// Errors writing an emulator run.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Neither .pcapng nor .pcap.
    #[error("{}: the output must end in .pcapng or .pcap", .0.display())]
    Extension(PathBuf),
    /// Snap length outside 64..=65535.
    #[error("snap length {0}: 64..=65535")]
    Snaplen(u32),
    /// Creating or writing a capture failed.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// The capture.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The snap length to write with: as asked, or 128 bytes (65,535 when the AP builds A-MSDUs,
/// whose later subframes a shorter snap length would cut off).
pub fn snaplen_for(asked: Option<u32>, wlan: &WlanConfig) -> Result<u32, WriteError> {
    let s = asked.unwrap_or(if wlan.amsdu_max_msdus > 1 { 65_535 } else { 128 });
    if !(64..=65_535).contains(&s) {
        return Err(WriteError::Snaplen(s));
    }
    Ok(s)
}

/// Per-station output paths: `out` for one station, `STEM.staK.EXT` for several.
pub fn station_paths(out: &Path, n: usize) -> Vec<PathBuf> {
    if n == 1 {
        return vec![out.to_path_buf()];
    }
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = out
        .extension()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pcapng".into());
    (0..n)
        .map(|i| out.with_file_name(format!("{stem}.sta{i}.{ext}")))
        .collect()
}

/// The container a file name asks for.
pub fn out_format(out: &Path) -> Result<OutFormat, WriteError> {
    match out.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase()) {
        Some(e) if e == "pcap" => Ok(OutFormat::Pcap),
        Some(e) if e == "pcapng" => Ok(OutFormat::Pcapng),
        _ => Err(WriteError::Extension(out.to_path_buf())),
    }
}

/// Run a checked scenario and write one capture per station (parent folders created);
/// `progress` gets virtual milliseconds.
pub fn simulate_to(
    scn: &ValidScenario,
    out: &Path,
    snaplen: Option<u32>,
    progress: &mut dyn Progress,
) -> Result<(RunSummary, Vec<PathBuf>), WriteError> {
    let format = out_format(out)?;
    let snaplen = snaplen_for(snaplen, scn.wlan.config())?;
    let n = scn.wlan.config().stations.len();
    let paths = station_paths(out, n);
    let comment = serde_json::json!({
        "aggrate": env!("CARGO_PKG_VERSION"),
        "seed": scn.scenario.seed,
        "receiver": scn.noise.as_ref().map_or("none".to_string(), |p| p.path().name.clone()),
        "receive_path": scn.noise.as_ref().map(|p| p.path()),
    })
    .to_string();
    let mut writers = Vec::new();
    for p in &paths {
        let io = |source| WriteError::Io {
            path: p.clone(),
            source,
        };
        if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).map_err(io)?;
        }
        let f = File::create(p).map_err(io)?;
        writers.push(
            CaptureWriter::with_comment(BufWriter::with_capacity(1 << 20, f), format, snaplen, Some(&comment))
                .map_err(io)?,
        );
    }
    let channel = scn.wlan.config().channel_mhz;
    let mut buf = Vec::with_capacity(256);
    let mut frames: Vec<MpduFrames> = (0..n).map(|_| MpduFrames::default()).collect();
    let mut err: Option<(usize, std::io::Error)> = None;
    let mut others = OtherFrames::default();
    let mut obuf = Vec::with_capacity(256);
    let senders = OtherSenders::of(scn.wlan.config());
    progress.start("simulating (virtual ms)", (scn.scenario.duration_s * 1000.0) as u64);
    let summary = run_heard(
        scn,
        |h| {
            if err.is_some() {
                return;
            }
            match h {
                // A packet the receive path dropped never reached the receiver's log.
                Heard::Delivery(d, host) => {
                    let sta = d.sta.0 as usize;
                    if let Some((at, orig)) = frames[sta].push(d, host, channel, snaplen as usize, &mut buf) {
                        if let Err(e) = writers[sta].write(at, &buf, orig as u32) {
                            err = Some((sta, e));
                        }
                    }
                }
                // A sniffer hears the other networks' frames: every station's capture holds them.
                Heard::Other(o) => others.write(o, senders, channel, snaplen as usize, &mut obuf, |at, bytes, full| {
                    for (sta, w) in writers.iter_mut().enumerate() {
                        if err.is_none() {
                            if let Err(e) = w.write(at, bytes, full as u32) {
                                err = Some((sta, e));
                            }
                        }
                    }
                }),
            }
        },
        |now| progress.set((now.as_secs_f64() * 1000.0) as u64),
    );
    progress.finish();
    if let Some((sta, source)) = err {
        return Err(WriteError::Io {
            path: paths[sta].clone(),
            source,
        });
    }
    for (w, p) in writers.into_iter().zip(&paths) {
        w.finish().map_err(|source| WriteError::Io {
            path: p.clone(),
            source,
        })?;
    }
    Ok((summary, paths))
}
