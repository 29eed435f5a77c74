//! A CSV log written line by line as a run goes (`ap --truth`, `recv --log`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A CSV log written line by line as a run goes (`ap --truth`, `recv --log`): the first write
/// error is kept and reported when the run ends, so a full disk neither stops the run nor goes
/// unnoticed.
pub(super) struct CsvLog {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    err: Option<std::io::Error>,
}

impl CsvLog {
    pub(super) fn create(path: &Path, header: &str) -> Result<CsvLog> {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        writeln!(out, "{header}").with_context(|| format!("writing {}", path.display()))?;
        Ok(CsvLog {
            path: path.to_path_buf(),
            out,
            err: None,
        })
    }

    pub(super) fn line(&mut self, text: &str) {
        if let Err(e) = writeln!(self.out, "{text}") {
            self.err.get_or_insert(e);
        }
    }

    pub(super) fn finish(mut self) -> Result<PathBuf> {
        if let Some(e) = self.err.take() {
            return Err(e).with_context(|| format!("writing {}", self.path.display()));
        }
        self.out
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(self.path)
    }
}
