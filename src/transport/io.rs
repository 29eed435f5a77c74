//! Socket drivers for [`Sender`] and [`Receiver`]: UDP, the receiver reading kernel receive
//! timestamps (`SO_TIMESTAMPNS` through `recvmsg`, in [`crate::rxstamp`]). Both sides use `CLOCK_REALTIME` (the clock
//! the kernel stamps with), so one-way delays on one host are exact.
//!
//! This module reads the real clock (allowed here, in `wlan::live` and the CLI only). Loops run
//! until `stop` is set or their deadline passes and return their counters; socket errors are
//! returned with the step that failed.

#![allow(clippy::disallowed_methods)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Receiver, ReceiverStats, Sender, SenderStats};
use crate::impair::{ImpairStats, Impairment};
use crate::runtime::AggReport;
use crate::rxstamp;
use crate::selfcal::{OnlineCalibrator, Step};
use crate::time::Ts;

mod survey;
pub use survey::{parse_survey, Reading, SurveyCounts, SurveyFeed, SurveyFile, SURVEY_EVERY, SURVEY_STALE};

/// An IO step failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct IoError {
    /// Which step.
    pub what: String,
    /// The error.
    pub source: std::io::Error,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> IoError {
    let what = what.into();
    move |source| IoError { what, source }
}

/// `CLOCK_REALTIME` now.
pub fn realtime() -> Ts {
    Ts(SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64)
}

/// 32 bytes of OS entropy (`getrandom`) to seed a [`Sender`]'s or [`Receiver`]'s nonces.
pub fn entropy() -> Result<[u8; 32], IoError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| IoError {
        what: "reading OS entropy".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(b)
}

/// A UDP socket with kernel receive timestamps turned on and a large receive buffer
/// ([`crate::rxstamp`], the one receive edge).
pub fn timestamped_socket(bind: SocketAddr) -> Result<UdpSocket, IoError> {
    timestamped_socket_with(bind, false)
}

/// [`timestamped_socket`], and with `tos` each datagram's TOS byte too: where the testbed's AP
/// marks A-MPDUs, [`run_receiver_with`] hands the marks to the receiver as its frames (the MAC
/// timestamps' place: the estimator's upper bound).
pub fn timestamped_socket_with(bind: SocketAddr, tos: bool) -> Result<UdpSocket, IoError> {
    let o = rxstamp::Options {
        tos,
        ..rxstamp::Options::default()
    };
    rxstamp::bind(bind, &o).map_err(|e| IoError {
        what: format!("{} on {bind}", e.what),
        source: e.source,
    })
}

impl From<rxstamp::Error> for IoError {
    fn from(e: rxstamp::Error) -> Self {
        IoError {
            what: e.what.into(),
            source: e.source,
        }
    }
}

/// Run a receiver on `sock` until `stop` or `duration`: hellos and data in, hello-acks and
/// feedback back to the session's peer only. `on_report` sees every report sent.
pub fn run_receiver(
    sock: &UdpSocket,
    rx: &mut Receiver,
    duration: Duration,
    stop: &AtomicBool,
    on_report: impl FnMut(&AggReport),
) -> Result<ReceiverStats, IoError> {
    let mut hooks = ReceiverHooks::new();
    hooks.on_report = Box::new(on_report);
    run_receiver_with(sock, rx, duration, stop, hooks)
}

/// What a receiver's driver does besides receiving ([`run_receiver_with`]); every part is
/// optional ([`ReceiverHooks::new`] has none).
pub struct ReceiverHooks<'a> {
    /// Calibrate the model's operating point from the receiver's own receive times while it
    /// runs (`recv --self-calibrate`).
    pub cal: Option<&'a mut OnlineCalibrator>,
    /// Sees every report sent.
    pub on_report: Box<dyn FnMut(&AggReport) + 'a>,
    /// Sees every self-calibration window used.
    pub on_step: Box<dyn FnMut(&Step) + 'a>,
    /// Runs after every datagram and every read timeout (e.g. drains a reliable stream);
    /// `false` ends the run.
    pub each: Box<dyn FnMut(&mut Receiver) -> bool + 'a>,
    /// A channel survey the estimator's share of others follows (`recv --survey-file`).
    pub survey: Option<&'a mut SurveyFeed>,
}

/// What a receiver's counters say its user should know, a sentence each (none: nothing).
pub fn receiver_warnings(stats: &ReceiverStats) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(v) = stats.other_version_seen {
        w.push(format!(
            "{} datagrams of protocol version {v}: the sender runs another aggrate (this one speaks version {}); run the same version at both ends",
            stats.other_version,
            crate::transport::wire::VERSION
        ));
    }
    if stats.clock_skewed > 0 {
        w.push(format!(
            "{} packets carried a send time more than an hour from their receive time: the sender's and this \
             host's clocks disagree, so the reports carried no one-way delay for them (sync the clocks, e.g. NTP)",
            stats.clock_skewed
        ));
    }
    if stats.replayed > 0 || stats.hellos_limited > 0 || stats.hellos_refused > 0 {
        w.push(format!(
            "refused {} replayed data datagrams, {} hellos over the rate, {} hellos while another address's handshake was pending",
            stats.replayed, stats.hellos_limited, stats.hellos_refused
        ));
    }
    if stats.frames_refused > 0 {
        w.push(format!(
            "{} verified datagrams carried reliable frames this receiver refused: does the sender use another --size? \
             (give recv --size the sender's)",
            stats.frames_refused
        ));
    }
    w
}

impl Default for ReceiverHooks<'_> {
    fn default() -> Self {
        ReceiverHooks {
            cal: None,
            on_report: Box::new(|_| {}),
            on_step: Box::new(|_| {}),
            each: Box::new(|_| true),
            survey: None,
        }
    }
}

impl ReceiverHooks<'_> {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }
}

/// [`run_receiver`] with [`ReceiverHooks`]. With `hooks.cal` the receiver calibrates its model's
/// operating point from its own receive times while it runs (`recv --self-calibrate`): every
/// data packet the receiver accepts goes to the calibrator, and after each window it used the
/// estimator takes the new offset; `hooks.on_step` sees each such window. Refused datagrams never
/// reach the calibrator. The run ends at `stop`, after `duration`, or when `hooks.each` says so.
pub fn run_receiver_with(
    sock: &UdpSocket,
    rx: &mut Receiver,
    duration: Duration,
    stop: &AtomicBool,
    hooks: ReceiverHooks<'_>,
) -> Result<ReceiverStats, IoError> {
    let ReceiverHooks {
        mut cal,
        mut on_report,
        mut on_step,
        mut each,
        mut survey,
    } = hooks;
    sock.set_read_timeout(Some(Duration::from_millis(5)))
        .map_err(io("receiver timeout"))?;
    let deadline = Instant::now() + duration;
    let mut buf = vec![0u8; 65_536];
    let mut edge = rxstamp::StampedReceiver::new(sock);
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Some(d) = edge.recv(&mut buf)? {
            // A datagram the kernel did not stamp takes the clock's time.
            let (n, from, host) = (d.len, d.from, d.kernel.unwrap_or_else(realtime));
            // Refused datagrams are counted in the receiver's stats.
            // An AP's A-MPDU mark in the DSCP bits, on a socket that asked for it, stands where
            // a MAC timestamp would (a new mark: a new frame).
            let mark = d.tos.map(|t| crate::time::Tsft(u64::from(t >> 2)));
            if let (_, Some(step)) = rx.handle_calibrated(host, from, &buf[..n], mark, cal.as_deref_mut()) {
                on_step(step);
            }
        }
        while let Some((n, to)) = rx.poll_transmit(realtime()) {
            let _ = sock.send_to(&rx.buffer()[..n], to);
            if rx.sent_report() {
                if let Some(r) = rx.last_report() {
                    on_report(r);
                }
            }
        }
        if let Some(s) = survey.as_deref_mut() {
            s.poll(rx);
        }
        if !each(rx) {
            break;
        }
    }
    Ok(rx.stats())
}

/// Run a sender on `sock` to `to[i]` (station i) until `stop` or `duration`; feedback is read
/// from the same socket and matched to stations by source address (hello-acks too). `on_tick` is called about
/// every 100 ms with the sender (rates, counters).
pub fn run_sender(
    sock: &UdpSocket,
    to: &[SocketAddr],
    tx: &mut Sender,
    duration: Duration,
    stop: &AtomicBool,
    on_tick: impl FnMut(Ts, &Sender),
) -> Result<SenderStats, IoError> {
    run_sender_with(sock, to, tx, duration, stop, on_tick, |_| true)
}

/// [`run_sender`], with `each` run on every turn of the loop before the sender sends (e.g. to
/// offer a reliable stream more bytes); `false` ends the run.
pub fn run_sender_with(
    sock: &UdpSocket,
    to: &[SocketAddr],
    tx: &mut Sender,
    duration: Duration,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(Ts, &Sender),
    mut each: impl FnMut(&mut Sender) -> bool,
) -> Result<SenderStats, IoError> {
    sock.set_nonblocking(true).map_err(io("sender non-blocking"))?;
    let deadline = Instant::now() + duration;
    let mut buf = vec![0u8; 2048];
    let mut next_tick = Instant::now();
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if !each(tx) {
            break;
        }
        let now = realtime();
        tx.handle_timeout(now);
        while let Some(t) = tx.poll_transmit(now) {
            if let Some(addr) = to.get(t.station) {
                match sock.send_to(&tx.buffer()[..t.len], addr) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                    Err(e) => return Err(io(format!("sending to {addr}"))(e)),
                }
            }
        }
        let mut heard = false;
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    // Not from a station we send to: refused and counted as dropped feedback.
                    let i = to.iter().position(|a| *a == from).unwrap_or(usize::MAX);
                    let _ = tx.handle_datagram(realtime(), i, &buf[..n]);
                    heard = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                Err(e) => return Err(io("receiving feedback")(e)),
            }
        }
        // Every 100 ms, and after feedback (so a caller that logs each step of the loop sees
        // every one, whatever the report interval).
        if Instant::now() >= next_tick {
            on_tick(realtime(), tx);
            next_tick += Duration::from_millis(100);
        } else if heard {
            on_tick(realtime(), tx);
        }
        // Sleep until the next send when it is far, spin when it is near.
        let wait = tx.poll_timeout().saturating_since(realtime());
        if wait > Duration::from_micros(300) {
            std::thread::sleep((wait - Duration::from_micros(200)).min(Duration::from_millis(2)));
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(tx.stats())
}

/// A packet socket on `iface` for [`run_watcher`] (kernel receive timestamps; root or
/// CAP_NET_RAW), the interface named in any error.
pub fn watch_socket(iface: &str) -> Result<rxstamp::PacketSocket, IoError> {
    // 32 MB, past rmem_max when root: at 600 Mb/s that is ≈ 0.3 s of packets, so a watcher
    // held off its core for a while loses none.
    let o = rxstamp::Options {
        rcvbuf: 32 << 20,
        force: true,
        read_timeout: Some(Duration::from_millis(20)),
        ..rxstamp::Options::default()
    };
    rxstamp::PacketSocket::open(iface, &o).map_err(|e| IoError {
        what: format!("{} {iface}", e.what),
        source: e.source,
    })
}

/// Run a watcher on `sock` ([`watch_socket`]) until `stop` or `duration`: every packet the
/// interface receives goes to `w`; `on_report` sees each finished report (intervals also close
/// while the link is quiet). Returns the watcher's counters.
pub fn run_watcher(
    sock: &mut rxstamp::PacketSocket,
    w: &mut aggrate_core::watch::Watcher,
    duration: Duration,
    stop: &AtomicBool,
    mut on_report: impl FnMut(&AggReport),
) -> Result<aggrate_core::watch::WatchStats, IoError> {
    let deadline = Instant::now() + duration;
    // A packet socket may hand up a GRO-merged packet of up to 64 KB; only the IP and UDP
    // headers and an aggrate data header are read.
    let mut buf = vec![0u8; 65_536];
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Some(p) = sock.recv(&mut buf)? {
            let n = p.len.min(buf.len());
            w.handle(p.kernel, p.outgoing, &buf[..n]);
            if let Some(d) = p.dropped {
                w.set_socket_drops(u64::from(d));
            }
        }
        while let Some(r) = w.poll_report(realtime()) {
            on_report(&r);
        }
    }
    Ok(w.stats())
}

/// What [`run_relay`] did: each direction's impairment counters.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct RelayStats {
    /// Client → upstream.
    pub forward: ImpairStats,
    /// Upstream → client.
    pub reverse: ImpairStats,
    /// Datagrams from another address than the client's (dropped: the first address that sends
    /// is the client for the whole run).
    pub foreign: u64,
    /// Datagrams the impairment delivered that the socket did not send (a full buffer, an ICMP
    /// error, no client yet for the way back).
    pub send_failed: u64,
    /// Datagrams still held when the run ended (each direction's).
    pub held_at_end: [u64; 2],
}

/// Datagrams each direction receives per turn of the relay's loop at most (a flood in one
/// direction does not starve the other, the deadline or `stop`).
const RELAY_BATCH: usize = 64;

/// A UDP relay that impairs a path, for live runs between `send` and `recv`: datagrams from the
/// client (the first address that sends to `listen`, for the whole run) go through `fwd` and
/// out of `upstream` (connected to the far end); what comes back on `upstream` goes through
/// `rev` to the client. Times are the monotonic clock's (a step of the wall clock moves
/// nothing). Per-datagram socket errors are counted, not fatal. Runs until `duration` passes or
/// `stop` is set, then drops what is still held (counted).
pub fn run_relay(
    listen: &UdpSocket,
    upstream: &UdpSocket,
    fwd: &mut Impairment<Vec<u8>>,
    rev: &mut Impairment<Vec<u8>>,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<RelayStats, IoError> {
    listen
        .set_nonblocking(true)
        .map_err(io("relay: listen socket non-blocking"))?;
    upstream
        .set_nonblocking(true)
        .map_err(io("relay: upstream socket non-blocking"))?;
    let t0 = Instant::now();
    let now = || Ts(t0.elapsed().as_nanos() as u64);
    let deadline = t0 + duration;
    // IP + UDP header bytes per datagram, for the rate limit (IP bytes).
    let header = if upstream.peer_addr().is_ok_and(|a| a.is_ipv6()) {
        48
    } else {
        28
    };
    let mut buf = vec![0u8; 65_536];
    let mut client: Option<SocketAddr> = None;
    let (mut foreign, mut send_failed) = (0u64, 0u64);
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        for _ in 0..RELAY_BATCH {
            match listen.recv_from(&mut buf) {
                Ok((n, from)) => {
                    if *client.get_or_insert(from) == from {
                        fwd.push(now(), n + header, buf[..n].to_vec());
                    } else {
                        foreign += 1;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // An ICMP error for an earlier send: that datagram is gone, the socket is fine.
                Err(_) => {}
            }
        }
        for _ in 0..RELAY_BATCH {
            match upstream.recv(&mut buf) {
                Ok(n) => rev.push(now(), n + header, buf[..n].to_vec()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {}
            }
        }
        let t = now();
        while let Some(d) = fwd.poll(t) {
            send_failed += upstream.send(&d).is_err() as u64;
        }
        while let Some(d) = rev.poll(t) {
            send_failed += client.is_none_or(|c| listen.send_to(&d, c).is_err()) as u64;
        }
        // Sleep until the next release when it is more than the timer's slack away (at most
        // 1 ms: datagrams keep coming); spin only for the last few tens of µs.
        let next = [fwd.next_due(), rev.next_due()].into_iter().flatten().min();
        let wait = next.map_or(Duration::from_millis(1), |d| d.saturating_since(now()));
        if wait > Duration::from_micros(60) {
            std::thread::sleep((wait - Duration::from_micros(50)).min(Duration::from_millis(1)));
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(RelayStats {
        forward: fwd.stats(),
        reverse: rev.stats(),
        foreign,
        send_failed,
        held_at_end: [fwd.in_flight() as u64, rev.in_flight() as u64],
    })
}
