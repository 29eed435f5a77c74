//! The transport under attack, as someone on the same network would try it: forged, replayed,
//! out-of-range and flooded feedback, injected data from a third address, sequence numbers near
//! 2^64, a restarted receiver — sans-IO on a virtual clock, plus one run over real loopback
//! sockets. Each of these changed the sender's rate or the receiver's state before version 2 of
//! the wire format.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use aggrate::control::PiParams;
use aggrate::features::FeatureSpec;
use aggrate::runtime::{AggReport, Mode, OnlineEstimator, RxPacket};
use aggrate::transport::wire::{self, Feedback, HelloAck, Psk, SessionKeys, WireError, NONCE_LEN};
use aggrate::transport::{io, Receiver, Sender, REPORT_BURST};
use aggrate::Ts;
use proptest::prelude::*;

const INTERVAL: Duration = Duration::from_millis(500);

fn psk() -> Psk {
    Psk::new(b"attack tests' pre-shared key").unwrap()
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn sender(seed: u8) -> Sender {
    Sender::new(psk(), [seed; 32], 1, 1000, PiParams::default(), INTERVAL, Ts::ZERO).unwrap()
}

fn receiver(seed: u8) -> Receiver {
    let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), INTERVAL).unwrap();
    Receiver::new(psk(), [seed; 32], est)
}

/// A key holder that answers the sender's hello itself: it can tag anything.
fn rogue_keys(s: &mut Sender, now: Ts) -> SessionKeys {
    let t = s.poll_transmit(now).expect("a hello");
    let hello = wire::parse_hello(&s.buffer()[..t.len], &psk()).unwrap();
    let ack = HelloAck {
        hello,
        nonce_r: [0x5a; NONCE_LEN],
    };
    let mut b = Vec::new();
    wire::emit_hello_ack(&mut b, &psk(), &ack);
    s.handle_datagram(now, 0, &b).unwrap();
    SessionKeys::derive(&psk(), hello.session, hello.station, &hello.nonce_s, &ack.nonce_r)
}

fn feedback(keys: &SessionKeys, number: u32, report: AggReport) -> Vec<u8> {
    let mut b = Vec::new();
    wire::emit_feedback(
        &mut b,
        keys,
        &Feedback {
            number,
            highest_seq: 1,
            report,
        },
    );
    b
}

fn report(level: f64) -> AggReport {
    AggReport {
        start: Ts::ZERO,
        end: Ts::from_millis(500),
        frames: 10,
        packets: 100,
        mean_agg: level,
        rx_rate_bps: 1e8,
        ..AggReport::default()
    }
}

/// Sender and receiver over a virtual clock from `from` to `until`; data and hellos reach the
/// receiver from address 1, replies go back to station 0.
fn run(s: &mut Sender, r: &mut Receiver, from: Ts, until: Ts) {
    let mut now = from;
    while now < until {
        s.handle_timeout(now);
        while let Some(t) = s.poll_transmit(now) {
            let b = s.buffer()[..t.len].to_vec();
            let _ = r.handle_datagram(now, addr(1), &b);
        }
        while let Some((n, _)) = r.poll_transmit(now) {
            let b = r.buffer()[..n].to_vec();
            let _ = s.handle_datagram(now, 0, &b);
        }
        now = s
            .poll_timeout()
            .min(now + Duration::from_millis(5))
            .max(now + Duration::from_micros(1));
    }
}

#[test]
fn there_is_no_default_key_and_weak_keys_are_refused() {
    assert!(
        Psk::new(b"aggrate-demo-key").is_ok(),
        "16 bytes pass the length check …"
    );
    assert!(Psk::new(b"short key").is_err());
    assert!(Psk::new(&[7u8; 32]).is_err(), "… a constant key does not");
    // A sender and a receiver with different keys never open a session.
    let mut s = sender(1);
    let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), INTERVAL).unwrap();
    let mut r = Receiver::new(Psk::new(b"another pre-shared key!").unwrap(), [2; 32], est);
    run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(2000));
    assert!(!s.connected(0));
    assert_eq!(s.stats().sent, 0, "no data without a session");
    assert!(r.stats().dropped > 0 && r.stats().hellos == 0);
}

#[test]
fn forged_feedback_without_the_key_changes_nothing() {
    let mut s = sender(1);
    let mut r = receiver(2);
    run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(50));
    assert!(s.connected(0));
    let before = s.rate(0);
    // The attacker knows the session id (clear text) but not the keys.
    let t = s.poll_transmit(Ts::from_millis(60)).unwrap();
    let (_, session, station) = wire::peek(&s.buffer()[..t.len]).unwrap();
    let guessed = SessionKeys::derive(
        &Psk::new(b"a guess at the key....").unwrap(),
        session,
        station,
        &[0; 32],
        &[0; 32],
    );
    for n in 1..50 {
        let e = s.handle_datagram(Ts::from_millis(60), 0, &feedback(&guessed, n, report(0.0)));
        assert!(matches!(e, Err(WireError::Tag { at: 112 })), "{e:?}");
    }
    assert_eq!(s.rate(0), before);
    assert_eq!(s.stats().feedback_dropped, 49);
}

#[test]
fn out_of_range_reports_from_a_key_holder_are_refused() {
    for (what, r) in [
        ("μ_N = −1e9", report(-1e9)),
        ("μ_N = NaN", report(f64::NAN)),
        ("μ_N = 65", report(65.0)),
        (
            "corrected μ_N = −inf",
            AggReport {
                corrected_agg: Some(f64::NEG_INFINITY),
                ..report(10.0)
            },
        ),
        (
            "μ_R = +inf",
            AggReport {
                phy_rate_bps: Some(f64::INFINITY),
                ..report(10.0)
            },
        ),
        (
            "receive rate = NaN",
            AggReport {
                rx_rate_bps: f64::NAN,
                ..report(10.0)
            },
        ),
    ] {
        let mut s = sender(1);
        let keys = rogue_keys(&mut s, Ts::ZERO);
        let before = s.rate(0);
        let e = s.handle_datagram(Ts::from_millis(10), 0, &feedback(&keys, 1, r));
        assert!(matches!(e, Err(WireError::Field { .. })), "{what}: {e:?}");
        assert_eq!(s.rate(0), before, "{what}");
        // Pacing stays pacing: the next data packet is a full interval at 20 Mb/s away.
        let t0 = Ts::from_millis(10);
        let mut sent = 0;
        let mut now = t0;
        while now < Ts::from_millis(110) {
            while s.poll_transmit(now).is_some() {
                sent += 1;
            }
            now = now + Duration::from_micros(100);
        }
        assert!(sent < 300, "{what}: {sent} datagrams in 100 ms at 20 Mb/s");
    }
}

#[test]
fn flooded_feedback_is_limited_per_interval() {
    let mut s = sender(1);
    let keys = rogue_keys(&mut s, Ts::ZERO);
    // 1,000 valid, increasing reports within 10 ms.
    for n in 1..=1000u32 {
        let _ = s.handle_datagram(Ts::from_micros(10 * n as u64), 0, &feedback(&keys, n, report(1.0)));
    }
    let st = s.stats();
    assert!(st.feedback <= REPORT_BURST as u64 + 1, "{st:?}");
    assert!(st.feedback_limited >= 990, "{st:?}");
    // Start-up multiplies by 1.5 per accepted report: at most a few steps from 20 Mb/s.
    assert!(
        s.rate(0).mbps <= 20.0 * 1.5f64.powi(REPORT_BURST as i32 + 1) + 1e-9,
        "{}",
        s.rate(0).mbps
    );
}

#[test]
fn feedback_recorded_in_an_earlier_run_is_refused_and_does_not_lock_out() {
    // Run 1: record every feedback datagram.
    let (mut s1, mut r1) = (sender(1), receiver(2));
    run(&mut s1, &mut r1, Ts::ZERO, Ts::from_millis(3000));
    let mut recorded = Vec::new();
    let mut now = Ts::from_millis(3000);
    while recorded.len() < 3 {
        while let Some(t) = s1.poll_transmit(now) {
            let b = s1.buffer()[..t.len].to_vec();
            let _ = r1.handle_datagram(now, addr(1), &b);
        }
        while let Some((n, _)) = r1.poll_transmit(now) {
            recorded.push(r1.buffer()[..n].to_vec());
        }
        now = now + Duration::from_millis(1);
    }
    // Run 2 (same key, new nonces): the replays are refused, genuine feedback still counts.
    let (mut s2, mut r2) = (sender(3), receiver(4));
    run(&mut s2, &mut r2, Ts::ZERO, Ts::from_millis(100));
    for b in &recorded {
        assert!(s2.handle_datagram(Ts::from_millis(100), 0, b).is_err());
    }
    assert_eq!(s2.stats().feedback, 0);
    run(&mut s2, &mut r2, Ts::from_millis(100), Ts::from_millis(3000));
    assert!(s2.stats().feedback >= 4, "{:?}", s2.stats());
    // Within a run, a replayed report is stale.
    let (mut s, mut r) = (sender(5), receiver(6));
    run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(1100));
    let last = {
        let mut now = Ts::from_millis(1100);
        loop {
            while let Some(t) = s.poll_transmit(now) {
                let b = s.buffer()[..t.len].to_vec();
                let _ = r.handle_datagram(now, addr(1), &b);
            }
            if let Some((n, _)) = r.poll_transmit(now) {
                let b = r.buffer()[..n].to_vec();
                s.handle_datagram(now, 0, &b).unwrap();
                break b;
            }
            now = now + Duration::from_millis(1);
        }
    };
    assert!(matches!(
        s.handle_datagram(Ts::from_millis(2000), 0, &last),
        Err(WireError::Stale { .. })
    ));
}

#[test]
fn a_restarted_receiver_rejoins() {
    let (mut s, mut r) = (sender(1), receiver(2));
    run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(2000));
    let fed = s.stats().feedback;
    assert!(fed >= 3);
    // The receiver process restarts: new state, same key.
    let mut r = receiver(9);
    run(&mut s, &mut r, Ts::from_millis(2000), Ts::from_millis(6000));
    assert_eq!(s.stats().sessions, 2, "{:?}", s.stats());
    assert!(s.stats().feedback > fed + 3, "feedback flows again: {:?}", s.stats());
    assert!(r.stats().received > 0);
}

#[test]
fn injected_data_from_a_third_address_is_not_counted_and_does_not_move_feedback() {
    let (mut s, mut r) = (sender(1), receiver(2));
    run(&mut s, &mut r, Ts::ZERO, Ts::from_millis(100));
    let received = r.stats().received;
    // The attacker copies a genuine datagram (valid tag) and sends it from elsewhere, and
    // makes up datagrams with the clear-text session id and a huge sequence number.
    let t = s.poll_transmit(s.poll_timeout()).unwrap();
    let genuine = s.buffer()[..t.len].to_vec();
    assert_eq!(
        r.handle_datagram(Ts::from_millis(100), addr(666), &genuine),
        Err(WireError::Peer)
    );
    let mut forged = genuine.clone();
    forged[12..20].copy_from_slice(&(u64::MAX - 1).to_be_bytes());
    for from in [addr(1), addr(666)] {
        assert!(r.handle_datagram(Ts::from_millis(100), from, &forged).is_err());
    }
    assert_eq!(r.stats().received, received);
    assert_eq!(r.peer(), Some(addr(1)), "feedback still goes to the sender");
    run(&mut s, &mut r, Ts::from_millis(101), Ts::from_millis(1100));
    let rep = r.last_report().unwrap();
    assert_eq!(rep.lost, 0, "{rep:?}");
}

#[test]
fn sequence_numbers_near_2_pow_64_neither_wrap_nor_panic() {
    // The estimator alone (debug builds check overflow): a key holder sends seq 2^64 − 3 … max.
    let mut e = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), INTERVAL).unwrap();
    let mut host = Ts::from_millis(1);
    for seq in [1, 2, 3, u64::MAX - 3, u64::MAX - 2, u64::MAX, 4, 5] {
        e.push(&RxPacket {
            host,
            seq: Some(seq),
            sent: None,
            len: 1000,
            tsft: None,
            phy_rate_bps: None,
        });
        host = host + Duration::from_micros(10);
    }
    let rep = e.poll_report(Ts::from_millis(1000)).unwrap();
    assert_eq!(rep.packets, 8);
    assert!(rep.lost <= 2, "lost {} (was 18,446,744,073,709,551,xxx)", rep.lost);
    assert!(e.seq_jumps() >= 1, "the jump to 2^64 − 3 is a jump, not losses");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// No sequence of authenticated reports, valid or not, takes the sender outside its clamps
    /// or makes its pacing interval shorter than the top rate's.
    #[test]
    fn no_report_sequence_moves_the_sender_past_its_clamps(
        reports in proptest::collection::vec(
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), 0u64..5_000_000, any::<u32>()),
            1..40,
        )
    ) {
        let p = PiParams::default();
        let mut s = Sender::new(psk(), [1; 32], 1, 1000, p, INTERVAL, Ts::ZERO).unwrap();
        let keys = rogue_keys(&mut s, Ts::ZERO);
        let mut now = Ts::ZERO;
        for (n, (agg, corr, phy, rx, dt_us, number)) in reports.into_iter().enumerate() {
            now = now + Duration::from_micros(dt_us);
            let r = AggReport {
                start: Ts::ZERO,
                end: now,
                frames: 1,
                packets: 2,
                mean_agg: f64::from_bits(agg),
                corrected_agg: (n % 3 == 0).then(|| f64::from_bits(corr)),
                rx_rate_bps: f64::from_bits(rx),
                phy_rate_bps: (n % 2 == 0).then(|| f64::from_bits(phy)),
                ..AggReport::default()
            };
            let _ = s.handle_datagram(now, 0, &feedback(&keys, number, r));
            s.handle_timeout(now);
            let x = s.rate(0).mbps;
            prop_assert!(x.is_finite() && x >= p.min_mbps && x <= p.max_mbps, "rate {x}");
            let gap = s.rate(0).interval(1028);
            let floor = aggrate::control::Rate { mbps: p.max_mbps }.interval(1028);
            prop_assert!(gap >= floor, "pacing gap {:?} below {:?}", gap, floor);
        }
    }
}

#[test]
fn over_real_sockets_a_third_address_cannot_steer_the_loop() {
    let key = Psk::new(&io::entropy().unwrap()).unwrap();
    let rx_sock = io::timestamped_socket(addr(0)).unwrap();
    let rx_addr = rx_sock.local_addr().unwrap();
    let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(100)).unwrap();
    let mut rx = Receiver::new(key.clone(), io::entropy().unwrap(), est);
    let mut tx = Sender::new(
        key,
        io::entropy().unwrap(),
        1,
        1000,
        PiParams::default(),
        Duration::from_millis(100),
        io::realtime(),
    )
    .unwrap();
    let tx_sock = UdpSocket::bind(addr(0)).unwrap();
    let tx_addr = tx_sock.local_addr().unwrap();
    let attacker = UdpSocket::bind(addr(0)).unwrap();
    let stop = AtomicBool::new(false);
    let (ts, rs) = std::thread::scope(|sc| {
        let r = sc.spawn(|| io::run_receiver(&rx_sock, &mut rx, Duration::from_millis(1500), &stop, |_| {}));
        let t = sc.spawn(|| {
            io::run_sender(
                &tx_sock,
                &[rx_addr],
                &mut tx,
                Duration::from_millis(1400),
                &stop,
                |_, _| {},
            )
        });
        // Clear-text copies of the header with a huge sequence number, from a third socket.
        std::thread::sleep(Duration::from_millis(300));
        let mut fake = vec![0u8; wire::DATA_HEADER_LEN + 100];
        fake[..2].copy_from_slice(&wire::MAGIC);
        fake[2] = wire::VERSION;
        fake[3] = 1;
        fake[12..20].copy_from_slice(&(u64::MAX - 1).to_be_bytes());
        for _ in 0..200 {
            let _ = attacker.send_to(&fake, rx_addr);
        }
        (t.join().unwrap().unwrap(), r.join().unwrap().unwrap())
    });
    assert_eq!(ts.sessions, 1, "{ts:?}");
    assert!(ts.feedback >= 5, "{ts:?}");
    assert_eq!(ts.feedback_dropped, 0, "{ts:?}");
    assert!(rs.dropped >= 200, "{rs:?}");
    assert_eq!(rx.peer(), Some(tx_addr));
    let last = rx.last_report().unwrap();
    assert!(last.lost < 1000, "{last:?}");
}

#[test]
fn the_live_ap_does_not_let_a_third_address_take_the_senders_place() {
    let ap_port = UdpSocket::bind(addr(0)).unwrap().local_addr().unwrap();
    let station = UdpSocket::bind(addr(0)).unwrap();
    station.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let sender = UdpSocket::bind(addr(0)).unwrap();
    sender.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let attacker = UdpSocket::bind(addr(0)).unwrap();
    attacker.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let wlan = aggrate::wlan::WlanConfig::vht_stations(&[9]).check().unwrap();
    let stop = AtomicBool::new(false);
    let sta_addr = station.local_addr().unwrap();
    let stats = std::thread::scope(|sc| {
        let ap = sc.spawn(|| {
            aggrate::wlan::live::run_ap(&[ap_port], &[sta_addr], wlan, 1, Duration::from_millis(1500), &stop)
        });
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..20 {
            sender.send_to(&[1u8; 200], ap_port).unwrap();
        }
        for _ in 0..10 {
            attacker.send_to(&[2u8; 200], ap_port).unwrap();
        }
        // The station hears the sender's data (not the attacker's), then sends feedback.
        let mut buf = [0u8; 512];
        let mut got = Vec::new();
        while station.recv(&mut buf).is_ok() {
            got.push(buf[0]);
            if got.len() == 20 {
                break;
            }
        }
        assert_eq!(got, vec![1u8; 20]);
        station.send_to(b"feedback", ap_port).unwrap();
        let n = sender.recv(&mut buf).expect("feedback relayed to the sender");
        assert_eq!(&buf[..n], b"feedback");
        assert!(attacker.recv(&mut buf).is_err(), "nothing relayed to the attacker");
        ap.join().unwrap().unwrap()
    });
    assert_eq!(stats.foreign, 10, "{stats:?}");
    assert_eq!(stats.data_in, 20);
}
