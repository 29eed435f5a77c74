//! `aggrate features`: captures → one labelled feature row per packet of the selected flow.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::features::FeatureSpec;
use aggrate::pipeline::table::{Compression, Format, RowTable};
use aggrate::pipeline::{capture_rows, rate_from_name, RowsOptions, RowsOutcome};

use super::progress::{ByteBars, Ui};
use super::{Exit, FlowArgs};

/// Output format of a feature table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TableFormat {
    Parquet,
    Csv,
}

/// Parquet compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CompressionArg {
    Zstd,
    Lz4,
    Snappy,
    None,
}

impl From<CompressionArg> for Compression {
    fn from(c: CompressionArg) -> Compression {
        match c {
            CompressionArg::Zstd => Compression::Zstd,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Snappy => Compression::Snappy,
            CompressionArg::None => Compression::None,
        }
    }
}

impl From<TableFormat> for Format {
    fn from(f: TableFormat) -> Format {
        match f {
            TableFormat::Parquet => Format::Parquet,
            TableFormat::Csv => Format::Csv,
        }
    }
}

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
    /// Parquet compression: zstd (smallest), lz4 (fastest to write), snappy, none.
    #[arg(long, value_enum, default_value_t = CompressionArg::Zstd)]
    pub(crate) compression: CompressionArg,
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
    let format = match a.format.map(TableFormat::into).or_else(|| Format::from_path(&a.output)) {
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
    super::ensure_parent(&a.output)?;
    let mut table = RowTable::create_with(&a.output, format, &spec, a.compression.into())?;
    let mut failure: Option<anyhow::Error> = None;
    for (id, path) in a.captures.iter().enumerate() {
        match one_capture(ui, &a, &spec, path, id as u32, &mut table) {
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
) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rate = a.rate_mbps.or_else(|| rate_from_name(path));
    table.begin_capture(&name, id, rate)?;
    let opts = RowsOptions {
        spec: *spec,
        filter: a.flow.filter(),
        seq_offset: a.seq_offset as usize,
        keep_going: a.flow.keep_going,
        kernel: a.kernel.clone(),
    };
    let mut write_err: Option<aggrate::pipeline::table::Error> = None;
    let out = capture_rows(path, &opts, &mut ByteBars::new(ui), |m, x| {
        if write_err.is_none() {
            if let Err(e) = table.push(m, x) {
                write_err = Some(e);
            }
        }
    })?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    report_rows(ui, &out, rate);
    out.check()?;
    Ok(())
}

/// What reading one capture into rows noticed: the flow picked, counts, caps hit, the join.
pub(crate) fn report_rows(ui: &Ui, out: &RowsOutcome, rate: Option<f64>) {
    let path = out.path.display();
    if let Some((f, why)) = out.pick.picked {
        ui.info(format!("{path}: selected flow {f} ({why})"));
    }
    if out.pick.over_cap_packets > 0 {
        ui.warn(format!(
            "{path}: cap hit: more than {} distinct flows; {} packets of later flows not counted when picking the largest",
            aggrate::capture::filter::MAX_COUNTED_FLOWS,
            out.pick.over_cap_packets
        ));
    }
    ui.read_report(&out.path, &out.read);
    ui.info(format!(
        "{path}: {} packets, {} frames, {} rows, {} retransmitted duplicates dropped{}",
        out.packets,
        out.frames,
        out.rows,
        out.duplicates_dropped,
        rate.map(|r| format!(", rate tag {r} Mb/s")).unwrap_or_default()
    ));
    if out.forced_closes > 0 {
        ui.warn(format!(
            "{path}: cap hit: {} frames still open after {} rows were closed there (a frame that never ends)",
            out.forced_closes,
            aggrate::dataset::MAX_PENDING_ROWS
        ));
    }
    if out.dedup_untracked > 0 {
        ui.warn(format!(
            "{path}: cap hit: more than {} transmitter × TID streams; {} packets kept without the retransmission filter",
            aggrate::label::DEDUP_MAX_STREAMS,
            out.dedup_untracked
        ));
    }
    ui.join_report(out);
}
