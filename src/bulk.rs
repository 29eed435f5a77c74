//! Bulk transfer on the virtual clock: the reliability layer
//! ([`aggrate_core::transport::reliable`]) through an impaired path ([`crate::impair`]), for the
//! lab's table (200,000 B/s, 100 ms one way, 0 / 2 / 5 % loss) and its ablation.
//!
//! What a run counts, and how:
//! - The link carries datagrams: the transport's data header and tag
//!   ([`wire::DATA_HEADER_LEN`] bytes, tag included), then the reliable frame
//!   ([`reliable::DATA_HEADER_LEN`] + segment). Its rate limit counts datagram bytes (the UDP
//!   payload), as a shaper on the UDP payload would; acknowledgements go back on a path with the
//!   same delay, loss and reordering, but no rate limit.
//! - The sender paces datagrams at the link's rate (in the lab the rate is given; in the live
//!   transport the aggregation controller sets it). Repairs and parity take pacing slots, not
//!   extra ones.
//! - **Goodput**: file bytes ÷ the time from the first datagram sent to the last byte delivered
//!   in order at the receiver.
//! - **Overhead**: stream bytes sent (first copies, repairs and parity payloads) ÷ file bytes
//!   − 1 — what the lab's table counts as overhead: bytes sent again or in addition. **Wire
//!   overhead** counts every datagram byte (headers and tags too) and the acknowledgements.

pub mod file;

use std::time::Duration;

use aggrate_core::time::Ts;
use aggrate_core::transport::reliable::{self, BulkConfig, BulkReceiver, BulkSender};
use aggrate_core::transport::wire;
use serde::Serialize;

use crate::impair::{ImpairConfig, Impairment};

/// One lab run's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct LabSetting {
    /// Link rate, bytes per second of datagrams.
    pub rate_bytes_per_s: f64,
    /// One-way delay.
    pub one_way: Duration,
    /// Random loss, each direction.
    pub loss: f64,
    /// Share of datagrams held back by `reorder_delay` (each direction).
    pub reorder: f64,
    /// See `reorder`.
    pub reorder_delay: Duration,
    /// File bytes.
    pub file_bytes: usize,
    /// Datagram bytes (UDP payload) of a full segment.
    pub datagram: usize,
    /// The reliability settings (the segment follows from `datagram`).
    pub mechanisms: BulkConfig,
    /// Seed of the path.
    pub seed: u64,
}

impl LabSetting {
    /// The lab's link (200,000 B/s, 100 ms one way, 1 % of datagrams 10 ms late) with this
    /// loss, a file of `file_bytes`, and Ethernet-size datagrams (1,472 bytes).
    pub fn lab(loss: f64, file_bytes: usize, seed: u64) -> LabSetting {
        LabSetting {
            rate_bytes_per_s: 200_000.0,
            one_way: Duration::from_millis(100),
            loss,
            reorder: 0.01,
            reorder_delay: Duration::from_millis(10),
            file_bytes,
            datagram: 1472,
            mechanisms: BulkConfig::default(),
            seed,
        }
    }

    /// Bytes a datagram adds to a segment.
    pub fn per_datagram() -> usize {
        aggrate_core::transport::BULK_OVERHEAD
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LabRun {
    /// File bytes.
    pub file_bytes: usize,
    /// Whether the file arrived whole and equal (SHA-256 compared).
    pub exact: bool,
    /// Seconds from the first datagram to the last byte delivered.
    pub completion_s: f64,
    /// File bytes ÷ completion.
    pub goodput_bytes_per_s: f64,
    /// Stream bytes sent ÷ file bytes − 1.
    pub overhead: f64,
    /// All datagram bytes both ways ÷ file bytes − 1.
    pub wire_overhead: f64,
    /// Datagrams the sender sent.
    pub datagrams: u64,
    /// Segments repaired after a NACK, after a timeout; timer expiries.
    pub nack_repairs: u64,
    /// See `nack_repairs`.
    pub rto_repairs: u64,
    /// See `nack_repairs`.
    pub timeouts: u64,
    /// Parity frames sent, segments rebuilt from them.
    pub parity_frames: u64,
    /// See `parity_frames`.
    pub recovered: u64,
    /// Datagrams the path lost (forward).
    pub lost: u64,
    /// Segments that arrived more than once (needless repairs, and the path's duplicates).
    pub duplicates: u64,
    /// Acknowledgements sent.
    pub acks: u64,
}

/// A run failed to start (settings out of range).
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The reliability settings.
    #[error(transparent)]
    Reliable(#[from] reliable::FrameError),
    /// The path's settings.
    #[error(transparent)]
    Path(#[from] crate::impair::ImpairError),
    /// A run's worker stopped without a result.
    #[error("a lab run stopped without a result")]
    Lost,
    /// A datagram too small for its headers.
    #[error("a datagram of {0} bytes leaves no room for a segment after {1} header bytes")]
    Datagram(usize, usize),
}

/// Give up after this much virtual time beyond ten times the file's time on the link (a run
/// that does not finish reports `exact: false`).
pub const LAB_LIMIT: Duration = Duration::from_secs(3600);

/// The file a run sends: seeded bytes, made chunk by chunk as the sender takes them (a 1 GB
/// run holds no more than the windows), hashed as they are made.
struct Source {
    x: u64,
    left: usize,
    chunk: Vec<u8>,
    at: usize,
    hash: sha2::Sha256,
}

impl Source {
    fn new(n: usize, seed: u64) -> Source {
        Source {
            x: seed ^ 0x5DEE_CE66_D1CE_4E5B | 1,
            left: n,
            chunk: Vec::with_capacity(1 << 16),
            at: 0,
            hash: sha2::Sha256::default(),
        }
    }

    /// Offer what the sender takes; `true` once every byte was taken.
    fn feed(&mut self, tx: &mut BulkSender) -> bool {
        use sha2::Digest;
        loop {
            if self.at == self.chunk.len() {
                if self.left == 0 {
                    return true;
                }
                let n = self.left.min(1 << 16);
                self.chunk.clear();
                for _ in 0..n {
                    self.x ^= self.x << 13;
                    self.x ^= self.x >> 7;
                    self.x ^= self.x << 17;
                    self.chunk.push(self.x as u8);
                }
                self.hash.update(&self.chunk);
                self.left -= n;
                self.at = 0;
            }
            let took = tx.offer(&self.chunk[self.at..]);
            self.at += took;
            if took == 0 {
                return false;
            }
        }
    }
}

fn path(s: &LabSetting, rate: bool, seed: u64) -> Result<Impairment<Vec<u8>>, LabError> {
    Ok(Impairment::new(ImpairConfig {
        loss: s.loss,
        reorder: s.reorder,
        reorder_delay: s.reorder_delay,
        delay: s.one_way,
        rate_bps: rate.then_some(s.rate_bytes_per_s * 8.0),
        queue_bytes: 1 << 20,
        seed,
        ..ImpairConfig::default()
    })?)
}

/// One transfer on the virtual clock.
pub fn run(s: &LabSetting) -> Result<LabRun, LabError> {
    use sha2::{Digest, Sha256};
    let head = LabSetting::per_datagram();
    let segment = s
        .datagram
        .checked_sub(head)
        .filter(|&n| n > 0)
        .ok_or(LabError::Datagram(s.datagram, head))?;
    let cfg = BulkConfig {
        segment,
        ..s.mechanisms.clone()
    };
    let mut tx = BulkSender::new(cfg.clone())?;
    let mut rx = BulkReceiver::new(cfg)?;
    let mut fwd = path(s, true, s.seed)?;
    let mut back = path(s, false, s.seed ^ 0x9E37_79B9)?;
    let mut source = Source::new(s.file_bytes, s.seed);
    let mut all_offered = false;
    let mut hash = Sha256::new();
    let (mut got, mut buf) = (0usize, Vec::new());
    let (mut wire_bytes, mut datagrams, mut acks) = (0u64, 0u64, 0u64);
    let (mut now, mut slot) = (Ts::ZERO, Ts::ZERO);
    let limit = Ts::ZERO + LAB_LIMIT + Duration::from_secs_f64(10.0 * s.file_bytes as f64 / s.rate_bytes_per_s);
    let mut done = None;
    while now < limit {
        while let Some(f) = fwd.poll(now) {
            let _ = rx.handle_frame(now, &f[wire::DATA_HEADER_LEN..]);
        }
        while let Some(b) = rx.read() {
            hash.update(b);
            got += b.len();
        }
        if rx.is_done() && done.is_none() {
            done = Some(now);
        }
        while rx.poll_ack(now, &mut buf) {
            acks += 1;
            wire_bytes += (wire::DATA_HEADER_LEN + buf.len()) as u64;
            back.push(now, buf.len(), buf.clone());
        }
        while let Some(a) = back.poll(now) {
            let _ = tx.handle_ack(now, &a);
        }
        if done.is_some() && tx.is_done() {
            break;
        }
        tx.handle_timeout(now);
        if now >= slot {
            if !all_offered {
                all_offered = source.feed(&mut tx);
            }
            if all_offered {
                tx.finish();
            }
            let mut dgram = vec![0u8; wire::DATA_HEADER_LEN];
            if tx.poll_frame(now, &mut buf).is_some() {
                dgram.extend_from_slice(&buf);
                // The next slot when the link has carried this one.
                let secs = dgram.len() as f64 / s.rate_bytes_per_s;
                slot = now + Duration::from_secs_f64(secs);
                wire_bytes += dgram.len() as u64;
                datagrams += 1;
                fwd.push(now, dgram.len(), dgram);
            } else {
                // Nothing to send: look again when something changes (below), or a full
                // datagram's time from now.
                slot = now + Duration::from_secs_f64(s.datagram as f64 / s.rate_bytes_per_s);
            }
        }
        let next = [
            Some(slot),
            fwd.next_due(),
            back.next_due(),
            tx.poll_timeout(),
            rx.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(limit);
        now = next.max(now + Duration::from_nanos(1));
    }
    let st = tx.stats();
    let rs = rx.stats();
    let completion_s = done.map_or(f64::INFINITY, |t| t.as_nanos() as f64 * 1e-9);
    let n = s.file_bytes.max(1) as f64;
    Ok(LabRun {
        file_bytes: s.file_bytes,
        exact: done.is_some() && got == s.file_bytes && hash.finalize()[..] == source.hash.finalize()[..],
        completion_s,
        goodput_bytes_per_s: s.file_bytes as f64 / completion_s,
        overhead: (st.new_bytes + st.repair_bytes + st.parity_bytes) as f64 / n - 1.0,
        wire_overhead: wire_bytes as f64 / n - 1.0,
        datagrams,
        nack_repairs: st.nack_repairs,
        rto_repairs: st.rto_repairs,
        timeouts: st.timeouts,
        parity_frames: st.parity_frames,
        recovered: rs.recovered,
        lost: fwd.stats().lost,
        duplicates: rs.duplicates,
        acks,
    })
}

/// A variant of the mechanisms, for the ablation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Variant {
    /// Everything on.
    All,
    /// No receiver NACKs (repairs by the timer alone).
    NoNack,
    /// No SACK ranges.
    NoSack,
    /// No tail parity.
    NoFec,
}

impl Variant {
    /// Every variant, the full one first.
    pub const ALL: [Variant; 4] = [Variant::All, Variant::NoNack, Variant::NoSack, Variant::NoFec];

    /// The mechanisms with this one off.
    pub fn apply(self, c: BulkConfig) -> BulkConfig {
        match self {
            Variant::All => c,
            Variant::NoNack => BulkConfig { nack: false, ..c },
            Variant::NoSack => BulkConfig { sack: false, ..c },
            Variant::NoFec => BulkConfig { fec: false, ..c },
        }
    }

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::All => "all",
            Variant::NoNack => "no NACK",
            Variant::NoSack => "no SACK",
            Variant::NoFec => "no parity",
        }
    }
}

/// One row of the lab's table: the mean over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct LabRow {
    /// Mechanisms.
    pub variant: Variant,
    /// Loss each way.
    pub loss: f64,
    /// Datagram bytes.
    pub datagram: usize,
    /// Runs (seeds) averaged.
    pub seeds: u32,
    /// The lowest goodput of them.
    pub goodput_min: f64,
    /// The highest overhead of them.
    pub overhead_max: f64,
    /// Means of the runs (counters rounded; `exact` only if every run was).
    #[serde(flatten)]
    pub run: LabRun,
}

fn mean(runs: &[LabRun]) -> LabRun {
    let n = runs.len().max(1) as f64;
    let f = |g: fn(&LabRun) -> f64| runs.iter().map(g).sum::<f64>() / n;
    let c = |g: fn(&LabRun) -> u64| (runs.iter().map(g).sum::<u64>() as f64 / n).round() as u64;
    LabRun {
        file_bytes: runs.first().map_or(0, |r| r.file_bytes),
        exact: runs.iter().all(|r| r.exact),
        completion_s: f(|r| r.completion_s),
        goodput_bytes_per_s: f(|r| r.goodput_bytes_per_s),
        overhead: f(|r| r.overhead),
        wire_overhead: f(|r| r.wire_overhead),
        datagrams: c(|r| r.datagrams),
        nack_repairs: c(|r| r.nack_repairs),
        rto_repairs: c(|r| r.rto_repairs),
        timeouts: c(|r| r.timeouts),
        parity_frames: c(|r| r.parity_frames),
        recovered: c(|r| r.recovered),
        lost: c(|r| r.lost),
        duplicates: c(|r| r.duplicates),
        acks: c(|r| r.acks),
    }
}

/// The lab's table: every loss × file size × variant at one datagram size, each the mean of
/// `seeds` runs (seeds `seed ..`; runs in parallel).
/// `link`: datagram bytes and the link's rate (B/s).
pub fn table(
    losses: &[f64],
    files: &[usize],
    variants: &[Variant],
    (datagram, rate): (usize, f64),
    seed: u64,
    seeds: u32,
) -> Result<Vec<LabRow>, LabError> {
    let seeds = seeds.max(1);
    let mut cases = Vec::new();
    for &variant in variants {
        for &file in files {
            for &loss in losses {
                for k in 0..seeds as u64 {
                    cases.push((variant, file, loss, seed + k));
                }
            }
        }
    }
    let mut runs: Vec<Option<Result<LabRun, LabError>>> = (0..cases.len()).map(|_| None).collect();
    crate::parallel::for_each(
        cases.len(),
        crate::parallel::all_cores(),
        |i| {
            let (variant, file, loss, seed) = cases[i];
            let mut s = LabSetting::lab(loss, file, seed);
            s.datagram = datagram;
            s.rate_bytes_per_s = rate;
            s.mechanisms = variant.apply(s.mechanisms);
            run(&s)
        },
        |i, r| runs[i] = Some(r),
    );
    let runs: Vec<LabRun> = runs
        .into_iter()
        .map(|r| r.unwrap_or(Err(LabError::Lost)))
        .collect::<Result<_, _>>()?;
    Ok(cases
        .chunks(seeds as usize)
        .zip(runs.chunks(seeds as usize))
        .map(|(c, r)| LabRow {
            variant: c[0].0,
            loss: c[0].2,
            datagram,
            seeds,
            goodput_min: r.iter().map(|x| x.goodput_bytes_per_s).fold(f64::INFINITY, f64::min),
            overhead_max: r.iter().map(|x| x.overhead).fold(f64::NEG_INFINITY, f64::max),
            run: mean(r),
        })
        .collect())
}
