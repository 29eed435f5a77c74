//! The live AP's binding (`aggrate::wlan::live::Binding`) on arbitrary datagrams from arbitrary
//! sources, with the key and without: each input is cut into datagrams, each from one of four
//! addresses (one is the station's) at a rising clock; after a real handshake has bound the
//! sender, so data reaches the tag and replay checks. Nothing may panic, and with the key no
//! datagram without a valid tag may enter the air.
#![no_main]
use std::net::SocketAddr;

use aggrate::transport::wire::{self, HelloAck, Psk, SessionKeys};
use aggrate::wlan::live::{ApStats, Binding, Route};
use aggrate::Ts;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let psk = Psk::new(b"fuzzing pre-shared key").unwrap();
    let addrs: [SocketAddr; 4] = [
        "127.0.0.1:9000".parse().unwrap(),
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
        "[::1]:3".parse().unwrap(),
    ];
    let station = addrs[0];
    let h = wire::Hello {
        session: 1,
        station: 0,
        nonce_s: [1; 32],
    };
    let (mut hello, mut ack) = (Vec::new(), Vec::new());
    wire::emit_hello(&mut hello, &psk, &h, &[0; wire::COOKIE_BYTES]);
    let a = HelloAck { hello: h, nonce_r: [2; 32] };
    wire::emit_hello_ack(&mut ack, &psk, &a);
    let keys = SessionKeys::derive(&psk, 1, 0, &[1; 32], &[2; 32]);
    for key in [Some(psk.clone()), None] {
        let keyed = key.is_some();
        let mut b = Binding::new(2, key);
        let mut st = ApStats::default();
        let _ = b.route(0, Ts(0), addrs[1], station, &hello, &mut st);
        let _ = b.route(0, Ts(0), station, station, &ack, &mut st);
        let mut now = 0u64;
        // Datagrams: a length byte, a source byte, a time step byte, then the bytes.
        let mut rest = data;
        while rest.len() >= 3 {
            let (len, from, step) = (rest[0] as usize, rest[1] as usize % 4, rest[2] as u64);
            rest = &rest[3..];
            let d = &rest[..len.min(rest.len())];
            rest = &rest[d.len()..];
            now += step * 1_000_000;
            let i = (from / 2) % 2;
            let r = b.route(i, Ts(now), addrs[from], station, d, &mut st);
            if keyed && r == Route::Data {
                assert!(wire::parse_data(d, &keys).is_ok(), "unverified data entered the air");
            }
        }
    }
});
