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
    run_receiver_with(sock, rx, duration, stop, None, on_report, |_| {})
}

/// [`run_receiver`], and with `cal` the receiver calibrates its model's operating point from its
/// own receive times while it runs (`recv --self-calibrate`): every data packet the receiver
/// accepts goes to the calibrator, and after each window it used the estimator takes the new
/// offset; `on_step` sees each such window. Refused datagrams never reach the calibrator.
pub fn run_receiver_with(
    sock: &UdpSocket,
    rx: &mut Receiver,
    duration: Duration,
    stop: &AtomicBool,
    mut cal: Option<&mut OnlineCalibrator>,
    mut on_report: impl FnMut(&AggReport),
    mut on_step: impl FnMut(&Step),
) -> Result<ReceiverStats, IoError> {
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
            if n == super::wire::FEEDBACK_LEN {
                if let Some(r) = rx.last_report() {
                    on_report(r);
                }
            }
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
    mut on_tick: impl FnMut(Ts, &Sender),
) -> Result<SenderStats, IoError> {
    sock.set_nonblocking(true).map_err(io("sender non-blocking"))?;
    let deadline = Instant::now() + duration;
    let mut buf = vec![0u8; 2048];
    let mut next_tick = Instant::now();
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
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
    /// Datagrams from a second client address while the first was still being served (dropped:
    /// replies go to one client).
    pub foreign: u64,
}

/// A UDP relay that impairs a path, for live runs between `send` and `recv`: datagrams from the
/// client (the first address that sends to `listen`) go through `fwd` and out of `upstream`
/// (connected to the far end); what comes back on `upstream` goes through `rev` to the client.
/// Runs until `duration` passes or `stop` is set, then drops what is still held.
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
    let deadline = Instant::now() + duration;
    let mut buf = vec![0u8; 65_536];
    let mut client: Option<SocketAddr> = None;
    let mut foreign = 0u64;
    let gone = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::ConnectionRefused
        )
    };
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        loop {
            match listen.recv_from(&mut buf) {
                Ok((n, from)) => {
                    if *client.get_or_insert(from) == from {
                        fwd.push(realtime(), n + 28, buf[..n].to_vec());
                    } else {
                        foreign += 1;
                    }
                }
                Err(e) if gone(&e) => break,
                Err(e) => return Err(io("relay: receiving from the client")(e)),
            }
        }
        loop {
            match upstream.recv(&mut buf) {
                Ok(n) => rev.push(realtime(), n + 28, buf[..n].to_vec()),
                Err(e) if gone(&e) => break,
                Err(e) => return Err(io("relay: receiving from upstream")(e)),
            }
        }
        let now = realtime();
        while let Some(d) = fwd.poll(now) {
            match upstream.send(&d) {
                Ok(_) => {}
                Err(e) if gone(&e) => {}
                Err(e) => return Err(io("relay: sending upstream")(e)),
            }
        }
        while let Some(d) = rev.poll(now) {
            if let Some(c) = client {
                match listen.send_to(&d, c) {
                    Ok(_) => {}
                    Err(e) if gone(&e) => {}
                    Err(e) => return Err(io(format!("relay: sending to {c}"))(e)),
                }
            }
        }
        // Sleep until the next arrival when it is far (at most 1 ms: datagrams keep coming).
        let next = [fwd.next_due(), rev.next_due()].into_iter().flatten().min();
        let wait = next.map_or(Duration::from_millis(1), |t| t.saturating_since(realtime()));
        if wait > Duration::from_micros(100) {
            std::thread::sleep(wait.min(Duration::from_millis(1)));
        }
    }
    Ok(RelayStats {
        forward: fwd.stats(),
        reverse: rev.stats(),
        foreign,
    })
}
