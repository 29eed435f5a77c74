//! The only file-touching part of `capture`: open a path (transparently gunzipping or unxz-ing),
//! count the compressed bytes consumed (for progress), and read `seq,host_ns` CSV logs.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{open_capture, CaptureReader, Error};

/// Compression of an input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Compression {
    /// Plain.
    None,
    /// gzip.
    Gzip,
    /// xz.
    Xz,
}

/// Counts bytes read from the underlying file, shared with whoever shows progress.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// A capture file opened for streaming.
pub struct CaptureFile {
    /// The reader.
    pub reader: CaptureReader<Box<dyn BufRead + Send>>,
    /// Path it came from.
    pub path: PathBuf,
    /// File size on disk (compressed size when compressed).
    pub file_len: u64,
    /// Bytes of the file consumed so far (compressed bytes when compressed).
    pub consumed: Arc<AtomicU64>,
    /// Detected compression.
    pub compression: Compression,
}

/// Errors opening a capture file: the IO error or the capture error, with the path.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file could not be opened or read.
    #[error("{path}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
    /// The content is not a readable capture.
    #[error("{path}")]
    Capture {
        /// Path.
        path: PathBuf,
        /// Error.
        source: Error,
    },
}

const BUF: usize = 1 << 16;

/// Memory the xz decoder may use (enough for `xz -9`, 65 MiB; a stream that asks for more is
/// refused with "Memory usage limit reached").
pub const XZ_MEMLIMIT: u64 = 96 << 20;

/// Open a pcap/pcapng file, gzip- or xz-compressed or plain (detected by magic bytes).
pub fn open_path(path: &Path) -> Result<CaptureFile, OpenError> {
    let io_err = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let file_len = file.metadata().map_err(io_err)?.len();
    let consumed = Arc::new(AtomicU64::new(0));
    let mut raw = BufReader::with_capacity(
        BUF,
        Counting {
            inner: file,
            count: consumed.clone(),
        },
    );
    let head = raw.fill_buf().map_err(io_err)?;
    let compression = if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Compression::Xz
    } else {
        Compression::None
    };
    let reader: Box<dyn BufRead + Send> = match compression {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(BufReader::with_capacity(BUF, flate2::bufread::MultiGzDecoder::new(raw))),
        Compression::Xz => {
            // A memory limit for the decoder: a hostile header can ask for a 1.5 GiB dictionary.
            let stream =
                xz2::stream::Stream::new_stream_decoder(XZ_MEMLIMIT, xz2::stream::CONCATENATED).map_err(|e| {
                    OpenError::Io {
                        path: path.to_path_buf(),
                        source: std::io::Error::other(format!("xz decoder: {e}")),
                    }
                })?;
            Box::new(BufReader::with_capacity(
                BUF,
                xz2::bufread::XzDecoder::new_stream(raw, stream),
            ))
        }
    };
    let reader = open_capture(reader).map_err(|source| OpenError::Capture {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(CaptureFile {
        reader,
        path: path.to_path_buf(),
        file_len,
        consumed,
        compression,
    })
}

/// Errors reading a `seq,host_ns` log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// IO.
    #[error("{path}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
    /// A line is not `seq,host_ns`.
    #[error("{path}:{line}: expected `seq,host_ns` (two unsigned integers), found {text:?}")]
    Parse {
        /// Path.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The offending text (first 60 chars).
        text: String,
    },
    /// More entries, or a longer line, than a log may have.
    #[error("{path}:{line}: {what} (cap); split the log")]
    Cap {
        /// Path.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// Which cap.
        what: String,
    },
}

/// Longest line of a kernel log (bytes).
pub const LOG_MAX_LINE: usize = 4096;

/// Entries a receiver log holds at most (≈ 70 MB joined; 40 minutes at 600 Mb/s); a longer
/// log is refused, and a join keeps no more.
pub const LOG_MAX_ENTRIES: usize = 1 << 21;

/// Read a CSV log of `seq,host_ns` lines (an optional header line starting with a letter and
/// `#` comments are skipped).
pub fn read_seq_log(path: &Path) -> Result<Vec<(u32, u64)>, LogError> {
    let f = File::open(path).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_seq_log(BufReader::new(f), path)
}

/// [`read_seq_log`] over any reader (`path` only names the source in errors).
pub fn parse_seq_log<R: BufRead>(mut r: R, path: &Path) -> Result<Vec<(u32, u64)>, LogError> {
    use std::io::Read;
    let mut out = Vec::new();
    let mut line = String::new();
    for i in 0.. {
        line.clear();
        // A bounded read per line: a log without newlines cannot grow the buffer without end.
        let n = (&mut r)
            .take(LOG_MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .map_err(|source| LogError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            break;
        }
        let cap = |what: String| LogError::Cap {
            path: path.to_path_buf(),
            line: i as u64 + 1,
            what,
        };
        if n > LOG_MAX_LINE && !line.ends_with('\n') {
            return Err(cap(format!("line longer than {LOG_MAX_LINE} bytes")));
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || (i == 0 && t.starts_with(|c: char| c.is_ascii_alphabetic())) {
            continue;
        }
        let bad = || LogError::Parse {
            path: path.to_path_buf(),
            line: i as u64 + 1,
            text: t.chars().take(60).collect(),
        };
        let (a, b) = t.split_once(',').ok_or_else(bad)?;
        let seq = a.trim().parse::<u32>().map_err(|_| bad())?;
        let ns = b.trim().parse::<u64>().map_err(|_| bad())?;
        if out.len() >= LOG_MAX_ENTRIES {
            return Err(cap(format!("more than {} entries", LOG_MAX_ENTRIES)));
        }
        out.push((seq, ns));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_without_end_is_refused_at_the_cap() {
        let long = "1".repeat(LOG_MAX_LINE + 10);
        let e = parse_seq_log(std::io::Cursor::new(format!("1,5\n{long}")), Path::new("k.csv")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("k.csv:2: line longer than {LOG_MAX_LINE} bytes (cap); split the log")
        );
        let ok = parse_seq_log(std::io::Cursor::new("seq,host_ns\n1,5\n2,7"), Path::new("k.csv")).unwrap();
        assert_eq!(ok, vec![(1, 5), (2, 7)]);
    }

    #[test]
    fn seq_log_parses_and_names_bad_lines() {
        let p = Path::new("k.csv");
        let ok = parse_seq_log("seq,host_ns\n1,100\n# c\n2, 250\n".as_bytes(), p).unwrap();
        assert_eq!(ok, vec![(1, 100), (2, 250)]);
        let e = parse_seq_log("1,100\n2;7\n".as_bytes(), p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k.csv:2: expected `seq,host_ns` (two unsigned integers), found \"2;7\""
        );
    }
}
