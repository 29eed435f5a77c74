//! Per-packet feature tables written in batches on a writer thread (constant memory whatever the
//! number of rows): Parquet (pages made here and by the `parquet` crate) or CSV (polars). [`RowTable`] writes what [`super::capture_rows`] makes;
//! [`read_rows`] reads such a table back into a [`Dataset`].

use std::fs::File;
use std::path::{Path, PathBuf};

#[cfg(feature = "tables")]
use polars::prelude::{
    AnyValue, Column, CsvReadOptions, CsvWriter, DataFrame, DataType, ParquetReader, PolarsError, Scalar, SerReader,
    SerWriter,
};

use crate::dataset::{Dataset, RowMeta};
use crate::features::FeatureSpec;
#[cfg(any(test, feature = "tables"))]
use crate::time::Ts;

/// Errors of feature tables; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be created or opened.
    #[error("{}: {source}", path.display())]
    Io {
        /// The table.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The Parquet writer failed.
    #[error("writing {}: {source}", path.display())]
    Parquet {
        /// The table.
        path: PathBuf,
        /// The parquet crate's error.
        source: parquet::errors::ParquetError,
    },
    /// This build reads no feature tables and writes no CSV ones (built without the `tables`
    /// feature, as the Python package is: read tables there with polars itself).
    #[error("{}: this build reads no feature tables and writes no CSV (the `tables` feature is off)", path.display())]
    NoTables {
        /// The table.
        path: PathBuf,
    },
    /// polars failed reading or writing it.
    #[cfg(feature = "tables")]
    #[error("{action} {}: {source}", path.display())]
    Polars {
        /// The table.
        path: PathBuf,
        /// "reading", "writing", "finishing".
        action: &'static str,
        /// polars' error.
        source: PolarsError,
    },
    /// A column the spec needs is missing or of the wrong type.
    #[error("{}: {what} column `{name}` (feature tables come from `aggrate features` with the model's --m{})", path.display(), if *context { " and --context" } else { "" })]
    Column {
        /// The table.
        path: PathBuf,
        /// Column name.
        name: String,
        /// "no" or "unreadable".
        what: &'static str,
        /// The spec has receiver context.
        context: bool,
    },
    /// A feature cell is empty.
    #[error("{}: row {row} has an empty feature", path.display())]
    EmptyFeature {
        /// The table.
        path: PathBuf,
        /// Row index.
        row: usize,
    },
    /// Neither .parquet nor .csv.
    #[error("{}: not a .parquet or .csv feature table", path.display())]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
}

impl Error {
    /// The table the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::Parquet { path, .. }
            | Error::Column { path, .. }
            | Error::EmptyFeature { path, .. }
            | Error::UnknownFormat { path }
            | Error::NoTables { path } => path,
            #[cfg(feature = "tables")]
            Error::Polars { path, .. } => path,
        }
    }
}

/// Table format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Apache Parquet (columnar, compressed).
    Parquet,
    /// Comma-separated values with a header line.
    Csv,
}

impl Format {
    /// From a file name's extension (.parquet/.pq, .csv; any case).
    pub fn from_path(p: &Path) -> Option<Format> {
        match p.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "parquet" | "pq" => Some(Format::Parquet),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }
}

/// Rows of a feature table: this build has no reader ([`Error::NoTables`]).
#[cfg(not(feature = "tables"))]
pub fn read_rows(path: &Path, _: &FeatureSpec, _: u32, _: &mut Dataset) -> Result<(), Error> {
    Err(Error::NoTables {
        path: path.to_path_buf(),
    })
}

/// Rows of a feature table written by `aggrate features` (Parquet or CSV), appended to `data` as
/// group `g`. The table's feature columns must be the ones `spec` names, in any order.
#[cfg(feature = "tables")]
pub fn read_rows(path: &Path, spec: &FeatureSpec, g: u32, data: &mut Dataset) -> Result<(), Error> {
    let polars = |source| Error::Polars {
        path: path.to_path_buf(),
        action: "reading",
        source,
    };
    let df = match Format::from_path(path) {
        Some(Format::Parquet) => ParquetReader::new(File::open(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?)
        .finish()
        .map_err(polars)?,
        Some(Format::Csv) => CsvReadOptions::default()
            .with_has_header(true)
            .try_into_reader_with_file_path(Some(path.to_path_buf()))
            .map_err(polars)?
            .finish()
            .map_err(polars)?,
        None => {
            return Err(Error::UnknownFormat {
                path: path.to_path_buf(),
            })
        }
    };
    let col_err = |name: &str, what| Error::Column {
        path: path.to_path_buf(),
        name: name.to_string(),
        what,
        context: spec.context > 0,
    };
    let col = |name: &str, dt: DataType| -> Result<polars::prelude::Series, Error> {
        let c = df.column(name).map_err(|_| col_err(name, "no"))?;
        c.as_materialized_series()
            .cast(&dt)
            .map_err(|_| col_err(name, "unreadable"))
    };
    let names = spec.column_names();
    let xs: Vec<polars::prelude::Series> = names
        .iter()
        .map(|n| col(n, DataType::Float64))
        .collect::<Result<_, _>>()?;
    let (y, host, level, rate) = (
        col("y", DataType::Boolean)?,
        col("host_ns", DataType::UInt64)?,
        col("agg_level", DataType::UInt32)?,
        col("rate_mbps", DataType::Float64)?,
    );
    let (y, host, level, rate) = (
        y.bool().map_err(polars)?,
        host.u64().map_err(polars)?,
        level.u32().map_err(polars)?,
        rate.f64().map_err(polars)?,
    );
    let xs: Vec<_> = xs.iter().map(|s| s.f64()).collect::<Result<_, _>>().map_err(polars)?;
    let mut row = vec![0.0; names.len()];
    for i in 0..df.height() {
        for (v, c) in row.iter_mut().zip(&xs) {
            *v = c.get(i).ok_or_else(|| Error::EmptyFeature {
                path: path.to_path_buf(),
                row: i,
            })?;
        }
        data.push_at(
            Ts(host.get(i).unwrap_or(0)),
            &row,
            y.get(i).unwrap_or(false),
            g,
            rate.get(i).map_or(f32::NAN, |r| r as f32),
            level.get(i).unwrap_or(1).min(u16::MAX as u32) as u16,
        );
    }
    Ok(())
}

/// Rows as columns, in the layout of a feature table (the capture-level columns aside): what
/// [`RowTable`] writes in batches and the Python package hands to polars.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    /// Packet number in the capture.
    pub number: Vec<u64>,
    /// Host (kernel) receive time, ns.
    pub host_ns: Vec<u64>,
    /// Radio TSFT, µs.
    pub tsft_us: Vec<Option<u64>>,
    /// Application sequence number.
    pub seq: Vec<Option<u32>>,
    /// First packet of its frame.
    pub y: Vec<bool>,
    /// Frame id in the flow.
    pub frame_id: Vec<u64>,
    /// Aggregation level of the row's frame.
    pub agg_level: Vec<u32>,
    /// PHY rate of the row's frame, b/s.
    pub phy_rate_bps: Vec<Option<u64>>,
    /// Feature columns, in [`FeatureSpec::column_names`] order.
    pub x: Vec<Vec<f64>>,
}

impl Columns {
    /// Empty columns for `spec`'s features.
    pub fn new(spec: &FeatureSpec) -> Columns {
        Columns::with_capacity(spec.width(), 0)
    }
    /// Empty columns for `width` features with room for `rows` rows (no reallocation below).
    pub fn with_capacity(width: usize, rows: usize) -> Columns {
        Columns {
            number: Vec::with_capacity(rows),
            host_ns: Vec::with_capacity(rows),
            tsft_us: Vec::with_capacity(rows),
            seq: Vec::with_capacity(rows),
            y: Vec::with_capacity(rows),
            frame_id: Vec::with_capacity(rows),
            agg_level: Vec::with_capacity(rows),
            phy_rate_bps: Vec::with_capacity(rows),
            x: (0..width).map(|_| Vec::with_capacity(rows)).collect(),
        }
    }
    /// Rows held.
    pub fn len(&self) -> usize {
        self.number.len()
    }
    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.number.is_empty()
    }
    /// Drop every row, keeping the allocations.
    pub fn clear(&mut self) {
        self.number.clear();
        self.host_ns.clear();
        self.tsft_us.clear();
        self.seq.clear();
        self.y.clear();
        self.frame_id.clear();
        self.agg_level.clear();
        self.phy_rate_bps.clear();
        self.x.iter_mut().for_each(Vec::clear);
    }
    /// Append one row.
    pub fn push(&mut self, m: &RowMeta, x: &[f64]) {
        self.number.push(m.number);
        self.host_ns.push(m.host.as_nanos());
        self.tsft_us.push(m.tsft.map(|t| t.as_micros()));
        self.seq.push(m.seq);
        self.y.push(m.first_of_frame);
        self.frame_id.push(m.frame_id);
        self.agg_level.push(m.level as u32);
        self.phy_rate_bps.push(m.phy_rate_bps);
        for (col, v) in self.x.iter_mut().zip(x) {
            col.push(*v);
        }
    }
}

/// Where a feature column's values live in a [`FeatureBlock`].
#[derive(Clone, Copy, Debug)]
enum Place {
    /// Lag `k` (0 = newest) of run `run`.
    Lag { run: usize, k: usize },
    /// Column `j` of the columns outside the runs.
    Rest(usize),
}

/// The feature columns of one batch of rows.
///
/// A gap window's row repeats the previous row shifted by one — `gap_us_2` is the last row's
/// `gap_us_1`, and so on (with a context: the `lg_*` run and the `rank_*` run) — so each such
/// run is kept once, as a series: the first row's values oldest first, then each later row's
/// newest. Column `gap_us_k` is then a slice of that series, handed to the Parquet pages as it
/// is. Storing each row's 21 values into 21 columns was a third of the row loop on the 10× ns-3
/// capture (memory traffic); this stores 2. Rows that do not continue the pattern (any caller
/// may push any row) turn the batch into plain columns, so every row reads back as pushed.
#[derive(Debug)]
pub(crate) struct FeatureBlock {
    width: usize,
    /// Runs of lagged columns: (first column, length), newest first.
    runs: Vec<(usize, usize)>,
    place: Vec<Place>,
    /// Per run, its values oldest first.
    series: Vec<Vec<f64>>,
    /// The columns outside the runs, in column order, and their numbers.
    rest: Vec<Vec<f64>>,
    rest_cols: Vec<usize>,
    /// Every column in full, used once a row broke the pattern (`plain`).
    full: Vec<Vec<f64>>,
    plain: bool,
    rows: usize,
}

impl FeatureBlock {
    /// For the rows of `spec`'s gap window, with room for `rows` rows.
    pub(crate) fn new(spec: &FeatureSpec, rows: usize) -> FeatureBlock {
        let m = spec.m;
        let runs = if spec.context > 0 {
            vec![(0, m), (m, m)]
        } else {
            vec![(0, m)]
        };
        FeatureBlock::with_runs(spec.width(), runs, rows)
    }

    /// Plain columns: no runs.
    #[cfg(any(test, feature = "tables"))]
    pub(crate) fn plain(width: usize, rows: usize) -> FeatureBlock {
        FeatureBlock::with_runs(width, Vec::new(), rows)
    }

    fn with_runs(width: usize, runs: Vec<(usize, usize)>, rows: usize) -> FeatureBlock {
        let runs: Vec<(usize, usize)> = runs.into_iter().filter(|&(c, m)| m > 0 && c + m <= width).collect();
        let mut place = Vec::with_capacity(width);
        let mut rest_cols = Vec::new();
        for i in 0..width {
            match runs.iter().position(|&(c, m)| (c..c + m).contains(&i)) {
                Some(run) => place.push(Place::Lag {
                    run,
                    k: i - runs[run].0,
                }),
                None => {
                    place.push(Place::Rest(rest_cols.len()));
                    rest_cols.push(i);
                }
            }
        }
        FeatureBlock {
            width,
            series: runs.iter().map(|&(_, m)| Vec::with_capacity(rows + m)).collect(),
            runs,
            place,
            rest: rest_cols.iter().map(|_| Vec::with_capacity(rows)).collect(),
            rest_cols,
            full: Vec::new(),
            plain: false,
            rows: 0,
        }
    }

    /// An empty block of the same layout with room for `rows` rows.
    fn empty_like(&self, rows: usize) -> FeatureBlock {
        FeatureBlock::with_runs(self.width, self.runs.clone(), rows)
    }

    /// Features per row.
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// Drop every row, keeping the allocations.
    pub(crate) fn clear(&mut self) {
        self.series.iter_mut().for_each(Vec::clear);
        self.rest.iter_mut().for_each(Vec::clear);
        self.full.iter_mut().for_each(Vec::clear);
        self.plain = false;
        self.rows = 0;
    }

    /// Append one row (`width` values; missing values are taken as NaN, extra ones ignored).
    pub(crate) fn push(&mut self, x: &[f64]) {
        if x.len() != self.width {
            let mut row = vec![f64::NAN; self.width];
            let n = x.len().min(self.width);
            row[..n].copy_from_slice(&x[..n]);
            return self.push(&row);
        }
        if !self.plain && self.rows > 0 && !self.continues(x) {
            self.make_plain();
        }
        if self.plain {
            for (col, v) in self.full.iter_mut().zip(x) {
                col.push(*v);
            }
        } else {
            for (s, &(c, m)) in self.series.iter_mut().zip(&self.runs) {
                if self.rows == 0 {
                    s.extend(x[c..c + m].iter().rev());
                } else {
                    s.push(x[c]);
                }
            }
            for (col, &i) in self.rest.iter_mut().zip(&self.rest_cols) {
                col.push(x[i]);
            }
        }
        self.rows += 1;
    }

    /// `x`'s lags are the previous row's values, bit for bit.
    fn continues(&self, x: &[f64]) -> bool {
        self.series.iter().zip(&self.runs).all(|(s, &(c, m))| {
            let tail = &s[s.len() + 1 - m..]; // the previous row's lags 0 ..= m-2, oldest first
            x[c + 1..c + m]
                .iter()
                .zip(tail.iter().rev())
                .all(|(a, b)| a.to_bits() == b.to_bits())
        })
    }

    fn make_plain(&mut self) {
        let mut full = std::mem::take(&mut self.full);
        full.resize_with(self.width, Vec::new);
        for (i, col) in full.iter_mut().enumerate() {
            col.clear();
            col.extend_from_slice(self.column(i));
        }
        self.full = full;
        self.plain = true;
    }

    /// The values of feature column `i` (empty past the width).
    pub(crate) fn column(&self, i: usize) -> &[f64] {
        if self.plain {
            return self.full.get(i).map_or(&[], |c| c.as_slice());
        }
        match self.place.get(i) {
            Some(&Place::Lag { run, k }) if self.rows > 0 => {
                let start = self.runs[run].1 - 1 - k;
                &self.series[run][start..start + self.rows]
            }
            Some(&Place::Rest(j)) => &self.rest[j],
            _ => &[],
        }
    }
}

/// Parquet page compression: zstd (level 3, the smallest files) by default; lz4 writes a little
/// faster for ~4× larger files; none is for a pipe into something that compresses anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// Zstandard (polars' default level).
    #[default]
    Zstd,
    /// LZ4 (raw blocks).
    Lz4,
    /// Snappy.
    Snappy,
    /// No compression.
    None,
}

impl Compression {
    fn parquet(self) -> parquet::basic::Compression {
        use parquet::basic::Compression as P;
        match self {
            Compression::Zstd => P::ZSTD(parquet::basic::ZstdLevel::try_new(ZSTD_LEVEL).unwrap_or_default()),
            Compression::Lz4 => P::LZ4_RAW,
            Compression::Snappy => P::SNAPPY,
            Compression::None => P::UNCOMPRESSED,
        }
    }
}

/// zstd level of Parquet pages (polars' default).
const ZSTD_LEVEL: i32 = 3;

/// Rows per batch handed to the writer thread (and per Parquet row group).
const BATCH: usize = 1 << 15;

/// Parquet columns written delta-coded: the counters that grow row by row. Their deltas are
/// small and regular, so the file is ~30 % smaller (5.7 instead of 8.0 MB on the 10× ns-3
/// capture) at the same write speed (the deltas are cheaper for zstd than the raw values).
const DELTA_COLUMNS: [&str; 5] = ["number", "host_ns", "tsft_us", "frame_id", "seq"];

/// Batches queued for the writer thread at most (memory stays bounded when it falls behind).
const QUEUE: usize = 1;

/// One batch of one capture's rows.
struct Batch {
    /// The rows' metadata (no feature columns: those are in `feats`).
    cols: Columns,
    feats: FeatureBlock,
    capture: std::sync::Arc<str>,
    capture_id: u32,
    rate_mbps: Option<f64>,
}

/// Writes rows of one or more captures into one table: `capture`, `capture_id`, `rate_mbps`,
/// `number`, `host_ns`, `tsft_us`, `seq`, `y`, `frame_id`, `agg_level`, `phy_rate_bps`, then the
/// spec's feature columns.
///
/// Encoding and compressing Parquet costs more per row than making the rows, so it runs on a
/// writer thread of its own, fed batches through a bounded queue: the caller's loop and the
/// encoder overlap. An error of the writer thread comes back from the next `push` or `finish`.
pub struct RowTable {
    path: PathBuf,
    cols: Columns,
    capture: std::sync::Arc<str>,
    capture_id: u32,
    rate_mbps: Option<f64>,
    rows: u64,
    tx: Option<std::sync::mpsc::SyncSender<Batch>>,
    /// Emptied batches coming back from the writer, to be filled again (fresh pages for every
    /// batch cost page faults and zeroing on this thread).
    free: std::sync::mpsc::Receiver<(Columns, FeatureBlock)>,
    feats: FeatureBlock,
    worker: Option<std::thread::JoinHandle<Result<(), Error>>>,
}

impl RowTable {
    /// Create (truncate) `path`; Parquet compressed with zstd.
    pub fn create(path: &Path, format: Format, spec: &FeatureSpec) -> Result<RowTable, Error> {
        RowTable::create_with(path, format, spec, Compression::default())
    }

    /// Create (truncate) `path` with a Parquet compression (ignored for CSV).
    pub fn create_with(
        path: &Path,
        format: Format,
        spec: &FeatureSpec,
        compression: Compression,
    ) -> Result<RowTable, Error> {
        let file = File::create(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(QUEUE);
        let (free_tx, free) = std::sync::mpsc::sync_channel::<(Columns, FeatureBlock)>(QUEUE + 1);
        let (wpath, names) = (path.to_path_buf(), spec.column_names());
        let worker = std::thread::Builder::new()
            .name("aggrate-table-writer".into())
            .spawn(move || write_batches(&wpath, format, compression, &names, file, rx, free_tx))
            .map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(RowTable {
            path: path.to_path_buf(),
            cols: Columns::with_capacity(0, BATCH),
            feats: FeatureBlock::new(spec, BATCH),
            capture: "".into(),
            capture_id: 0,
            rate_mbps: None,
            rows: 0,
            tx: Some(tx),
            free,
            worker: Some(worker),
        })
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Start the rows of another capture (hands the previous one's rows to the writer).
    pub fn begin_capture(&mut self, name: &str, id: u32, rate_mbps: Option<f64>) -> Result<(), Error> {
        self.flush()?;
        self.capture = name.into();
        self.capture_id = id;
        self.rate_mbps = rate_mbps;
        Ok(())
    }

    /// One row.
    pub fn push(&mut self, m: &RowMeta, x: &[f64]) -> Result<(), Error> {
        self.cols.push(m, &[]);
        self.feats.push(x);
        self.rows += 1;
        if self.cols.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.cols.is_empty() {
            return Ok(());
        }
        let (cols, feats) = self
            .free
            .try_recv()
            .unwrap_or_else(|_| (Columns::with_capacity(0, BATCH), self.feats.empty_like(BATCH)));
        let batch = Batch {
            cols: std::mem::replace(&mut self.cols, cols),
            feats: std::mem::replace(&mut self.feats, feats),
            capture: self.capture.clone(),
            capture_id: self.capture_id,
            rate_mbps: self.rate_mbps,
        };
        let sent = self.tx.as_ref().map(|tx| tx.send(batch).is_ok());
        if sent != Some(true) {
            // The writer stopped: its error says why.
            return Err(self.join().err().unwrap_or_else(|| self.stopped()));
        }
        Ok(())
    }

    fn stopped(&self) -> Error {
        Error::Io {
            path: self.path.clone(),
            source: std::io::Error::other("the table writer stopped"),
        }
    }

    fn join(&mut self) -> Result<(), Error> {
        self.tx = None;
        match self.worker.take() {
            Some(h) => h.join().unwrap_or_else(|_| Err(self.stopped())),
            None => Ok(()),
        }
    }

    /// Write the last batch and the file's footer; the rows written. A table with no rows has
    /// the feature columns' schema but no row group.
    pub fn finish(mut self) -> Result<u64, Error> {
        self.flush()?;
        self.join()?;
        Ok(self.rows)
    }
}

impl Drop for RowTable {
    fn drop(&mut self) {
        // Not finished (an error elsewhere): let the writer end; what it wrote stays.
        let _ = self.join();
    }
}

/// The writer thread: batches → DataFrames → the file, then the footer.
fn write_batches(
    path: &Path,
    format: Format,
    compression: Compression,
    names: &[String],
    file: File,
    rx: std::sync::mpsc::Receiver<Batch>,
    free: std::sync::mpsc::SyncSender<(Columns, FeatureBlock)>,
) -> Result<(), Error> {
    let pq = |source| Error::Parquet {
        path: path.to_path_buf(),
        source,
    };
    if format == Format::Parquet {
        // Written even with no rows: the schema alone is a readable, empty table.
        let mut sink = ParquetSink::new(file, names, compression).map_err(pq)?;
        for mut b in rx {
            sink.write(&b).map_err(pq)?;
            b.cols.clear();
            b.feats.clear();
            let _ = free.try_send((b.cols, b.feats)); // full: the table has enough spare batches
        }
        return sink.finish().map_err(pq);
    }
    write_csv(path, names, file, rx)
}

/// The CSV writer thread's work (polars' batched writer).
#[cfg(not(feature = "tables"))]
fn write_csv(path: &Path, _: &[String], _: File, _: std::sync::mpsc::Receiver<Batch>) -> Result<(), Error> {
    Err(Error::NoTables {
        path: path.to_path_buf(),
    })
}

/// The CSV writer thread's work (polars' batched writer).
#[cfg(feature = "tables")]
fn write_csv(path: &Path, names: &[String], file: File, rx: std::sync::mpsc::Receiver<Batch>) -> Result<(), Error> {
    let polars = |action, source| Error::Polars {
        path: path.to_path_buf(),
        action,
        source,
    };
    let mut file = Some(file);
    let mut writer: Option<polars::io::csv::write::BatchedWriter<File>> = None;
    let mut open =
        |df: &DataFrame, writer: &mut Option<polars::io::csv::write::BatchedWriter<File>>| -> Result<(), Error> {
            if writer.is_some() {
                return Ok(());
            }
            let Some(file) = file.take() else { return Ok(()) };
            let schema = df.schema().as_ref().clone();
            *writer = Some(
                CsvWriter::new(file)
                    .include_header(true)
                    .batched(&schema)
                    .map_err(|e| polars("writing", e))?,
            );
            Ok(())
        };
    let mut any = false;
    for b in rx {
        let df = frame(b, names).map_err(|e| polars("writing", e))?;
        open(&df, &mut writer)?;
        any = true;
        if let Some(w) = writer.as_mut() {
            w.write_batch(&df).map_err(|e| polars("writing", e))?;
        }
    }
    if !any {
        // No rows: still a readable table with the columns' schema.
        let empty = Batch {
            cols: Columns::default(),
            feats: FeatureBlock::plain(names.len(), 0),
            capture: "".into(),
            capture_id: 0,
            rate_mbps: None,
        };
        let df = frame(empty, names).map_err(|e| polars("writing", e))?;
        open(&df, &mut writer)?;
        if let Some(w) = writer.as_mut() {
            w.write_batch(&df).map_err(|e| polars("writing", e))?;
        }
    }
    if let Some(w) = writer.as_mut() {
        w.finish().map_err(|e| polars("finishing", e))?;
    }
    Ok(())
}

/// A Parquet file written column chunk by column chunk, one row group per batch: plain encoding
/// (delta for the counters that grow row by row), no dictionaries (the columns are floats and
/// counters that rarely repeat), no statistics. The schema is the one polars gives the same
/// columns (unsigned integers as annotated INT32/INT64, nullable `tsft_us`, `seq`,
/// `phy_rate_bps`, `rate_mbps`), so readers see the same table either way.
struct ParquetSink {
    w: parquet::file::writer::SerializedFileWriter<File>,
    /// The feature columns' pages, encoded here (zstd and uncompressed tables on little-endian
    /// machines; otherwise the crate's column writers do it).
    pages: Option<FeaturePages>,
}

/// Columns before the features: capture … phy_rate_bps.
const META_COLUMNS: usize = 11;

/// Values per data page of a feature column (1 MB of `f64`, the crate's default page size).
const PAGE_VALUES: usize = 1 << 17;

/// Plain-encoded `f64` pages written straight from the feature columns with one zstd context for
/// the whole table. The parquet crate's column writer copies every value into its encoder and
/// makes a zstd context per column chunk (640 for 625 k rows: a tenth of the writer thread's
/// time); these columns are the bulk of the table (21 of 32 with the default features), so they
/// go through here, and the metadata, counters and flags keep the crate's writers. The pages are
/// the ones the crate writes (v1 data pages, PLAIN values, no levels, no statistics); these
/// chunks have no page index, which the tables never had a use for (one page per chunk).
struct FeaturePages {
    /// One context for every page; `None` for uncompressed tables.
    zstd: Option<zstd::bulk::Compressor<'static>>,
    codec: parquet::basic::Compression,
    /// The feature columns' descriptors, in order.
    columns: Vec<parquet::schema::types::ColumnDescPtr>,
    /// Compressed page, reused.
    out: Vec<u8>,
}

impl FeaturePages {
    fn new(
        compression: Compression,
        columns: Vec<parquet::schema::types::ColumnDescPtr>,
    ) -> Result<Option<FeaturePages>, parquet::errors::ParquetError> {
        if cfg!(target_endian = "big") {
            return Ok(None); // PLAIN is little-endian: the slices cannot be written as they are
        }
        let zstd = match compression {
            Compression::Zstd => Some(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
            Compression::None => None,
            Compression::Lz4 | Compression::Snappy => return Ok(None),
        };
        Ok(Some(FeaturePages {
            zstd,
            codec: compression.parquet(),
            columns,
            out: Vec::new(),
        }))
    }

    /// The chunk of feature column `i` holding `values` (its pages with their headers) and its
    /// metadata.
    fn chunk(
        &mut self,
        i: usize,
        values: &[f64],
    ) -> Result<(bytes::Bytes, parquet::column::writer::ColumnCloseResult), parquet::errors::ParquetError> {
        use parquet::basic::Encoding;
        use parquet::column::page::{CompressedPage, Page, PageWriter};
        use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
        let mut sink = TrackedWrite::new(Vec::with_capacity(values.len()));
        let mut uncompressed = 0;
        {
            let mut pages = SerializedPageWriter::new(&mut sink);
            for page in values.chunks(PAGE_VALUES) {
                let raw: &[u8] = bytemuck::cast_slice(page);
                let buf = match self.zstd.as_mut() {
                    Some(z) => {
                        self.out.clear();
                        self.out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
                        z.compress_to_buffer(raw, &mut self.out)?;
                        bytes::Bytes::copy_from_slice(&self.out)
                    }
                    None => bytes::Bytes::copy_from_slice(raw),
                };
                let page = Page::DataPage {
                    buf,
                    num_values: page.len() as u32,
                    encoding: Encoding::PLAIN,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                };
                uncompressed += pages
                    .write_page(CompressedPage::new(page, raw.len()))?
                    .uncompressed_size;
            }
            pages.close()?;
        }
        let compressed = sink.bytes_written();
        let descr =
            self.columns.get(i).cloned().ok_or_else(|| {
                parquet::errors::ParquetError::General("schema has fewer columns than the table".into())
            })?;
        let metadata = parquet::file::metadata::ColumnChunkMetaData::builder(descr)
            .set_compression(self.codec)
            .set_encodings(vec![Encoding::PLAIN, Encoding::RLE])
            .set_num_values(values.len() as i64)
            .set_total_compressed_size(compressed as i64)
            .set_total_uncompressed_size(uncompressed as i64)
            .set_data_page_offset(0)
            .build()?;
        let close = parquet::column::writer::ColumnCloseResult {
            bytes_written: compressed as u64,
            rows_written: values.len() as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        };
        Ok((bytes::Bytes::from(sink.into_inner()?), close))
    }
}

impl ParquetSink {
    fn new(
        file: File,
        names: &[String],
        compression: Compression,
    ) -> Result<ParquetSink, parquet::errors::ParquetError> {
        use parquet::basic::{LogicalType, Repetition, Type as Physical};
        use parquet::schema::types::Type;
        use std::sync::Arc;
        let field = |name: &str, physical, logical: Option<LogicalType>, optional: bool| {
            Type::primitive_type_builder(name, physical)
                .with_logical_type(logical)
                .with_repetition(if optional {
                    Repetition::OPTIONAL
                } else {
                    Repetition::REQUIRED
                })
                .build()
                .map(Arc::new)
        };
        let u64 = || Some(LogicalType::integer(64, false));
        let u32 = || Some(LogicalType::integer(32, false));
        let mut fields = vec![
            field("capture", Physical::BYTE_ARRAY, Some(LogicalType::String), false)?,
            field("capture_id", Physical::INT32, u32(), false)?,
            field("rate_mbps", Physical::DOUBLE, None, true)?,
            field("number", Physical::INT64, u64(), false)?,
            field("host_ns", Physical::INT64, u64(), false)?,
            field("tsft_us", Physical::INT64, u64(), true)?,
            field("seq", Physical::INT32, u32(), true)?,
            field("y", Physical::BOOLEAN, None, false)?,
            field("frame_id", Physical::INT64, u64(), false)?,
            field("agg_level", Physical::INT32, u32(), false)?,
            field("phy_rate_bps", Physical::INT64, u64(), true)?,
        ];
        debug_assert_eq!(fields.len(), META_COLUMNS);
        for n in names {
            fields.push(field(n, Physical::DOUBLE, None, false)?);
        }
        let schema = Arc::new(Type::group_type_builder("schema").with_fields(fields).build()?);
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(compression.parquet())
            .set_dictionary_enabled(false)
            .set_encoding(parquet::basic::Encoding::PLAIN)
            .set_statistics_enabled(parquet::file::properties::EnabledStatistics::None)
            .set_max_row_group_row_count(Some(BATCH));
        let props = DELTA_COLUMNS
            .into_iter()
            .fold(props, |p, c| {
                p.set_column_encoding(
                    parquet::schema::types::ColumnPath::from(c),
                    parquet::basic::Encoding::DELTA_BINARY_PACKED,
                )
            })
            .build();
        let w = parquet::file::writer::SerializedFileWriter::new(file, schema, Arc::new(props))?;
        let features = w.schema_descr().columns()[META_COLUMNS..].to_vec();
        Ok(ParquetSink {
            pages: FeaturePages::new(compression, features)?,
            w,
        })
    }

    fn write(&mut self, b: &Batch) -> Result<(), parquet::errors::ParquetError> {
        use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
        let n = b.cols.len();
        if n == 0 {
            return Ok(());
        }
        let c = &b.cols;
        let mut rg = self.w.next_row_group()?;
        let mut i64s: Vec<i64> = Vec::with_capacity(n);
        let mut i32s: Vec<i32> = Vec::with_capacity(n);
        let mut def: Vec<i16> = Vec::with_capacity(n);
        // Unsigned values go in as their two's-complement bits, as the INT annotations say.
        macro_rules! column {
            ($ty:ty, $values:expr, $def:expr) => {{
                let mut col = rg.next_column()?.ok_or_else(|| {
                    parquet::errors::ParquetError::General("schema has fewer columns than the table".into())
                })?;
                col.typed::<$ty>().write_batch($values, $def, None)?;
                col.close()?;
            }};
        }
        let name = ByteArray::from(&*b.capture);
        column!(ByteArrayType, &vec![name; n], None);
        column!(Int32Type, &vec![b.capture_id as i32; n], None);
        match b.rate_mbps {
            Some(r) => column!(DoubleType, &vec![r; n], Some(&vec![1; n])),
            None => column!(DoubleType, &[], Some(&vec![0; n])),
        }
        let u64_col = |v: &[u64], out: &mut Vec<i64>| {
            out.clear();
            out.extend(v.iter().map(|&x| x as i64));
        };
        u64_col(&c.number, &mut i64s);
        column!(Int64Type, &i64s, None);
        u64_col(&c.host_ns, &mut i64s);
        column!(Int64Type, &i64s, None);
        opt(&c.tsft_us, |x| x as i64, &mut i64s, &mut def);
        column!(Int64Type, &i64s, Some(&def));
        opt(&c.seq, |x| x as i32, &mut i32s, &mut def);
        column!(Int32Type, &i32s, Some(&def));
        column!(BoolType, &c.y, None);
        u64_col(&c.frame_id, &mut i64s);
        column!(Int64Type, &i64s, None);
        i32s.clear();
        i32s.extend(c.agg_level.iter().map(|&x| x as i32));
        column!(Int32Type, &i32s, None);
        opt(&c.phy_rate_bps, |x| x as i64, &mut i64s, &mut def);
        column!(Int64Type, &i64s, Some(&def));
        for i in 0..b.feats.width() {
            let x = b.feats.column(i);
            match self.pages.as_mut() {
                Some(pages) => {
                    let (bytes, close) = pages.chunk(i, x)?;
                    rg.append_column(&bytes, close)?;
                }
                None => column!(DoubleType, x, None),
            }
        }
        rg.close()?;
        Ok(())
    }

    fn finish(self) -> Result<(), parquet::errors::ParquetError> {
        self.w.close().map(|_| ())
    }
}

/// The present values of an optional column and its definition levels (1 present, 0 null).
fn opt<T: Copy, U>(v: &[Option<T>], f: impl Fn(T) -> U, values: &mut Vec<U>, def: &mut Vec<i16>) {
    values.clear();
    def.clear();
    for x in v {
        def.push(i16::from(x.is_some()));
        if let Some(x) = x {
            values.push(f(*x));
        }
    }
}

/// One batch as a DataFrame in the table's column order.
#[cfg(feature = "tables")]
fn frame(b: Batch, names: &[String]) -> Result<DataFrame, PolarsError> {
    let n = b.cols.len();
    let c = b.cols;
    let mut columns = vec![
        Column::new_scalar(
            "capture".into(),
            Scalar::new(DataType::String, AnyValue::StringOwned((&*b.capture).into())),
            n,
        ),
        Column::new_scalar(
            "capture_id".into(),
            Scalar::new(DataType::UInt32, AnyValue::UInt32(b.capture_id)),
            n,
        ),
        Column::new_scalar(
            "rate_mbps".into(),
            Scalar::new(DataType::Float64, b.rate_mbps.map_or(AnyValue::Null, AnyValue::Float64)),
            n,
        ),
        Column::new("number".into(), c.number),
        Column::new("host_ns".into(), c.host_ns),
        Column::new("tsft_us".into(), c.tsft_us),
        Column::new("seq".into(), c.seq),
        Column::new("y".into(), c.y),
        Column::new("frame_id".into(), c.frame_id),
        Column::new("agg_level".into(), c.agg_level),
        Column::new("phy_rate_bps".into(), c.phy_rate_bps),
    ];
    for (i, name) in names.iter().enumerate() {
        columns.push(Column::new(name.as_str().into(), b.feats.column(i).to_vec()));
    }
    DataFrame::new(n, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Tsft;

    fn meta(i: u64) -> RowMeta {
        RowMeta {
            number: i,
            host: Ts(1_000_000 + 37 * i),
            tsft: (!i.is_multiple_of(3)).then_some(Tsft(i / 4)),
            seq: Some(i as u32),
            first_of_frame: i.is_multiple_of(4),
            frame_id: i / 4,
            level: 4,
            phy_rate_bps: Some(866_700_000),
            ip_len: 1500,
        }
    }

    /// Rows of two captures through the writer thread and back, in every format and
    /// compression, more rows than one batch.
    #[test]
    fn tables_round_trip_through_the_writer_thread() {
        let spec = FeatureSpec {
            m: 3,
            ..FeatureSpec::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let n = BATCH as u64 + 1234;
        let x = |i: u64| [i as f64 * 0.5, 1.0 + i as f64, -(i as f64), 0.25];
        for (name, format, c) in [
            ("a.parquet", Format::Parquet, Compression::Zstd),
            ("b.parquet", Format::Parquet, Compression::Lz4),
            ("c.parquet", Format::Parquet, Compression::None),
            ("d.csv", Format::Csv, Compression::Zstd),
        ] {
            let path = dir.path().join(name);
            let mut t = RowTable::create_with(&path, format, &spec, c).unwrap();
            t.begin_capture("one", 0, Some(300.0)).unwrap();
            for i in 0..n {
                t.push(&meta(i), &x(i)).unwrap();
            }
            t.begin_capture("two", 1, None).unwrap();
            for i in n..n + 10 {
                t.push(&meta(i), &x(i)).unwrap();
            }
            assert_eq!(t.finish().unwrap(), n + 10);
            let mut d = Dataset::new(spec.width());
            read_rows(&path, &spec, 0, &mut d).unwrap();
            assert_eq!(d.len() as u64, n + 10, "{name}");
            for i in 0..n + 10 {
                assert_eq!(d.row(i as usize), &x(i), "{name} row {i}");
            }
            for i in [0, 1, BATCH as u64 - 1, BATCH as u64, n - 1, n, n + 9] {
                let r = i as usize;
                assert_eq!(d.y[r], i.is_multiple_of(4));
                assert_eq!(d.host[r], Ts(1_000_000 + 37 * i));
                assert_eq!(d.level[r], 4);
            }
            assert_eq!(d.rate_mbps[0], 300.0);
            assert!(
                d.rate_mbps[n as usize].is_nan(),
                "{name}: the second capture has no rate"
            );
            if format == Format::Parquet {
                // The growing counters are delta-coded, the features plain.
                use parquet::file::reader::FileReader;
                let r = parquet::file::reader::SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
                let rg = r.metadata().row_group(0);
                let encodings = |col: &str| {
                    let i = (0..rg.num_columns())
                        .find(|&i| rg.column(i).column_path().string() == col)
                        .unwrap();
                    rg.column(i).encodings().collect::<Vec<_>>()
                };
                for col in ["number", "host_ns", "tsft_us", "frame_id", "seq"] {
                    assert!(
                        encodings(col).contains(&parquet::basic::Encoding::DELTA_BINARY_PACKED),
                        "{name}: {col}"
                    );
                }
                assert!(!encodings("gap_us_1").contains(&parquet::basic::Encoding::DELTA_BINARY_PACKED));
                // The feature chunks written here (not by the crate's column writer) carry the
                // table's codec, and the crate's own reader reads them.
                // (A file does not record the zstd level: compare the codecs.)
                assert_eq!(
                    std::mem::discriminant(&rg.column(META_COLUMNS).compression()),
                    std::mem::discriminant(&c.parquet()),
                    "{name}"
                );
                let values = feature_values(&path, META_COLUMNS + 1);
                assert_eq!(values.len() as u64, n + 10);
                assert!(values.iter().enumerate().all(|(i, v)| *v == x(i as u64)[1]), "{name}");
            }
        }
    }

    /// Every value of DOUBLE column `col` of a Parquet file, read page by page with the parquet
    /// crate's reader (which checks each page header against the chunk's metadata).
    fn feature_values(path: &Path, col: usize) -> Vec<f64> {
        use parquet::column::reader::ColumnReader;
        use parquet::file::reader::FileReader;
        let r = parquet::file::reader::SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        let mut out = Vec::new();
        for g in 0..r.num_row_groups() {
            let rg = r.get_row_group(g).unwrap();
            let ColumnReader::DoubleColumnReader(mut c) = rg.get_column_reader(col).unwrap() else {
                panic!("column {col} is not DOUBLE");
            };
            let mut buf = Vec::new();
            loop {
                let (records, _, _) = c.read_records(4096, None, None, &mut buf).unwrap();
                if records == 0 {
                    break;
                }
            }
            out.extend(buf);
        }
        out
    }

    /// A feature chunk longer than a page is cut into pages, each read back in order.
    #[test]
    fn long_feature_chunks_span_pages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.parquet");
        let names = vec!["a".to_string()];
        let n = PAGE_VALUES * 2 + 7;
        let mut cols = Columns::with_capacity(0, n);
        let mut feats = FeatureBlock::plain(1, n);
        for i in 0..n as u64 {
            cols.push(&meta(i), &[]);
            feats.push(&[i as f64 * 0.25]);
        }
        let batch = Batch {
            cols,
            feats,
            capture: "long".into(),
            capture_id: 0,
            rate_mbps: None,
        };
        let mut sink = ParquetSink::new(File::create(&path).unwrap(), &names, Compression::Zstd).unwrap();
        sink.write(&batch).unwrap();
        sink.finish().unwrap();
        let values = feature_values(&path, META_COLUMNS);
        assert_eq!(values.len(), n);
        assert!(values.iter().enumerate().all(|(i, v)| *v == i as f64 * 0.25));
        use parquet::file::reader::FileReader;
        let mut pages = 0;
        let r = parquet::file::reader::SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let mut p = r
            .get_row_group(0)
            .unwrap()
            .get_column_page_reader(META_COLUMNS)
            .unwrap();
        while p.get_next_page().unwrap().is_some() {
            pages += 1;
        }
        assert_eq!(pages, 3);
    }

    /// The default layout (20 gaps + σ), the shipped model's (5 gaps + a context), one gap.
    fn window_specs() -> [FeatureSpec; 3] {
        [
            FeatureSpec::default(),
            FeatureSpec {
                m: 5,
                context: 1024,
                sigma: false,
                ..FeatureSpec::default()
            },
            FeatureSpec {
                m: 1,
                ..FeatureSpec::default()
            },
        ]
        .map(|s| s.check().unwrap())
    }

    /// The rows of a gap window for `spec`, as the pipeline makes them.
    fn window_rows(spec: &FeatureSpec, n: usize) -> Vec<Vec<f64>> {
        let mut w = crate::features::GapWindow::new(spec);
        let mut t = 1_000_000u64;
        let mut rows = Vec::new();
        for i in 0..n as u64 + 64 {
            // Frames of 1–9 packets 20–60 µs apart, 150–400 µs between frames.
            t += if i % (1 + i / 7 % 9) == 0 {
                150_000 + i * 7_919 % 250_000
            } else {
                20_000 + i * 104_729 % 40_000
            };
            if let Some(x) = w.push(Ts(t)) {
                rows.push(x.to_vec());
            }
        }
        rows.truncate(n);
        rows
    }

    /// A gap window's rows are kept as one series per lagged run, and every column reads back as
    /// pushed; a row that does not continue the run turns the block into plain columns without
    /// losing a value.
    #[test]
    fn feature_blocks_keep_lagged_runs_once() {
        for spec in window_specs() {
            let rows = window_rows(&spec, 3000);
            let mut b = FeatureBlock::new(&spec, 16);
            for r in &rows {
                b.push(r);
            }
            assert!(!b.plain, "window rows continue the runs (m = {})", spec.m);
            // One stored value per run per row (plus the first row's lags), not one per column.
            let stored: usize =
                b.series.iter().map(Vec::len).sum::<usize>() + b.rest.iter().map(Vec::len).sum::<usize>();
            let runs = if spec.context > 0 { 2 } else { 1 };
            assert_eq!(
                stored,
                rows.len() * (spec.width() - runs * (spec.m - 1)) + runs * (spec.m - 1)
            );
            let check = |b: &FeatureBlock, rows: &[Vec<f64>]| {
                for i in 0..spec.width() {
                    let col = b.column(i);
                    assert_eq!(col.len(), rows.len());
                    assert!(
                        col.iter().zip(rows).all(|(v, r)| v.to_bits() == r[i].to_bits()),
                        "column {i}"
                    );
                }
            };
            check(&b, &rows);
            // A row from elsewhere: plain from here on, the earlier rows intact.
            let mut rows = rows;
            let mut odd = rows[17].clone();
            odd.iter_mut().for_each(|v| *v += 1.0);
            rows.push(odd.clone());
            b.push(&odd);
            rows.push(rows[5].clone());
            b.push(&rows[5].clone());
            assert_eq!(
                b.plain,
                spec.m > 1,
                "with m = 1 every row continues (nothing is shared)"
            );
            check(&b, &rows);
            // Cleared, it takes runs again.
            b.clear();
            let fresh = window_rows(&spec, 100);
            fresh.iter().for_each(|r| b.push(r));
            assert!(!b.plain);
            check(&b, &fresh);
        }
    }

    /// The pipeline's rows (a gap window's, with and without a context) written through the
    /// table across several batches read back exactly, in Parquet and CSV.
    #[test]
    fn window_rows_round_trip_through_tables() {
        let dir = tempfile::tempdir().unwrap();
        for spec in window_specs().into_iter().take(2) {
            let rows = window_rows(&spec, 2 * BATCH + 99);
            for (name, format) in [("w.parquet", Format::Parquet), ("w.csv", Format::Csv)] {
                let path = dir.path().join(name);
                let mut t = RowTable::create(&path, format, &spec).unwrap();
                t.begin_capture("w", 0, None).unwrap();
                for (i, r) in rows.iter().enumerate() {
                    t.push(&meta(i as u64), r).unwrap();
                }
                t.finish().unwrap();
                let mut d = Dataset::new(spec.width());
                read_rows(&path, &spec, 0, &mut d).unwrap();
                assert_eq!(d.len(), rows.len(), "{name}");
                for (i, r) in rows.iter().enumerate() {
                    // CSV holds decimal text: equal to the shortest round-tripping form.
                    assert_eq!(d.row(i), r.as_slice(), "{name} row {i} (m = {})", spec.m);
                }
            }
        }
    }

    /// The writer thread's failure (a full disk) comes back as an error naming the file.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_full_disk_is_an_error_naming_the_table() {
        let path = Path::new("/dev/full");
        let spec = FeatureSpec::default();
        let mut t = RowTable::create(path, Format::Csv, &spec).unwrap();
        let x = vec![1.5; spec.width()];
        let mut err = None;
        for i in 0..(4 * BATCH as u64) {
            if let Err(e) = t.push(&meta(i), &x) {
                err = Some(e);
                break;
            }
        }
        let e = match err {
            Some(e) => e,
            None => t.finish().expect_err("writing to /dev/full must fail"),
        };
        assert_eq!(e.path(), path);
        assert!(e.to_string().contains("/dev/full"), "{e}");
    }
}
