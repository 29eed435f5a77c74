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
    /// Packets decoded and handed to the callback.
    pub(crate) records: u64,
    /// Damaged packets skipped (only with --keep-going).
    pub(crate) skipped: u64,
    /// What stopped the read early, if anything (already prefixed with the path).
    pub(crate) error: Option<String>,
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
    };
    let mut rec = aggrate::capture::PacketRecord::empty();
    while let Some(r) = file.reader.next_into(&mut rec) {
        match r {
            Ok(()) => {
                out.records += 1;
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
                break;
            }
            Err(e) => {
                out.error = Some(format!("{}: {e}", path.display()));
                break;
            }
        }
    }
    bar.finish();
    if out.skipped > MAX_WARNINGS {
        ui.warn(format!(
            "{}: {} damaged packets skipped in all",
            path.display(),
            out.skipped
        ));
    }
    Ok(out)
}
