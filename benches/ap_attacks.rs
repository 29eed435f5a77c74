//! The attacks of issue 46 through `send → ap → recv` on loopback, the AP holding the key, each
//! beside an unattacked run in the same process: when the sender connected, and what the
//! receiver got in each run's second half as a ratio of the unattacked run's. Root (the spoofed
//! sources need a raw socket). `cargo bench --bench ap_attacks [-- SECONDS]` (default 6 s per
//! run); the table is in docs/security.md.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/common/lan_attacker.rs"]
mod lan_attacker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aggrate::transport::io;
use aggrate::transport::wire::Psk;
use lan_attacker::{record, through_ap, Aim, Arsenal, Outcome, Recorded};

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

/// One kind of attack: `one(arsenal, aim, k)` sent `per_s` times a second from `ports` ports.
fn attack<'a>(
    old: &'a Recorded,
    ports: usize,
    per_s: u64,
    one: impl Fn(&mut Arsenal<'a>, Aim, u64) + Sync + 'a,
) -> impl Fn(Aim, &AtomicBool) + Sync + 'a {
    move |aim, stop| {
        let mut arsenal = Arsenal::new(old, ports);
        paced(stop, per_s, |k| one(&mut arsenal, aim, k));
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
    let replay = |a: &mut Arsenal, aim, k| a.replay_hello(aim, k as usize);
    // The old hello from the attacker's port (so the ack names a relayed hello), then the old
    // hello-ack spoofed from the station, 50 a second.
    let acks = |a: &mut Arsenal, aim, k| {
        a.replay_hello(aim, k as usize);
        a.spoof_old_ack(aim);
    };
    let flood = |a: &mut Arsenal, aim, k| a.forge_hello(aim, k);
    let oversize = |a: &mut Arsenal, aim, k| {
        a.spoof_junk(aim);
        a.spoof_old_data(aim, k as usize);
    };
    type Attack<'a> = Box<dyn Fn(Aim, &AtomicBool) + Sync + 'a>;
    let attacks: Vec<(&str, Attack)> = vec![
        ("old hello, 1 port, 10,000/s", Box::new(attack(&old, 1, 10_000, replay))),
        (
            "old hello, 200 ports, 10,000/s",
            Box::new(attack(&old, 200, 10_000, replay)),
        ),
        ("spoofed old hello-acks, 50/s", Box::new(attack(&old, 1, 50, acks))),
        ("forged hellos, 65,000/s", Box::new(attack(&old, 1, 65_000, flood))),
        (
            "60 KB + old data spoofed from the sender, 1,000/s each",
            Box::new(attack(&old, 1, 1_000, oversize)),
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
    let o = through_ap(&key, None, secs, attack(&old, 1, 50, acks));
    row("spoofed old hello-acks, 50/s, **AP without the key**", &clean, &o);
}
