//! One-way delay from captures at both ends of the downlink: a packet socket on the server's
//! device sees every packet as the server sends it, one on each station's device as the station
//! receives it, both stamped by the kernel on one host clock (`CLOCK_REALTIME`). A packet is the
//! same packet at both ends when its IPv4 addresses, identification, protocol, length and first
//! transport bytes (ports, TCP sequence and acknowledgement numbers and options, or a UDP
//! datagram's header and the start of its payload) agree — what forwarding through the AP leaves
//! as it was (it changes the TTL, the header checksum and, with A-MPDU marks, the DSCP bits).
//!
//! So the delay covers everything between the server and the station: a backhaul's queue before
//! the AP (its `tc` queue sits after the server's capture, on the AP's side of the link), the
//! AP's queue, the air time and both kernels' forwarding; the AP's own "time in the AP" is one
//! part of it. Packets seen leaving but never arriving are counted (lost on the way, or still
//! queued when the run ended).
//!
//! Edge code (root): threads enter the namespaces and read the kernel's clock stamps.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::downlink::{Downlink, SERVER_DEV};
use super::{enter, io, Error};
use crate::rxstamp;

/// Most packets one capture keeps (a minute of 600 Mb/s is ≈ 3 M; 16 bytes each). Past it,
/// packets are counted, not kept.
pub const TAP_MAX: usize = 8 << 20;

/// Bytes of each packet read (the IPv4 header and the first transport bytes).
const SNAP: usize = 128;

/// Transport bytes that enter a packet's key.
const L4_KEY: usize = 48;

/// One packet as a capture saw it: its key (the station's index in the low 3 bits) and the
/// kernel's stamp (ns, `CLOCK_REALTIME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    /// Key of the packet's invariant bytes, station in the low 3 bits.
    pub key: u64,
    /// Kernel stamp (ns).
    pub t_ns: u64,
}

/// What one capture gathered.
#[derive(Clone, Debug, Default)]
pub struct Tapped {
    /// Packets, in the order read.
    pub seen: Vec<Seen>,
    /// Packets past [`TAP_MAX`] (counted only).
    pub overflow: u64,
    /// Packets the socket dropped (its buffer full).
    pub dropped: u64,
    /// Packets without a kernel stamp (not kept).
    pub unstamped: u64,
    /// Packets longer than an Ethernet MTU: merged by GRO, matching no packet sent (kept).
    pub merged: u64,
}

/// A capture running in a thread of a namespace until stopped.
pub struct Tap {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Tapped, Error>>>,
}

/// Which packets a capture keeps: those sent (`outgoing`) or received on the device, to one of
/// `stations` (the key carries the index).
#[derive(Clone, Debug)]
pub struct Filter {
    /// Sent by the device (the server's egress) or received (a station's ingress).
    pub outgoing: bool,
    /// Destination addresses kept, by station index.
    pub stations: Vec<Ipv4Addr>,
}

impl Tap {
    /// Start capturing on `dev` in namespace `ns` (on `cpu`, off the AP's core).
    pub fn start(ns: &str, dev: &str, filter: Filter, cpu: Option<usize>) -> Result<Tap, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, dev, s) = (ns.to_string(), dev.to_string(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("owd-tap".into())
            .spawn(move || -> Result<Tapped, Error> {
                if let Some(c) = cpu {
                    super::pin(c);
                }
                let opened = enter(&ns).and_then(|()| {
                    let o = rxstamp::Options {
                        rcvbuf: 32 << 20,
                        force: true,
                        read_timeout: Some(Duration::from_millis(20)),
                        ..rxstamp::Options::default()
                    };
                    rxstamp::PacketSocket::open(&dev, &o).map_err(|e| Error::Io {
                        what: "opening a capture for the one-way delay (packet socket)",
                        source: std::io::Error::other(format!("{dev} in {ns}: {e}")),
                    })
                });
                let mut sock = match opened {
                    Ok(s) => {
                        let _ = ready_tx.send(None);
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Some(e.to_string()));
                        return Err(e);
                    }
                };
                let mut out = Tapped::default();
                let mut buf = [0u8; SNAP];
                while !s.load(Ordering::Relaxed) {
                    let Some(p) = sock.recv(&mut buf).map_err(|e| Error::Io {
                        what: "reading a capture for the one-way delay",
                        source: std::io::Error::other(format!("{dev} in {ns}: {e}")),
                    })?
                    else {
                        continue;
                    };
                    if let Some(d) = p.dropped {
                        out.dropped = u64::from(d);
                    }
                    if p.outgoing != filter.outgoing {
                        continue;
                    }
                    let Some(key) = key_of(&buf[..p.len.min(SNAP)], &filter.stations) else {
                        continue;
                    };
                    if u16::from_be_bytes([buf[2], buf[3]]) > 1500 {
                        out.merged += 1;
                    }
                    match p.kernel {
                        None => out.unstamped += 1,
                        Some(_) if out.seen.len() >= TAP_MAX => out.overflow += 1,
                        Some(t) => out.seen.push(Seen { key, t_ns: t.0 }),
                    }
                }
                Ok(out)
            })
            .map_err(io("starting a capture thread"))?;
        let mut tap = Tap {
            stop,
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(None) => Ok(tap),
            _ => Err(tap.finish().err().unwrap_or(Error::Io {
                what: "starting a capture thread",
                source: std::io::Error::other("it ended before opening its socket"),
            })),
        }
    }

    /// Stop and hand over what was captured.
    pub fn finish(&mut self) -> Result<Tapped, Error> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| Error::Io {
                what: "a capture thread",
                source: std::io::Error::other("panicked"),
            })?,
            None => Ok(Tapped::default()),
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The key of an IPv4 packet to one of `stations` (cooked capture: the IPv4 header first), or
/// `None` for anything else. FNV-1a over the bytes forwarding leaves alone; the station's index
/// in the low 3 bits.
pub fn key_of(p: &[u8], stations: &[Ipv4Addr]) -> Option<u64> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < 20 || p.len() < ihl {
        return None;
    }
    let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
    let sta = stations.iter().position(|&s| s == dst)?;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    let l4_end = total.min(p.len()).min(ihl + L4_KEY).max(ihl);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    // Length, identification, flags and fragment offset; protocol; addresses; the transport's
    // first bytes. Not the TOS byte, TTL or header checksum, nor the transport's checksum: the
    // server's capture sees it before the device completes it (checksum offload), the
    // station's after the AP's TUN device had it computed.
    eat(&p[2..8]);
    eat(&p[9..10]);
    eat(&p[12..20]);
    let l4 = &p[ihl..l4_end];
    let csum = match p[9] {
        6 => 16..18,
        17 => 6..8,
        _ => 0..0,
    };
    for (i, &b) in l4.iter().enumerate() {
        if !csum.contains(&i) {
            eat(&[b]);
        }
    }
    Some((h & !7) | sta as u64)
}

/// One-way delays of the packets seen at both ends: per station, every matched packet's delay
/// (ns, by its arrival time), and per station the packets seen leaving that never arrived.
/// Packets with one key are matched in time order (a retransmission with the same bytes is
/// another packet).
pub fn match_delays(mut sent: Vec<Seen>, mut got: Vec<Seen>, stations: usize) -> Matched {
    sent.sort_unstable();
    got.sort_unstable();
    let mut out = Matched {
        delays: vec![Vec::new(); stations],
        unmatched: vec![0; stations],
        notes: Vec::new(),
    };
    let (mut i, mut j) = (0, 0);
    while i < sent.len() {
        let k = sent[i].key;
        let sta = (k & 7) as usize;
        while j < got.len() && got[j].key < k {
            j += 1;
        }
        // Both runs of this key, in time order: pair each arrival with the earliest send
        // before it.
        let i_end = i + sent[i..].iter().take_while(|s| s.key == k).count();
        let j_end = j + got[j..].iter().take_while(|g| g.key == k).count();
        let (mut a, mut b) = (i, j);
        while a < i_end && b < j_end {
            if got[b].t_ns < sent[a].t_ns {
                b += 1; // arrived before anything was sent: another packet's
                continue;
            }
            // Skip sends that a later send also precedes this arrival (lost duplicates).
            while a + 1 < i_end && sent[a + 1].t_ns <= got[b].t_ns && (j_end - b) < (i_end - a) {
                if let Some(u) = out.unmatched.get_mut(sta) {
                    *u += 1;
                }
                a += 1;
            }
            if let Some(d) = out.delays.get_mut(sta) {
                d.push((got[b].t_ns, got[b].t_ns - sent[a].t_ns));
            }
            a += 1;
            b += 1;
        }
        if let Some(u) = out.unmatched.get_mut(sta) {
            *u += (i_end - a) as u64;
        }
        i = i_end;
        j = j_end;
    }
    for d in &mut out.delays {
        d.sort_unstable();
    }
    out
}

/// What [`match_delays`] found.
#[derive(Clone, Debug, Default)]
pub struct Matched {
    /// Per station: (arrival stamp ns, one-way delay ns), by arrival.
    pub delays: Vec<Vec<(u64, u64)>>,
    /// Per station: packets seen leaving that were never seen arriving.
    pub unmatched: Vec<u64>,
    /// What the captures missed or could not match, a sentence each, for the user.
    pub notes: Vec<String>,
}

impl Matched {
    /// Station `i`'s one-way delays (ns), smallest first.
    pub fn sorted_delays(&self, i: usize) -> Vec<u64> {
        let mut d: Vec<u64> = self
            .delays
            .get(i)
            .map_or(Vec::new(), |d| d.iter().map(|x| x.1).collect());
        d.sort_unstable();
        d
    }
}

/// The captures of one run on a downlink: the server's egress and every station's arrivals
/// ([`Downlink::arrival_tap`]), off the AP's core.
pub struct Captures {
    taps: Vec<Tap>,
    stations: usize,
}

impl Captures {
    /// Start them.
    pub fn start(d: &Downlink) -> Result<Captures, Error> {
        let cpu = super::downlink::others_mask().map(|m| m.trailing_zeros() as usize);
        let filter = |outgoing| Filter {
            outgoing,
            stations: d.station_ip.clone(),
        };
        let mut taps = vec![Tap::start(&d.server_ns, SERVER_DEV, filter(true), cpu)?];
        for i in 0..d.station_ip.len() {
            let (ns, dev, outgoing) = d.arrival_tap(i);
            taps.push(Tap::start(ns, &dev, filter(outgoing), cpu)?);
        }
        Ok(Captures {
            taps,
            stations: d.station_ip.len(),
        })
    }

    /// Stop them and match what they saw (what a capture missed or could not match is said in
    /// [`Matched::notes`]).
    pub fn finish(mut self) -> Result<Matched, Error> {
        let mut tapped = self.taps.iter_mut().map(Tap::finish).collect::<Result<Vec<_>, _>>()?;
        let mut notes = Vec::new();
        for t in &tapped {
            if t.merged > 0 {
                notes.push(format!(
                    "testbed: a capture for the one-way delay saw {} packets merged by GRO: they match nothing sent, and count as unmatched",
                    t.merged
                ));
            }
            if t.dropped > 0 || t.overflow > 0 {
                notes.push(format!(
                    "testbed: a capture for the one-way delay missed packets ({} dropped by its socket, {} past its limit): the delays are of the rest",
                    t.dropped, t.overflow
                ));
            }
        }
        let sent = std::mem::take(&mut tapped[0].seen);
        let got = tapped[1..]
            .iter_mut()
            .flat_map(|t| std::mem::take(&mut t.seen))
            .collect();
        Ok(Matched {
            notes,
            ..match_delays(sent, got, self.stations)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(id: u16, dst: [u8; 4], ttl: u8, tos: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut p = vec![0x45, tos];
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&[0x40, 0, ttl, 17, 0xab, 0xcd]);
        p.extend_from_slice(&[10, 214, 0, 1]);
        p.extend_from_slice(&dst);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn keys_ignore_what_forwarding_changes_and_see_the_rest() {
        let st = [Ipv4Addr::new(10, 215, 0, 2), Ipv4Addr::new(10, 216, 0, 2)];
        let a = ipv4(7, [10, 216, 0, 2], 64, 0, b"12345678payload");
        // The AP decrements the TTL, redoes the checksum, marks DSCP.
        let mut fwd = ipv4(7, [10, 216, 0, 2], 63, 0x28, b"12345678payload");
        fwd[10] = 0x11;
        assert_eq!(key_of(&a, &st), key_of(&fwd, &st));
        assert_eq!(key_of(&a, &st).unwrap() & 7, 1);
        // The UDP checksum (bytes 6–7 of its header) completed on the way: the same packet.
        let mut done = a.clone();
        done[26] = 0x55;
        assert_eq!(key_of(&a, &st), key_of(&done, &st));
        done[25] = 0x55; // its length: another
        assert_ne!(key_of(&a, &st), key_of(&done, &st));
        // Another identification, payload or destination: another packet.
        assert_ne!(
            key_of(&a, &st),
            key_of(&ipv4(8, [10, 216, 0, 2], 64, 0, b"12345678payload"), &st)
        );
        assert_ne!(
            key_of(&a, &st),
            key_of(&ipv4(7, [10, 216, 0, 2], 64, 0, b"12345678payloaD"), &st)
        );
        assert_eq!(key_of(&ipv4(7, [10, 1, 0, 2], 64, 0, b"x"), &st), None);
        // Not IPv4, or cut short: none (and no panic).
        assert_eq!(key_of(&[0x60; 40], &st), None);
        assert_eq!(key_of(&a[..19], &st), None);
        let mut bad = a.clone();
        bad[0] = 0x4f; // a 60-byte header in a 35-byte packet
        assert_eq!(key_of(&bad, &st), None);
        bad[2] = 0xff; // a length past the capture: the bytes there are used
        bad[0] = 0x45;
        assert!(key_of(&bad, &st).is_some());
    }

    #[test]
    fn delays_pair_each_arrival_with_its_send_and_count_the_lost() {
        let s = |key: u64, t_ns: u64| Seen { key, t_ns };
        // Station 0: keys 8 and 16 sent once each, 16 lost; station 1: key 25 sent twice (a
        // retransmission with the same bytes), both arrive; key 33 arrives unsent (ignored).
        let sent = vec![s(8, 100), s(16, 110), s(25, 120), s(25, 500)];
        let got = vec![s(25, 700), s(8, 150), s(25, 130), s(33, 10)];
        let m = match_delays(sent, got, 2);
        assert_eq!(m.delays[0], vec![(150, 50)]);
        assert_eq!(m.delays[1], vec![(130, 10), (700, 200)]);
        assert_eq!(m.unmatched, vec![1, 0]);
        // The first copy lost, the retransmission arrives: the later send is its.
        let m = match_delays(vec![s(25, 120), s(25, 500)], vec![s(25, 520)], 2);
        assert_eq!((m.delays[1].clone(), m.unmatched[1]), (vec![(520, 20)], 1));
    }
}
