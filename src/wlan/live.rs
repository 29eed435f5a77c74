//! Real-time edge of the emulator: [`run_ap`] / [`run_ap_on`], the emulated WLAN as a real-time
//! bottleneck between a sender and its receivers (on UDP, or any [`ApPort`] such as the
//! testbed's TUN), with [`Binding`] deciding whose datagrams take the air; and
//! [`replay_through_kernel`], a noise source nobody here wrote — it replays MAC delivery times
//! through the real kernel (UDP over loopback) and reads the receive timestamps the kernel stamps
//! (`SO_TIMESTAMPNS`).
//!
//! This module reads the real clock (allowed here, in `transport::io`, `testbed` and the CLI
//! only). For the replay, the sender sleeps until shortly before each A-MPDU's MAC time and spins the rest, then sends the
//! A-MPDU's datagrams back to back; the receiver thread records `(seq, kernel ns)`. The kernel
//! times are mapped back onto the emulator clock by the offset between the schedule's start in
//! virtual time and in `CLOCK_REALTIME`. What this measures is the host's real receive path plus
//! the sender's scheduling error, on whatever machine runs it: not deterministic by nature.

#![allow(clippy::disallowed_methods)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::rxstamp;
use crate::time::Ts;

mod binding;
pub use binding::{Binding, Route, AP_HELLOS_KEPT, BINDING_HOLD, HELLOS_PER_SOURCE, HELLO_REPEAT};

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

impl From<rxstamp::Error> for ReplayError {
    fn from(e: rxstamp::Error) -> Self {
        ReplayError::Io {
            what: e.what,
            source: e.source,
        }
    }
}

/// Sleep until shortly before `at`, then spin the rest; returns how late it woke up (the
/// schedulers of both real-kernel replays: loopback here and veth in `testbed`).
pub(crate) fn wait_until(at: Instant) -> Duration {
    loop {
        let now = Instant::now();
        if now >= at {
            return now - at;
        }
        let left = at - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(150));
        } else {
            std::hint::spin_loop();
        }
    }
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
    let rx = rxstamp::bind(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        &rxstamp::Options {
            read_timeout: Some(Duration::from_millis(200)),
            ..rxstamp::Options::default()
        },
    )?;
    let addr = rx.local_addr().map_err(io("receiver address"))?;
    let tx = UdpSocket::bind("127.0.0.1:0").map_err(io("binding the sender"))?;
    tx.connect(addr).map_err(io("connecting"))?;

    let done = Arc::new(AtomicBool::new(false));
    let done_rx = done.clone();
    let receiver = std::thread::spawn(move || -> Vec<(u32, u64)> {
        rxstamp::StampedReceiver::new(&rx).collect_seq(64, &done_rx, n)
    });

    // Schedule: virtual mac[0] ↔ wall start (+ 20 ms to let the receiver settle).
    let lead = Duration::from_millis(20);
    let start = Instant::now() + lead;
    let wall0 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default() + lead;
    let mut max_late = Duration::ZERO;
    let mut i = 0;
    while i < n {
        let j = (i..n).find(|&j| mac[j] != mac[i]).unwrap_or(n);
        max_late = max_late.max(wait_until(start + mac[i].saturating_since(mac[0])));
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

/// Counters of a live AP run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ApStats {
    /// Datagrams from the sender.
    pub data_in: u64,
    /// Datagrams released to stations.
    pub data_out: u64,
    /// Dropped at a full AP queue.
    pub dropped: u64,
    /// Feedback datagrams relayed back to the sender.
    pub feedback: u64,
    /// A-MPDUs released.
    pub ampdus: u64,
    /// Stored datagrams overwritten before the emulator released or dropped them (the store
    /// holds at most [`AP_STORE_CAP`]).
    pub evicted: u64,
    /// Datagrams from an address other than the station's sender (dropped: they neither enter
    /// the emulator nor move where feedback is relayed).
    pub foreign: u64,
    /// Hellos relayed to stations.
    pub hellos: u64,
    /// Handshakes the AP saw a station answer: each binds that station's sender.
    pub bindings: u64,
    /// With the key: datagrams whose tag did not verify (hellos, answers, data), dropped.
    #[serde(skip_serializing_if = "is_zero")]
    pub forged: u64,
    /// With the key: the bound sender's data seen before (replays), dropped.
    #[serde(skip_serializing_if = "is_zero")]
    pub replayed: u64,
    /// With the key: copies of a hello relayed less than `HELLO_REPEAT` before, dropped.
    #[serde(skip_serializing_if = "is_zero")]
    pub hellos_repeated: u64,
    /// With the key: verified hello-acks that did not move the binding (an earlier session's,
    /// or while the bound sender's data still verified).
    #[serde(skip_serializing_if = "is_zero")]
    pub binds_refused: u64,
    /// Dropped by the queue discipline (CoDel) as they left the queue.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_aqm: u64,
    /// Packets from stations to the AP (the uplink, on a port that carries one).
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_in: u64,
    /// Uplink packets passed on after their air time.
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_out: u64,
    /// Uplink packets dropped at a station's full queue.
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_dropped: u64,
    /// Medium time of the stations' own exchanges (ns).
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_airtime_ns: u64,
    /// Medium time of every exchange, the AP's, the stations' and the contenders' (ns).
    #[serde(skip_serializing_if = "is_zero")]
    pub busy_ns: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// What the live AP sent one station in one report interval: the truth a receiver's estimate is
/// joined with (`ap --truth FILE`), and how late the AP released its bursts, so that a late AP
/// (a loaded host: several emulated A-MPDUs leave together and look like one) is told apart
/// from a receiver that hides frame starts.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TruthRow {
    /// Interval start: `CLOCK_REALTIME` ns, a multiple of the interval (the grid a receiver's
    /// reports on the same host sit on).
    pub start_ns: u64,
    /// Station.
    pub station: u16,
    /// A-MPDUs released in the interval.
    pub ampdus: u64,
    /// Packets (MPDUs) in them.
    pub mpdus: u64,
    /// Median release error: how long after its emulated end time an A-MPDU left (µs).
    pub release_p50_us: f64,
    /// 99th percentile of the release error (µs).
    pub release_p99_us: f64,
    /// A-MPDUs released less than [`MERGE_GAP`] after the previous one: a receiver cannot see
    /// them apart whatever its receive path.
    pub merged: u64,
    /// Others' share of the air in the interval (the channel's busy time less this AP's cell's
    /// own exchanges, over the interval; the same for every station): the contention the
    /// receiver's level had to read through (`ap --contenders`). NaN in a log that predates it.
    pub others_share: f64,
}

/// Two A-MPDUs the AP releases closer together than this reach a station as one burst (less
/// than the shortest possible A-MPDU exchange: AIFS 43 µs + preamble 40 µs + Block Ack 32 µs).
pub const MERGE_GAP: Duration = Duration::from_micros(100);

/// Per-station truth of the open interval.
#[derive(Clone, Debug, Default)]
struct TruthAcc {
    ampdus: u64,
    mpdus: u64,
    merged: u64,
    late_us: Vec<f32>,
    last_release: Option<Instant>,
}

/// Largest number of A-MPDUs per station and interval whose release error is kept (beyond it the
/// quantiles come from the first ones; at 64 A-MPDUs per ms this is a 4 s interval).
const TRUTH_SAMPLES_MAX: usize = 1 << 18;

/// The AP's per-interval truth: `on_row` is called for every station at the end of every
/// interval of `interval` (aligned to multiples of it on `CLOCK_REALTIME`).
pub struct ApTruth<'a> {
    /// Report interval Δ.
    pub interval: Duration,
    /// Called with each finished row.
    pub on_row: &'a mut dyn FnMut(&TruthRow),
}

/// What else a live AP run does besides relaying ([`run_ap`], [`run_ap_on`]).
#[derive(Default)]
pub struct ApOptions<'a> {
    /// Report the truth per interval.
    pub truth: Option<ApTruth<'a>>,
    /// Release each A-MPDU at the next multiple of this period after its end (zero: at its
    /// end): a station driver that hands received frames to the host on a timer (a polling
    /// driver, USB bus intervals), made at the AP because a veth pair has no such stage. The
    /// truth counts A-MPDUs as the emulator sends them.
    pub release_tick: Duration,
    /// Called with every packet released to a station (how long it stayed in the AP).
    pub on_release: Option<&'a mut dyn FnMut(&Released)>,
    /// The emulated channel's survey counters, kept current for readers in other threads.
    pub survey: Option<&'a Survey>,
    /// The pre-shared key `send` and `recv` hold: [`run_ap`]'s UDP port verifies the handshake
    /// and the data with it ([`Binding`]); `None`: it can read the handshake's ids only.
    /// [`run_ap_on`] does not read it: a port of one's own brings its own admission.
    pub key: Option<crate::transport::wire::Psk>,
}

/// A channel survey of the emulated WLAN, as a station's driver keeps one (`iw dev … survey
/// dump`): cumulative times since the AP started (ns). Updated by the AP's loop; read by
/// anyone ([`Survey::line`]).
#[derive(Debug, Default)]
pub struct Survey {
    /// Time the channel was observed.
    pub active_ns: std::sync::atomic::AtomicU64,
    /// Time it was busy (every exchange: the AP's, its stations', other transmitters').
    pub busy_ns: std::sync::atomic::AtomicU64,
    /// Time this AP's own cell took (its A-MPDUs to its stations and theirs to it).
    pub cell_ns: std::sync::atomic::AtomicU64,
}

impl Survey {
    /// The emulator's counters at `now`.
    fn update<R: rand::Rng>(&self, now: Ts, sim: &super::WlanSim<R>) {
        self.active_ns.store(now.as_nanos(), Ordering::Relaxed);
        self.busy_ns.store(sim.busy_ns(), Ordering::Relaxed);
        self.cell_ns.store(sim.cell_airtime_ns(), Ordering::Relaxed);
    }

    /// The survey file's line: `active_ns busy_ns own_ns` (what `recv --survey-file` reads).
    pub fn line(&self) -> String {
        format!(
            "{} {} {}\n",
            self.active_ns.load(Ordering::Relaxed),
            self.busy_ns.load(Ordering::Relaxed),
            self.cell_ns.load(Ordering::Relaxed)
        )
    }
}

/// Datagrams the live AP keeps while the emulator holds their packets (at most; 65,536 × up to
/// 64 KB in the worst case, ≈ 100 MB at 1,500 B). The emulator's queues hold far fewer; packets
/// it drops without delivering are overwritten here rather than kept forever.
pub const AP_STORE_CAP: usize = 1 << 16;

/// The AP's port for each of `n` stations: station i listens on `listen`'s port + i. `None` when
/// a port would pass 65535 or `listen` asks for port 0 (the ports must be known to the senders).
pub fn station_ports(listen: SocketAddr, n: usize) -> Option<Vec<SocketAddr>> {
    if listen.port() == 0 {
        return None;
    }
    (0..n)
        .map(|i| {
            u16::try_from(listen.port() as usize + i)
                .ok()
                .map(|p| SocketAddr::new(listen.ip(), p))
        })
        .collect()
}

/// The emulator as a real-time bottleneck on UDP: station i's data arrives on `listen[i]`
/// (from the sender), is queued in the [`WlanSim`](super::WlanSim) at its arrival time, and
/// is released to `stations[i]` in bursts at the emulated A-MPDU end times. Datagrams from
/// `stations[i]` (feedback) are relayed to the sender from the same socket, so the sender sees
/// each station's feedback come from the address it sends that station's data to.
///
/// **Whose data.** The AP binds each station's sender by the handshake it relays: hellos go to
/// the station (their sources remembered), the station's answer — a cookie or a hello-ack, which
/// names the hello it answers — goes back to that hello's source, and a hello-ack makes that
/// source the station's sender. Data from any other address, or before any handshake, is
/// counted as foreign and dropped; feedback goes to the bound sender only. Talking first takes
/// nothing: only the station, which holds the key, chooses. With `opts.key` every step is
/// verified and data enters the air only under the session's keys; without it, anyone who can
/// spoof the station's or the sender's address can rebind the station or take its air
/// ([`Binding`] says what each does).
///
/// With `opts.truth` it reports what it sent each station per interval ([`TruthRow`]), with
/// `opts.release_tick` it releases on a timer ([`ApOptions`]; `ApOptions::default()`: neither).
pub fn run_ap(
    listen: &[std::net::SocketAddr],
    stations: &[std::net::SocketAddr],
    wlan: super::ValidWlanConfig,
    seed: u64,
    duration: Duration,
    stop: &AtomicBool,
    mut opts: ApOptions<'_>,
) -> Result<ApStats, ReplayError> {
    let mut port = UdpPort {
        socks: ap_sockets(listen, stations, &wlan)?,
        stations: stations.to_vec(),
        binding: Binding::new(stations.len(), opts.key.take()),
        at: 0,
        start: Instant::now(),
    };
    Ok(run_ap_on(&mut port, wlan, seed, duration, stop, opts))
}

/// Where a live AP's packets come from and go: per station, data in (from the sender's side)
/// and out (to the station). A port handles its own control traffic; the AP loop sees only
/// the data that enters the emulated WLAN.
pub trait ApPort {
    /// The next data packet waiting, copied into `buf`: (its way — for a station, or from one
    /// on the uplink —, the station, length); `None` when nothing waits. Counts what it drops
    /// or relays in `stats`.
    fn recv(&mut self, buf: &mut [u8], stats: &mut ApStats) -> Option<(Way, usize, usize)>;
    /// Release `bytes` to station `i`; `starts_ampdu`: the first packet of an A-MPDU.
    fn send(&mut self, i: usize, bytes: &[u8], starts_ampdu: bool);
    /// Pass on `bytes` that station `i` sent the AP (the uplink; a port without one has none).
    fn send_up(&mut self, _i: usize, _bytes: &[u8]) {}
    /// Bytes a packet from [`ApPort::recv`] lacks of its IP length (28 for a UDP payload over
    /// IPv4, 0 for an IP packet): the emulator's airtime counts IP packets.
    fn l3_overhead(&self) -> usize;
}

/// The UDP port of [`run_ap`]: one socket per station, the handshake binding its sender.
struct UdpPort {
    socks: Vec<UdpSocket>,
    stations: Vec<std::net::SocketAddr>,
    binding: Binding,
    /// The socket being drained.
    at: usize,
    /// The binding's clock starts here.
    start: Instant,
}

/// Which way a packet crosses the emulated WLAN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// From the AP to a station.
    Down,
    /// From a station to the AP, in the station's own transmit opportunities.
    Up,
}

impl ApPort for UdpPort {
    fn recv(&mut self, buf: &mut [u8], stats: &mut ApStats) -> Option<(Way, usize, usize)> {
        while self.at < self.socks.len() {
            let i = self.at;
            match self.socks[i].recv_from(buf) {
                Ok((n, from)) => match self.binding.route(
                    i,
                    Ts(self.start.elapsed().as_nanos() as u64),
                    from,
                    self.stations[i],
                    &buf[..n],
                    stats,
                ) {
                    Route::To(to) => {
                        let _ = self.socks[i].send_to(&buf[..n], to);
                    }
                    Route::Drop => {}
                    Route::Data => return Some((Way::Down, i, n)),
                },
                Err(_) => self.at += 1,
            }
        }
        // Every socket drained: start over on the next call.
        self.at = 0;
        None
    }

    fn send(&mut self, i: usize, bytes: &[u8], _: bool) {
        let _ = self.socks[i].send_to(bytes, self.stations[i]);
    }

    fn l3_overhead(&self) -> usize {
        28
    }
}

/// A packet released to a station, for [`ApOptions::on_release`].
#[derive(Clone, Copy, Debug)]
pub struct Released {
    /// Station.
    pub station: usize,
    /// Bytes.
    pub len: usize,
    /// When it entered the AP, on the run's clock (time since the AP started).
    pub arrived: Duration,
    /// How long it stayed in the AP (queue and air time, and a release tick's hold).
    pub held: Duration,
    /// For the first packet of an A-MPDU: how late the AP released the burst after its
    /// emulated end time (the host's share of the timing, not the WLAN's).
    pub late: Option<Duration>,
}

/// The live AP's loop over any [`ApPort`]: each data packet is queued in the
/// [`WlanSim`](super::WlanSim) at its arrival time and released to its station in bursts at
/// the emulated A-MPDU end times (see [`run_ap`]), until `duration` passes or `stop` is set.
pub fn run_ap_on(
    port: &mut dyn ApPort,
    wlan: super::ValidWlanConfig,
    seed: u64,
    duration: Duration,
    stop: &AtomicBool,
    opts: ApOptions<'_>,
) -> ApStats {
    let ApOptions {
        truth,
        release_tick,
        mut on_release,
        survey,
        key: _,
    } = opts;
    let n_sta = wlan.config().stations.len();
    let tick_ns = release_tick.as_nanos() as u64;
    // Packets waiting for their tick (see [`Held`]); bounded like the
    // store.
    let mut held: std::collections::VecDeque<Held> = std::collections::VecDeque::new();
    use rand::SeedableRng;
    let mut sim = super::WlanSim::new(wlan, rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    let start = Instant::now();
    // CLOCK_REALTIME at `start`: the truth's intervals sit on the receivers' grid.
    let real0 = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let vnow = || Ts(start.elapsed().as_nanos() as u64);
    let mut rows = Rows::new(truth, n_sta, real0);
    let mut store = Store::new();
    let mut stats = ApStats::default();
    let mut buf = vec![0u8; 65_536];
    let mut last_ref = u32::MAX;
    let mut release =
        |port: &mut dyn ApPort, i: usize, arrived: Ts, due: Option<Ts>, bytes: &[u8], stats: &mut ApStats| {
            // Released when handed over (a TUN write runs the kernel's forwarding path, and more).
            let now = on_release.is_some().then(vnow);
            port.send(i, bytes, due.is_some());
            stats.data_out += 1;
            if let (Some(f), Some(now)) = (on_release.as_mut(), now) {
                f(&Released {
                    station: i,
                    len: bytes.len(),
                    arrived: Duration::from_nanos(arrived.as_nanos()),
                    held: now.saturating_since(arrived),
                    late: due.map(|t| now.saturating_since(t)),
                });
            }
        };
    while start.elapsed() < duration && !stop.load(Ordering::Relaxed) {
        let mut busy = false;
        // A bounded batch in, then the releases that fell due: a sender's burst of a thousand
        // packets must not hold back A-MPDUs whose end time has come.
        let mut batch = 0;
        while batch < RECV_BATCH {
            let Some((way, i, n)) = port.recv(&mut buf, &mut stats) else {
                break;
            };
            batch += 1;
            busy = true;
            if i >= n_sta {
                stats.foreign += 1;
                continue;
            }
            store.admit(&mut sim, vnow(), (way, i), &buf[..n], port.l3_overhead(), &mut stats);
        }
        let now = vnow();
        if sim.poll_timeout().is_some_and(|t| t <= now) {
            sim.handle_timeout(now);
        }
        if let Some(s) = survey {
            s.update(now, &sim);
        }
        let real = real0 + start.elapsed().as_nanos() as u64;
        rows.close(&sim, real);
        while let Some(d) = sim.poll_delivery() {
            busy = true;
            let first = d.ampdu_ref != last_ref;
            if first {
                stats.ampdus += 1;
                last_ref = d.ampdu_ref;
            }
            if let Some(a) = rows.acc.get_mut(d.sta.0 as usize) {
                a.released(&d, first.then(vnow));
            }
            if let Some((arrived, bytes)) = store.take(d.packet.seq) {
                let i = d.sta.0 as usize;
                match hold_until(d.mac_time, tick_ns) {
                    Some(at) => hold(&mut held, (at, i, arrived, first, bytes), &mut stats),
                    None => release(port, i, arrived, first.then_some(d.mac_time), &bytes, &mut stats),
                }
            }
        }
        busy |= store.pass_uplink(&mut sim, port, &mut stats);
        let now = vnow();
        while held.front().is_some_and(|h| h.0 <= now) {
            if let Some((at, i, arrived, first, bytes)) = held.pop_front() {
                // Late against its tick, for the first packet of an A-MPDU.
                release(port, i, arrived, first.then_some(at), &bytes, &mut stats);
                busy = true;
            }
        }
        if !busy {
            idle(sim.poll_timeout(), held.front().map(|h| h.0), vnow());
        }
    }
    rows.last(&sim, real0 + vnow().as_nanos());
    let per_sta = sim.stats();
    ApStats {
        dropped_aqm: per_sta.iter().map(|s| s.dropped_aqm).sum(),
        uplink_dropped: per_sta.iter().map(|s| s.uplink_dropped).sum(),
        uplink_airtime_ns: per_sta.iter().map(|s| s.uplink_airtime_ns).sum(),
        busy_ns: sim.busy_ns(),
        ..stats
    }
}

/// The packets the emulator holds, by id: a ring, bounded whatever the emulator drops.
struct Store {
    slots: Vec<Option<(u32, Ts, Vec<u8>)>>,
    next_id: u32,
}

impl Store {
    fn new() -> Store {
        let mut slots = Vec::new();
        slots.resize_with(AP_STORE_CAP, || None);
        Store { slots, next_id: 0 }
    }

    /// A packet for station `i` (`l3_overhead` bytes short of its IP length) arrived `now`, or
    /// one from station `i` on the uplink: into the emulator's queue (or dropped at a full one,
    /// counted), its bytes kept until the emulator releases it.
    fn admit<R: rand::Rng>(
        &mut self,
        sim: &mut super::WlanSim<R>,
        now: Ts,
        (way, i): (Way, usize),
        bytes: &[u8],
        l3_overhead: usize,
        stats: &mut ApStats,
    ) {
        match way {
            Way::Down => stats.data_in += 1,
            Way::Up => stats.uplink_in += 1,
        }
        sim.handle_timeout(now);
        self.next_id = self.next_id.wrapping_add(1);
        let pkt = super::Packet {
            seq: self.next_id,
            len: (bytes.len() + l3_overhead).min(u16::MAX as usize) as u16,
            sent: now,
        };
        let queued = match way {
            Way::Down => sim.enqueue(now, super::StaId(i as u16), pkt),
            Way::Up => sim.enqueue_uplink(now, super::StaId(i as u16), pkt),
        };
        if queued.is_ok() {
            let slot = &mut self.slots[self.next_id as usize % AP_STORE_CAP];
            if slot.is_some() {
                stats.evicted += 1;
            }
            *slot = Some((self.next_id, now, bytes.to_vec()));
        } else if way == Way::Down {
            stats.dropped += 1;
        }
    }

    /// The uplink: pass on what reached the AP from a station (not counted in the truth,
    /// which is the downlink's). Whether there was any.
    fn pass_uplink<R: rand::Rng>(
        &mut self,
        sim: &mut super::WlanSim<R>,
        port: &mut dyn ApPort,
        stats: &mut ApStats,
    ) -> bool {
        let mut any = false;
        while let Some(u) = sim.poll_uplink() {
            any = true;
            if let Some((_, bytes)) = self.take(u.packet.seq) {
                port.send_up(u.sta.0 as usize, &bytes);
                stats.uplink_out += 1;
            }
        }
        any
    }

    /// The arrival time and bytes of packet `seq`, if still kept.
    fn take(&mut self, seq: u32) -> Option<(Ts, Vec<u8>)> {
        self.slots[seq as usize % AP_STORE_CAP]
            .take_if(|(id, _, _)| *id == seq)
            .map(|(_, at, b)| (at, b))
    }
}

/// One non-blocking socket per station's listen address, with a large receive buffer.
fn ap_sockets(
    listen: &[std::net::SocketAddr],
    stations: &[std::net::SocketAddr],
    wlan: &super::ValidWlanConfig,
) -> Result<Vec<UdpSocket>, ReplayError> {
    if listen.len() != stations.len() || listen.len() != wlan.config().stations.len() {
        return Err(ReplayError::Io {
            what: "live AP: one listen address and one station address per configured station",
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        });
    }
    listen
        .iter()
        .map(|a| {
            let s = UdpSocket::bind(a).map_err(io("binding an AP port"))?;
            s.set_nonblocking(true).map_err(io("AP non-blocking"))?;
            rxstamp::set_rcvbuf(&s, 8 << 20, false);
            Ok(s)
        })
        .collect::<Result<_, ReplayError>>()
}

/// With a release tick (`tick_ns` > 0), the tick an MPDU emulated to end at `mac_time` leaves
/// on; without, None: it leaves now.
fn hold_until(mac_time: Ts, tick_ns: u64) -> Option<Ts> {
    (tick_ns > 0).then(|| Ts(mac_time.as_nanos().div_ceil(tick_ns).saturating_mul(tick_ns)))
}

/// Most packets the AP takes in before it releases what fell due.
const RECV_BATCH: usize = 32;

/// A packet held for its tick: (release time, station, arrival, first of its A-MPDU, bytes).
type Held = (Ts, usize, Ts, bool, Vec<u8>);

/// Hold a packet for its tick; the oldest held is dropped (counted) when full.
fn hold(held: &mut std::collections::VecDeque<Held>, h: Held, stats: &mut ApStats) {
    if held.len() == AP_STORE_CAP {
        held.pop_front();
        stats.evicted += 1;
    }
    held.push_back(h);
}

/// The truth rows of a run: per station what the open interval holds, others' air, and where
/// the open interval starts on `CLOCK_REALTIME` (a multiple of the interval).
struct Rows<'a> {
    truth: Option<ApTruth<'a>>,
    acc: Vec<TruthAcc>,
    others: OthersMeter,
    open_start: u64,
    step: u64,
}

impl<'a> Rows<'a> {
    fn new(truth: Option<ApTruth<'a>>, stations: usize, real0: u64) -> Self {
        let step = truth.as_ref().map_or(1, |t| t.interval.as_nanos().max(1) as u64);
        Rows {
            truth,
            acc: vec![TruthAcc::default(); stations],
            others: OthersMeter::default(),
            open_start: (real0 / step) * step,
            step,
        }
    }

    /// Close every interval that ended by `real` (ns, `CLOCK_REALTIME`).
    fn close<R: rand::Rng>(&mut self, sim: &super::WlanSim<R>, real: u64) {
        self.others.update(sim);
        while self.truth.is_some() && real >= self.open_start + self.step {
            let share = self.others.share(self.step);
            self.emit(share);
            self.open_start += self.step;
        }
    }

    /// The rows of the interval cut short by the run's end at `end`.
    fn last<R: rand::Rng>(&mut self, sim: &super::WlanSim<R>, end: u64) {
        self.others.update(sim);
        if self.truth.is_some() {
            let share = self.others.share(end.saturating_sub(self.open_start).max(1));
            self.emit(share);
        }
    }

    /// Every station's row of the open interval, to `on_row`.
    fn emit(&mut self, others_share: f64) {
        if let Some(t) = self.truth.as_mut() {
            for (i, a) in self.acc.iter_mut().enumerate() {
                (t.on_row)(&TruthRow {
                    others_share,
                    ..a.finish(self.open_start, i as u16)
                });
            }
        }
    }
}

/// Others' air time since the last interval closed: the emulator's busy and own-cell counters
/// (ns), now and at the last close.
#[derive(Default)]
struct OthersMeter {
    now: (u64, u64),
    last: (u64, u64),
}

impl OthersMeter {
    fn update<R: rand::Rng>(&mut self, sim: &super::WlanSim<R>) {
        self.now = (sim.busy_ns(), sim.cell_airtime_ns());
    }

    /// Others' share of an interval of `step` ns ending now (0..=1), and start the next one.
    fn share(&mut self, step: u64) -> f64 {
        let busy = self.now.0.saturating_sub(self.last.0);
        let own = self.now.1.saturating_sub(self.last.1);
        self.last = self.now;
        (busy.saturating_sub(own) as f64 / step.max(1) as f64).clamp(0.0, 1.0)
    }
}

/// Nothing to do now: sleep a little when the next event (the emulator's, or a held release)
/// is far enough, else spin.
fn idle(next_wlan: Option<Ts>, next_held: Option<Ts>, now: Ts) {
    let next = match (next_wlan, next_held) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let wait = next.map_or(Duration::from_micros(200), |t| t.saturating_since(now));
    if wait > Duration::from_micros(120) {
        std::thread::sleep(Duration::from_micros(50));
    } else {
        std::hint::spin_loop();
    }
}

impl TruthAcc {
    /// An MPDU released; `first_at`: the virtual time now, when it is the first of its A-MPDU
    /// (then the A-MPDU is counted, whether it follows the last one too closely to tell apart,
    /// and how late the release was).
    fn released(&mut self, d: &super::Delivery, first_at: Option<Ts>) {
        if let Some(now) = first_at {
            let now_i = Instant::now();
            self.ampdus += 1;
            if self.last_release.is_some_and(|l| now_i.duration_since(l) < MERGE_GAP) {
                self.merged += 1;
            }
            self.last_release = Some(now_i);
            if self.late_us.len() < TRUTH_SAMPLES_MAX {
                self.late_us.push(now.saturating_since(d.mac_time).as_secs_f32() * 1e6);
            }
        }
        self.mpdus += 1;
    }
    /// The row of the interval starting at `start_ns`, and a fresh interval.
    fn finish(&mut self, start_ns: u64, station: u16) -> TruthRow {
        let q = |v: &mut Vec<f32>, p: f64| -> f64 {
            if v.is_empty() {
                return f64::NAN;
            }
            let k = ((v.len() - 1) as f64 * p).round() as usize;
            *v.select_nth_unstable_by(k, |a, b| a.total_cmp(b)).1 as f64
        };
        let row = TruthRow {
            start_ns,
            station,
            ampdus: self.ampdus,
            mpdus: self.mpdus,
            release_p50_us: q(&mut self.late_us, 0.5),
            release_p99_us: q(&mut self.late_us, 0.99),
            merged: self.merged,
            others_share: f64::NAN,
        };
        self.ampdus = 0;
        self.mpdus = 0;
        self.merged = 0;
        self.late_us.clear();
        row
    }
}
