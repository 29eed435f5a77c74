//! The record loop every command shares: open a capture, stream its packets with a progress bar,
//! and apply the `--keep-going` policy to damage.

use std::path::Path;
use std::sync::atomic::Ordering;

use anyhow::Result;

use aggrate::capture::io::{open_path, Compression};
use aggrate::capture::{Format, LinkType, PacketRecord};

use super::progress::Ui;
use super::InputError;

/// How reading one file went.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) format: Format,
    pub(crate) link: Option<LinkType>,
    pub(crate) compression: Compression,
    /// Capture records decoded (each handed to the callback once per IP packet it carries).
    pub(crate) records: u64,
    /// Damaged packets skipped (only with --keep-going).
    pub(crate) skipped: u64,
    /// What stopped the read early, if anything (already prefixed with the path).
    pub(crate) error: Option<String>,
    /// With --keep-going: the container damage reading stopped at (prefixed with the path).
    pub(crate) stopped: Option<String>,
    /// Bytes of the file not read when reading stopped early.
    pub(crate) unread_bytes: u64,
    /// Records whose timestamp fraction was a second or more, normalised as tshark does.
    pub(crate) timestamps_fixed: u64,
    /// Packets of pcapng interfaces with a link type we do not decode (skipped).
    pub(crate) other_link_packets: u64,
}

impl Outcome {
    /// Turn a stop-on-damage outcome into the command's error, after its partial results were
    /// written.
    pub(crate) fn into_result(self) -> Result<()> {
        match self.error {
            Some(e) => Err(InputError(format!("{e} (results up to the damage were kept)")).into()),
            None => Ok(()),
        }
    }
}

const MAX_WARNINGS: u64 = 5;

/// Read every packet of `path`, calling `f` on each one that decodes.
pub(crate) fn for_each_record(
    ui: &Ui,
    path: &Path,
    keep_going: bool,
    mut f: impl FnMut(&PacketRecord),
) -> Result<Outcome> {
    let mut file = open_path(path)?;
    let mut bar = ui.bytes_bar(file.file_len, &format!("reading {}", path.display()));
    let mut out = Outcome {
        format: file.reader.format(),
        link: file.reader.link_type(),
        compression: file.compression,
        records: 0,
        skipped: 0,
        error: None,
        stopped: None,
        unread_bytes: 0,
        timestamps_fixed: 0,
        other_link_packets: 0,
    };
    let mut rec = aggrate::capture::PacketRecord::empty();
    while let Some(r) = file.reader.next_into(&mut rec) {
        match r {
            Ok(()) => {
                // Capture records: the further packets of an A-MSDU share their MPDU's record.
                out.records += u64::from(rec.msdu.0 == 0);
                if out.link.is_none() {
                    out.link = Some(rec.link);
                }
                f(&rec);
                if out.records & 0xffff == 0 {
                    bar.set(file.consumed.load(Ordering::Relaxed));
                }
            }
            Err(e) if keep_going && e.is_packet_level() => {
                out.skipped += 1;
                if out.skipped <= MAX_WARNINGS {
                    ui.warn(format!("{}: {e}; skipped", path.display()));
                }
            }
            Err(e) if keep_going => {
                ui.warn(format!("{}: {e}; stopped reading this file there", path.display()));
                out.stopped = Some(format!("{}: {e}", path.display()));
                break;
            }
            Err(e) => {
                out.error = Some(format!("{}: {e}", path.display()));
                break;
            }
        }
    }
    bar.finish();
    if out.error.is_some() || out.stopped.is_some() {
        // Uncompressed: from the record the reader stopped at; compressed: from the compressed
        // bytes consumed (a lower bound: the decoder reads ahead).
        let done = match file.compression {
            Compression::None => file.reader.offset(),
            _ => file.consumed.load(Ordering::Relaxed),
        };
        out.unread_bytes = file.file_len.saturating_sub(done);
    }
    out.timestamps_fixed = file.reader.timestamps_fixed();
    let (n, ifaces) = file.reader.other_link_packets();
    out.other_link_packets = n;
    if n > 0 {
        ui.info(format!(
            "{}: {n} packets of interface(s) {ifaces:?} skipped: link types aggrate does not decode",
            path.display()
        ));
    }
    if out.timestamps_fixed > 0 {
        ui.info(format!(
            "{}: {} records with a fraction of a second ≥ 1 s, carried into the seconds (as tshark does)",
            path.display(),
            out.timestamps_fixed
        ));
    }
    if out.skipped > MAX_WARNINGS {
        ui.warn(format!(
            "{}: {} damaged packets skipped in all",
            path.display(),
            out.skipped
        ));
    }
    Ok(out)
}
