//! Per-packet feature tables written through polars, in batches (constant memory whatever the
//! number of rows): Parquet or CSV.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use polars::prelude::{
    AnyValue, Column, CsvReadOptions, CsvWriter, DataFrame, DataType, ParquetReader, ParquetWriter, Scalar, SerReader,
    SerWriter,
};

use aggrate::dataset::{Dataset, RowMeta};
use aggrate::features::FeatureSpec;
use aggrate::Ts;

/// Rows of a feature table written by `aggrate features` (Parquet or CSV), appended to `data` as
/// group `g`. The table's feature columns must be the ones `spec` names, in any order.
pub(crate) fn read_rows(path: &Path, spec: &FeatureSpec, g: u32, data: &mut Dataset) -> Result<()> {
    let ctx = || format!("reading {}", path.display());
    let df = match TableFormat::from_path(path) {
        Some(TableFormat::Parquet) => ParquetReader::new(File::open(path).with_context(ctx)?)
            .finish()
            .with_context(ctx)?,
        Some(TableFormat::Csv) => CsvReadOptions::default()
            .with_has_header(true)
            .try_into_reader_with_file_path(Some(path.to_path_buf()))
            .with_context(ctx)?
            .finish()
            .with_context(ctx)?,
        None => anyhow::bail!("{}: not a .parquet or .csv feature table", path.display()),
    };
    let col = |name: &str, dt: DataType| -> Result<polars::prelude::Series> {
        let c = df.column(name).map_err(|_| {
            anyhow::anyhow!(
                "{}: no column `{name}` (feature tables come from `aggrate features` with the model's --m{})",
                path.display(),
                if spec.context > 0 { " and --context" } else { "" }
            )
        })?;
        c.as_materialized_series()
            .cast(&dt)
            .with_context(|| format!("{}: column `{name}`", path.display()))
    };
    let names = spec.column_names();
    let xs: Vec<polars::prelude::Series> = names.iter().map(|n| col(n, DataType::Float64)).collect::<Result<_>>()?;
    let y = col("y", DataType::Boolean)?;
    let host = col("host_ns", DataType::UInt64)?;
    let level = col("agg_level", DataType::UInt32)?;
    let rate = col("rate_mbps", DataType::Float64)?;
    let (y, host, level, rate) = (y.bool()?, host.u64()?, level.u32()?, rate.f64()?);
    let xs: Vec<_> = xs.iter().map(|s| s.f64()).collect::<Result<_, _>>()?;
    let mut row = vec![0.0; names.len()];
    for i in 0..df.height() {
        for (v, c) in row.iter_mut().zip(&xs) {
            *v = c
                .get(i)
                .with_context(|| format!("{}: row {i} has an empty feature", path.display()))?;
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

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TableFormat {
    Parquet,
    Csv,
}

impl TableFormat {
    pub(crate) fn from_path(p: &Path) -> Option<TableFormat> {
        match p.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "parquet" | "pq" => Some(TableFormat::Parquet),
            "csv" => Some(TableFormat::Csv),
            _ => None,
        }
    }
}

enum Writer {
    Parquet(Box<polars::io::parquet::write::BatchedWriter<File>>),
    Csv(polars::io::csv::write::BatchedWriter<File>),
}

const BATCH: usize = 1 << 14;

/// Column buffers for one batch.
#[derive(Default)]
struct Cols {
    number: Vec<u64>,
    host_ns: Vec<u64>,
    tsft_us: Vec<Option<u64>>,
    seq: Vec<Option<u32>>,
    y: Vec<bool>,
    frame_id: Vec<u64>,
    agg_level: Vec<u32>,
    phy_rate_bps: Vec<Option<u64>>,
    x: Vec<Vec<f64>>,
}

/// Writes rows of one or more captures into one table.
pub(crate) struct RowTable {
    path: PathBuf,
    format: TableFormat,
    names: Vec<String>,
    writer: Option<Writer>,
    file: Option<File>,
    cols: Cols,
    capture: String,
    capture_id: u32,
    rate_mbps: Option<f64>,
    pub(crate) rows: u64,
}

impl RowTable {
    pub(crate) fn create(path: &Path, format: TableFormat, spec: &FeatureSpec) -> Result<RowTable> {
        super::ensure_parent(path)?;
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let names = spec.column_names();
        let cols = Cols {
            x: vec![Vec::new(); names.len()],
            ..Cols::default()
        };
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

    /// Start the rows of another capture (flushes the previous one's batch).
    pub(crate) fn begin_capture(&mut self, name: &str, id: u32, rate_mbps: Option<f64>) -> Result<()> {
        self.flush()?;
        self.capture = name.to_string();
        self.capture_id = id;
        self.rate_mbps = rate_mbps;
        Ok(())
    }

    pub(crate) fn push(&mut self, m: &RowMeta, x: &[f64]) -> Result<()> {
        let c = &mut self.cols;
        c.number.push(m.number);
        c.host_ns.push(m.host.as_nanos());
        c.tsft_us.push(m.tsft.map(|t| t.as_micros()));
        c.seq.push(m.seq);
        c.y.push(m.first_of_frame);
        c.frame_id.push(m.frame_id);
        c.agg_level.push(m.level as u32);
        c.phy_rate_bps.push(m.phy_rate_bps);
        for (col, v) in c.x.iter_mut().zip(x) {
            col.push(*v);
        }
        self.rows += 1;
        if c.number.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn batch(&mut self) -> Result<DataFrame> {
        let c = std::mem::take(&mut self.cols);
        let n = c.number.len();
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
        Ok(DataFrame::new(n, columns)?)
    }

    fn flush(&mut self) -> Result<()> {
        if self.cols.number.is_empty() && self.writer.is_some() {
            return Ok(());
        }
        let df = self.batch()?;
        if df.height() == 0 && self.writer.is_some() {
            return Ok(());
        }
        if self.writer.is_none() {
            let file = self.file.take().context("table writer already closed")?;
            let schema = df.schema().as_ref().clone();
            self.writer = Some(match self.format {
                TableFormat::Parquet => Writer::Parquet(Box::new(ParquetWriter::new(file).batched(&schema)?)),
                TableFormat::Csv => Writer::Csv(CsvWriter::new(file).include_header(true).batched(&schema)?),
            });
        }
        let ctx = || format!("writing {}", self.path.display());
        match self.writer.as_mut() {
            Some(Writer::Parquet(w)) => w.write_batch(&df).with_context(ctx)?,
            Some(Writer::Csv(w)) => w.write_batch(&df).with_context(ctx)?,
            None => {}
        }
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<u64> {
        self.flush()?;
        let ctx = || format!("finishing {}", self.path.display());
        match self.writer.as_mut() {
            Some(Writer::Parquet(w)) => {
                w.finish().with_context(ctx)?;
            }
            Some(Writer::Csv(w)) => w.finish().with_context(ctx)?,
            None => {}
        }
        Ok(self.rows)
    }
}
