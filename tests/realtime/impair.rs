//! `aggrate impair` as a live relay on loopback: datagrams between a client and a server lose,
//! duplicate, reorder and wait as set (seeded), the relay's counters agree with what arrived;
//! and `send` → relay → `recv` still closes the loop through 2 % loss. Bad settings are refused.

// A live network test: it reads the host clock to time what the relay held (an IO edge).
#![allow(clippy::disallowed_methods)]

use crate::common;

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

/// Kills and reaps a child process when the test ends, also when it fails.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[test]
fn the_relay_loses_duplicates_reorders_and_delays_as_set() {
    let _room = common::room(module_path!());
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
    let _room = common::room(module_path!());
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
    let _room = common::room(module_path!());
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

/// The reliability layer through the impairment layer on the virtual clock (the lab's link:
/// 200,000 B/s, 100 ms one way, 1 % reordered): every file arrives byte-exact; repairs track the
/// loss (a needless copy now and then, not a share of the file); the receiver's NACKs finish
/// sooner than the timer alone; and the CLI writes the table, the JSON and the chart.
#[test]
fn bulk_transfers_arrive_whole_through_loss_and_reordering() {
    let _room = common::room(module_path!());
    use aggrate::bulk::{run, table, LabSetting, Variant};
    for (loss, seed) in [(0.0, 1), (0.02, 2), (0.05, 3), (0.2, 4)] {
        let mut s = LabSetting::lab(loss, 300_000, seed);
        s.datagram = 1472;
        let r = run(&s).unwrap();
        assert!(r.exact, "{loss}: {r:?}");
        // Each lost datagram costs one repair (and a repair can be lost too): the overhead
        // stays near loss / (1 − loss), never a multiple of it.
        let floor = -0.001;
        let ceiling = loss / (1.0 - loss) * 1.6 + 0.01;
        assert!(
            r.overhead > floor && r.overhead < ceiling,
            "{loss}: overhead {} {r:?}",
            r.overhead
        );
        // The link carries at most 200,000 B/s of datagrams, 76 bytes of each headers.
        assert!(r.goodput_bytes_per_s < 200_000.0 * 1396.0 / 1472.0, "{r:?}");
    }
    let rows = table(
        &[0.02],
        &[300_000],
        &[Variant::All, Variant::NoNack],
        (1472, 200_000.0),
        7,
        3,
    )
    .unwrap();
    let (all, no_nack) = (&rows[0].run, &rows[1].run);
    assert!(all.exact && no_nack.exact);
    assert_eq!(no_nack.nack_repairs, 0);
    assert!(all.nack_repairs > 0);
    assert!(
        all.completion_s < no_nack.completion_s,
        "NACKs repair within a round trip, the timer after an RTO: {} vs {} s",
        all.completion_s,
        no_nack.completion_s
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lab");
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "tool",
            "bulk-lab",
            "-o",
            out.to_str().unwrap(),
            "--files",
            "100000",
            "--losses",
            "0,0.05",
            "--seeds",
            "2",
            "--datagram",
            "1472",
        ],
    );
    assert!(o.status.success(), "{:?}", text(&o));
    let md = std::fs::read_to_string(out.join("bulk_lab.md")).unwrap();
    assert_eq!(md.lines().filter(|l| l.starts_with("| all |")).count(), 2, "{md}");
    assert!(!md.contains("**no**"), "{md}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("bulk_lab.json")).unwrap()).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 8, "4 variants × 2 losses");
    assert!(std::fs::metadata(out.join("bulk_lab.png")).unwrap().len() > 1000);
    let bad = aggrate(
        dir.path(),
        &["-q", "tool", "bulk-lab", "-o", out.to_str().unwrap(), "--losses", "1.5"],
    );
    assert!(!bad.status.success());
    let (_, err) = text(&bad);
    assert!(err.contains("--losses"), "{err}");
}

/// `send --file` → relay (5 % loss each way, reordering) → `recv --out`: the file arrives whole
/// under its name; a transfer cut short leaves only NAME.aggrate-part and resumes from its
/// length; standard input reaches standard output; another key, a missing file and a missing
/// output directory are refused by name.
#[test]
fn files_cross_a_lossy_relay_whole_and_resume_after_a_cut() {
    let _room = common::room(module_path!());
    let bin = env!("CARGO_BIN_EXE_aggrate");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(aggrate(d, &["-q", "keygen", "key"]).status.success());
    assert!(aggrate(d, &["-q", "keygen", "other"]).status.success());
    let content: Vec<u8> = (0..3_000_000u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 11) as u8)
        .collect();
    std::fs::write(d.join("model.bin"), &content).unwrap();
    let cmd = |args: &[&str], key: &str| {
        let mut c = Command::new(bin);
        c.args(args)
            .current_dir(d)
            .env("AGGRATE_KEY_FILE", d.join(key))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let rx = port();
    let rx_addr = format!("127.0.0.1:{rx}");
    // A relay per sender (it serves the first address it hears), stopped when the test ends.
    let mut relays = Vec::new();
    let mut relay = || {
        let addr = format!("127.0.0.1:{}", port());
        let p = cmd(
            &[
                "-q",
                "impair",
                "--listen",
                &addr,
                "--to",
                &rx_addr,
                "--duration",
                "30",
                "--loss",
                "0.05",
                "--reorder",
                "0.01",
                "--reorder-ms",
                "3",
                "--delay-ms",
                "2",
                "--both-ways",
                "--seed",
                "3",
            ],
            "key",
        )
        .spawn()
        .unwrap();
        relays.push(Reap(p));
        std::thread::sleep(Duration::from_millis(100));
        addr
    };
    let recv = |out: &str, secs: &str, key: &str| {
        cmd(
            &["-q", "recv", "--listen", &rx_addr, "--out", out, "--duration", secs],
            key,
        )
        .spawn()
        .unwrap()
    };
    let settle = || std::thread::sleep(Duration::from_millis(300));

    // Whole, through loss: renamed into place, nothing else left.
    let relay_addr = relay();
    let r = recv("got.bin", "30", "key");
    settle();
    let s = cmd(&["-q", "send", "--to", &relay_addr, "--file", "model.bin"], "key")
        .output()
        .unwrap();
    let r = r.wait_with_output().unwrap();
    assert!(
        s.status.success() && r.status.success(),
        "{:?}\n{:?}",
        text(&s),
        text(&r)
    );
    assert!(std::fs::read(d.join("got.bin")).unwrap() == content, "the bytes differ");
    assert!(!d.join("got.bin.aggrate-part").exists());
    let sj: serde_json::Value = serde_json::from_str(text(&s).0.trim()).unwrap();
    let t = &sj["transfer"];
    assert!(t["repair_bytes"].as_u64().unwrap() > 0, "loss was repaired: {sj}");
    assert_eq!(sj["file_bytes_acknowledged"].as_u64(), Some(content.len() as u64));

    // Cut short by the sender's --duration: no file under the final name, the part kept; the
    // resume at its length completes it.
    let relay_addr = relay();
    let r = recv("cut.bin", "3", "key");
    settle();
    let s = cmd(
        &[
            "-q",
            "send",
            "--to",
            &relay_addr,
            "--file",
            "model.bin",
            "--duration",
            "0.4",
            "--max-rate-mbps",
            "20",
        ],
        "key",
    )
    .output()
    .unwrap();
    let r = r.wait_with_output().unwrap();
    assert!(!s.status.success() && !r.status.success());
    let (_, serr) = text(&s);
    assert!(
        serr.contains("resume with `aggrate send --file model.bin --offset"),
        "{serr}"
    );
    let (_, rerr) = text(&r);
    assert!(
        rerr.contains("cut.bin.aggrate-part") && rerr.contains("--offset"),
        "{rerr}"
    );
    assert!(!d.join("cut.bin").exists());
    let part = std::fs::metadata(d.join("cut.bin.aggrate-part")).unwrap().len();
    assert!(part > 0 && part < content.len() as u64, "{part}");
    let relay_addr = relay();
    let r = recv("cut.bin", "30", "key");
    settle();
    let s = cmd(
        &[
            "-q",
            "send",
            "--to",
            &relay_addr,
            "--file",
            "model.bin",
            "--offset",
            &part.to_string(),
        ],
        "key",
    )
    .output()
    .unwrap();
    let r = r.wait_with_output().unwrap();
    assert!(
        s.status.success() && r.status.success(),
        "{:?}\n{:?}",
        text(&s),
        text(&r)
    );
    assert!(
        std::fs::read(d.join("cut.bin")).unwrap() == content,
        "the resumed bytes differ"
    );

    // Standard input to standard output.
    let relay_addr = relay();
    let r = recv("-", "30", "key");
    settle();
    let mut s = cmd(
        &["-q", "send", "--to", &relay_addr, "--file", "-", "--window-mb", "0.2"],
        "key",
    )
    .stdin(Stdio::piped())
    .spawn()
    .unwrap();
    {
        use std::io::Write;
        let mut stdin = s.stdin.take().unwrap();
        stdin.write_all(&content[..500_000]).unwrap();
    }
    // Read the receiver's output while the sender runs (a full pipe would stop it).
    let r = std::thread::spawn(move || r.wait_with_output().unwrap());
    let s = s.wait_with_output().unwrap();
    let r = r.join().unwrap();
    assert!(
        s.status.success() && r.status.success(),
        "{:?}\n{:?}",
        text(&s),
        text(&r)
    );
    assert!(r.stdout == content[..500_000], "stdout carries the bytes only");

    // Another key: nothing arrives, both say why, no file.
    let relay_addr = relay();
    let r = recv("nokey.bin", "2", "other");
    settle();
    let s = cmd(
        &[
            "-q",
            "send",
            "--to",
            &relay_addr,
            "--file",
            "model.bin",
            "--duration",
            "1",
        ],
        "key",
    )
    .output()
    .unwrap();
    let r = r.wait_with_output().unwrap();
    assert!(!s.status.success() && !r.status.success());
    assert!(text(&s).1.contains("no receiver answered"), "{:?}", text(&s));
    assert!(text(&r).1.contains("no file arrived"), "{:?}", text(&r));
    assert!(!d.join("nokey.bin").exists() && !d.join("nokey.bin.aggrate-part").exists());
    drop(relays);

    // A missing file, an output directory that does not exist, a window of nothing: refused
    // by name.
    let send = ["-q", "send", "--to", "127.0.0.1:9", "--key-file", "key", "--file"];
    let recv = ["-q", "recv", "--key-file", "key", "--duration", "1", "--out"];
    for (args, says) in [
        ([&send[..], &["nope.bin"]].concat(), "nope.bin: opening"),
        ([&recv[..], &["no/such/dir/f"]].concat(), "no/such/dir"),
        (
            [&send[..], &["model.bin", "--window-mb", "0"]].concat(),
            "--window-mb 0",
        ),
    ] {
        let o = aggrate(d, &args);
        assert!(
            !o.status.success() && text(&o).1.contains(says),
            "{args:?}: {:?}",
            text(&o)
        );
    }
}
