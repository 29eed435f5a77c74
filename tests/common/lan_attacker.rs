//! An attacker on the LAN of `send → ap → recv`, for tests/realtime/attacks.rs and
//! benches/ap_attacks.rs: datagrams with any source address (a raw socket; root), a recorded
//! handshake and session of another sender under the key, and the loop itself on loopback.
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aggrate::control::PiParams;
use aggrate::features::FeatureSpec;
use aggrate::runtime::{Mode, OnlineEstimator};
use aggrate::transport::wire::{self, Psk};
use aggrate::transport::{io, Receiver, ReceiverStats, Sender, SenderStats};
use aggrate::wlan::live::ApStats;
use aggrate::Ts;

const INTERVAL: Duration = Duration::from_millis(500);

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// IPv4 UDP datagrams with any source address, through a raw socket.
pub struct Spoofer(libc::c_int);

impl Spoofer {
    pub fn new() -> Spoofer {
        // SAFETY: a plain socket(2) call; the descriptor is owned by the Spoofer.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        assert!(fd >= 0, "a raw socket needs root: {}", std::io::Error::last_os_error());
        Spoofer(fd)
    }

    /// `payload` from `from` to `to` (IPv4 both): IP header (the kernel fills its checksum and
    /// id), UDP header without a checksum.
    pub fn send(&self, from: SocketAddr, to: SocketAddr, payload: &[u8]) {
        let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
            panic!("IPv4 only")
        };
        let len = 28 + payload.len();
        let mut p = Vec::with_capacity(len);
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&(len as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0]);
        p.extend_from_slice(&f.ip().octets());
        p.extend_from_slice(&t.ip().octets());
        p.extend_from_slice(&f.port().to_be_bytes());
        p.extend_from_slice(&t.port().to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(t.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `p` and `sa` outlive the call; the lengths are theirs.
        unsafe {
            libc::sendto(
                self.0,
                p.as_ptr().cast(),
                p.len(),
                0,
                std::ptr::addr_of!(sa).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
        }
    }
}

impl Drop for Spoofer {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

/// What the attacks send, one datagram each call: the recorded session's hellos replayed from
/// many ports, hellos forged under a key that is not the AP's, and datagrams spoofed from the
/// station's or the sender's address (the old hello-ack, 60 KB of junk, the old data). The
/// keyed-AP test sends them all at once; the bench one kind per run.
pub struct Arsenal<'a> {
    old: &'a Recorded,
    other: Psk,
    spoof: Spoofer,
    ports: Vec<UdpSocket>,
    junk: Vec<u8>,
    forged: Vec<u8>,
}

impl<'a> Arsenal<'a> {
    /// Replays from `ports` ports of its own.
    pub fn new(old: &'a Recorded, ports: usize) -> Arsenal<'a> {
        Arsenal {
            old,
            other: Psk::new(b"a key that is not the AP's, nor the ends'").unwrap(),
            spoof: Spoofer::new(),
            ports: (0..ports.max(1)).map(|_| UdpSocket::bind(addr(0)).unwrap()).collect(),
            junk: vec![0x5a; 60_000],
            forged: Vec::new(),
        }
    }

    /// The `k`-th replay: one of the two recorded hellos, from port `k` mod the ports.
    pub fn replay_hello(&self, aim: Aim, k: usize) {
        let _ = self.ports[k % self.ports.len()].send_to(&self.old.hellos[k % 2], aim.ap);
    }

    /// A hello under the other key (session `k`, a nonce from `k`), from the first port.
    pub fn forge_hello(&mut self, aim: Aim, k: u64) {
        let h = wire::Hello {
            session: k as u32,
            station: 0,
            nonce_s: [(k % 251) as u8; wire::NONCE_LEN],
        };
        wire::emit_hello(&mut self.forged, &self.other, &h, &[0; wire::COOKIE_BYTES]);
        let _ = self.ports[0].send_to(&self.forged, aim.ap);
    }

    /// The recorded handshake's hello-ack, spoofed from the station's address.
    pub fn spoof_old_ack(&self, aim: Aim) {
        self.spoof.send(aim.station, aim.ap, &self.old.ack);
    }

    /// 60 KB of junk spoofed from the sender's address.
    pub fn spoof_junk(&self, aim: Aim) {
        self.spoof.send(aim.sender, aim.ap, &self.junk);
    }

    /// The recorded session's `k`-th data datagram (cycling), spoofed from the sender's address.
    pub fn spoof_old_data(&self, aim: Aim, k: usize) {
        self.spoof
            .send(aim.sender, aim.ap, &self.old.data[k % self.old.data.len()]);
    }
}

/// Another sender's handshake under `key`, as an attacker recorded it: its two hellos (without
/// and with the cookie), the receiver's hello-ack, and ten of its data datagrams.
pub struct Recorded {
    pub hellos: Vec<Vec<u8>>,
    pub ack: Vec<u8>,
    pub data: Vec<Vec<u8>>,
}

pub fn record(key: &Psk) -> Recorded {
    let mut s = Sender::new(key.clone(), [5; 32], 1, 1000, PiParams::default(), INTERVAL, Ts::ZERO).unwrap();
    let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), INTERVAL).unwrap();
    let mut r = Receiver::new(key.clone(), [6; 32], est);
    let (mut hellos, mut ack) = (Vec::new(), Vec::new());
    for k in 0..2 {
        let now = Ts::from_millis(k);
        let t = s.poll_transmit(now).unwrap();
        hellos.push(s.buffer()[..t.len].to_vec());
        let _ = r.handle_datagram(now, addr(40000), &hellos[k as usize]);
        let (n, _) = r.poll_transmit(now).unwrap();
        ack = r.buffer()[..n].to_vec();
        let _ = s.handle_datagram(now, 0, &ack);
    }
    assert!(s.connected(0));
    let mut data = Vec::new();
    let mut now = Ts::from_millis(2);
    while data.len() < 10 {
        if let Some(t) = s.poll_transmit(now) {
            data.push(s.buffer()[..t.len].to_vec());
        }
        now = now + Duration::from_micros(100);
    }
    Recorded { hellos, ack, data }
}

/// Where the attacker aims: the AP's port, the station's and the real sender's addresses.
#[derive(Clone, Copy)]
pub struct Aim {
    pub ap: SocketAddr,
    pub station: SocketAddr,
    pub sender: SocketAddr,
}

/// What one run of the loop came to.
pub struct Outcome {
    pub sender: SenderStats,
    pub receiver: ReceiverStats,
    pub ap: ApStats,
    /// When the sender was first connected, after it started.
    pub connected_at: Option<Duration>,
    /// Datagrams the receiver accepted in the run's second half.
    pub late_received: u64,
}

/// `send → ap → recv` on loopback for `secs` (report interval 100 ms), the AP holding `ap_key`,
/// and `attack` running from 200 ms before the sender starts until it stops (it must watch the
/// flag).
pub fn through_ap(key: &Psk, ap_key: Option<Psk>, secs: f64, attack: impl Fn(Aim, &AtomicBool) + Sync) -> Outcome {
    let interval = Duration::from_millis(100);
    let ap_port = UdpSocket::bind(addr(0)).unwrap().local_addr().unwrap();
    let rx_sock = io::timestamped_socket(addr(0)).unwrap();
    let tx_sock = UdpSocket::bind(addr(0)).unwrap();
    let aim = Aim {
        ap: ap_port,
        station: rx_sock.local_addr().unwrap(),
        sender: tx_sock.local_addr().unwrap(),
    };
    let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), interval).unwrap();
    let mut rx = Receiver::new(key.clone(), io::entropy().unwrap(), est);
    let t0 = io::realtime();
    let mut tx = Sender::new(
        key.clone(),
        io::entropy().unwrap(),
        1,
        1400,
        PiParams::default(),
        interval,
        t0,
    )
    .unwrap();
    let run = Duration::from_secs_f64(secs);
    let (stop, attack_stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let wlan = aggrate::wlan::WlanConfig::vht_stations(&[9]).check().unwrap();
    let mut connected_at = None;
    let half = Ts(t0.as_nanos() + 200_000_000 + run.as_nanos() as u64 / 2);
    let mut late_received = 0u64;
    let (sender, receiver, ap) = std::thread::scope(|sc| {
        let ap = sc.spawn(|| {
            aggrate::wlan::live::run_ap(
                &[ap_port],
                &[aim.station],
                wlan,
                1,
                run + Duration::from_millis(600),
                &stop,
                aggrate::wlan::live::ApOptions {
                    key: ap_key,
                    ..Default::default()
                },
            )
        });
        let (late, stop, rx_sock, rx) = (&mut late_received, &stop, &rx_sock, &mut rx);
        let r = sc.spawn(move || {
            io::run_receiver(rx_sock, rx, run + Duration::from_millis(500), stop, |r| {
                if r.start >= half {
                    *late += r.packets;
                }
            })
        });
        let a = sc.spawn(|| attack(aim, &attack_stop));
        std::thread::sleep(Duration::from_millis(200));
        let start = io::realtime();
        let ts = io::run_sender(&tx_sock, &[ap_port], &mut tx, run, stop, |now, s| {
            if connected_at.is_none() && s.connected(0) {
                connected_at = Some(now.saturating_since(start));
            }
        })
        .unwrap();
        attack_stop.store(true, Ordering::Relaxed);
        a.join().unwrap();
        (ts, r.join().unwrap().unwrap(), ap.join().unwrap().unwrap())
    });
    Outcome {
        sender,
        receiver,
        ap,
        connected_at,
        late_received,
    }
}
