//! Real-time edge of the emulator. Today: [`replay_through_kernel`], a noise source nobody here
//! wrote — it replays MAC delivery times through the real kernel (UDP over loopback) and reads
//! the receive timestamps the kernel stamps (`SO_TIMESTAMPNS`).
//!
//! This module reads the real clock (allowed here and in `transport::io` and the CLI only). The
//! sender sleeps until shortly before each A-MPDU's MAC time and spins the rest, then sends the
//! A-MPDU's datagrams back to back; the receiver thread records `(seq, kernel ns)`. The kernel
//! times are mapped back onto the emulator clock by the offset between the schedule's start in
//! virtual time and in `CLOCK_REALTIME`. What this measures is the host's real receive path plus
//! the sender's scheduling error, on whatever machine runs it: not deterministic by nature.

#![allow(clippy::disallowed_methods)]

use std::io::IoSliceMut;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};

use crate::time::Ts;

/// Result of a replay.
#[derive(Clone, Debug)]
pub struct Replayed {
    /// Kernel receive time per input packet (`None`: lost in the kernel).
    pub host: Vec<Option<Ts>>,
    /// Packets the kernel dropped (receive buffer overflow).
    pub lost: u64,
    /// Largest lateness of the sender against its schedule.
    pub max_send_late: Duration,
}

/// Errors of the replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Socket setup or IO failed.
    #[error("loopback replay: {what}: {source}")]
    Io {
        /// Which step.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The schedule is too long to replay in real time.
    #[error("loopback replay of {0:.1} s refused: at most 120 s of real time")]
    TooLong(f64),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ReplayError {
    move |source| ReplayError::Io { what, source }
}

/// Replay packets whose MPDUs reach the station at `mac[i]` (non-decreasing) through the kernel
/// over loopback. Packets with equal MAC time (one A-MPDU) are sent back to back.
pub fn replay_through_kernel(mac: &[Ts]) -> Result<Replayed, ReplayError> {
    let n = mac.len();
    if n == 0 {
        return Ok(Replayed {
            host: Vec::new(),
            lost: 0,
            max_send_late: Duration::ZERO,
        });
    }
    let span = mac[n - 1].saturating_since(mac[0]).as_secs_f64();
    if span > 120.0 {
        return Err(ReplayError::TooLong(span));
    }
    let rx = UdpSocket::bind("127.0.0.1:0").map_err(io("binding the receiver"))?;
    setsockopt(&rx, sockopt::ReceiveTimestampns, &true).map_err(|e| io("SO_TIMESTAMPNS")(e.into()))?;
    let _ = setsockopt(&rx, sockopt::RcvBuf, &(8 << 20));
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(io("receiver timeout"))?;
    let addr = rx.local_addr().map_err(io("receiver address"))?;
    let tx = UdpSocket::bind("127.0.0.1:0").map_err(io("binding the sender"))?;
    tx.connect(addr).map_err(io("connecting"))?;

    let done = Arc::new(AtomicBool::new(false));
    let done_rx = done.clone();
    let receiver = std::thread::spawn(move || -> Vec<(u32, u64)> {
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
        loop {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match recvmsg::<SockaddrStorage>(rx.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()) {
                Ok(msg) => {
                    let mut ts = None;
                    if let Ok(cm) = msg.cmsgs() {
                        for c in cm {
                            if let ControlMessageOwned::ScmTimestampns(t) = c {
                                ts = Some(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64);
                            }
                        }
                    }
                    let len = msg.bytes;
                    if let (Some(t), true) = (ts, len >= 4) {
                        got.push((u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]), t));
                    }
                }
                Err(_) => {
                    if done_rx.load(Ordering::Acquire) {
                        break;
                    }
                }
            }
        }
        got
    });

    // Schedule: virtual mac[0] ↔ wall start (+ 20 ms to let the receiver settle).
    let lead = Duration::from_millis(20);
    let start = Instant::now() + lead;
    let wall0 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default() + lead;
    let mut max_late = Duration::ZERO;
    let mut i = 0;
    while i < n {
        let j = (i..n).find(|&j| mac[j] != mac[i]).unwrap_or(n);
        let due = start + mac[i].saturating_since(mac[0]);
        loop {
            let now = Instant::now();
            if now >= due {
                max_late = max_late.max(now - due);
                break;
            }
            let left = due - now;
            if left > Duration::from_micros(200) {
                std::thread::sleep(left - Duration::from_micros(150));
            } else {
                std::hint::spin_loop();
            }
        }
        for k in i..j {
            let _ = tx.send(&(k as u32).to_be_bytes());
        }
        i = j;
    }
    std::thread::sleep(Duration::from_millis(50));
    done.store(true, Ordering::Release);
    let got = receiver.join().unwrap_or_default();
    let mut host = vec![None; n];
    let base = wall0.as_nanos() as u64;
    for (k, t) in got {
        if let Some(h) = host.get_mut(k as usize) {
            *h = Some(Ts(mac[0].as_nanos() + t.saturating_sub(base)));
        }
    }
    let lost = host.iter().filter(|h| h.is_none()).count() as u64;
    Ok(Replayed {
        host,
        lost,
        max_send_late: max_late,
    })
}
