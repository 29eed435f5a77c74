//! The loss-based baseline of the virtual loop: a Cubic window per station (RFC 8312 growth
//! without the TCP-friendly region, β = 0.7), acknowledged per packet after the feedback delay,
//! paced at twice the window rate. It is a [`Controller`] like the aggregation target's
//! [`AirtimeSplit`](crate::control::AirtimeSplit); what differs is only what it reacts to (a
//! window of unacknowledged packets and losses, not reports). Its acknowledgements are events,
//! not datagrams: it has no wire format.

use std::collections::VecDeque;
use std::time::Duration;

use crate::control::{Controller, Pacer, Rate};
use crate::runtime::AggReport;
use crate::time::Ts;
use crate::wlan::Packet;

/// Cubic window (packets), RFC 8312 without the TCP-friendly region.
#[derive(Clone, Debug)]
struct Cubic {
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    epoch: Option<Ts>,
    recovery_until: Ts,
}

impl Cubic {
    const C: f64 = 0.4;
    const BETA: f64 = 0.7;

    fn new() -> Self {
        Cubic {
            cwnd: 10.0,
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            epoch: None,
            recovery_until: Ts::ZERO,
        }
    }

    fn on_ack(&mut self, now: Ts) {
        if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
            return;
        }
        let epoch = *self.epoch.get_or_insert(now);
        let t = now.saturating_since(epoch).as_secs_f64();
        let k = (self.w_max * (1.0 - Self::BETA) / Self::C).cbrt();
        let target = Self::C * (t - k).powi(3) + self.w_max;
        if target > self.cwnd {
            self.cwnd += (target - self.cwnd) / self.cwnd;
        } else {
            self.cwnd += 0.01 / self.cwnd;
        }
    }

    /// A loss detected at `now`; `rtt` bounds one reduction per round trip.
    fn on_loss(&mut self, now: Ts, rtt: Duration) {
        if now < self.recovery_until {
            return;
        }
        self.w_max = self.cwnd;
        self.cwnd = (self.cwnd * Self::BETA).max(2.0);
        self.ssthresh = self.cwnd;
        self.epoch = None;
        self.recovery_until = now + rtt;
    }
}

/// The Cubic windows as a [`Controller`]: a window per station, acknowledged per packet,
/// paced at twice the window rate (bursts without overrunning the clock).
struct CubicController {
    windows: Vec<Cubic>,
    rtt: Duration,
    packet_len: u16,
}

impl Controller for CubicController {
    fn on_reports(&mut self, _: Ts, _: &[AggReport]) {}
    fn on_silence(&mut self, _: Ts, _: Duration) {}
    fn on_ack(&mut self, now: Ts, sta: usize, lost: bool) {
        if lost {
            self.windows[sta].on_loss(now, self.rtt);
        } else {
            self.windows[sta].on_ack(now);
        }
    }
    fn wants_acks(&self) -> bool {
        true
    }
    fn may_send(&self, sta: usize, inflight: u64) -> bool {
        (inflight as f64) < self.windows[sta].cwnd
    }
    fn rate(&self, sta: usize) -> Rate {
        Rate {
            mbps: self.windows[sta].cwnd * self.packet_len as f64 * 8.0 / self.rtt.as_secs_f64() / 1e6,
        }
    }
    fn pacing_rate(&self, sta: usize) -> Rate {
        Rate {
            mbps: (self.rate(sta).mbps * 2.0).max(1.0),
        }
    }
}

/// The baseline sender: its controller and the transport's [`Pacer`] (pacing clock and packets
/// in flight per station, as the real [`Sender`](crate::transport::Sender) paces), the packets
/// sent, and the acknowledgements on their way back.
pub(super) struct Baseline {
    ctl: CubicController,
    pacer: Pacer,
    packet_len: u16,
    /// Packets sent per station (the last sequence number).
    seq: Vec<u64>,
    /// Acknowledgements in flight: (arrival at the sender, station, the receiver saw a gap).
    acks: VecDeque<(Ts, usize, bool)>,
}

impl Baseline {
    /// `n` stations, round trip `rtt` (the window's rate), packets of `packet_len` bytes.
    pub(super) fn new(n: usize, rtt: Duration, packet_len: u16) -> Self {
        Baseline {
            ctl: CubicController {
                windows: vec![Cubic::new(); n],
                rtt,
                packet_len,
            },
            // A window-blocked station whose turn has passed sends as soon as it may, and paces
            // from then: no credit for the time its window held it.
            pacer: Pacer::new(n, Ts::ZERO, Duration::ZERO),
            packet_len,
            seq: vec![0; n],
            acks: VecDeque::new(),
        }
    }

    /// The next station whose window lets it send, and when (never before `clock`).
    pub(super) fn next_send(&self, clock: Ts) -> Option<(Ts, usize)> {
        self.pacer.next_due(clock, &self.ctl, |_| true)
    }

    /// Station `sta` sends its next packet at `now`.
    pub(super) fn send(&mut self, now: Ts, sta: usize) -> Packet {
        self.seq[sta] += 1;
        self.pacer
            .sent(sta, now, self.ctl.pacing_rate(sta), self.packet_len as u32);
        Packet {
            seq: self.seq[sta] as u32,
            len: self.packet_len,
            sent: now,
        }
    }

    /// Station `sta`'s receiver took a packet at `now` (after a gap: `lost`); the
    /// acknowledgement arrives `delay` later.
    pub(super) fn received(&mut self, now: Ts, sta: usize, lost: bool, delay: Duration) {
        self.acks.push_back((now + delay, sta, lost));
    }

    /// When the next acknowledgement arrives.
    pub(super) fn next_ack(&self) -> Option<Ts> {
        self.acks.front().map(|a| a.0)
    }

    /// The next acknowledgement arrives at `now`.
    pub(super) fn on_ack(&mut self, now: Ts) {
        if let Some((_, sta, lost)) = self.acks.pop_front() {
            self.pacer.acked(sta);
            self.ctl.on_ack(now, sta, lost);
        }
    }

    /// Packets lost in the AP queue are never acknowledged; the gap at the receiver signals the
    /// loss, and the lost packets leave the window then. Per station: the highest sequence
    /// number received and the packets still in its receive path.
    pub(super) fn forget_lost(&mut self, received: impl Iterator<Item = (u64, u64)>) {
        for (i, (expect_seq, queued)) in received.enumerate() {
            let outstanding = self.seq[i].saturating_sub(expect_seq);
            if self.pacer.inflight(i) > outstanding + queued + 64 {
                self.pacer.set_inflight(i, outstanding + queued);
            }
        }
    }

    /// The window's rate toward `sta`.
    pub(super) fn rate(&self, sta: usize) -> Rate {
        self.ctl.rate(sta)
    }
}
