//! The record loop every command shares: [`aggrate::pipeline::read_records`] with a byte
//! progress bar, then what the read noticed (skipped packets, damage, foreign interfaces) on
//! stderr.

use std::path::Path;

use anyhow::Result;

use aggrate::capture::PacketRecord;
use aggrate::pipeline::{read_records, ReadStats, MAX_SKIPPED_KEPT};

use super::progress::{ByteBars, Ui};

/// Read every packet of `path`, calling `f` on each one that decodes; damage is in the returned
/// stats (turn it into the command's error with `ReadStats::fatal_damage` once partial results
/// are written).
pub(crate) fn for_each_record(
    ui: &Ui,
    path: &Path,
    keep_going: bool,
    f: impl FnMut(&PacketRecord),
) -> Result<ReadStats> {
    let st = read_records(path, keep_going, &mut ByteBars::new(ui), f)?;
    report_read(ui, path, &st);
    Ok(st)
}

/// What a read noticed, as warnings and notes.
pub(crate) fn report_read(ui: &Ui, path: &Path, st: &ReadStats) {
    for e in &st.first_skipped {
        ui.warn(format!("{}: {e}; skipped", path.display()));
    }
    if st.skipped > MAX_SKIPPED_KEPT as u64 {
        ui.warn(format!(
            "{}: {} damaged packets skipped in all",
            path.display(),
            st.skipped
        ));
    }
    if let (Some(e), true) = (&st.damage, st.keep_going) {
        ui.warn(format!("{}: {e}; stopped reading this file there", path.display()));
    }
    if st.other_link_packets > 0 {
        ui.info(format!(
            "{}: {} packets of interface(s) {:?} skipped: link types aggrate does not decode",
            path.display(),
            st.other_link_packets,
            st.other_link_interfaces
        ));
    }
    if st.timestamps_fixed > 0 {
        ui.info(format!(
            "{}: {} records with a fraction of a second ≥ 1 s, carried into the seconds (as tshark does)",
            path.display(),
            st.timestamps_fixed
        ));
    }
}
