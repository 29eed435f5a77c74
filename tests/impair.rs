//! `aggrate impair` as a live relay on loopback: datagrams between a client and a server lose,
//! duplicate, reorder and wait as set (seeded), the relay's counters agree with what arrived;
//! and `send` → relay → `recv` still closes the loop through 2 % loss. Bad settings are refused.

// A live network test: it reads the host clock to time what the relay held (an IO edge).
#![allow(clippy::disallowed_methods)]

mod common;

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{aggrate, port, text};

/// Stops a relay (SIGTERM) when the test ends, also when it fails before the relay is done.
struct StopOnDrop(u32);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.to_string()]).status();
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[test]
fn the_relay_loses_duplicates_reorders_and_delays_as_set() {
    let bin = env!("CARGO_BIN_EXE_aggrate");
    let (relay, far) = (port(), port());
    let server = UdpSocket::bind(("127.0.0.1", far)).unwrap();
    server.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let child = Command::new(bin)
        .args([
            "-q",
            "impair",
            "--listen",
            &format!("127.0.0.1:{relay}"),
            "--to",
            &format!("127.0.0.1:{far}"),
            "--duration",
            "30",
            "--loss",
            "0.1",
            "--duplicate",
            "0.05",
            "--reorder",
            "0.05",
            "--reorder-ms",
            "15",
            "--delay-ms",
            "20",
            "--seed",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _stop = StopOnDrop(child.id());
    // Ready once the relay holds its port.
    assert!(
        (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            UdpSocket::bind(("127.0.0.1", relay)).is_err()
        }),
        "the relay never bound its port"
    );
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let n = 2000u32;
    let sender = std::thread::spawn(move || {
        for i in 0..n {
            let mut b = [0u8; 12];
            b[..4].copy_from_slice(&i.to_be_bytes());
            b[4..].copy_from_slice(&now_ns().to_be_bytes());
            client.send_to(&b, ("127.0.0.1", relay)).unwrap();
            std::thread::sleep(Duration::from_micros(500));
        }
        client
    });
    // Read until the sender is done and the relay has had 500 ms to release what it held (the
    // 20 ms delay, 15 ms held back); then stop the relay (SIGTERM: it prints its counters).
    let (mut got, mut seqs, mut min_delay) = (0u64, Vec::new(), u64::MAX);
    let mut buf = [0u8; 64];
    let mut done: Option<Instant> = None;
    while done.is_none_or(|t| t.elapsed() < Duration::from_millis(500)) {
        if done.is_none() && sender.is_finished() {
            done = Some(Instant::now());
        }
        if let Ok((12, _)) = server.recv_from(&mut buf) {
            got += 1;
            seqs.push(u32::from_be_bytes(buf[..4].try_into().unwrap()));
            let sent = u64::from_be_bytes(buf[4..12].try_into().unwrap());
            min_delay = min_delay.min(now_ns().saturating_sub(sent));
        }
    }
    sender.join().unwrap();
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let s: serde_json::Value = serde_json::from_str(text(&out).0.trim()).unwrap();
    let f = &s["forward"];
    assert_eq!(f["offered"], n as u64, "{s}");
    assert_eq!(f["delivered"], got, "the relay's count is what arrived: {s}");
    // Binomial(2000, 0.1): σ ≈ 13.
    let lost = f["lost"].as_u64().unwrap();
    assert!((140..=260).contains(&lost), "{s}");
    let dup = f["duplicated"].as_u64().unwrap();
    assert!(dup > 40 && dup < 150, "{s}");
    assert_eq!(got, n as u64 - lost + dup, "{s}");
    assert_eq!(
        (s["send_failed"].as_u64(), s["held_at_end"][0].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let inversions = seqs.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(inversions > 20, "reordered: {inversions}");
    assert!(
        min_delay >= 20_000_000,
        "every datagram waited the delay: {min_delay} ns"
    );
    // Nothing impaired the way back.
    assert_eq!(s["reverse"]["offered"], 0, "{s}");
}

#[test]
fn send_and_recv_close_the_loop_through_the_relay() {
    let bin = env!("CARGO_BIN_EXE_aggrate");
    let dir = tempfile::tempdir().unwrap();
    let o = aggrate(dir.path(), &["-q", "keygen", "key"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let key = dir.path().join("key");
    let (relay, rx) = (port(), port());
    let spawn = |args: Vec<String>| {
        Command::new(bin)
            .args(args)
            .env("AGGRATE_KEY_FILE", &key)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let relay_p = spawn(s(&[
        "-q",
        "impair",
        "--listen",
        &format!("127.0.0.1:{relay}"),
        "--to",
        &format!("127.0.0.1:{rx}"),
        "--duration",
        "5",
        "--loss",
        "0.02",
        "--delay-ms",
        "5",
        "--both-ways",
        "--seed",
        "1",
    ]));
    let rx_p = spawn(s(&[
        "-q",
        "recv",
        "--listen",
        &format!("127.0.0.1:{rx}"),
        "--duration",
        "5",
    ]));
    std::thread::sleep(Duration::from_millis(300));
    let tx_p = spawn(s(&[
        "-q",
        "send",
        "--to",
        &format!("127.0.0.1:{relay}"),
        "--duration",
        "4",
    ]));
    let (tx, rx, relay) = (
        tx_p.wait_with_output().unwrap(),
        rx_p.wait_with_output().unwrap(),
        relay_p.wait_with_output().unwrap(),
    );
    for (name, o) in [("send", &tx), ("recv", &rx), ("impair", &relay)] {
        assert!(o.status.success(), "{name}: {}", text(o).1);
    }
    let j = |o: &std::process::Output| -> serde_json::Value { serde_json::from_str(text(o).0.trim()).unwrap() };
    let (tx, rx, relay) = (j(&tx), j(&rx), j(&relay));
    let sent = tx["sent"].as_u64().unwrap();
    let got = rx["received"].as_u64().unwrap();
    assert!(sent > 1000 && tx["sessions"].as_u64().unwrap() >= 1, "{tx}");
    assert!(
        tx["feedback"].as_u64().unwrap() >= 3,
        "feedback crossed the impaired way back: {tx}"
    );
    let f = &relay["forward"];
    let (offered, lost, delivered) = (
        f["offered"].as_u64().unwrap(),
        f["lost"].as_u64().unwrap(),
        f["delivered"].as_u64().unwrap(),
    );
    // What the relay lost is its 2 %; what it delivered arrived (datagrams still held at the
    // end, and any the loaded host's kernel dropped on the way, aside).
    let hellos = tx["hellos"].as_u64().unwrap();
    assert!(
        offered <= sent + hellos && offered as f64 >= 0.95 * sent as f64,
        "{relay} {tx}"
    );
    let share = lost as f64 / offered as f64;
    assert!((0.01..0.035).contains(&share), "{relay}");
    assert!(
        got <= delivered && got as f64 >= 0.97 * delivered as f64,
        "received {got} of {delivered}"
    );
}

#[test]
fn bad_settings_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (&["--loss", "1.5"][..], "loss"),
        (&["--burst", "0.1,0.5,0,2"][..], "burst.loss_bad"),
        (&["--delay-ms=-3"][..], "--delay-ms"),
        (&["--config", "missing.json"][..], "missing.json"),
        (&["--loss", "0.1", "--burst", "0.1,0.5,0,1"][..], "--burst"),
        (&["--rate-bps", "1e6", "--queue-bytes", "0"][..], "queue_bytes"),
    ] {
        let o = aggrate(
            dir.path(),
            &[&["-q", "impair", "--to", "127.0.0.1:9", "--duration", "1"][..], args].concat(),
        );
        assert!(!o.status.success());
        assert!(text(&o).1.contains(want), "{args:?}: {}", text(&o).1);
    }
}
