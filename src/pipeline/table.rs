//! Per-packet feature tables written through polars, in batches (constant memory whatever the
//! number of rows): Parquet or CSV. [`RowTable`] writes what [`super::capture_rows`] makes;
//! [`read_rows`] reads such a table back into a [`Dataset`].

use std::fs::File;
use std::path::{Path, PathBuf};

use polars::prelude::{
    AnyValue, Column, CsvReadOptions, CsvWriter, DataFrame, DataType, ParquetReader, ParquetWriter, PolarsError,
    Scalar, SerReader, SerWriter,
};

use crate::dataset::{Dataset, RowMeta};
use crate::features::FeatureSpec;
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
    /// polars failed reading or writing it.
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
            | Error::Polars { path, .. }
            | Error::Column { path, .. }
            | Error::EmptyFeature { path, .. }
            | Error::UnknownFormat { path } => path,
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

/// Rows of a feature table written by `aggrate features` (Parquet or CSV), appended to `data` as
/// group `g`. The table's feature columns must be the ones `spec` names, in any order.
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

enum Writer {
    Parquet(Box<polars::io::parquet::write::BatchedWriter<File>>),
    Csv(polars::io::csv::write::BatchedWriter<File>),
}

const BATCH: usize = 1 << 14;

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
        Columns {
            x: vec![Vec::new(); spec.width()],
            ..Columns::default()
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

/// Writes rows of one or more captures into one table: `capture`, `capture_id`, `rate_mbps`,
/// `number`, `host_ns`, `tsft_us`, `seq`, `y`, `frame_id`, `agg_level`, `phy_rate_bps`, then the
/// spec's feature columns.
pub struct RowTable {
    path: PathBuf,
    format: Format,
    names: Vec<String>,
    writer: Option<Writer>,
    file: Option<File>,
    cols: Columns,
    capture: String,
    capture_id: u32,
    rate_mbps: Option<f64>,
    rows: u64,
}

impl RowTable {
    /// Create (truncate) `path`.
    pub fn create(path: &Path, format: Format, spec: &FeatureSpec) -> Result<RowTable, Error> {
        let file = File::create(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let names = spec.column_names();
        let cols = Columns::new(spec);
        Ok(RowTable {
            path: path.to_path_buf(),
            format,
            names,
            writer: None,
            file: Some(file),
            cols,
            capture: String::new(),
            capture_id: 0,
            rate_mbps: None,
            rows: 0,
        })
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Start the rows of another capture (flushes the previous one's batch).
    pub fn begin_capture(&mut self, name: &str, id: u32, rate_mbps: Option<f64>) -> Result<(), Error> {
        self.flush()?;
        self.capture = name.to_string();
        self.capture_id = id;
        self.rate_mbps = rate_mbps;
        Ok(())
    }

    /// One row.
    pub fn push(&mut self, m: &RowMeta, x: &[f64]) -> Result<(), Error> {
        self.cols.push(m, x);
        self.rows += 1;
        if self.cols.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn batch(&mut self) -> Result<DataFrame, PolarsError> {
        let c = std::mem::take(&mut self.cols);
        let n = c.len();
        let mut columns = vec![
            Column::new_scalar(
                "capture".into(),
                Scalar::new(DataType::String, AnyValue::StringOwned(self.capture.as_str().into())),
                n,
            ),
            Column::new_scalar(
                "capture_id".into(),
                Scalar::new(DataType::UInt32, AnyValue::UInt32(self.capture_id)),
                n,
            ),
            Column::new_scalar(
                "rate_mbps".into(),
                Scalar::new(
                    DataType::Float64,
                    self.rate_mbps.map_or(AnyValue::Null, AnyValue::Float64),
                ),
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
        for (name, col) in self.names.iter().zip(c.x) {
            columns.push(Column::new(name.as_str().into(), col));
        }
        self.cols.x = vec![Vec::new(); self.names.len()];
        DataFrame::new(n, columns)
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.cols.number.is_empty() && self.writer.is_some() {
            return Ok(());
        }
        let path = self.path.clone();
        let polars = |source| Error::Polars {
            path: path.clone(),
            action: "writing",
            source,
        };
        let df = self.batch().map_err(polars)?;
        if df.height() == 0 && self.writer.is_some() {
            return Ok(());
        }
        if self.writer.is_none() {
            let Some(file) = self.file.take() else {
                return Ok(());
            };
            let schema = df.schema().as_ref().clone();
            self.writer = Some(match self.format {
                Format::Parquet => {
                    Writer::Parquet(Box::new(ParquetWriter::new(file).batched(&schema).map_err(polars)?))
                }
                Format::Csv => Writer::Csv(
                    CsvWriter::new(file)
                        .include_header(true)
                        .batched(&schema)
                        .map_err(polars)?,
                ),
            });
        }
        match self.writer.as_mut() {
            Some(Writer::Parquet(w)) => w.write_batch(&df).map_err(polars)?,
            Some(Writer::Csv(w)) => w.write_batch(&df).map_err(polars)?,
            None => {}
        }
        Ok(())
    }

    /// Write the last batch and the file's footer; the rows written.
    pub fn finish(mut self) -> Result<u64, Error> {
        self.flush()?;
        let path = self.path.clone();
        let polars = |source| Error::Polars {
            path,
            action: "finishing",
            source,
        };
        match self.writer.as_mut() {
            Some(Writer::Parquet(w)) => {
                w.finish().map_err(polars)?;
            }
            Some(Writer::Csv(w)) => w.finish().map_err(polars)?,
            None => {}
        }
        Ok(self.rows)
    }
}
