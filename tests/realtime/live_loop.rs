//! The live loop over real loopback sockets: `aggrate ap` between `aggrate send` and
//! `aggrate recv` as separate processes (kernel receive timestamps, real feedback), and the
//! README's main command `aggrate demo` end to end with a short live phase.

use crate::common;

use std::process::{Command, Stdio};

use common::{aggrate, port, text};

#[test]
fn sender_ap_receiver_processes_close_the_loop() {
    let _room = common::room(module_path!());
    let bin = env!("CARGO_BIN_EXE_aggrate");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    // A key made by `keygen` (mode 600, never over an existing file); no key, no run.
    let o = aggrate(dir.path(), &["-q", "keygen", "key"]);
    assert!(o.status.success(), "{}", text(&o).1);
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let hex = std::fs::read_to_string(&key).unwrap();
    assert_eq!(hex.trim().len(), 64);
    assert!(
        !aggrate(dir.path(), &["-q", "keygen", "key"]).status.success(),
        "keygen never overwrites"
    );
    let o = Command::new(bin)
        .args(["-q", "recv", "--duration", "1"])
        .env_remove("AGGRATE_KEY")
        .env_remove("AGGRATE_KEY_FILE")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).1.contains("aggrate keygen"), "{}", text(&o).1);
    // A survey file that is not there, or not a survey: named, before anything runs.
    std::fs::write(dir.path().join("survey"), "12 busy 3\n").unwrap();
    for (file, want) in [("missing", "missing"), ("survey", "busy_ns")] {
        let o = aggrate(
            dir.path(),
            &[
                "-q",
                "recv",
                "--key-file",
                "key",
                "--duration",
                "1",
                "--survey-file",
                file,
            ],
        );
        assert!(!o.status.success() && text(&o).1.contains(want), "{}", text(&o).1);
    }
    // An AP without a key runs, and says what that leaves open; one given a file that is not a
    // key refuses to start, naming it.
    let ap_alone = |extra: &[&str]| {
        let o = Command::new(bin)
            .current_dir(dir.path())
            .args([
                "-q",
                "ap",
                "--listen",
                &format!("127.0.0.1:{}", port()),
                "--duration",
                "0.3",
            ])
            .args(["--stations", &format!("127.0.0.1:{}", port())])
            .args(extra)
            .env_remove("AGGRATE_KEY")
            .env_remove("AGGRATE_KEY_FILE")
            .output()
            .unwrap();
        (o.status.success(), text(&o).1)
    };
    let (ok, err) = ap_alone(&[]);
    assert!(
        ok && err.contains("AP without a key") && err.contains("rebind"),
        "{err}"
    );
    std::fs::write(dir.path().join("not-a-key"), "hello\n").unwrap();
    let (ok, err) = ap_alone(&["--key-file", "not-a-key"]);
    assert!(!ok && err.contains("not-a-key"), "{err}");
    let (ok, err) = ap_alone(&["--key-file", "key"]);
    assert!(ok && !err.contains("without a key"), "{err}");
    let (ap, rx) = (port(), port());
    let spawn = |args: Vec<String>| {
        Command::new(bin)
            .args(args)
            // The receiver takes the key from the environment, the sender from the file.
            .env("AGGRATE_KEY", hex.trim())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let ap_p = spawn(s(&[
        "-q",
        "ap",
        "--listen",
        &format!("127.0.0.1:{ap}"),
        "--stations",
        &format!("127.0.0.1:{rx}"),
        "--duration",
        "5",
        "--truth",
        dir.path().join("ap.csv").to_str().unwrap(),
    ]));
    let rx_p = spawn(s(&[
        "-q",
        "recv",
        "--listen",
        &format!("127.0.0.1:{rx}"),
        "--duration",
        "5",
        "--phy-mbps",
        "866.7",
        "--self-calibrate",
        "--log",
        dir.path().join("recv.csv").to_str().unwrap(),
    ]));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let tx_p = spawn(s(&[
        "-q",
        "send",
        "--to",
        &format!("127.0.0.1:{ap}"),
        "--key-file",
        key.to_str().unwrap(),
        "--duration",
        "4",
    ]));
    let (tx, rx, ap) = (
        tx_p.wait_with_output().unwrap(),
        rx_p.wait_with_output().unwrap(),
        ap_p.wait_with_output().unwrap(),
    );
    for (name, o) in [("send", &tx), ("recv", &rx), ("ap", &ap)] {
        assert!(o.status.success(), "{name}: {}", text(o).1);
    }
    let j = |o: &std::process::Output| -> serde_json::Value { serde_json::from_str(text(o).0.trim()).unwrap() };
    let (tx, rx, ap) = (j(&tx), j(&rx), j(&ap));
    let sent = tx["sent"].as_u64().unwrap();
    assert!(sent > 1000, "{tx}");
    assert!(
        tx["feedback"].as_u64().unwrap() >= 4,
        "reports every 0.5 s came back: {tx}"
    );
    assert_eq!(tx["feedback_dropped"], 0, "{tx}");
    assert_eq!(tx["sessions"], 1, "one handshake: {tx}");
    assert!(
        ap["ampdus"].as_u64().unwrap() > 0 && ap["data_out"].as_u64().unwrap() > 0,
        "{ap}"
    );
    // The AP took the key from the environment too: every datagram verified, one binding.
    assert_eq!((ap["bindings"].as_u64(), ap.get("forged")), (Some(1), None), "{ap}");
    let got = rx["received"].as_u64().unwrap();
    assert!(got as f64 >= 0.95 * sent as f64, "received {got} of {sent}");
    // Start-up raised the rate above the 20 Mb/s start: more than 4 s × 20 Mb/s of packets.
    assert!(sent as f64 * 1500.0 * 8.0 / 4.0 > 40e6, "{sent} packets in 4 s");
    // `--self-calibrate`: every accepted packet went to the calibrator, one window per
    // WINDOW_GAPS + 1 of them (used, or not used for mixed rates), and what it learned is an
    // operating point the estimator takes.
    let sc = &rx["self_calibration"];
    let per = aggrate::train::online::WINDOW_GAPS as u64 + 1;
    assert_eq!(
        sc["windows"].as_u64().unwrap() + sc["skipped"].as_u64().unwrap(),
        got / per,
        "{sc}"
    );
    if sc["windows"].as_u64().unwrap() > 0 {
        let knots: Vec<[f64; 2]> = serde_json::from_value(sc["knots"].clone()).unwrap();
        assert!(
            !knots.is_empty() && knots.iter().flatten().all(|v| v.is_finite()),
            "{sc}"
        );
        assert!(knots.windows(2).all(|w| w[0][0] < w[1][0]), "{sc}");
        assert!(sc["last"]["nearest"].as_str().is_some_and(|n| !n.is_empty()), "{sc}");
        assert!(
            sc["too_far"].as_u64().unwrap() <= sc["windows"].as_u64().unwrap(),
            "{sc}"
        );
    }
    // The AP's truth per interval joined with the receiver's reports (`aggrate join`): the
    // same grid, the truth the AP's own count, a release error measured.
    let truth = std::fs::read_to_string(dir.path().join("ap.csv")).unwrap();
    let reports = std::fs::read_to_string(dir.path().join("recv.csv")).unwrap();
    assert!(truth.starts_with(::aggrate::livelog::TRUTH_HEADER), "{truth}");
    assert!(reports.starts_with(::aggrate::livelog::REPORT_HEADER), "{reports}");
    let t = ::aggrate::livelog::read_truth(&dir.path().join("ap.csv")).unwrap();
    assert_eq!(t.iter().map(|r| r.mpdus).sum::<u64>(), ap["data_out"].as_u64().unwrap());
    assert_eq!(t.iter().map(|r| r.ampdus).sum::<u64>(), ap["ampdus"].as_u64().unwrap());
    assert!(
        t.windows(2).all(|w| w[1].start_ns == w[0].start_ns + 500_000_000),
        "{truth}"
    );
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "join",
            "--truth",
            "ap.csv",
            "--reports",
            "recv.csv",
            "--skip",
            "0",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let jn: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert!(jn["intervals"].as_u64().unwrap() >= 4, "{jn}");
    assert!(jn["level"]["intervals"].as_u64().unwrap() >= 1, "{jn}");
    assert!(jn["release_p50_us"].as_f64().unwrap().is_finite(), "{jn}");
    let o = aggrate(
        dir.path(),
        &["-q", "join", "--truth", "ap.csv", "--reports", "recv.csv"],
    );
    assert!(
        text(&o).0.contains("true μ_N (AP)") && text(&o).0.contains("AP release error"),
        "{}",
        text(&o).0
    );
    // The logs swapped, or another station's: clear errors naming the files, exit code 3.
    let o = aggrate(
        dir.path(),
        &["-q", "join", "--truth", "recv.csv", "--reports", "ap.csv"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o).1);
    assert!(
        text(&o).1.contains("recv.csv: line 1 is not the AP truth"),
        "{}",
        text(&o).1
    );
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "join",
            "--truth",
            "ap.csv",
            "--reports",
            "recv.csv",
            "--station",
            "3",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o).1);
    assert!(text(&o).1.contains("share no report interval"), "{}", text(&o).1);
}

#[test]
fn demo_runs_end_to_end() {
    let _room = common::room(module_path!());
    let dir = tempfile::tempdir().unwrap();
    // 4-fold CV instead of the demo's 20 (the SVR's CV is most of the demo in a test build).
    let o = aggrate(
        dir.path(),
        &["-q", "demo", "--out", "d", "--live-seconds", "3", "--folds", "4"],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let d = dir.path().join("d");
    for f in [
        "models/logistic_m20_sigma.json",
        "models/threshold_m1.json",
        "models/slot_svr_m20_sigma_d3.json",
        "sim/aggrate.series.csv",
        "sim/cubic.series.csv",
        "live/live.csv",
        "live/live_rate.png",
    ] {
        assert!(d.join(f).exists(), "{f} missing");
    }
    let live = std::fs::read_to_string(d.join("live/live.csv")).unwrap();
    assert!(live.lines().count() >= 4, "{live}");
    // The comparison table is printed.
    assert!(text(&o).0.contains("aggrate / cubic"), "{}", text(&o).0);
}

/// `ap --contenders`: others on the emulated channel, and the truth log carries their share of
/// the air per interval (none without them); an out-of-range setting is refused by name.
#[test]
fn the_aps_truth_carries_others_share_of_the_air() {
    let _room = common::room(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let share = |extra: &[&str]| -> Vec<f64> {
        let mut args = vec![
            "-q",
            "ap",
            "--duration",
            "1.3",
            "--interval-ms",
            "100",
            "--truth",
            "t.csv",
        ];
        let (l, s) = (format!("127.0.0.1:{}", port()), format!("127.0.0.1:{}", port()));
        args.extend(["--listen", &l, "--stations", &s]);
        args.extend(extra);
        let o = aggrate(dir.path(), &args);
        assert!(o.status.success(), "{}", text(&o).1);
        let t = aggrate::livelog::read_truth(&dir.path().join("t.csv")).unwrap();
        // Whole intervals only: the first and last are cut by the start and the end.
        t[1..t.len() - 1].iter().map(|r| r.others_share).collect()
    };
    let quiet = share(&[]);
    assert!(quiet.len() >= 8 && quiet.iter().all(|&x| x == 0.0), "{quiet:?}");
    let busy = share(&["--contenders", "2", "--contender-mbps", "20"]);
    let mean = busy.iter().sum::<f64>() / busy.len() as f64;
    // Two stations at 20 Mb/s of 1,500-byte frames, one per exchange at VHT MCS 7 (1 SS, 80 MHz):
    // ≈ 3,300 exchanges a second of ≈ 130 µs each with contention: about 0.4 of the air.
    assert!(
        busy.iter().all(|x| (0.0..=1.0).contains(x)) && (0.2..0.7).contains(&mean),
        "{busy:?}"
    );
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "ap",
            "--stations",
            "127.0.0.1:1",
            "--contenders",
            "1",
            "--contender-ampdu",
            "0",
        ],
    );
    assert!(
        !o.status.success() && text(&o).1.contains("contender_ampdu"),
        "{}",
        text(&o).1
    );
}

/// `recv --steer`: the reports give the sender the frame count alone (`frame-count`) or the
/// airtime level alone (`airtime`, which needs the PHY rate) in place of the model's level —
/// the same loop steered by each estimator (`testbed run --senders aggrate-count,
/// aggrate-airtime`).
#[test]
fn recv_steers_by_the_estimator_it_is_told() {
    let _room = common::room(module_path!());
    let bin = env!("CARGO_BIN_EXE_aggrate");
    let dir = tempfile::tempdir().unwrap();
    let o = aggrate(dir.path(), &["-q", "keygen", "key"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let key = dir.path().join("key");
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "recv",
            "--key-file",
            "key",
            "--duration",
            "1",
            "--steer",
            "airtime",
        ],
    );
    assert!(
        !o.status.success() && text(&o).1.contains("--steer airtime needs --phy-mbps"),
        "{}",
        text(&o).1
    );
    let (ap, rx) = (port(), port());
    let spawn = |args: &[&str]| {
        Command::new(bin)
            .args(args)
            .args(["--key-file", key.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let log = dir.path().join("recv.csv");
    let (ap_l, rx_l) = (format!("127.0.0.1:{ap}"), format!("127.0.0.1:{rx}"));
    let ap_p = spawn(&["-q", "ap", "--listen", &ap_l, "--stations", &rx_l, "--duration", "3.5"]);
    let rx_p = spawn(&[
        "-q",
        "recv",
        "--listen",
        &rx_l,
        "--duration",
        "3.5",
        "--phy-mbps",
        "866.7",
        "--interval-ms",
        "100",
        "--steer",
        "frame-count",
        "--log",
        log.to_str().unwrap(),
    ]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let tx = spawn(&["-q", "send", "--to", &ap_l, "--duration", "2.5", "--interval-ms", "100"])
        .wait_with_output()
        .unwrap();
    let (rx, ap) = (rx_p.wait_with_output().unwrap(), ap_p.wait_with_output().unwrap());
    for (name, o) in [("send", &tx), ("recv", &rx), ("ap", &ap)] {
        assert!(o.status.success(), "{name}: {}", text(o).1);
    }
    let rows = aggrate::livelog::read_reports(&log).unwrap();
    let counted: Vec<_> = rows.iter().filter(|r| r.frames > 0).collect();
    assert!(counted.len() >= 10, "{rows:?}");
    // Every report's level is its frame count, not the model's level.
    for r in &counted {
        assert!((r.level - r.frame_count).abs() < 1e-3, "{r:?}");
    }
}
