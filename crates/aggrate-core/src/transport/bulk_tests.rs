//! The reliable stream through the whole transport: frames inside authenticated data, acks as
//! authenticated, numbered datagrams, over a lossy path with an attacker on it.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::reliable::tests::Rng;
use super::reliable::{BulkConfig, BulkReceiver, BulkSender};
use super::*;
use crate::features::FeatureSpec;
use crate::runtime::Mode;

const SIZE: usize = 1472;

fn cfg() -> BulkConfig {
    BulkConfig {
        window: 256,
        ..super::bulk_config(SIZE, 0x5eed).unwrap()
    }
}

fn ends() -> (Sender, Receiver) {
    let psk = Psk::new(b"the test's pre-shared key").unwrap();
    let mut s = Sender::new(
        psk.clone(),
        [1; 32],
        1,
        SIZE - wire::DATA_HEADER_LEN,
        PiParams::default(),
        Duration::from_millis(100),
        Ts::ZERO,
    )
    .unwrap();
    s.set_bulk(0, BulkSender::new(cfg()).unwrap());
    let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(100)).unwrap();
    let mut r = Receiver::new(psk, [2; 32], est);
    r.set_bulk(BulkReceiver::new(cfg()).unwrap());
    (s, r)
}

/// Offer station 0's stream the rest of `content` it has room for (the end once all is in).
fn feed(s: &mut Sender, content: &[u8], offered: &mut usize) {
    if let Some(b) = s.bulk_mut(0) {
        *offered += b.offer(&content[*offered..]);
        if *offered == content.len() {
            b.finish();
        }
    }
}

/// What the sender sends at `now`, straight to the receiver (from `from`).
fn send(s: &mut Sender, r: &mut Receiver, now: Ts, from: SocketAddr) {
    s.handle_timeout(now);
    while let Some(t) = s.poll_transmit(now) {
        let d = s.buffer()[..t.len].to_vec();
        let _ = r.handle_datagram(now, from, &d);
    }
}

#[derive(Default)]
struct Outcome {
    got: Vec<u8>,
    done: bool,
    acks_replayed: u64,
    acks_forged: u64,
    data_replayed: u64,
}

/// A one-way path of `delay` that loses a share `loss` of datagrams and copies a share `dup`.
struct Link {
    q: VecDeque<(Ts, Vec<u8>)>,
    delay: Duration,
}

impl Link {
    fn push(&mut self, now: Ts, b: &[u8], rng: &mut Rng, loss: f64, dup: f64) {
        if rng.unit() < loss {
            return;
        }
        self.q.push_back((now + self.delay, b.to_vec()));
        if rng.unit() < dup {
            self.q.push_back((now + self.delay * 2, b.to_vec()));
        }
    }
    fn due(&mut self, now: Ts) -> Option<Vec<u8>> {
        if self.q.front().is_some_and(|(t, _)| *t <= now) {
            return self.q.pop_front().map(|(_, b)| b);
        }
        None
    }
}

/// Carry `content` from sender to receiver; on the way an attacker replays acks and data it
/// saw and forges acks (flipping bits of a real one), each refused without effect.
fn transfer(seed: u64, loss: f64, dup: f64, content: &[u8]) -> Outcome {
    let (mut s, mut r) = ends();
    let mut rng = Rng(seed);
    let (mut down, mut up) = (
        Link {
            q: VecDeque::new(),
            delay: Duration::from_millis(5),
        },
        Link {
            q: VecDeque::new(),
            delay: Duration::from_millis(5),
        },
    );
    let (mut seen_acks, mut seen_data) = (Vec::<Vec<u8>>::new(), Vec::<Vec<u8>>::new());
    let mut out = Outcome::default();
    let (mut offered, mut now) = (0usize, Ts::ZERO);
    let from = SocketAddr::from(([127, 0, 0, 1], 1));
    while now < Ts::from_millis(120_000) {
        feed(&mut s, content, &mut offered);
        s.handle_timeout(now);
        while let Some(t) = s.poll_transmit(now) {
            let b = &s.buffer()[..t.len];
            down.push(now, b, &mut rng, loss, dup);
            if b[3] == 1 && seen_data.len() < 64 {
                seen_data.push(b.to_vec());
            }
        }
        while let Some(b) = down.due(now) {
            let _ = r.handle_datagram(now, from, &b);
        }
        if let Some(b) = r.bulk_mut() {
            while let Some(bytes) = b.read() {
                out.got.extend_from_slice(bytes);
            }
        }
        while let Some((n, _)) = r.poll_transmit(now) {
            let b = &r.buffer()[..n];
            up.push(now, b, &mut rng, loss, dup);
        }
        while let Some(b) = up.due(now) {
            // The attacker keeps acks the sender took (a copy of one the path lost is the
            // receiver's own word, late: taking it is right).
            if s.handle_datagram(now, 0, &b).is_ok() && b[3] == 6 && seen_acks.len() < 64 {
                seen_acks.push(b);
            }
        }
        // The attacker, now and then.
        if !seen_acks.is_empty() && rng.unit() < 0.1 {
            let old = seen_acks[(rng.unit() * seen_acks.len() as f64) as usize].clone();
            let (rate, acked) = (s.rate(0), s.bulk(0).map(|b| b.acked()));
            // A forgery with a fresh number (so that only the tag can refuse it), the frame's
            // bytes changed too or not.
            let mut forged = old.clone();
            let n = forged.len();
            forged[12..16].copy_from_slice(&(s.stats().acks as u32 + 1_000).to_be_bytes());
            if rng.unit() < 0.5 {
                let at = wire::ACK_HEADER_LEN + (rng.unit() * (n - wire::ACK_HEADER_LEN) as f64) as usize;
                forged[at.min(n - 1)] ^= 0x40;
            }
            // A copy of an ack already taken is stale — or, once the loss made the ends start
            // a new session, of another session (refused by its id before anything else).
            let e = s.handle_datagram(now, 0, &old).unwrap_err();
            assert!(matches!(e, WireError::Stale { .. } | WireError::Session { .. }), "{e}");
            out.acks_replayed += 1;
            let e = s.handle_datagram(now, 0, &forged).unwrap_err();
            assert!(
                matches!(e, WireError::Tag { .. } | WireError::Session { .. }),
                "a forged ack: {e}"
            );
            out.acks_forged += 1;
            assert_eq!((s.rate(0), s.bulk(0).map(|b| b.acked())), (rate, acked));
        }
        if !seen_data.is_empty() && rng.unit() < 0.1 {
            let old = &seen_data[(rng.unit() * seen_data.len() as f64) as usize];
            let before = r.bulk().map(|b| (b.stats(), b.is_done()));
            if r.handle_datagram(now, from, old).is_err() {
                out.data_replayed += 1;
                // Refused before the stream: nothing in it moved.
                assert_eq!(r.bulk().map(|b| (b.stats(), b.is_done())), before);
            }
        }
        if s.bulk(0).is_some_and(|b| b.is_done()) && r.bulk().is_some_and(|b| b.is_done()) {
            out.done = true;
            break;
        }
        let next = s.poll_timeout().min(r.poll_timeout(now));
        now = next.clamp(now + Duration::from_micros(10), now + Duration::from_millis(1));
    }
    out
}

#[test]
fn a_stream_crosses_the_transport_whole_and_the_attacker_moves_nothing() {
    let content: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let o = transfer(7, 0.05, 0.02, &content);
    assert!(o.done, "not done: {} of {} bytes", o.got.len(), content.len());
    assert!(o.got == content, "the bytes differ");
    let counts = (o.acks_replayed, o.acks_forged, o.data_replayed);
    assert!(counts.0 > 5 && counts.1 > 5 && counts.2 > 5, "{counts:?}");
}

#[test]
fn acks_never_reach_the_controller_and_numbers_only_rise() {
    let (mut s, mut r) = ends();
    let content = vec![9u8; 50_000];
    let from = SocketAddr::from(([127, 0, 0, 1], 1));
    let mut acks = Vec::new();
    let mut now = Ts::ZERO;
    let mut offered = 0;
    while now < Ts::from_millis(5_000) && !s.bulk(0).is_some_and(|b| b.is_done()) {
        feed(&mut s, &content, &mut offered);
        send(&mut s, &mut r, now, from);
        while let Some((n, _)) = r.poll_transmit(now) {
            let b = r.buffer()[..n].to_vec();
            if b[3] == 6 {
                acks.push(b.clone());
            }
            s.handle_datagram(now, 0, &b).unwrap();
        }
        now = now + Duration::from_micros(200);
    }
    assert!(s.bulk(0).is_some_and(|b| b.is_done()) && acks.len() > 3);
    assert_eq!(s.stats().acks, acks.len() as u64);
    // Acks step nothing: the loop moved on reports alone (far fewer than acks).
    let (updates, feedback) = (s.control().0.updates(), s.stats().feedback);
    assert!(updates <= feedback && feedback < s.stats().acks, "{updates} {feedback}");
    let rate = s.rate(0);
    for a in &acks {
        assert!(matches!(s.handle_datagram(now, 0, a), Err(WireError::Stale { .. })));
    }
    assert_eq!((s.rate(0), s.control().0.updates()), (rate, updates));
    // A station without a stream refuses acks by kind.
    let (mut plain, _) = ends();
    plain.stations[0].bulk = None;
    plain.stations[0].keys = s.stations[0].keys.clone();
    assert_eq!(plain.handle_datagram(now, 0, &acks[0]), Err(WireError::Kind(6)));
}

/// A case CI met (2026-12-05): the loss made the ends start a new session mid-transfer, and the
/// attacker's replayed ack of the old session was refused by its session id (right) where the
/// test expected "stale".
#[test]
fn replayed_acks_of_an_earlier_session_are_refused_and_the_stream_completes() {
    let (seed, loss, len) = (8_148_010_157_010_774_011u64, 0.130_445_086_641_789_14, 52_698u64);
    let content: Vec<u8> = (0..len).map(|i| (i.wrapping_mul(seed | 1) >> 7) as u8).collect();
    let o = transfer(seed, loss, 0.01, &content);
    assert!(o.done && o.got == content, "{} of {len} bytes", o.got.len());
}

proptest! {
    // Seeded, as everything random here: the same cases every run (new ones: change the seed).
    #![proptest_config(ProptestConfig {
        cases: 12,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0033),
        ..ProptestConfig::default()
    })]
    /// Byte-exact through the transport at any loss up to 20 % both ways, with copies and an
    /// attacker on the path.
    #[test]
    fn byte_exact_at_any_loss(seed in any::<u64>(), loss in 0.0f64..0.2, len in 1usize..120_000) {
        let content: Vec<u8> = (0..len as u64).map(|i| (i.wrapping_mul(seed | 1) >> 7) as u8).collect();
        let o = transfer(seed, loss, 0.01, &content);
        prop_assert!(o.done, "not done at loss {loss}: {} of {len}", o.got.len());
        prop_assert!(o.got == content);
    }
}

/// A new session in the middle of a transfer (feedback lost for three intervals: the sender
/// opens one) carries the same stream on; a restarted sender's new transfer (another stream id)
/// is refused by the receiver, which keeps the first one's state.
#[test]
fn a_new_session_carries_the_stream_on_and_a_restarted_sender_is_not_mixed_in() {
    let (mut s, mut r) = ends();
    let content: Vec<u8> = (0..2_000_000u32).map(|i| (i.wrapping_mul(7919) >> 5) as u8).collect();
    let from = SocketAddr::from(([127, 0, 0, 1], 1));
    let (mut got, mut offered, mut now) = (Vec::new(), 0usize, Ts::ZERO);
    let mut silent_from = None;
    while now < Ts::from_millis(20_000) && !s.bulk(0).is_some_and(|b| b.is_done()) {
        feed(&mut s, &content, &mut offered);
        send(&mut s, &mut r, now, from);
        if let Some(b) = r.bulk_mut() {
            while let Some(bytes) = b.read() {
                got.extend_from_slice(bytes);
            }
        }
        // Half way, everything back to the sender is lost for 1.6 s (three intervals and more).
        if silent_from.is_none() && got.len() > content.len() / 2 {
            silent_from = Some(now);
        }
        let silent = silent_from.is_some_and(|t| now >= t && now < t + Duration::from_millis(1600));
        while let Some((n, _)) = r.poll_transmit(now) {
            let b = r.buffer()[..n].to_vec();
            if !silent {
                let _ = s.handle_datagram(now, 0, &b);
            }
        }
        now = now + Duration::from_micros(500);
    }
    assert!(
        s.stats().sessions >= 2,
        "the silence opened a new session: {:?}",
        s.stats()
    );
    assert!(
        s.bulk(0).is_some_and(|b| b.is_done()) && got == content,
        "{} of {}",
        got.len(),
        content.len()
    );
    // Another sender (a restart: new session, new stream id) to the same receiver.
    let psk = Psk::new(b"the test's pre-shared key").unwrap();
    let mut s2 = Sender::new(
        psk,
        [9; 32],
        1,
        SIZE - wire::DATA_HEADER_LEN,
        PiParams::default(),
        Duration::from_millis(100),
        now,
    )
    .unwrap();
    s2.set_bulk(0, BulkSender::new(BulkConfig { stream: 0xbad, ..cfg() }).unwrap());
    let b2 = s2.bulk_mut(0).unwrap();
    b2.offer(b"another file");
    assert!(b2.finish());
    let before = r.bulk().map(|b| b.stats());
    let from2 = SocketAddr::from(([127, 0, 0, 1], 2));
    for _ in 0..300 {
        s2.handle_timeout(now);
        while let Some(t) = s2.poll_transmit(now) {
            let d = s2.buffer()[..t.len].to_vec();
            let _ = r.handle_datagram(now, from2, &d);
        }
        while let Some((n, _)) = r.poll_transmit(now) {
            let b = r.buffer()[..n].to_vec();
            let _ = s2.handle_datagram(now, 0, &b);
        }
        now = now + Duration::from_millis(1);
    }
    assert!(r.stats().other_stream > 0, "{:?} {:?}", r.stats(), s2.stats());
    // The first stream's state did not move (only the refusals were counted).
    let mut after = r.bulk().map(|b| b.stats()).unwrap();
    let before = before.unwrap();
    assert!(after.refused > before.refused);
    after.refused = before.refused;
    assert_eq!(after, before);
}

/// A stream waiting for its producer: an empty datagram every BULK_KEEPALIVE tells the receiver
/// the sender is there.
#[test]
fn a_waiting_stream_keeps_alive() {
    let (mut s, mut r) = ends();
    let from = SocketAddr::from(([127, 0, 0, 1], 1));
    let mut now = Ts::ZERO;
    s.bulk_mut(0).unwrap().offer(&vec![5u8; 3 * cfg().segment]);
    let mut idle_from = None;
    while now < Ts::from_millis(12_000) {
        send(&mut s, &mut r, now, from);
        if let Some(b) = r.bulk_mut() {
            while b.read().is_some() {}
        }
        while let Some((n, _)) = r.poll_transmit(now) {
            let b = r.buffer()[..n].to_vec();
            let _ = s.handle_datagram(now, 0, &b);
        }
        if idle_from.is_none() && s.bulk(0).is_some_and(|b| !b.outstanding()) {
            idle_from = Some(r.stats().received);
        }
        now = now + Duration::from_millis(1);
    }
    let kept = r.stats().received - idle_from.expect("the three segments were acknowledged");
    assert!((2..=3).contains(&kept), "{kept} keepalives in ~12 s");
    assert_eq!(r.stats().frames_refused, 0);
}
