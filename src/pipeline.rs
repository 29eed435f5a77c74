//! The one road from a capture (and optionally a receiver's kernel log) to labelled feature rows,
//! taken by `features`, `train`, `eval`, `sweep`, the ingest bench and the Python package.
//!
//! [`read_records`] streams one file's packets (progress in bytes, the `keep_going` policy for
//! damage); [`pick_flow`] chooses the flow when none is asked for; [`kernel_join`] loads a
//! receiver's `seq,host_ns` log or receiver-side capture; [`capture_rows`] puts them together and
//! hands every row to a sink as soon as its frame closes. What went wrong is decided afterwards by
//! [`RowsOutcome::check`], so the rows read before damage are already with the caller (the CLI
//! writes them, Python keeps them on the exception). [`load_dataset`] reads many inputs — captures
//! or feature tables — on all cores into one [`Dataset`]; [`table`] writes and reads the
//! Parquet/CSV feature tables. No printing; the clock is never read.

pub mod air;
pub mod inputs;
pub mod summary;
pub mod table;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::capture::filter::{FlowCounts, FlowFilter};
use crate::capture::io::{open_path, read_seq_log, Compression, LogError, OpenError};
use crate::capture::{self, FiveTuple, Format, LinkType, PacketRecord};
use crate::dataset::{Dataset, Join, RowExtractor, RowMeta};
use crate::features::FeatureSpec;
use crate::progress::{NoProgress, Progress};

/// Damaged packets whose errors [`ReadStats::first_skipped`] keeps (the rest are only counted).
pub const MAX_SKIPPED_KEPT: usize = 5;

/// How reading one file went.
#[derive(Debug)]
pub struct ReadStats {
    /// Container.
    pub format: Format,
    /// Link type (of the first interface, for pcapng).
    pub link: Option<LinkType>,
    /// Compression detected.
    pub compression: Compression,
    /// Capture records decoded (the further packets of an A-MSDU share their MPDU's record).
    pub records: u64,
    /// Damaged packets skipped (only when reading with `keep_going`).
    pub skipped: u64,
    /// The first [`MAX_SKIPPED_KEPT`] of the skipped packets' errors.
    pub first_skipped: Vec<capture::Error>,
    /// What stopped the read before the end of the file, if anything.
    pub damage: Option<capture::Error>,
    /// Read with `keep_going`: `damage` is a warning, not an error.
    pub keep_going: bool,
    /// Bytes of the file not read when reading stopped early (compressed files: a lower bound).
    pub unread_bytes: u64,
    /// Records whose timestamp fraction was a second or more, carried into the seconds as tshark
    /// does.
    pub timestamps_fixed: u64,
    /// Packets of pcapng interfaces with a link type aggrate does not decode (skipped).
    pub other_link_packets: u64,
    /// Those interfaces.
    pub other_link_interfaces: Vec<u32>,
}

/// What can stop the road from a capture to rows. Every variant names the file and, for damage,
/// the byte offset ([`Error::offset`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be opened or is not a capture.
    #[error("{}", open_message(.0))]
    Open(OpenError),
    /// The capture is damaged at `source`'s offset (rows before it were handed over).
    #[error("{}: {error} (results up to the damage were kept)", path.display())]
    Damaged {
        /// The capture.
        path: PathBuf,
        /// Where and how (in the message, so not a `source`).
        error: capture::Error,
    },
    /// No filter given and no UDP or TCP flow to pick.
    #[error("{}: no UDP or TCP flow in the capture; select one with --ip/--port/--proto", path.display())]
    NoFlow {
        /// The capture.
        path: PathBuf,
    },
    /// The filter matches no packet.
    #[error("{}: no packets of the selected flow", path.display())]
    NoPackets {
        /// The capture.
        path: PathBuf,
    },
    /// No packet carries radiotap ground truth.
    #[error("{}: {error}", path.display())]
    NoGroundTruth {
        /// The capture.
        path: PathBuf,
        /// The labeller's error.
        error: crate::label::Error,
    },
    /// Fewer packets than one row needs.
    #[error("{}: the selected flow has {packets} packets, too short for one row: m = {m} needs at least {}", path.display(), m + 1)]
    TooShort {
        /// The capture.
        path: PathBuf,
        /// Packets of the flow.
        packets: u64,
        /// Gaps per row.
        m: usize,
    },
    /// A `seq,host_ns` log cannot be read.
    #[error("kernel log {0}")]
    KernelLog(#[from] LogError),
    /// A receiver-side capture given as the kernel log cannot be read.
    #[error("kernel log {}: {error}", log.display())]
    KernelCapture {
        /// The log.
        log: PathBuf,
        /// Why.
        error: Box<Error>,
    },
    /// The log and the capture share no sequence number.
    #[error("{}: no sequence number in common with the {packets} packets of {}'s flow ({entries} log entries): a log of another flow or capture?", log.display(), capture.display())]
    KernelNoOverlap {
        /// The log.
        log: PathBuf,
        /// The capture.
        capture: PathBuf,
        /// Capture packets looked up.
        packets: u64,
        /// Log entries.
        entries: usize,
    },
    /// Bad labelling parameters (n_max).
    #[error(transparent)]
    Label(#[from] crate::label::Error),
    /// A feature table cannot be written or read.
    #[error(transparent)]
    Table(#[from] table::Error),
    /// A reader thread panicked (a bug; the other inputs' rows are dropped).
    #[error("a capture reader thread failed")]
    Worker,
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Error {
        Error::Open(e)
    }
}

fn open_message(e: &OpenError) -> String {
    match e {
        OpenError::Io { path, source } => format!("{}: {source}", path.display()),
        OpenError::Capture { path, source } => format!("{}: {source}", path.display()),
    }
}

impl Error {
    /// Byte offset of the damage, when the error is about a place in a file.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Damaged { error, .. } | Error::Open(OpenError::Capture { source: error, .. }) => error.offset(),
            Error::KernelCapture { error, .. } => error.offset(),
            _ => None,
        }
    }
    /// The input data is at fault (damaged, unreadable as a capture, no flow, no ground truth, a
    /// log that does not match), not the machine (IO, a failed thread).
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::Open(OpenError::Io { .. }) | Error::KernelLog(LogError::Io { .. }) | Error::Worker => false,
            Error::Table(t) => !matches!(t, table::Error::Io { .. }),
            Error::KernelCapture { error, .. } => error.is_bad_input(),
            _ => true,
        }
    }
    /// The file the error is about.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Open(OpenError::Io { path, .. } | OpenError::Capture { path, .. })
            | Error::Damaged { path, .. }
            | Error::NoFlow { path }
            | Error::NoPackets { path }
            | Error::NoGroundTruth { path, .. }
            | Error::TooShort { path, .. } => Some(path),
            Error::KernelCapture { log, .. } | Error::KernelNoOverlap { log, .. } => Some(log),
            Error::KernelLog(LogError::Io { path, .. } | LogError::Parse { path, .. } | LogError::Cap { path, .. }) => {
                Some(path)
            }
            Error::Table(e) => Some(e.path()),
            Error::Label(_) | Error::Worker => None,
        }
    }
}

/// Read every packet of `path`, calling `f` on each one that decodes. Damage stops the read and
/// is returned in [`ReadStats::damage`] (with `keep_going`, damage inside one packet skips that
/// packet instead); only a file that cannot be opened at all is an `Err`.
pub fn read_records(
    path: &Path,
    keep_going: bool,
    progress: &mut dyn Progress,
    mut f: impl FnMut(&PacketRecord),
) -> Result<ReadStats, Error> {
    let mut file = open_path(path)?;
    progress.start(&format!("reading {}", path.display()), file.file_len);
    let mut st = ReadStats {
        format: file.reader.format(),
        link: file.reader.link_type(),
        compression: file.compression,
        records: 0,
        skipped: 0,
        first_skipped: Vec::new(),
        damage: None,
        keep_going,
        unread_bytes: 0,
        timestamps_fixed: 0,
        other_link_packets: 0,
        other_link_interfaces: Vec::new(),
    };
    let mut rec = PacketRecord::empty();
    while let Some(r) = file.reader.next_into(&mut rec) {
        match r {
            Ok(()) => {
                st.records += u64::from(rec.msdu.0 == 0);
                if st.link.is_none() {
                    st.link = Some(rec.link);
                }
                f(&rec);
                if st.records & 0xffff == 0 {
                    progress.set(file.consumed.load(Ordering::Relaxed));
                }
            }
            Err(e) if keep_going && e.is_packet_level() => {
                st.skipped += 1;
                if st.first_skipped.len() < MAX_SKIPPED_KEPT {
                    st.first_skipped.push(e);
                }
            }
            Err(e) => {
                st.damage = Some(e);
                break;
            }
        }
    }
    progress.finish();
    if st.damage.is_some() {
        // Uncompressed: from the record the reader stopped at; compressed: from the compressed
        // bytes consumed (a lower bound: the decoder reads ahead).
        let done = match file.compression {
            Compression::None => file.reader.offset(),
            _ => file.consumed.load(Ordering::Relaxed),
        };
        st.unread_bytes = file.file_len.saturating_sub(done);
    }
    st.timestamps_fixed = file.reader.timestamps_fixed();
    let (n, ifaces) = file.reader.other_link_packets();
    st.other_link_packets = n;
    st.other_link_interfaces = ifaces.to_vec();
    Ok(st)
}

impl ReadStats {
    /// The damage as an error, unless reading was told to keep going.
    pub fn fatal_damage(self, path: &Path) -> Result<(), Error> {
        match self.damage {
            Some(error) if !self.keep_going => Err(Error::Damaged {
                path: path.to_path_buf(),
                error,
            }),
            _ => Ok(()),
        }
    }
}

/// The flow rows are made from.
#[derive(Clone, Debug)]
pub struct FlowPick {
    /// The filter to read with (the asked-for one, or the picked flow).
    pub filter: FlowFilter,
    /// The flow picked when no filter was given, and why.
    pub picked: Option<(FiveTuple, &'static str)>,
    /// Packets of flows beyond the counting cap, not counted when picking the largest.
    pub over_cap_packets: u64,
}

/// The flow to read: `filter` when it selects anything, else a first pass picks the largest UDP
/// flow (else the largest TCP flow).
pub fn pick_flow(
    path: &Path,
    filter: &FlowFilter,
    keep_going: bool,
    progress: &mut dyn Progress,
) -> Result<FlowPick, Error> {
    if !filter.is_empty() {
        return Ok(FlowPick {
            filter: *filter,
            picked: None,
            over_cap_packets: 0,
        });
    }
    let mut counts = FlowCounts::default();
    let st = read_records(path, keep_going, progress, |r| counts.push(r))?;
    match crate::capture::filter::pick_flow(&counts, filter) {
        Some((f, why)) => Ok(FlowPick {
            filter: FlowFilter {
                flow: Some(f),
                ..*filter
            },
            picked: Some((f, why)),
            over_cap_packets: counts.over_cap_packets,
        }),
        None => {
            st.fatal_damage(path)?;
            Err(Error::NoFlow {
                path: path.to_path_buf(),
            })
        }
    }
}

/// Kernel receive times from a `seq,host_ns` CSV or a receiver-side capture (its flow picked like
/// the capture's, with `filter`; sequence numbers at `seq_offset` in the UDP payload).
pub fn kernel_join(
    log: &Path,
    filter: &FlowFilter,
    seq_offset: usize,
    keep_going: bool,
    progress: &mut dyn Progress,
) -> Result<Join, Error> {
    if log.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
        return Ok(Join::new(read_seq_log(log)?));
    }
    let wrap = |e: Error| Error::KernelCapture {
        log: log.to_path_buf(),
        error: Box::new(e),
    };
    let pick = pick_flow(log, filter, keep_going, progress).map_err(wrap)?;
    let mut pairs = Vec::new();
    let st = read_records(log, keep_going, progress, |r| {
        if pick.filter.matches(r) {
            if let Some(s) = r.payload_seq(seq_offset) {
                pairs.push((s, r.host.as_nanos()));
            }
        }
    })
    .map_err(wrap)?;
    st.fatal_damage(log).map_err(wrap)?;
    Ok(Join::new(pairs))
}

/// What to make rows from, beyond the capture itself.
#[derive(Clone, Debug)]
pub struct RowsOptions {
    /// Feature layout (checked).
    pub spec: FeatureSpec,
    /// Which packets (empty: pick the largest UDP, else TCP, flow).
    pub filter: FlowFilter,
    /// Byte offset of the 4-byte big-endian sequence number in the UDP payload.
    pub seq_offset: usize,
    /// Skip damaged packets and treat container damage as the end of the file.
    pub keep_going: bool,
    /// A receiver's kernel log to take the host times from (joined by sequence number).
    pub kernel: Option<PathBuf>,
}

impl RowsOptions {
    /// Defaults around `spec`: picked flow, sequence numbers at offset 0, stop at damage, the
    /// capture's own host times.
    pub fn new(spec: FeatureSpec) -> RowsOptions {
        RowsOptions {
            spec,
            filter: FlowFilter::default(),
            seq_offset: 0,
            keep_going: false,
            kernel: None,
        }
    }
}

/// How a receiver log's join went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinStats {
    /// Capture packets with a kernel time.
    pub matched: u64,
    /// Capture packets without one.
    pub unmatched_truth: u64,
    /// Log entries no capture packet used.
    pub unmatched_kernel: u64,
    /// Log entries.
    pub entries: usize,
}

/// What [`capture_rows`] did; [`RowsOutcome::check`] says whether it is an error.
#[derive(Debug)]
pub struct RowsOutcome {
    /// The capture.
    pub path: PathBuf,
    /// The flow read.
    pub pick: FlowPick,
    /// How reading the capture went.
    pub read: ReadStats,
    /// Packets of the flow.
    pub packets: u64,
    /// Frames (A-MPDUs) closed.
    pub frames: u64,
    /// Rows handed to the sink.
    pub rows: u64,
    /// Retransmitted duplicates dropped.
    pub duplicates_dropped: u64,
    /// Packets of transmitter × TID streams beyond the de-duplication cap (kept).
    pub dedup_untracked: u64,
    /// Frames closed at [`crate::dataset::MAX_PENDING_ROWS`] rows instead of at their end.
    pub forced_closes: u64,
    /// Any packet carried ground truth.
    pub ground_truth: bool,
    /// The kernel log and its join, when one was given.
    pub join: Option<(PathBuf, JoinStats)>,
    /// Gaps per row.
    pub m: usize,
}

impl RowsOutcome {
    /// The outcome back, or the first thing that makes the rows unusable or incomplete, in this order: damage (unless
    /// read with `keep_going`), no packets, no ground truth, a kernel log that matches nothing,
    /// too few packets for one row. Partial joins are not errors (see [`RowsOutcome::join`]).
    pub fn check(self) -> Result<RowsOutcome, Error> {
        self.check_with(true)
    }

    /// [`RowsOutcome::check`], but without ground truth when `need_truth` is false.
    pub fn check_with(mut self, need_truth: bool) -> Result<RowsOutcome, Error> {
        let path = || self.path.clone();
        if !self.read.keep_going {
            if let Some(error) = self.read.damage.take() {
                return Err(Error::Damaged { path: path(), error });
            }
        }
        if self.packets == 0 {
            return Err(Error::NoPackets { path: path() });
        }
        if need_truth && !self.ground_truth {
            return Err(Error::NoGroundTruth {
                path: path(),
                error: crate::label::Error::NoGroundTruth { packets: self.packets },
            });
        }
        if let Some((log, j)) = &self.join {
            if j.matched == 0 {
                return Err(Error::KernelNoOverlap {
                    log: log.clone(),
                    capture: path(),
                    packets: j.unmatched_truth,
                    entries: j.entries,
                });
            }
        }
        if self.rows == 0 {
            return Err(Error::TooShort {
                path: path(),
                packets: self.packets,
                m: self.m,
            });
        }
        Ok(self)
    }
}

/// Stream the labelled feature rows of one capture into `sink` (in capture order, each once its
/// frame has closed). Picks the flow if `opts.filter` is empty and joins `opts.kernel` if given.
/// Returns `Err` only when nothing could be read; damage and empty results come back in the
/// outcome (rows before damage are already in the sink) — call [`RowsOutcome::check`].
pub fn capture_rows(
    path: &Path,
    opts: &RowsOptions,
    progress: &mut dyn Progress,
    sink: impl FnMut(&RowMeta, &[f64]),
) -> Result<RowsOutcome, Error> {
    capture_rows_heard(path, opts, progress, sink, None)
}

/// [`capture_rows`], gathering the frames of everyone else on the channel into `others` as they
/// go by (a sniffer's capture: [`air::OthersAir`]).
pub fn capture_rows_heard(
    path: &Path,
    opts: &RowsOptions,
    progress: &mut dyn Progress,
    mut sink: impl FnMut(&RowMeta, &[f64]),
    mut others: Option<&mut air::OthersAir>,
) -> Result<RowsOutcome, Error> {
    let spec = opts.spec;
    let pick = pick_flow(path, &opts.filter, opts.keep_going, progress)?;
    let mut join = match &opts.kernel {
        Some(k) => Some(kernel_join(
            k,
            &opts.filter,
            opts.seq_offset,
            opts.keep_going,
            progress,
        )?),
        None => None,
    };
    let mut ex = RowExtractor::new(spec, opts.seq_offset)?;
    let off = opts.seq_offset;
    let read = read_records(path, opts.keep_going, progress, |r| {
        if !pick.filter.matches(r) {
            if let Some(o) = others.as_deref_mut() {
                o.push(r);
            }
            return;
        }
        let host = match join.as_mut() {
            Some(j) => j.lookup(r.payload_seq(off)),
            None => Some(r.host),
        };
        if let Some(o) = others.as_deref_mut() {
            o.flow_frame(r, host);
        }
        ex.push(r, host, &mut sink);
    })?;
    ex.finish(&mut sink);
    Ok(RowsOutcome {
        path: path.to_path_buf(),
        pick,
        read,
        packets: ex.packets_in,
        frames: ex.frames,
        rows: ex.rows_out,
        duplicates_dropped: ex.duplicates_dropped(),
        dedup_untracked: ex.dedup_untracked(),
        forced_closes: ex.forced_closes,
        ground_truth: ex.has_ground_truth(),
        join: join.zip(opts.kernel.clone()).map(|(j, k)| {
            (
                k,
                JoinStats {
                    matched: j.matched,
                    unmatched_truth: j.unmatched_truth,
                    unmatched_kernel: j.unmatched_kernel(),
                    entries: j.len(),
                },
            )
        }),
        m: spec.m,
    })
}

/// Send rate in a file name: the number before "mbps" (case-insensitive), e.g. `cbr_300mbps.pcap`.
pub fn rate_from_name(p: &Path) -> Option<f64> {
    let stem = p.file_name()?.to_str()?.to_ascii_lowercase();
    let i = stem.find("mbps")?;
    let head = &stem[..i];
    let start = head
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |j| j + 1);
    head[start..].parse().ok()
}

/// The receiver named in a capture's pcapng section comment (written by `simulate` and
/// `dataset build`), if any.
pub fn receiver_from_comment(path: &Path) -> Option<String> {
    let f = open_path(path).ok()?;
    for c in f.reader.section_comments() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&c) {
            if let Some(r) = v["receiver"].as_str().or_else(|| v["replay"]["receiver"].as_str()) {
                return Some(r.to_string());
            }
        }
    }
    None
}

/// One input of a training or evaluation run.
#[derive(Clone, Debug)]
pub struct Input {
    /// A capture (pcap/pcapng, optionally .gz/.xz) or a feature table (.parquet/.csv).
    pub path: PathBuf,
    /// The receiver it came through (manifest `receiver`, the capture's pcapng comment, or none).
    pub receiver: Option<String>,
    /// Kernel receive times to join (a `seq,host_ns` CSV or a receiver-side capture).
    pub kernel: Option<PathBuf>,
    /// A capture without A-MPDU ground truth is read too (the receiver's own capture, for
    /// label-free calibration); its rows' labels mean nothing (every packet its own frame).
    pub truth_optional: bool,
}

impl Input {
    /// A feature table rather than a capture (by extension).
    pub fn is_table(&self) -> bool {
        table::Format::from_path(&self.path).is_some()
    }
    /// The file name.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Rows of many inputs in one [`Dataset`] (group = input index), with each capture's outcome
/// (`None` for feature tables).
#[derive(Debug)]
pub struct Loaded {
    /// The rows.
    pub data: Dataset,
    /// Per input, in order.
    pub outcomes: Vec<Option<RowsOutcome>>,
}

/// Rows of all inputs (group = input index, rate from the file name). Inputs are read on up to
/// `threads` cores, each into its own block, and concatenated in input order (the result does not
/// depend on the thread count). The first failing input (in input order) is the error.
/// `progress` counts finished inputs.
pub fn load_dataset(
    inputs: &[Input],
    spec: &FeatureSpec,
    filter: &FlowFilter,
    keep_going: bool,
    threads: usize,
    progress: &mut dyn Progress,
) -> Result<Loaded, Error> {
    progress.start("reading captures", inputs.len() as u64);
    let mut parts: Vec<(usize, InputRows)> = Vec::with_capacity(inputs.len());
    crate::parallel::for_each(
        inputs.len(),
        threads,
        |g| load_input(&inputs[g], g as u32, spec, filter, keep_going),
        |g, part| {
            progress.inc();
            parts.push((g, part));
        },
    );
    progress.finish();
    if parts.len() != inputs.len() {
        return Err(Error::Worker);
    }
    parts.sort_by_key(|p| p.0);
    let mut data = Dataset::new(spec.width());
    let mut outcomes = Vec::with_capacity(parts.len());
    for (_, part) in parts {
        let (d, o) = part?;
        data.append(&d);
        outcomes.push(o);
    }
    Ok(Loaded { data, outcomes })
}

/// One input's rows and, for a capture, how reading it went.
type InputRows = Result<(Dataset, Option<RowsOutcome>), Error>;

/// One input's rows as group `g`.
fn load_input(input: &Input, g: u32, spec: &FeatureSpec, filter: &FlowFilter, keep_going: bool) -> InputRows {
    let mut data = Dataset::new(spec.width());
    if input.is_table() {
        table::read_rows(&input.path, spec, g, &mut data)?;
        return Ok((data, None));
    }
    let rate = rate_from_name(&input.path).map_or(f32::NAN, |r| r as f32);
    let opts = RowsOptions {
        spec: *spec,
        filter: *filter,
        seq_offset: 0,
        keep_going,
        kernel: input.kernel.clone(),
    };
    let out = capture_rows(&input.path, &opts, &mut NoProgress, |m, x| {
        data.push_at(m.host, x, m.first_of_frame, g, rate, m.level)
    })?;
    let out = out.check_with(!input.truth_optional)?;
    Ok((data, Some(out)))
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
