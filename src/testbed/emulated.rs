//! An emulator run whose receive times come from a real kernel: the emulator (no noise model)
//! says when each MPDU reaches the station, the packets are replayed at those times through
//! loopback or a veth [`Testbed`], and the kernel's receive timestamps become the capture's
//! record times. `aggrate simulate --kernel-replay` and `aggrate dataset build` (kernel receivers)
//! write through [`simulate_replayed`].

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use super::{schedule, Error, KernelPath, Testbed};
use crate::capture::writer::CaptureWriter;
use crate::time::Ts;
use crate::wlan::live::{replay_through_kernel, ReplayError};
use crate::wlan::run::{run_heard, Heard, MpduFrames, OtherFrames, OtherSenders, RunSummary, ValidScenario};
use crate::wlan::write::{out_format, station_paths, WriteError};

/// Longest scenario replayed in real time.
pub const MAX_REPLAY_S: f64 = 120.0;

/// Errors of a replayed run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scenario models its own receive path; the kernel is the receive path here.
    #[error("a kernel replay takes its receive times from the kernel: the scenario must have no noise model")]
    Noise,
    /// Longer than [`MAX_REPLAY_S`].
    #[error("a kernel replay runs in real time: duration_s = {0} exceeds {MAX_REPLAY_S} s")]
    TooLong(f64),
    /// The output's name or snap length.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Setting up or replaying through the veth testbed.
    #[error("veth testbed: {0}")]
    Testbed(#[from] Error),
    /// Replaying over loopback.
    #[error(transparent)]
    Loopback(#[from] ReplayError),
}

/// Emulate `scn` (whose receive path must have no stages: host time = MAC time), replay each station's packets through the
/// real kernel — loopback, or a veth testbed with `kernel`'s settings — and write one capture per
/// station with the kernel's receive times (parent folders created). The pcapng section comment
/// records the path, what the kernel applied and how the replay went; `note` hears what each
/// station is doing.
pub fn simulate_replayed(
    scn: &ValidScenario,
    out: &Path,
    snaplen: u32,
    kernel: Option<&KernelPath>,
    note: &mut dyn FnMut(String),
) -> Result<(RunSummary, Vec<PathBuf>), RunError> {
    if scn.noise.as_ref().is_some_and(|p| !p.path().stages.is_empty()) {
        return Err(RunError::Noise);
    }
    if scn.scenario.duration_s > MAX_REPLAY_S {
        return Err(RunError::TooLong(scn.scenario.duration_s));
    }
    let format = out_format(out)?;
    let mut ds = Vec::new();
    // A sniffer's run: the other networks' PPDUs too, written beside the station's frames on
    // the kernel's clock (they never pass through the receiver).
    let mut others = Vec::new();
    let summary = run_heard(
        scn,
        |h| match h {
            Heard::Delivery(d, _) => ds.push(*d),
            Heard::Other(o) => others.push(*o),
        },
        |_| {},
    );
    let senders = OtherSenders::of(scn.wlan.config());
    let n = scn.wlan.config().stations.len();
    let paths = station_paths(out, n);
    let channel = scn.wlan.config().channel_mhz;
    let bed = kernel.map(Testbed::create).transpose()?;
    for (sta, p) in paths.iter().enumerate() {
        let mine: Vec<_> = ds.iter().filter(|d| d.sta.0 as usize == sta).collect();
        note(format!(
            "sta{sta}: replaying {} packets through the kernel ({}, {:.1} s)…",
            mine.len(),
            kernel.map_or("loopback", |k| k.name.as_str()),
            scn.scenario.duration_s
        ));
        let (host, lost, late, meta) = match (&bed, kernel) {
            (Some(bed), Some(k)) => {
                let ppdu: Vec<_> = mine
                    .iter()
                    .map(|d| (d.ppdu_start, d.mac_time, d.index, d.count))
                    .collect();
                let rep = bed.replay(k, &schedule(k, &ppdu))?;
                let meta = serde_json::json!({
                    "receiver": k.name,
                    "kernel_path": k,
                    "applied": bed.applied,
                    "lost": rep.lost,
                    "send_errors": rep.send_errors,
                    "max_send_late_us": rep.max_send_late.as_secs_f64() * 1e6,
                });
                (rep.host, rep.lost, rep.max_send_late, meta)
            }
            _ => {
                let macs: Vec<Ts> = mine.iter().map(|d| d.mac_time).collect();
                let rep = replay_through_kernel(&macs)?;
                let meta = serde_json::json!({
                    "receiver": "loopback",
                    "kernel_path": "loopback",
                    "lost": rep.lost,
                    "max_send_late_us": rep.max_send_late.as_secs_f64() * 1e6,
                });
                (rep.host, rep.lost, rep.max_send_late, meta)
            }
        };
        let comment = serde_json::json!({
            "aggrate": env!("CARGO_PKG_VERSION"),
            "seed": scn.scenario.seed,
            "replay": meta,
        })
        .to_string();
        let io = |source| WriteError::Io {
            path: p.clone(),
            source,
        };
        if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).map_err(io)?;
        }
        let f = File::create(p).map_err(io)?;
        let mut w = CaptureWriter::with_comment(BufWriter::new(f), format, snaplen, Some(&comment)).map_err(io)?;
        let mut buf = Vec::new();
        let mut frames = MpduFrames::default();
        for (d, h) in mine.iter().zip(&host) {
            if let Some((at, orig)) = frames.push(d, *h, channel, snaplen as usize, &mut buf) {
                w.write(at, &buf, orig as u32).map_err(io)?;
            }
        }
        write_others(&mut w, &others, &mine, &host, senders, channel, snaplen as usize).map_err(io)?;
        w.finish().map_err(io)?;
        note(format!(
            "sta{sta}: {lost} lost in the kernel, sender at most {:.0} µs late",
            late.as_secs_f64() * 1e6
        ));
    }
    Ok((summary, paths))
}

/// The other networks' PPDUs of a sniffer's run into a station's capture, on the kernel's clock:
/// the emulator's shifted by the least receive delay any of the station's packets had.
fn write_others<W: std::io::Write>(
    w: &mut CaptureWriter<W>,
    others: &[crate::wlan::OtherPpdu],
    mine: &[&crate::wlan::Delivery],
    host: &[Option<Ts>],
    senders: OtherSenders,
    channel: u16,
    snaplen: usize,
) -> std::io::Result<()> {
    if others.is_empty() {
        return Ok(());
    }
    let offset = mine
        .iter()
        .zip(host)
        .filter_map(|(d, h)| h.map(|h| h.as_nanos() as i128 - d.mac_time.as_nanos() as i128))
        .min()
        .unwrap_or(0);
    let (mut of, mut buf, mut err) = (OtherFrames::default(), Vec::new(), None);
    for o in others {
        of.write(o, senders, channel, snaplen, &mut buf, |at, bytes, full| {
            let at = Ts((at.as_nanos() as i128 + offset).max(0) as u64);
            if err.is_none() {
                err = w.write(at, bytes, full as u32).err();
            }
        });
    }
    err.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wlan::noise::NoisePreset;
    use crate::wlan::run::Scenario;

    fn scenario(noise: NoisePreset, duration_s: f64) -> ValidScenario {
        let s = Scenario {
            noise_preset: noise,
            duration_s,
            ..Scenario::default()
        };
        s.check().unwrap()
    }

    #[test]
    fn refuses_a_noise_model_or_a_long_run_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("x.pcapng");
        let mut notes = Vec::new();
        let e = simulate_replayed(&scenario(NoisePreset::Phone, 1.0), &out, 128, None, &mut |m| {
            notes.push(m)
        });
        assert!(matches!(e, Err(RunError::Noise)), "{e:?}");
        let e = simulate_replayed(&scenario(NoisePreset::None, 121.0), &out, 128, None, &mut |m| {
            notes.push(m)
        });
        assert!(matches!(e, Err(RunError::TooLong(d)) if d == 121.0), "{e:?}");
        let bad = dir.path().join("x.txt");
        let e = simulate_replayed(&scenario(NoisePreset::None, 1.0), &bad, 128, None, &mut |m| {
            notes.push(m)
        });
        assert!(matches!(e, Err(RunError::Write(WriteError::Extension(_)))), "{e:?}");
        assert!(notes.is_empty() && std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
