//! The transport's wire parser on arbitrary datagrams — data, feedback, hello, cookie,
//! hello-ack, the keyless handshake-id read the live AP does — through the sans-IO sender and
//! receiver too (a handshake with a fixed key, cookie round included, is done first, so data and
//! feedback reach the tag and replay checks).
#![no_main]
use std::net::SocketAddr;
use std::time::Duration;

use aggrate::control::PiParams;
use aggrate::features::FeatureSpec;
use aggrate::runtime::{Mode, OnlineEstimator};
use aggrate::transport::wire::{self, Psk, SessionKeys};
use aggrate::transport::{Receiver, Sender};
use aggrate::Ts;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let psk = Psk::new(b"fuzzing pre-shared key").unwrap();
    let keys = SessionKeys::derive(&psk, 1, 0, &[1; 32], &[2; 32]);
    let _ = wire::peek(data);
    let _ = wire::parse_data(data, &keys);
    if let Ok(f) = wire::parse_feedback(data, &keys) {
        let _ = wire::check_report(&f.report, 64.0);
    }
    let _ = wire::parse_hello(data, &psk);
    let _ = wire::parse_hello_ack(data, &psk);
    let _ = wire::parse_cookie(data, &psk);
    let _ = wire::handshake_id(data);
    let mut w = wire::ReplayWindow::default();
    for c in data.chunks(8) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        let _ = w.accept(u64::from_le_bytes(b));
    }
    let _ = Psk::from_hex(&String::from_utf8_lossy(data));
    let from = SocketAddr::from(([127, 0, 0, 1], 9));
    let mut s = Sender::new(
        psk.clone(),
        [3; 32],
        2,
        100,
        PiParams::default(),
        Duration::from_millis(100),
        Ts::ZERO,
    )
    .unwrap();
    let est = OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(100)).unwrap();
    let mut r = Receiver::new(psk, [4; 32], est);
    // Hello → cookie → hello with the cookie → ack.
    for k in 0..2u64 {
        if let Some(t) = s.poll_transmit(Ts(10 * k)) {
            let hello = s.buffer()[..t.len].to_vec();
            let _ = r.handle_datagram(Ts(10 * k + 1), from, &hello);
            if let Some((n, _)) = r.poll_transmit(Ts(10 * k + 2)) {
                let answer = r.buffer()[..n].to_vec();
                let _ = s.handle_datagram(Ts(10 * k + 3), 0, &answer);
            }
        }
    }
    assert!(s.connected(0));
    let _ = r.handle_datagram(Ts(10), from, data);
    let _ = s.handle_datagram(Ts(10), data.first().map_or(0, |&b| b as usize % 3), data);
    let _ = r.poll_transmit(Ts(200_000_000));
    let _ = s.poll_transmit(Ts(200_000_000));
    assert!(s.rate(0).mbps.is_finite());
});
