//! `send --file` / `recv --out`: a file (or standard input/output) as the reliable stream the
//! data datagrams carry ([`aggrate::bulk::file`] holds the offer, source and sink; the transport
//! carries the frames at the controller's rate). What is here is the glue: settings from the
//! datagram size, progress, and what to tell the user when a transfer stops short.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use aggrate::bulk::file::{self, FileError, FileSink, FileSource, Offer};
use aggrate::transport::Receiver;

use super::super::progress::{Progress, Ui};
use super::super::Exit;
use aggrate::transport::reliable::{BulkConfig, BulkReceiver, BulkSender};

/// The reliable layer's settings for datagrams of `size` bytes (UDP payload) and transfer
/// `stream`.
/// With `window_mb`, the window holds that many megabytes of segments (a path whose
/// bandwidth-delay product is larger than the default 4,096 segments needs more).
pub(crate) fn config(size: usize, stream: u32, window_mb: Option<f64>) -> Result<BulkConfig> {
    let mut cfg = aggrate::transport::bulk_config(size, stream).with_context(|| format!("--size {size}"))?;
    if let Some(mb) = window_mb {
        let max = (aggrate::transport::reliable::MAX_WINDOW * cfg.segment) as f64 / 1e6;
        let max = max.min(4096.0);
        if !(mb.is_finite() && mb >= 0.01 && mb <= max) {
            bail!("--window-mb {mb}: 0.01..={max:.0} at --size {size} (megabytes each end holds)");
        }
        cfg.window = ((mb * 1e6) as usize / cfg.segment).max(2);
    }
    cfg.check()
        .with_context(|| format!("--window-mb {}", window_mb.unwrap_or(0.0)))
}

/// The source for `send --file PATH` (`-`: standard input) resumed at `offset`, and its offer.
pub(crate) fn source(path: &Path, offset: u64) -> Result<(FileSource, Offer)> {
    if file::is_stdout(path) {
        if offset > 0 {
            bail!("--offset {offset}: standard input cannot be resumed (send a file)");
        }
        let offer = Offer::of_stream("stdin")?;
        let src = FileSource::new(&offer, Box::new(std::io::stdin()), Path::new("standard input"));
        return Ok((src, offer));
    }
    let mut offer = Offer::of_file(path)?;
    if offset > offer.size {
        bail!(
            "--offset {offset}: beyond the end of {} ({} bytes)",
            path.display(),
            offer.size
        );
    }
    offer.offset = offset;
    let mut f = File::open(path).with_context(|| format!("{}: opening", path.display()))?;
    f.seek(SeekFrom::Start(offset))
        .with_context(|| format!("{}: seeking to byte {offset}", path.display()))?;
    Ok((FileSource::new(&offer, Box::new(f), path), offer))
}

/// File bytes the receiver acknowledged, of a stream of `segment`-byte segments whose first
/// `head` bytes are the offer.
pub(crate) fn acked_bytes(segments: u64, segment: usize, head: usize) -> u64 {
    (segments.saturating_mul(segment as u64)).saturating_sub(head as u64)
}

/// A file on its way out.
pub(crate) struct Outgoing {
    pub(crate) path: PathBuf,
    pub(crate) src: FileSource,
    pub(crate) offer: Offer,
    /// Segment bytes.
    pub(crate) segment: usize,
    /// Bytes of the offer at the stream's start.
    pub(crate) head: usize,
}

impl Outgoing {
    /// `send --file PATH --offset N` with datagrams of `size` bytes to `receivers` receivers
    /// (one): the file hashed, the stream set on `tx`'s station 0.
    pub(crate) fn open(
        ui: &Ui,
        path: &Path,
        offset: u64,
        (size, window_mb): (usize, Option<f64>),
        receivers: usize,
        tx: &mut aggrate::transport::Sender,
    ) -> Result<Outgoing> {
        if receivers != 1 {
            bail!("--file goes to one receiver: give one --to (got {receivers})");
        }
        // A stream id per transfer, so a receiver never mixes this one into an earlier one's
        // state (nonzero: a receiver's "take the first").
        let id = aggrate::transport::io::entropy()?;
        let cfg = config(size, u32::from_be_bytes([id[0], id[1], id[2], id[3]]) | 1, window_mb)?;
        let spin = ui.spinner(&format!("hashing {}", path.display()));
        let (src, offer) = source(path, offset)?;
        spin.finish_and_clear();
        tx.set_bulk(0, BulkSender::new(cfg.clone())?);
        Ok(Outgoing {
            path: path.to_path_buf(),
            head: offer.encode().len(),
            src,
            offer,
            segment: cfg.segment,
        })
    }

    /// The run ended (`quiet`: because the receiver stopped answering): the counters on
    /// standard output, and success only if the receiver acknowledged every byte (else why
    /// not, and how to resume).
    pub(crate) fn report(
        &self,
        ui: &Ui,
        b: &BulkSender,
        stats: &aggrate::transport::SenderStats,
        to: std::net::SocketAddr,
        quiet: bool,
    ) -> Result<Exit> {
        if quiet && stats.sessions > 0 {
            let sent = b.stats().new_bytes.saturating_sub(self.head as u64);
            let last_out = sent >= self.bytes_to_send() && self.offer.size != file::UNKNOWN_SIZE;
            ui.warn(format!(
                "no acknowledgement for {} s: the receiver stopped answering{}",
                IDLE.as_secs(),
                if last_out {
                    " after the last segment went out (it may well have the whole file: check it)"
                } else {
                    ""
                }
            ));
        }
        let acked = self.acked_bytes(b);
        outln!(
            "{}",
            serde_json::json!({ "sender": stats, "transfer": b.stats(), "file_bytes_acknowledged": acked })
        );
        if !b.is_done() {
            if stats.sessions == 0 {
                bail!(
                    "no receiver answered at {to} (none listening, or one with another key or aggrate version): nothing was sent"
                );
            }
            bail!(self.incomplete(acked));
        }
        ui.info(format!(
            "{} arrived whole ({} bytes)",
            self.offer.name,
            self.offer.offset + acked
        ));
        Ok(Exit::Ok)
    }

    /// File bytes this run sends (0: unknown, standard input).
    pub(crate) fn bytes_to_send(&self) -> u64 {
        if self.offer.size == file::UNKNOWN_SIZE {
            0
        } else {
            self.offer.size - self.offer.offset
        }
    }

    /// File bytes `b` has had acknowledged.
    pub(crate) fn acked_bytes(&self, b: &BulkSender) -> u64 {
        // The last segment is short (and a stream's ends with its hash): clamp where known.
        let n = acked_bytes(b.acked(), self.segment, self.head);
        if self.offer.size == file::UNKNOWN_SIZE {
            n
        } else {
            n.min(self.bytes_to_send())
        }
    }

    /// What to say when the sender stopped before the receiver had everything.
    pub(crate) fn incomplete(&self, acked: u64) -> String {
        let have = self.offer.offset + acked;
        let (path, offer) = (&self.path, &self.offer);
        let size = if offer.size == file::UNKNOWN_SIZE {
            "of a stream".to_string()
        } else {
            format!("of {} bytes", offer.size)
        };
        let resume = if file::is_stdout(path) {
            String::new()
        } else {
            format!(
                "; the receiver keeps the bytes so far under {}{}: resume with `aggrate send --file {} --offset <its length>` (at least {have})",
                offer.name,
                file::PART_SUFFIX,
                path.display()
            )
        };
        format!("the transfer stopped with {have} bytes {size} acknowledged{resume}")
    }
}

/// How long `recv --out` keeps acknowledging after the file is whole, once nothing arrives
/// (the sender ends when it hears the last ack; if that ack was lost it sends the last segment
/// again after its timeout, which is answered: three seconds ride out a few lost acks).
const LINGER: Duration = Duration::from_secs(3);

/// A transfer under way ends when the other end has been silent this long (a sender that
/// died, a receiver that left): it does not wait for --duration.
pub(crate) const IDLE: Duration = Duration::from_secs(30);

/// How `recv --out` receives a file, besides where.
#[derive(Debug, clap::Args)]
pub(crate) struct OutArgs {
    /// With --out: the sender's UDP payload bytes per datagram (its --size).
    #[arg(long, default_value_t = 1472, requires = "out")]
    pub(crate) size: usize,
    /// With --out: megabytes of segments held past the delivered point (the sender's
    /// --window-mb or more).
    #[arg(long, requires = "out")]
    pub(crate) window_mb: Option<f64>,
    /// With --out: replace a file already under the output's name (without it such a file is
    /// never touched: the transfer is refused, or, if the file appeared meanwhile, the whole
    /// file stays under PATH.aggrate-part).
    #[arg(long, requires = "out")]
    pub(crate) overwrite: bool,
    /// With --out: most megabytes a transfer may write (default: the free space of the output's
    /// file system). A larger offer is refused before a byte is written; a stream of unknown
    /// size stops there.
    #[arg(long, value_name = "MB", requires = "out")]
    pub(crate) max_size: Option<f64>,
}

/// A file on its way in: the stream's bytes drained into a [`FileSink`] after every datagram.
pub(crate) struct Incoming<'u> {
    ui: &'u Ui,
    out: PathBuf,
    sink: FileSink,
    bar: Option<Progress>,
    error: Option<FileError>,
    /// Data datagrams accepted, and when that count last moved.
    last: (u64, Instant),
    /// Why the run stopped short, if it did on its own.
    stopped: Option<String>,
    /// When the first data came.
    first_data: Option<Instant>,
}

impl<'u> Incoming<'u> {
    /// A transfer into `out`, whose directory must exist (checked now, not when the first
    /// bytes arrive), received as `o` says: the stream set on `rx`.
    pub(crate) fn new(ui: &'u Ui, out: &Path, o: &OutArgs, rx: &mut Receiver) -> Result<Incoming<'u>> {
        let max_bytes = match o.max_size {
            None => None,
            Some(mb) if mb.is_finite() && mb > 0.0 && mb <= 1e12 => Some((mb * 1e6) as u64),
            Some(mb) => bail!("--max-size {mb}: a positive number of megabytes, at most 10^12"),
        };
        if !file::is_stdout(out) && !out.is_dir() {
            let dir = match out.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                bail!(
                    "--out {}: the directory {} does not exist",
                    out.display(),
                    dir.display()
                );
            }
        }
        rx.set_bulk(BulkReceiver::new(config(o.size, 0, o.window_mb)?)?);
        Ok(Incoming {
            ui,
            out: out.to_path_buf(),
            sink: FileSink::with_options(
                out,
                file::SinkOptions {
                    overwrite: o.overwrite,
                    max_bytes,
                },
            ),
            bar: None,
            error: None,
            last: (0, Instant::now()),
            stopped: None,
            first_data: None,
        })
    }

    /// Whether the file goes to standard output.
    pub(crate) fn to_stdout(&self) -> bool {
        file::is_stdout(&self.out)
    }

    /// After each datagram: write what arrived in order; `false` once the file is whole and the
    /// sender has gone quiet, or on an error (kept for [`Incoming::finish`]).
    pub(crate) fn poll(&mut self, rx: &mut Receiver) -> bool {
        let Some(b) = rx.bulk_mut() else { return false };
        // A resume hashing the part it kept: leave the stream unread meanwhile (its window
        // holds the sender; acks and reports go on). At most one read is held by the sink.
        loop {
            match self.sink.busy() {
                Ok(false) => {}
                Ok(true) => break,
                Err(e) => {
                    self.error = Some(e);
                    return false;
                }
            }
            let Some(bytes) = b.read() else { break };
            if let Err(e) = self.sink.write(bytes) {
                self.error = Some(e);
                return false;
            }
        }
        let done = b.is_done();
        if let Some(o) = self.sink.offer().filter(|_| self.bar.is_none()) {
            let len = if o.size == file::UNKNOWN_SIZE { 0 } else { o.size };
            self.bar = Some(self.ui.bytes_bar(len, &format!("receiving {}", o.name)));
        }
        if let Some(bar) = &mut self.bar {
            bar.set(self.sink.written());
        }
        let (received, other) = (rx.stats().received, rx.stats().other_stream);
        // Segments of the stream (keepalives, empty datagrams of a sender waiting for its
        // producer, carry none).
        let segments = rx.bulk().map_or(0, |b| b.stats().segments);
        if received != self.last.0 {
            self.last = (received, Instant::now());
        }
        let quiet = self.last.1.elapsed();
        if other > 0 && !done {
            self.stopped = Some(format!(
                "another transfer began ({other} frames of another stream: a restarted sender) while this one was \
                 under way; it was not mixed in"
            ));
            return false;
        }
        if !done && received > 0 && quiet >= IDLE {
            self.stopped = Some(format!("the sender went quiet for {} s", IDLE.as_secs()));
            return false;
        }
        // Data that never brings the stream's start: a transfer already under way when this
        // receiver started (the sender does not send again what an earlier receiver took).
        if self.sink.offer().is_none() && segments > 0 {
            let first = *self.first_data.get_or_insert_with(Instant::now);
            if first.elapsed() >= IDLE {
                self.stopped = Some(
                    "the data never brought the transfer's start: it was under way before this receiver \
                     started (restart the sender too)"
                        .into(),
                );
                return false;
            }
        }
        !(done && quiet >= LINGER)
    }

    /// The run ended: the file renamed into place if it is whole and matches the offer, else an
    /// error naming what arrived and how to resume.
    pub(crate) fn finish(self, rx: &Receiver) -> Result<PathBuf> {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
        let written = self.sink.written();
        if let Some(e) = self.error {
            return Err(anyhow::Error::new(e).context("receiving the file"));
        }
        let stream = self.sink.offer().is_some_and(|o| o.size == file::UNKNOWN_SIZE);
        let whole = self.sink.offer().is_some_and(|o| o.size == written);
        let hint = if self.to_stdout() || stream {
            // Standard output, or a stream of unknown size: nothing to resume from.
            String::new()
        } else if whole {
            // Every byte came and the hash differs: the part is bad, not short.
            ": the part holds the whole size with other bytes; delete it and send again (--offset 0)".to_string()
        } else {
            format!(": resume with `aggrate send --file FILE --offset {written}` (restart recv first)")
        };
        let why = self.stopped.as_ref().map(|w| format!("{w}; ")).unwrap_or_default();
        let resume = move |e: FileError| anyhow::anyhow!("{why}{e}{hint}");
        if self.sink.offer().is_none() {
            let heard = rx.stats().received;
            if let Some(why) = &self.stopped {
                bail!("no file arrived: {why}");
            }
            bail!(
                "no file arrived ({heard} data datagrams accepted: no sender, or one with another key, version or --size; \
                 see the counters above)"
            );
        }
        // Whole or not, the sink decides by size and hash: a stream cut short fails there and
        // keeps its part.
        self.sink.finish().map_err(resume)
    }
}
