//! `aggrate features`: captures → one labelled feature row per packet of the selected flow.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::capture::filter::{FlowCounts, FlowFilter};
use aggrate::dataset::{Join, RowExtractor};
use aggrate::features::FeatureSpec;

use super::ingest::for_each_record;
use super::progress::Ui;
use super::table::{RowTable, TableFormat};
use super::{Exit, FlowArgs, InputError};

#[derive(Debug, clap::Args)]
pub(crate) struct FeaturesArgs {
    /// Capture files with radiotap ground truth (pcap/pcapng, optionally .gz/.xz).
    #[arg(required = true)]
    pub(crate) captures: Vec<PathBuf>,
    /// Output table (.parquet or .csv).
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Output format (default: from the extension).
    #[arg(long, value_enum)]
    pub(crate) format: Option<TableFormat>,
    /// Gaps per row (m).
    #[arg(long, default_value_t = 20)]
    pub(crate) m: usize,
    /// Leave out σ of the gaps.
    #[arg(long)]
    pub(crate) no_sigma: bool,
    /// Receiver-context rows over this many past gaps (log gaps, their ranks, the horizon's
    /// quantiles and log mean; see `aggrate train --context`); implies --no-sigma.
    #[arg(long, default_value_t = 0)]
    pub(crate) context: u32,
    /// Send-rate tag (Mb/s) for every capture; default: read from a file name like `…_300mbps…`.
    #[arg(long)]
    pub(crate) rate_mbps: Option<f64>,
    /// Kernel receive timestamps for the (single) capture: a receiver-side capture of any
    /// supported link type, or a CSV log of `seq,host_ns`; joined by sequence number.
    #[arg(long)]
    pub(crate) kernel: Option<PathBuf>,
    /// Byte offset of the 4-byte big-endian sequence number in the UDP payload (0..=8).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=8))]
    pub(crate) seq_offset: u8,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

/// Send rate in a file name: the number before "mbps" (case-insensitive), e.g. `cbr_300mbps.pcap`.
pub(crate) fn rate_from_name(p: &Path) -> Option<f64> {
    let stem = p.file_name()?.to_str()?.to_ascii_lowercase();
    let i = stem.find("mbps")?;
    let head = &stem[..i];
    let start = head
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |j| j + 1);
    head[start..].parse().ok()
}

/// Pass 1 when no filter is given: the largest UDP flow, else the largest TCP flow.
pub(crate) fn pick_flow(ui: &Ui, path: &Path, flow: &FlowArgs) -> Result<FlowFilter> {
    let filter = flow.filter();
    if !filter.is_empty() {
        return Ok(filter);
    }
    let mut counts = FlowCounts::default();
    let out = for_each_record(ui, path, flow.keep_going, |r| counts.push(r))?;
    let picked = aggrate::capture::filter::pick_flow(&counts, &filter);
    if counts.over_cap_packets > 0 {
        ui.warn(format!(
            "{}: cap hit: more than {} distinct flows; {} packets of later flows not counted when picking the largest",
            path.display(),
            aggrate::capture::filter::MAX_COUNTED_FLOWS,
            counts.over_cap_packets
        ));
    }
    match picked {
        Some((f, why)) => {
            ui.info(format!("{}: selected flow {f} ({why})", path.display()));
            Ok(FlowFilter {
                flow: Some(f),
                ..filter
            })
        }
        None => {
            out.into_result()?;
            Err(InputError(format!(
                "{}: no UDP or TCP flow in the capture; select one with --ip/--port/--proto",
                path.display()
            ))
            .into())
        }
    }
}

pub(crate) fn run(ui: &Ui, a: FeaturesArgs) -> Result<Exit> {
    let spec = FeatureSpec {
        m: a.m,
        sigma: !a.no_sigma && a.context == 0,
        n_max: a.flow.n_max,
        context: a.context,
        ..FeatureSpec::default()
    }
    .check()
    .context("--m / --context")?;
    let format = match a.format.or_else(|| TableFormat::from_path(&a.output)) {
        Some(f) => f,
        None => bail!(
            "cannot tell the format of {}: use a .parquet or .csv name, or --format",
            a.output.display()
        ),
    };
    if a.kernel.is_some() && a.captures.len() != 1 {
        bail!(
            "--kernel joins one ground-truth capture; {} were given",
            a.captures.len()
        );
    }
    let mut join = match &a.kernel {
        Some(k) => Some(super::rows::load_kernel(ui, k, &a.flow, a.seq_offset as usize)?),
        None => None,
    };
    let mut table = RowTable::create(&a.output, format, &spec)?;
    let mut failure: Option<anyhow::Error> = None;
    for (id, path) in a.captures.iter().enumerate() {
        match one_capture(ui, &a, &spec, path, id as u32, &mut table, join.as_mut()) {
            Ok(()) => {}
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let rows = table.finish()?;
    if rows == 0 && failure.is_some() {
        // Nothing was computed: leave no empty table behind.
        let _ = std::fs::remove_file(&a.output);
    } else {
        ui.info(format!("wrote {rows} rows to {}", a.output.display()));
    }
    if let Some(j) = &join {
        ui.info(format!(
            "join: {} packets matched, {} ground-truth packets without a kernel time, {} kernel entries unmatched",
            j.matched,
            j.unmatched_truth,
            j.unmatched_kernel()
        ));
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(Exit::Ok),
    }
}

fn one_capture(
    ui: &Ui,
    a: &FeaturesArgs,
    spec: &FeatureSpec,
    path: &Path,
    id: u32,
    table: &mut RowTable,
    mut join: Option<&mut Join>,
) -> Result<()> {
    let filter = pick_flow(ui, path, &a.flow)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rate = a.rate_mbps.or_else(|| rate_from_name(path));
    table.begin_capture(&name, id, rate)?;
    let mut ex = RowExtractor::new(*spec, a.seq_offset as usize)?;
    let mut write_err: Option<anyhow::Error> = None;
    let mut sink = |m: &aggrate::dataset::RowMeta, x: &[f64]| {
        if write_err.is_none() {
            if let Err(e) = table.push(m, x) {
                write_err = Some(e);
            }
        }
    };
    let off = a.seq_offset as usize;
    let outcome = for_each_record(ui, path, a.flow.keep_going, |r| {
        if !filter.matches(r) {
            return;
        }
        let host = match join.as_deref_mut() {
            Some(j) => j.lookup(r.payload_seq(off)),
            None => Some(r.host),
        };
        ex.push(r, host, &mut sink);
    })?;
    ex.finish(&mut sink);
    if let Some(e) = write_err {
        return Err(e);
    }
    ui.info(format!(
        "{}: {} packets, {} frames, {} rows, {} retransmitted duplicates dropped{}",
        path.display(),
        ex.packets_in,
        ex.frames,
        ex.rows_out,
        ex.duplicates_dropped(),
        rate.map(|r| format!(", rate tag {r} Mb/s")).unwrap_or_default()
    ));
    if ex.forced_closes > 0 {
        ui.warn(format!(
            "{}: cap hit: {} frames still open after {} rows were closed there (a frame that never ends)",
            path.display(),
            ex.forced_closes,
            aggrate::dataset::MAX_PENDING_ROWS
        ));
    }
    if ex.dedup_untracked() > 0 {
        ui.warn(format!(
            "{}: cap hit: more than {} transmitter × TID streams; {} packets kept without the retransmission filter",
            path.display(),
            aggrate::label::DEDUP_MAX_STREAMS,
            ex.dedup_untracked()
        ));
    }
    outcome.into_result()?;
    if ex.packets_in == 0 {
        return Err(InputError(format!("{}: no packets of the selected flow", path.display())).into());
    }
    if !ex.has_ground_truth() {
        return Err(aggrate::label::Error::NoGroundTruth { packets: ex.packets_in })
            .with_context(|| format!("{}", path.display()));
    }
    if ex.rows_out == 0 {
        let need = spec.m + 1;
        return Err(InputError(format!(
            "{}: the selected flow has {} packets, too short for one row: m = {} needs at least {need}",
            path.display(),
            ex.packets_in,
            spec.m
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_tag_from_file_names() {
        assert_eq!(rate_from_name(Path::new("data/cbr_300mbps_s1.pcapng")), Some(300.0));
        assert_eq!(rate_from_name(Path::new("x/RUN-12.5Mbps.pcap")), Some(12.5));
        assert_eq!(rate_from_name(Path::new("mbps.pcap")), None);
        assert_eq!(rate_from_name(Path::new("capture.pcap")), None);
    }
}
