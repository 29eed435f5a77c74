//! Whose data the live AP lets into the air: the binding of each station's sender by the
//! handshake the station answers ([`Binding::route`]).
//!
//! **Without the key** the AP can only read a handshake's ids (`wire::handshake_id`), so an
//! attacker on the LAN who can spoof the station's address can rebind it, and one who can spoof
//! the sender's address can put datagrams into its air. `ap` says so when it starts.
//!
//! **With the key** (`ap --key-file`, the key `send` and `recv` hold) every step is verified:
//!
//! - a hello is relayed only when its tag verifies, and the same hello (its tag) at most once per
//!   [`HELLO_REPEAT`], so an old hello replayed from any number of ports costs the receiver a
//!   few answers a second, charged to that hello's own nonce there;
//! - hellos remembered for routing the answers are bounded per station ([`AP_HELLOS_KEPT`]) and
//!   per source address ([`HELLOS_PER_SOURCE`]): one address cannot push the others out;
//! - a cookie or hello-ack is routed back only when it verifies and names a relayed hello; a
//!   hello-ack binds the station's sender and gives the AP the session's keys, once (a replayed
//!   ack of an earlier binding is refused), and never moves a binding whose sender's data
//!   verified in the last [`BINDING_HOLD`];
//! - data enters the air only from the bound address, under the session's data key and its
//!   replay window: forged or replayed datagrams, of any size, cost the air nothing.
//!
//! What it cannot do: an on-path attacker who races genuine packets (a copy of a real hello from
//! another address before the real one arrives) or withholds them is a limit of any design that
//! keys on packets it cannot order (docs/reliable.md, "Security").

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use super::ApStats;
use crate::time::Ts;
use crate::transport::wire::{self, handshake_id, Hello, Kind, Psk, ReplayWindow, SessionKeys};

/// Hellos per station whose source the AP remembers, to route the station's answer (a cookie
/// or a hello-ack) back to it; the oldest goes first.
pub const AP_HELLOS_KEPT: usize = 64;
/// Of those, at most this many from one source address (its oldest goes first).
pub const HELLOS_PER_SOURCE: usize = 8;
/// With the key, the same hello (byte for byte) is relayed at most once per this long: a
/// sender repeats an unanswered hello every 20–200 ms, a replay as often as it likes.
pub const HELLO_REPEAT: Duration = Duration::from_millis(100);
/// With the key, a binding whose sender's data verified this recently is not moved.
pub const BINDING_HOLD: Duration = Duration::from_secs(1);
/// Handshakes (the hello's nonce) that bound a station once, remembered per station so that a
/// replayed hello-ack cannot bind it again.
const USED_KEPT: usize = 64;

/// Where a datagram the AP received goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Relay it to this address.
    To(SocketAddr),
    /// Station data from its bound sender: into the emulated WLAN.
    Data,
    /// Nowhere.
    Drop,
}

/// A session the station agreed to (a verified hello-ack), at the address of the hello it
/// answered.
struct Session {
    to: SocketAddr,
    keys: SessionKeys,
    nonce_s: [u8; wire::NONCE_LEN],
    nonce_r: [u8; wire::NONCE_LEN],
    replay: ReplayWindow,
    /// When its data last verified.
    last_data: Option<Ts>,
}

/// Sessions per station the AP keeps (the newest; the bound one is never pushed out).
const SESSIONS_KEPT: usize = 4;

#[derive(Default)]
struct Station {
    /// Without the key: the bound sender.
    keyless: Option<SocketAddr>,
    /// With the key: the sessions the station agreed to, oldest first.
    sessions: Vec<Session>,
    /// Recent hellos and their first source.
    hellos: VecDeque<(Hello, SocketAddr)>,
    /// With the key: tags of recently relayed hellos and when.
    relayed: VecDeque<([u8; 8], Ts)>,
    /// With the key: hello nonces of the sessions agreed so far.
    used: VecDeque<[u8; wire::NONCE_LEN]>,
}

/// The AP's binding of each station's sender (see the module docs): per station, the bound
/// sender and recent hellos' sources; with the key, the sessions it verifies data under.
pub struct Binding {
    key: Option<Psk>,
    stations: Vec<Station>,
}

impl Binding {
    /// For `stations` stations; `key`: the pre-shared key (see the module docs for what it
    /// changes).
    pub fn new(stations: usize, key: Option<Psk>) -> Self {
        Binding {
            key,
            stations: (0..stations).map(|_| Station::default()).collect(),
        }
    }

    /// The bound sender of station `i` at `now`.
    pub fn sender(&self, i: usize, now: Ts) -> Option<SocketAddr> {
        let st = self.stations.get(i)?;
        st.keyless.or_else(|| st.bound(now).map(|k| st.sessions[k].to))
    }

    /// Where `bytes` from `from`, arriving at `now` on station `i`'s port (the station at
    /// `station`), go; counted in `stats`.
    pub fn route(
        &mut self,
        i: usize,
        now: Ts,
        from: SocketAddr,
        station: SocketAddr,
        bytes: &[u8],
        stats: &mut ApStats,
    ) -> Route {
        let Some(st) = self.stations.get_mut(i) else {
            return Route::Drop;
        };
        let id = handshake_id(bytes);
        if from == station {
            return match (id, &self.key) {
                (Some((k @ (Kind::Cookie | Kind::HelloAck), h)), None) => st.answer_unverified(k, h, stats),
                (Some((Kind::Cookie, _)), Some(psk)) => match wire::parse_cookie(bytes, psk) {
                    Ok(c) => st.hello_source(&c.hello).map_or(Route::Drop, Route::To),
                    Err(_) => forged(stats),
                },
                (Some((Kind::HelloAck, _)), Some(psk)) => match wire::parse_hello_ack(bytes, psk) {
                    Ok(a) => st.agree(psk, &a, now, stats),
                    Err(_) => forged(stats),
                },
                _ => match st.keyless.or_else(|| st.bound(now).map(|k| st.sessions[k].to)) {
                    Some(to) => {
                        stats.feedback += 1;
                        Route::To(to)
                    }
                    None => Route::Drop,
                },
            };
        }
        if let Some((Kind::Hello, h)) = id {
            if let Some(psk) = &self.key {
                if wire::parse_hello(bytes, psk).is_err() {
                    return forged(stats);
                }
                if !st.fresh_hello(bytes, now) {
                    stats.hellos_repeated += 1;
                    return Route::Drop;
                }
            }
            st.remember_hello(h, from);
            stats.hellos += 1;
            return Route::To(station);
        }
        if self.key.is_none() {
            if st.keyless == Some(from) {
                return Route::Data;
            }
            stats.foreign += 1;
            return Route::Drop;
        }
        st.data(now, from, bytes, stats)
    }
}

fn forged(stats: &mut ApStats) -> Route {
    stats.forged += 1;
    Route::Drop
}

fn within(now: Ts, then: Option<Ts>, d: Duration) -> bool {
    then.is_some_and(|t| now.as_nanos().saturating_sub(t.as_nanos()) < d.as_nanos() as u64)
}

impl Station {
    fn hello_source(&self, h: &Hello) -> Option<SocketAddr> {
        self.hellos.iter().find(|(x, _)| x == h).map(|&(_, to)| to)
    }

    /// The bound session at `now`: the one whose data verified last, while that was within
    /// [`BINDING_HOLD`]; else the newest the station agreed to.
    fn bound(&self, now: Ts) -> Option<usize> {
        let live = (0..self.sessions.len())
            .filter(|&k| within(now, self.sessions[k].last_data, BINDING_HOLD))
            .max_by_key(|&k| self.sessions[k].last_data);
        live.or(self.sessions.len().checked_sub(1))
    }

    /// With the key: data from `from` enters the air only under the bound session's keys, once
    /// per sequence number. Data that verifies under another session of the same address takes
    /// the binding only when the bound session's data has not verified for [`BINDING_HOLD`].
    fn data(&mut self, now: Ts, from: SocketAddr, bytes: &[u8], stats: &mut ApStats) -> Route {
        let bound = self.bound(now);
        let held = bound.is_some_and(|b| within(now, self.sessions[b].last_data, BINDING_HOLD));
        // Newest first: a sender that re-handshook from the same address.
        let verified = (0..self.sessions.len()).rev().find_map(|k| {
            let s = &self.sessions[k];
            (s.to == from)
                .then(|| wire::parse_data(bytes, &s.keys).ok())
                .flatten()
                .map(|(d, _)| (k, d.seq))
        });
        let Some((k, seq)) = verified else {
            return if self.sessions.iter().any(|s| s.to == from) {
                forged(stats)
            } else {
                stats.foreign += 1;
                Route::Drop
            };
        };
        let s = &mut self.sessions[k];
        if !s.replay.accept(seq) {
            stats.replayed += 1;
            return Route::Drop;
        }
        if Some(k) != bound && held {
            stats.foreign += 1;
            return Route::Drop;
        }
        s.last_data = Some(now);
        Route::Data
    }

    /// Keep `h`'s first source: a copy replayed from elsewhere does not take its answer. At most
    /// [`HELLOS_PER_SOURCE`] per source and [`AP_HELLOS_KEPT`] in all, oldest first.
    fn remember_hello(&mut self, h: Hello, from: SocketAddr) {
        if self.hellos.iter().any(|(x, _)| *x == h) {
            return;
        }
        if self.hellos.iter().filter(|(_, s)| *s == from).count() >= HELLOS_PER_SOURCE {
            if let Some(k) = self.hellos.iter().position(|(_, s)| *s == from) {
                self.hellos.remove(k);
            }
        } else if self.hellos.len() >= AP_HELLOS_KEPT {
            self.hellos.pop_front();
        }
        self.hellos.push_back((h, from));
    }

    /// Whether this hello (by its tag) was not relayed in the last [`HELLO_REPEAT`]; records it.
    fn fresh_hello(&mut self, bytes: &[u8], now: Ts) -> bool {
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&bytes[bytes.len() - 8..]);
        while self
            .relayed
            .front()
            .is_some_and(|&(_, t)| !within(now, Some(t), HELLO_REPEAT))
        {
            self.relayed.pop_front();
        }
        if self.relayed.iter().any(|(t, _)| *t == tag) {
            return false;
        }
        if self.relayed.len() >= AP_HELLOS_KEPT {
            self.relayed.pop_front();
        }
        self.relayed.push_back((tag, now));
        true
    }

    /// Without the key: the station's answer goes back to the hello's source, and a hello-ack
    /// binds it (the station holds the key; the AP trusts the station's address).
    fn answer_unverified(&mut self, k: Kind, h: Hello, stats: &mut ApStats) -> Route {
        let Some(to) = self.hello_source(&h) else {
            return Route::Drop;
        };
        if k == Kind::HelloAck {
            if self.keyless != Some(to) {
                stats.bindings += 1;
            }
            self.keyless = Some(to);
        }
        Route::To(to)
    }

    /// With the key: a verified hello-ack `a` naming a relayed hello makes a session at that
    /// hello's source, once per handshake (a replay of an earlier one is refused). It is bound
    /// at once unless the bound session's data still verifies; then it waits for that to stop.
    fn agree(&mut self, psk: &Psk, a: &wire::HelloAck, now: Ts, stats: &mut ApStats) -> Route {
        let Some(to) = self.hello_source(&a.hello) else {
            return Route::Drop;
        };
        let h = &a.hello;
        if self
            .sessions
            .iter()
            .any(|s| s.nonce_s == h.nonce_s && s.nonce_r == a.nonce_r && s.to == to)
        {
            // The station repeating an ack: relay it, nothing changes.
            return Route::To(to);
        }
        if self.used.contains(&h.nonce_s) {
            stats.binds_refused += 1;
            return Route::Drop;
        }
        let bound = self.bound(now);
        if bound.is_some_and(|b| within(now, self.sessions[b].last_data, BINDING_HOLD)) {
            stats.binds_refused += 1;
        }
        if self.used.len() >= USED_KEPT {
            self.used.pop_front();
        }
        self.used.push_back(h.nonce_s);
        if self.sessions.len() >= SESSIONS_KEPT {
            // The oldest that is not bound.
            if let Some(k) = (0..self.sessions.len()).find(|&k| Some(k) != bound) {
                self.sessions.remove(k);
            }
        }
        stats.bindings += 1;
        self.sessions.push(Session {
            to,
            keys: SessionKeys::derive(psk, h.session, h.station, &h.nonce_s, &a.nonce_r),
            nonce_s: h.nonce_s,
            nonce_r: a.nonce_r,
            replay: ReplayWindow::default(),
            last_data: None,
        });
        Route::To(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::wire::{Data, HelloAck, NONCE_LEN};

    fn psk() -> Psk {
        Psk::new(b"binding tests' pre-shared key").unwrap()
    }

    fn a(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    const STA: u16 = 9000;

    fn hello(nonce: u8) -> (Hello, Vec<u8>) {
        let h = Hello {
            session: u32::from(nonce),
            station: 0,
            nonce_s: [nonce; NONCE_LEN],
        };
        let mut b = Vec::new();
        wire::emit_hello(&mut b, &psk(), &h, &[0; wire::COOKIE_BYTES]);
        (h, b)
    }

    fn ack(h: Hello, r: u8) -> (HelloAck, Vec<u8>) {
        let a = HelloAck {
            hello: h,
            nonce_r: [r; NONCE_LEN],
        };
        let mut b = Vec::new();
        wire::emit_hello_ack(&mut b, &psk(), &a);
        (a, b)
    }

    fn data(a: &HelloAck, seq: u64, len: usize) -> Vec<u8> {
        let h = a.hello;
        let keys = SessionKeys::derive(&psk(), h.session, h.station, &h.nonce_s, &a.nonce_r);
        let mut b = Vec::new();
        wire::emit_data(&mut b, &keys, &Data { seq, sent: Ts(1) }, len);
        b
    }

    fn ms(x: u64) -> Ts {
        Ts::from_millis(x)
    }

    /// A keyed binding with sender `a(1)` bound by the hello with nonce 1 at 0 ms.
    fn bound() -> (Binding, HelloAck, ApStats) {
        let mut b = Binding::new(1, Some(psk()));
        let mut st = ApStats::default();
        let (h, hb) = hello(1);
        assert_eq!(b.route(0, ms(0), a(1), a(STA), &hb, &mut st), Route::To(a(STA)));
        let (ak, ab) = ack(h, 7);
        assert_eq!(b.route(0, ms(0), a(STA), a(STA), &ab, &mut st), Route::To(a(1)));
        assert_eq!(b.sender(0, ms(0)), Some(a(1)));
        (b, ak, st)
    }

    #[test]
    fn with_the_key_forged_handshakes_and_data_go_nowhere() {
        let (mut b, ak, mut st) = bound();
        // A hello under another key, an ack under another key spoofed from the station, data
        // from the sender's address under another session's keys, and a 60 KB datagram.
        let other = Psk::new(b"somebody else's key, not ours").unwrap();
        let (h2, _) = hello(2);
        let mut forged_hello = Vec::new();
        wire::emit_hello(&mut forged_hello, &other, &h2, &[0; wire::COOKIE_BYTES]);
        assert_eq!(b.route(0, ms(1), a(66), a(STA), &forged_hello, &mut st), Route::Drop);
        let mut forged_ack = Vec::new();
        wire::emit_hello_ack(
            &mut forged_ack,
            &other,
            &HelloAck {
                hello: h2,
                nonce_r: [3; NONCE_LEN],
            },
        );
        assert_eq!(b.route(0, ms(1), a(STA), a(STA), &forged_ack, &mut st), Route::Drop);
        let wrong = HelloAck {
            nonce_r: [8; NONCE_LEN],
            ..ak
        };
        assert_eq!(
            b.route(0, ms(1), a(1), a(STA), &data(&wrong, 1, 100), &mut st),
            Route::Drop
        );
        let mut big = data(&ak, 2, 60_000);
        big[100] ^= 1;
        assert_eq!(b.route(0, ms(1), a(1), a(STA), &big, &mut st), Route::Drop);
        assert_eq!(st.forged, 4, "{st:?}");
        assert_eq!(b.sender(0, ms(1)), Some(a(1)));
        // The real sender's data goes through, once; another address's not at all.
        let d = data(&ak, 3, 1000);
        assert_eq!(b.route(0, ms(2), a(1), a(STA), &d, &mut st), Route::Data);
        assert_eq!(b.route(0, ms(2), a(1), a(STA), &d, &mut st), Route::Drop);
        assert_eq!(
            b.route(0, ms(2), a(66), a(STA), &data(&ak, 4, 10), &mut st),
            Route::Drop
        );
        assert_eq!((st.replayed, st.foreign), (1, 1));
    }

    #[test]
    fn with_the_key_a_replayed_handshake_never_takes_a_sending_station() {
        let (mut b, ak, mut st) = bound();
        let (h, hb) = hello(1);
        let (_, ab) = ack(h, 7);
        // The station repeating the current ack changes nothing.
        assert_eq!(b.route(0, ms(1), a(STA), a(STA), &ab, &mut st), Route::To(a(1)));
        assert_eq!(st.bindings, 1);
        // An old handshake (another sender's, recorded earlier) replayed from the attacker's
        // address, just after the real sender bound: agreed, but the real sender's data keeps
        // the station, and feedback goes to it.
        let (h9, hb9) = hello(9);
        let (_, ab9) = ack(h9, 9);
        let _ = b.route(0, ms(1), a(66), a(STA), &hb9, &mut st);
        assert_eq!(b.route(0, ms(1), a(STA), a(STA), &ab9, &mut st), Route::To(a(66)));
        assert_eq!(b.route(0, ms(2), a(1), a(STA), &data(&ak, 1, 10), &mut st), Route::Data);
        assert_eq!(b.sender(0, ms(2)), Some(a(1)));
        assert_eq!(b.route(0, ms(3), a(STA), a(STA), b"feedback", &mut st), Route::To(a(1)));
        // Replayed again, and the real one's first hello and ack: refused, even long after.
        let _ = b.route(0, ms(9000), a(66), a(STA), &hb, &mut st);
        assert_eq!(b.route(0, ms(9000), a(STA), a(STA), &ab9, &mut st), Route::To(a(66)));
        assert_eq!(
            b.sender(0, ms(9000)),
            Some(a(66)),
            "a quiet binding is the newest session's"
        );
        let (h2, hb2) = hello(2);
        let (ak2, ab2) = ack(h2, 2);
        let _ = b.route(0, ms(9001), a(1), a(STA), &hb2, &mut st);
        assert_eq!(b.route(0, ms(9001), a(STA), a(STA), &ab2, &mut st), Route::To(a(1)));
        assert_eq!(
            b.route(0, ms(9002), a(1), a(STA), &data(&ak2, 1, 10), &mut st),
            Route::Data
        );
        let _ = b.route(0, ms(9003), a(66), a(STA), &hb9, &mut st);
        assert_eq!(b.route(0, ms(9003), a(STA), a(STA), &ab9, &mut st), Route::To(a(66)));
        assert_eq!(b.sender(0, ms(9003)), Some(a(1)));
        assert_eq!(st.binds_refused, 0);
        // Two more recorded handshakes while the sender sends: agreed (the AP cannot tell them
        // old), counted as refused, and the station stays with its sender. The oldest session
        // not bound (hello 1's) makes room; its ack replayed then is refused outright.
        for n in [8, 7] {
            let (hn, hbn) = hello(n);
            let (_, abn) = ack(hn, n);
            let _ = b.route(0, ms(9004), a(66), a(STA), &hbn, &mut st);
            assert_eq!(b.route(0, ms(9004), a(STA), a(STA), &abn, &mut st), Route::To(a(66)));
        }
        assert_eq!((b.sender(0, ms(9004)), st.binds_refused), (Some(a(1)), 2));
        assert_eq!(b.route(0, ms(9005), a(STA), a(STA), &ab, &mut st), Route::Drop);
        assert_eq!(st.binds_refused, 3);
        assert_eq!(
            b.route(0, ms(9006), a(1), a(STA), &data(&ak2, 2, 10), &mut st),
            Route::Data
        );
    }

    #[test]
    fn with_the_key_a_sending_binding_holds_and_a_quiet_one_moves() {
        let (mut b, ak, mut st) = bound();
        assert_eq!(
            b.route(0, ms(500), a(1), a(STA), &data(&ak, 1, 10), &mut st),
            Route::Data
        );
        // A new sender at another address (a restarted process): agreed, but its data waits
        // while the bound one's verified within BINDING_HOLD, and takes the station after.
        let (h, hb) = hello(3);
        let (ak3, ab) = ack(h, 4);
        assert_eq!(b.route(0, ms(600), a(2), a(STA), &hb, &mut st), Route::To(a(STA)));
        assert_eq!(b.route(0, ms(600), a(STA), a(STA), &ab, &mut st), Route::To(a(2)));
        assert_eq!(
            b.route(0, ms(700), a(2), a(STA), &data(&ak3, 1, 10), &mut st),
            Route::Drop
        );
        assert_eq!((b.sender(0, ms(700)), st.binds_refused), (Some(a(1)), 1));
        assert_eq!(
            b.route(0, ms(1600), a(2), a(STA), &data(&ak3, 2, 10), &mut st),
            Route::Data
        );
        assert_eq!(b.sender(0, ms(1600)), Some(a(2)));
        assert_eq!(
            b.route(0, ms(1601), a(1), a(STA), &data(&ak, 2, 10), &mut st),
            Route::Drop
        );
    }

    #[test]
    fn with_the_key_a_replayed_hello_is_relayed_a_few_times_a_second_whatever_its_ports() {
        let mut b = Binding::new(1, Some(psk()));
        let mut st = ApStats::default();
        let (_, hb) = hello(1);
        let mut relayed = 0;
        // 10,000 copies from 200 ports over one second.
        for k in 0..10_000u64 {
            let port = 20_000 + (k % 200) as u16;
            if b.route(0, Ts(k * 100_000), a(port), a(STA), &hb, &mut st) == Route::To(a(STA)) {
                relayed += 1;
            }
        }
        assert_eq!(relayed, 10, "{st:?}");
        // The first source keeps it; a genuine new hello still goes through at once.
        assert_eq!(b.stations[0].hello_source(&hello(1).0), Some(a(20_000)));
        let (_, hb2) = hello(2);
        assert_eq!(
            b.route(0, Ts(1_000_000_000), a(1), a(STA), &hb2, &mut st),
            Route::To(a(STA))
        );
    }

    #[test]
    fn one_source_cannot_push_the_others_hellos_out() {
        let mut b = Binding::new(1, Some(psk()));
        let mut st = ApStats::default();
        let (h1, hb1) = hello(1);
        let _ = b.route(0, ms(0), a(1), a(STA), &hb1, &mut st);
        for n in 10..200u8 {
            let (_, hb) = hello(n);
            let _ = b.route(0, ms(1), a(66), a(STA), &hb, &mut st);
        }
        assert_eq!(b.stations[0].hello_source(&h1), Some(a(1)));
        assert!(b.stations[0].hellos.len() <= 1 + HELLOS_PER_SOURCE);
    }

    #[test]
    fn without_the_key_the_station_binds_by_its_answer() {
        let mut b = Binding::new(1, None);
        let mut st = ApStats::default();
        let (h, hb) = hello(1);
        assert_eq!(b.route(0, ms(0), a(66), a(STA), b"junk", &mut st), Route::Drop);
        assert_eq!(b.route(0, ms(0), a(1), a(STA), &hb, &mut st), Route::To(a(STA)));
        let (_, ab) = ack(h, 2);
        assert_eq!(b.route(0, ms(0), a(STA), a(STA), &ab, &mut st), Route::To(a(1)));
        assert_eq!(b.route(0, ms(0), a(1), a(STA), b"anything", &mut st), Route::Data);
        assert_eq!(b.sender(0, ms(0)), Some(a(1)));
        assert_eq!((st.foreign, st.bindings, st.forged), (1, 1, 0));
    }
}
