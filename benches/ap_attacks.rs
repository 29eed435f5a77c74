//! The attacks of issue 46 through `send → ap → recv` on loopback, the AP holding the key, each
//! beside an unattacked run in the same process: when the sender connected, and what the
//! receiver got in each run's second half as a ratio of the unattacked run's. Root (the spoofed
//! sources need a raw socket). `cargo bench --bench ap_attacks [-- SECONDS]` (default 6 s per
//! run); the table is in docs/security.md.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/common/lan_attacker.rs"]
mod lan_attacker;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aggrate::transport::io;
use aggrate::transport::wire::{self, Psk, NONCE_LEN};
use lan_attacker::{record, through_ap, Aim, Outcome, Recorded, Spoofer};

/// Send `per_s` datagrams a second, made by `one(k)`, until `stop` (at most `per_s` × 120).
fn paced(stop: &AtomicBool, per_s: u64, mut one: impl FnMut(u64)) {
    let start = Instant::now();
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) && k < per_s * 120 {
        let due = (start.elapsed().as_secs_f64() * per_s as f64) as u64;
        while k < due {
            one(k);
            k += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn replay_hellos(old: &Recorded, ports: usize, per_s: u64) -> impl Fn(Aim, &AtomicBool) + Sync + '_ {
    move |aim, stop| {
        let socks: Vec<UdpSocket> = (0..ports).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
        paced(stop, per_s, |k| {
            let _ = socks[k as usize % ports].send_to(&old.hellos[k as usize % 2], aim.ap);
        });
    }
}

fn main() {
    // `cargo test --all-targets` runs this binary too, without `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("ap_attacks: a benchmark; `cargo bench --bench ap_attacks` runs it");
        return;
    }
    let secs: f64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(6.0);
    let key = Psk::new(&io::entropy().unwrap()).unwrap();
    let old = record(&key);
    let other = Psk::new(b"a key that is not the AP's, nor the ends'").unwrap();
    let flood = |aim: Aim, stop: &AtomicBool| {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut b = Vec::new();
        paced(stop, 65_000, |k| {
            let h = wire::Hello {
                session: k as u32,
                station: 0,
                nonce_s: [(k % 251) as u8; NONCE_LEN],
            };
            wire::emit_hello(&mut b, &other, &h, &[0; wire::COOKIE_BYTES]);
            let _ = s.send_to(&b, aim.ap);
        });
    };
    let acks = |aim: Aim, stop: &AtomicBool| {
        // The old hello from the attacker's port (so the ack names a relayed hello), then the old
        // hello-ack spoofed from the station, 50 a second.
        let (s, spoof) = (UdpSocket::bind("127.0.0.1:0").unwrap(), Spoofer::new());
        paced(stop, 50, |k| {
            let _ = s.send_to(&old.hellos[k as usize % 2], aim.ap);
            spoof.send(aim.station, aim.ap, &old.ack);
        });
    };
    let oversize = |aim: Aim, stop: &AtomicBool| {
        let (junk, spoof) = (vec![0x5au8; 60_000], Spoofer::new());
        paced(stop, 1_000, |k| {
            spoof.send(aim.sender, aim.ap, &junk);
            spoof.send(aim.sender, aim.ap, &old.data[k as usize % old.data.len()]);
        });
    };
    type Attack<'a> = Box<dyn Fn(Aim, &AtomicBool) + Sync + 'a>;
    let attacks: Vec<(&str, Attack)> = vec![
        ("old hello, 1 port, 10,000/s", Box::new(replay_hellos(&old, 1, 10_000))),
        (
            "old hello, 200 ports, 10,000/s",
            Box::new(replay_hellos(&old, 200, 10_000)),
        ),
        ("spoofed old hello-acks, 50/s", Box::new(acks)),
        ("forged hellos, 65,000/s", Box::new(flood)),
        (
            "60 KB + old data spoofed from the sender, 1,000/s each",
            Box::new(oversize),
        ),
    ];
    println!("send → ap (holding the key) → recv on loopback, {secs} s per run; unattacked run before each\n");
    println!("| attack | connected after | received, second half (attacked ÷ unattacked) | AP: forged / replayed / repeated hellos / bindings / refused | sessions |");
    println!("| --- | --- | --- | --- | --- |");
    let row = |name: &str, clean: &Outcome, o: &Outcome| {
        println!(
            "| {name} | {} | {} ÷ {} = **{:.3}** | {} / {} / {} / {} / {} | {} |",
            o.connected_at
                .map_or("never".into(), |t| format!("{:.0} ms", t.as_secs_f64() * 1e3)),
            o.late_received,
            clean.late_received,
            o.late_received as f64 / clean.late_received.max(1) as f64,
            o.ap.forged,
            o.ap.replayed,
            o.ap.hellos_repeated,
            o.ap.bindings,
            o.ap.binds_refused,
            o.sender.sessions
        );
    };
    for (name, attack) in &attacks {
        let clean = through_ap(&key, Some(key.clone()), secs, |_, _| {});
        let o = through_ap(&key, Some(key.clone()), secs, |aim, stop| attack(aim, stop));
        row(name, &clean, &o);
    }
    // The same spoofed acks at an AP without the key: what `ap` warns about.
    let clean = through_ap(&key, None, secs, |_, _| {});
    let o = through_ap(&key, None, secs, acks);
    row("spoofed old hello-acks, 50/s, **AP without the key**", &clean, &o);
}
