//! Real kernel receive paths in network namespaces: set-up, replay, and tear-down on every exit
//! path (normal and panic). Needs root, as the test command runs in CI; elsewhere set
//! AGGRATE_NO_ROOT_TESTS=1 to leave these out knowingly (they then fail loudly otherwise).

use crate::common;

use aggrate::testbed::{KernelPath, Testbed};
use aggrate::Ts;

/// Real-time replays: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn require_root() -> bool {
    if aggrate::testbed::is_root() {
        return true;
    }
    assert!(
        std::env::var_os("AGGRATE_NO_ROOT_TESTS").is_some(),
        "these tests need root (network namespaces); run as root or set AGGRATE_NO_ROOT_TESTS=1"
    );
    false
}

fn ours() -> Vec<String> {
    let prefix = format!("aggrate-{}-", std::process::id());
    Testbed::namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// A-MPDUs of `n` packets every `period_us`, for `frames` frames.
fn schedule(frames: u64, n: u64, period_us: u64) -> Vec<Ts> {
    (0..frames)
        .flat_map(|f| std::iter::repeat_n(Ts::from_micros(1000 + f * period_us), n as usize))
        .collect()
}

#[test]
fn veth_paths_replay_and_tear_down() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A real kernel on a shared 2-core machine: the timing check (not the set-up and tear-down
    // checks) gets five tries, each reported with how late the sender fell behind its 600 µs
    // schedule (milliseconds when the hypervisor held it: a late qdisc timer then lets a
    // shaper's packets out in bursts), before it fails.
    const TRIES: usize = 5;
    for settings in ["veth", "gro,threaded", "rps,burner,tick=250", "shape=1000"] {
        for attempt in 0..TRIES {
            let path: KernelPath = settings.parse().unwrap();
            let due = schedule(200, 20, 600);
            let (rep, names) = {
                let bed = Testbed::create(&path).unwrap();
                let names = ours();
                assert!(names.contains(&bed.tx_ns) && names.contains(&bed.rx_ns), "{names:?}");
                assert_eq!(
                    bed.applied["gro"].as_str().unwrap_or("").ends_with(": on"),
                    path.gro,
                    "{}",
                    bed.applied
                );
                if path.threaded_napi {
                    assert_eq!(bed.applied["threaded"], "1");
                }
                let qdisc = bed.applied["tx_qdisc"].as_str().unwrap_or("");
                assert_eq!(qdisc.contains("tbf"), path.shape_mbps > 0, "{qdisc}");
                (bed.replay(&path, &due).unwrap(), names)
            };
            // Dropped: both namespaces (and the veth in them) are gone.
            let left = ours();
            assert!(names.iter().all(|n| !left.contains(n)), "{settings}: left {left:?}");
            let got: Vec<Ts> = rep.host.iter().flatten().copied().collect();
            assert!(
                got.len() as f64 >= 0.95 * due.len() as f64,
                "{settings}: {} of {}",
                got.len(),
                due.len()
            );
            // Kernel times follow the schedule: the gap before each A-MPDU is far larger than the
            // gaps inside it (the kernel path adds µs, the schedule 600 µs between A-MPDUs).
            let mut inside = Vec::new();
            let mut starts = Vec::new();
            for i in 1..due.len() {
                if let (Some(a), Some(b)) = (rep.host[i - 1], rep.host[i]) {
                    let g = b.as_nanos().saturating_sub(a.as_nanos()) as f64 / 1e3;
                    if due[i] != due[i - 1] {
                        starts.push(g);
                    } else {
                        inside.push(g);
                    }
                }
            }
            inside.sort_by(|a, b| a.total_cmp(b));
            starts.sort_by(|a, b| a.total_cmp(b));
            let med = |v: &[f64]| v[v.len() / 2];
            let (ok, what) = if path.shape_mbps > 0 {
                // A 1514-byte frame takes 12.1 µs at 1000 Mbit/s: after the first two (the
                // bucket's depth) an A-MPDU's packets leave at least that far apart, and the
                // 600 µs between A-MPDUs keeps 600 − 18 × 12.1 ≈ 380 µs. The receive side adds
                // its own per-packet cost on top (16–18 µs medians seen on a loaded 2-core VM,
                // and starts then ≈ 260 µs apart), so the upper bound (3 frame times) only rules
                // out a stall, and the boundaries must stand out against the inside gaps.
                (
                    (10.0..36.3).contains(&med(&inside)) && med(&starts) > 5.0 * med(&inside),
                    format!(
                        "inside gap median {} µs, start gap median {} µs",
                        med(&inside),
                        med(&starts)
                    ),
                )
            } else if path.tick_us == 0 {
                (
                    med(&starts) > 10.0 * med(&inside),
                    format!("start gap median {} µs vs inside {} µs", med(&starts), med(&inside)),
                )
            } else {
                // Released at 250 µs ticks: A-MPDUs 600 µs apart leave 500 or 750 µs apart.
                (med(&starts) > 400.0, format!("start gap median {} µs", med(&starts)))
            };
            if !ok && attempt + 1 < TRIES {
                eprintln!(
                    "{settings}: attempt {}: {what} (sender at most {:?} late); trying again",
                    attempt + 1,
                    rep.max_send_late
                );
                continue;
            }
            assert!(ok, "{settings}: {what} (sender at most {:?} late)", rep.max_send_late);
            break;
        }
    }
}

#[test]
fn namespaces_go_away_when_a_test_panics() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let bed = Testbed::create(&KernelPath::default()).unwrap();
        tx.send(vec![bed.tx_ns.clone(), bed.rx_ns.clone()]).unwrap();
        assert!(ours().contains(&bed.rx_ns));
        panic!("on purpose, with the testbed alive");
    });
    assert!(h.join().is_err());
    let names = rx.recv().unwrap();
    let left = ours();
    assert!(
        names.iter().all(|n| !left.contains(n)),
        "namespaces removed during unwinding: {left:?}"
    );
}

#[test]
fn simulate_records_the_kernel_path_in_the_capture() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let o = common::aggrate(
        dir.path(),
        &[
            "-q",
            "simulate",
            "--rate-mbps",
            "300",
            "--duration",
            "0.3",
            "--veth",
            "gro,threaded",
            "-o",
            "k_300mbps.pcapng",
        ],
    );
    assert!(o.status.success(), "{}", common::text(&o).1);
    let f = aggrate::capture::io::open_path(&dir.path().join("k_300mbps.pcapng")).unwrap();
    let c: serde_json::Value = serde_json::from_str(&f.reader.section_comments()[0]).unwrap();
    assert_eq!(c["replay"]["receiver"], "veth-gro-threaded");
    assert_eq!(c["replay"]["kernel_path"]["threaded_napi"], true);
    assert_eq!(c["replay"]["applied"]["threaded"], "1");
    // Its labels and kernel times make rows like any capture.
    let o = common::aggrate(dir.path(), &["-q", "features", "k_300mbps.pcapng", "-o", "k.csv"]);
    assert!(o.status.success(), "{}", common::text(&o).1);
    // Settings that cannot work are refused before anything is made.
    let o = common::aggrate(
        dir.path(),
        &["simulate", "--duration", "0.1", "--veth", "threaded", "-o", "x.pcapng"],
    );
    assert!(!o.status.success());
    assert!(common::text(&o).1.contains("gro"), "{}", common::text(&o).1);
}

/// The emulated downlink: `stations` stations at the given MCS, 1 stream, 80 MHz.
fn downlink_wlan(mcs: &[u8]) -> aggrate::wlan::ValidWlanConfig {
    use aggrate::wlan::config::StationConfig;
    aggrate::wlan::WlanConfig {
        stations: mcs
            .iter()
            .map(|&mcs| StationConfig {
                mcs,
                nss: 1,
                bw_mhz: 80,
                ..StationConfig::default()
            })
            .collect(),
        queue_limit: 1000,
        ..aggrate::wlan::WlanConfig::default()
    }
    .check()
    .unwrap()
}

/// Processes still running in a namespace.
fn pids_in(ns: &str) -> String {
    let o = std::process::Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn kernel_tcp_crosses_the_emulated_downlink_and_nothing_is_left() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use aggrate::testbed::compare::tcp_run;
    use aggrate::testbed::downlink::Downlink;
    // One station at MCS 9 (433 Mb/s PHY), then two at MCS 9 and 4 (433 and 195).
    let d = Downlink::up(1).unwrap();
    let names = ours();
    assert!(
        names.contains(&d.ap_ns) && names.contains(&d.station_ns[0]),
        "{names:?}"
    );
    let r = tcp_run(&d, &downlink_wlan(&[9]), "cubic", 3, 1).unwrap();
    for ns in [&d.server_ns, &d.ap_ns, &d.station_ns[0]] {
        assert_eq!(pids_in(ns), "", "processes left in {ns}");
    }
    let f = &r.flows[0];
    // Cubic fills the AP's FIFO: a rate below the PHY's, full A-MPDUs, a standing queue.
    assert!(f.goodput_mbps > 150.0 && f.goodput_mbps < 433.0, "{f:?}");
    assert!(f.true_level > 40.0 && f.true_level <= 64.0, "{f:?}");
    assert!(
        f.ap_delay_ms.p50 > 2.0 && f.ap_delay_ms.p50 <= f.ap_delay_ms.p99,
        "{f:?}"
    );
    // One-way delay from the captures at both ends: the time in the AP and a little more (the
    // hosts' forwarding); what the server's capture saw leave and the station's never saw
    // arrive is at least what the AP dropped, and not much more (what it held at the end).
    assert!(
        f.owd_ms.p50 >= f.ap_delay_ms.p50 - 0.1 && f.owd_ms.p50 < f.ap_delay_ms.p50 + 2.0,
        "{f:?}"
    );
    assert!(
        f.owd_unmatched >= r.ap_dropped && f.owd_unmatched < r.ap_dropped + 1_100,
        "{f:?} {r:?}"
    );
    assert!(f.packets > 10_000 && f.retransmits.is_some(), "{f:?}");
    assert!(r.release_p99_us.is_finite(), "{r:?}");
    // The station's TCP ACKs crossed the air in its own transmit opportunities.
    assert!(r.uplink_air_share > 0.01 && r.uplink_air_share < 0.15, "{r:?}");
    // The channel's survey as the AP left it: 3 s and more observed, Cubic kept the channel
    // busy, all of it the cell's own (no other transmitter).
    let line = std::fs::read_to_string(&d.survey_file.0).unwrap();
    let [active, busy, own] = aggrate::transport::io::parse_survey(&line).unwrap();
    assert!(
        active > 2_500_000_000 && busy > active / 2 && own <= busy && own > busy * 9 / 10,
        "{line}"
    );
    // CoDel at the AP (as a Linux AP): Cubic's standing queue shrinks to about its target.
    // (Here with the uplink straight through the kernel: it takes no air.)
    let mut codel = downlink_wlan(&[9]).config().clone();
    codel.aqm = aggrate::wlan::codel::Aqm::codel();
    d.set_uplink_airtime(false).unwrap();
    let c = tcp_run(&d, &codel.check().unwrap(), "cubic", 3, 1).unwrap();
    d.set_uplink_airtime(true).unwrap();
    assert_eq!(c.uplink_air_share, 0.0, "{c:?}");
    let g = &c.flows[0];
    assert!(
        g.ap_delay_ms.p50 < f.ap_delay_ms.p50 / 2.0 && g.goodput_mbps > 150.0 && c.ap_dropped > 0,
        "CoDel {g:?} against the FIFO's {f:?}"
    );
    // A 100 Mb/s backhaul before the AP: the bottleneck moves off the air, and the queue with
    // it — the one-way delay (captured at the server, before the backhaul) holds it, the time
    // in the AP does not.
    d.set_backhaul(Some(100.0)).unwrap();
    let b = tcp_run(&d, &downlink_wlan(&[9]), "cubic", 3, 1).unwrap();
    d.set_backhaul(None).unwrap();
    // Off: the redirect through the IFB device is gone with it.
    let links = std::process::Command::new("ip")
        .args(["-n", &d.ap_ns, "link"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains(aggrate::testbed::downlink::BACKHAUL_DEV),
        "{links:?}"
    );
    let h = &b.flows[0];
    assert!(
        h.goodput_mbps < 100.0 && h.goodput_mbps > 60.0 && h.ap_delay_ms.p50 < 2.0,
        "{b:?}"
    );
    assert!(h.owd_ms.p95 > 3.0 && h.owd_ms.p95 > 4.0 * h.ap_delay_ms.p95, "{h:?}");
    assert!(d.set_backhaul(Some(0.5)).is_err());
    // The stations' receive path: GRO on the station's device (read back); a CPU burner keeps
    // a CPU busy while it is set (its thread's CPU time grows by most of the wall time), and
    // stops when another path is set; busy polling is refused by name.
    d.set_receive_path(&"gro,tick=250".parse().unwrap()).unwrap();
    let k = std::process::Command::new("ip")
        .args(["netns", "exec", &d.station_ns[0], "ethtool", "-k", &d.station_dev[0]])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&k.stdout).contains("generic-receive-offload: on"));
    // GRO merges what the station receives: arrivals are captured as the AP hands them over.
    assert_eq!(d.arrival_tap(0), (d.ap_ns.as_str(), "ap1".to_string(), true));
    // The burner thread (named) and its CPU time (utime + stime, in USER_HZ ticks).
    let burner = || -> Option<u64> {
        std::fs::read_dir("/proc/self/task").unwrap().flatten().find_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            (comm.trim() == aggrate::testbed::downlink::STATION_BURNER).then(|| {
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap();
                let f: Vec<u64> = stat
                    .rsplit(')')
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .skip(11)
                    .take(2)
                    .map(|x| x.parse().unwrap())
                    .collect();
                f[0] + f[1]
            })
        })
    };
    assert_eq!(burner(), None);
    d.set_receive_path(&"burner".parse().unwrap()).unwrap();
    // (The thread names itself once it runs.)
    let before = (0..100)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            burner()
        })
        .expect("a burner thread");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let burned = (burner().unwrap() - before) as f64 / 100.0;
    assert!(burned > 0.3, "the burner took {burned} s of 0.5");
    d.set_receive_path(&"veth".parse().unwrap()).unwrap();
    assert_eq!(
        d.arrival_tap(0),
        (d.station_ns[0].as_str(), d.station_dev[0].clone(), false)
    );
    // (Joined; the kernel drops the task from /proc a moment after.)
    assert!(
        (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            burner().is_none()
        }),
        "stopped with the next path"
    );
    let e = d.set_receive_path(&"gro,busy=50".parse().unwrap()).unwrap_err();
    assert!(e.to_string().contains("busy"), "{e}");
    let gone = [d.server_ns.clone(), d.ap_ns.clone(), d.station_ns[0].clone()];
    drop(d);
    let left = ours();
    assert!(gone.iter().all(|n| !left.contains(n)), "{left:?}");

    let d = Downlink::up(2).unwrap();
    let r = tcp_run(&d, &downlink_wlan(&[9, 4]), "bbr", 3, 2).unwrap();
    assert_eq!(r.flows.len(), 2);
    let share: f64 = r.flows.iter().map(|f| f.ampdu_share).sum();
    assert!((share - 1.0).abs() < 1e-9, "{r:?}");
    for f in &r.flows {
        assert!(f.goodput_mbps > 20.0 && f.packets > 1000, "{f:?}");
    }
    // Together below what the faster station would get alone.
    assert!(r.flows.iter().map(|f| f.goodput_mbps).sum::<f64>() < 433.0, "{r:?}");
}

#[test]
fn testbed_run_writes_its_table_and_refuses_what_the_kernel_lacks() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = common::aggrate(
        dir.path(),
        &[
            "-q",
            "testbed",
            "run",
            "--senders",
            "cubic,cubic@codel",
            "--contenders",
            "1",
            "--contender-mbps",
            "5",
            "--duration",
            "2",
            "-o",
            "tb",
        ],
    );
    assert!(out.status.success(), "{}", common::text(&out).1);
    let md = std::fs::read_to_string(dir.path().join("tb/testbed.md")).unwrap();
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| tcp-cubic | 0 |")).collect();
    assert_eq!(rows.len(), 1, "{md}");
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| tcp-cubic @codel | 0 |")).count(),
        1,
        "{md}"
    );
    let first = md.lines().next().unwrap_or_default();
    assert!(first.contains("1 contender(s) of 5 Mb/s"), "{md}");
    let header = md.lines().find(|l| l.starts_with("| sender")).unwrap();
    assert_eq!(rows[0].matches('|').count(), header.matches('|').count(), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("tb/testbed.json")).unwrap()).unwrap();
    assert!(
        json["runs"][0]["flows"][0]["goodput_mbps"].as_f64().unwrap() > 50.0
            && json["runs"][0]["flows"][0]["owd_ms"]["p50"].as_f64().unwrap() > 0.0,
        "{json}"
    );
    let series = std::fs::read_to_string(dir.path().join("tb/testbed_series.csv")).unwrap();
    assert!(series.lines().count() > 10 && series.lines().skip(1).all(|l| l.starts_with("tcp-cubic")));
    for png in ["testbed_rate.png", "testbed_delay.png"] {
        let bytes = std::fs::read(dir.path().join("tb").join(png)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000, "{png}");
    }
    // The child's namespaces carry its pid: none of any aggrate process is left.
    let left: Vec<String> = Testbed::namespaces().into_iter().filter(|n| n.contains("-w")).collect();
    assert!(left.is_empty(), "{left:?}");

    let out = common::aggrate(
        dir.path(),
        &[
            "-q",
            "testbed",
            "run",
            "--senders",
            "nosuchcc",
            "--duration",
            "2",
            "-o",
            "tb2",
        ],
    );
    let err = common::text(&out).1;
    assert!(
        !out.status.success() && err.contains("nosuchcc") && err.contains("cubic"),
        "{err}"
    );
    assert!(!dir.path().join("tb2").exists());
    // An AP queue the emulator does not have, named; nothing set up.
    let out = common::aggrate(
        dir.path(),
        &[
            "-q",
            "testbed",
            "run",
            "--senders",
            "cubic@red",
            "--duration",
            "2",
            "-o",
            "tb3",
        ],
    );
    let err = common::text(&out).1;
    assert!(!out.status.success() && err.contains("fifo or codel"), "{err}");
    assert!(!dir.path().join("tb3").exists());
}

/// `testbed bottleneck`: two short runs with a backhaul switching on and off, one trains the
/// classifier, the other judges it; every output is there and readable, nothing is left; bad
/// input is refused before anything is set up.
#[test]
fn testbed_bottleneck_trains_and_judges_the_classifier() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "-q",
        "testbed",
        "bottleneck",
        "--runs",
        "2",
        "--train",
        "1",
        "--duration",
        "10",
    ];
    let out = common::aggrate(dir.path(), &[&args[..], &["--dwell", "1.5,2.5", "-o", "bn"]].concat());
    assert!(out.status.success(), "{}", common::text(&out).1);
    let bn = dir.path().join("bn");
    let md = std::fs::read_to_string(bn.join("bottleneck.md")).unwrap();
    let header = md.lines().find(|l| l.starts_with("| classifier")).expect("a table");
    for name in ["| in the loop |", "| trained (offline on the same reports) |"] {
        let row = md
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {md}"));
        assert_eq!(row.matches('|').count(), header.matches('|').count(), "{md}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bn.join("bottleneck.json")).unwrap()).unwrap();
    let switches = json["in_loop"]["switches"].as_u64().unwrap();
    assert!(
        switches >= 3 && json["in_loop"]["reports"].as_u64().unwrap() > 100,
        "{json}"
    );
    // The rows carry both classes, from both runs; the weights load as `send` loads them.
    let rows = aggrate::bottleneck::read_rows(&bn.join("rows.csv")).unwrap();
    assert!(rows.iter().any(|r| r.label) && rows.iter().any(|r| !r.label));
    assert!(rows.iter().any(|r| r.run == 0) && rows.iter().any(|r| r.run == 1));
    let w = aggrate::bottleneck::read_weights(&bn.join("weights.json")).unwrap();
    assert!(w.w.iter().any(|x| *x != 0.0));
    for png in ["bottleneck_rate.png", "bottleneck_class.png"] {
        let bytes = std::fs::read(bn.join(png)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000, "{png}");
    }
    let left: Vec<String> = Testbed::namespaces().into_iter().filter(|n| n.contains("-w")).collect();
    assert!(left.is_empty(), "{left:?}");
    // Weights that are not weights, and a fixed backhaul: refused, nothing set up.
    std::fs::write(dir.path().join("bad.json"), "{\"kind\": \"something else\"}").unwrap();
    let out = common::aggrate(
        dir.path(),
        &[&args[..], &["--weights", "bad.json", "-o", "bn2"]].concat(),
    );
    let err = common::text(&out).1;
    assert!(!out.status.success() && err.contains("bad.json"), "{err}");
    let out = common::aggrate(
        dir.path(),
        &[&args[..], &["--backhaul-mbps", "100", "-o", "bn2"]].concat(),
    );
    let err = common::text(&out).1;
    assert!(!out.status.success() && err.contains("--backhaul-range"), "{err}");
    assert!(!dir.path().join("bn2").exists());
}

#[test]
fn aggrate_crosses_the_downlink_and_its_level_is_joined_with_the_aps_truth() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Up to three runs: every run must pass every check below except two that the hypervisor's
    // steal on this 2-core VM can spoil for a whole 8 s run (CI saw both): the watcher against
    // the AP needs intervals in which the AP kept its timing, and the watcher against the
    // receiver needs neither socket held off its core.
    const TRIES: usize = 3;
    for attempt in 1..=TRIES {
        if crosses_the_downlink_once(attempt == TRIES) {
            return;
        }
        eprintln!("run {attempt}: spoiled by a late AP or a socket held off its core (above); again");
    }
}

/// One run of the test above; false when the AP was late in all but 2 or fewer intervals, or
/// the watcher and the receiver parted in more than 1 interval of 10, and `last` is false (the
/// caller tries again); a panic on any other failed check.
fn crosses_the_downlink_once(last: bool) -> bool {
    use aggrate::testbed::compare::{aggrate_run, AggrateRun};
    use aggrate::testbed::downlink::Downlink;
    let dir = tempfile::tempdir().unwrap();
    let d = Downlink::up(1).unwrap();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_aggrate"));
    let interval = std::time::Duration::from_millis(250);
    // `aggrate watch` on the station's interface beside the receiver: any traffic, no key.
    let watch_log = dir.path().join("watch.csv");
    let watcher = d
        .command(&d.station_ns[0], &exe.to_string_lossy())
        .args([
            "watch",
            "-i",
            &d.station_dev[0],
            "--phy-mbps",
            "433.3",
            "--interval-ms",
            "250",
        ])
        .args(["--duration", "40", "--log"])
        .arg(&watch_log)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut watcher = Killed(watcher);
    let run = AggrateRun::new(exe, 8, interval, 1, dir.path());
    let r = aggrate_run(&d, &downlink_wlan(&[9]), &run).unwrap().0;
    // Ctrl-C ends the watch; its log keeps every report.
    let int = std::process::Command::new("kill")
        .args(["-INT", &watcher.0.id().to_string()])
        .status()
        .unwrap();
    assert!(int.success());
    let out = std::mem::replace(&mut watcher.0, std::process::Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        printed.starts_with("interval_end_s") && printed.lines().count() > 20,
        "{printed}"
    );
    for ns in [&d.server_ns, &d.ap_ns, &d.station_ns[0]] {
        assert_eq!(pids_in(ns), "", "processes left in {ns}");
    }
    let f = &r.flows[0];
    assert!(f.goodput_mbps > 20.0 && f.goodput_mbps < 433.0, "{f:?}");
    assert!(f.lost.is_some() && f.retransmits.is_none(), "{f:?}");
    // The receiver's reports met the AP's truth on the same 250 ms grid.
    let est = f.estimated.expect("the steered level joined with the truth");
    let count = f.frame_count.expect("the frame count joined with the truth");
    assert!(
        est.intervals >= 10 && count.intervals == est.intervals,
        "{est:?} {count:?}"
    );
    assert!(
        est.truth_mean >= 1.0 && est.truth_mean <= 64.0 && est.estimate_mean >= 1.0,
        "{est:?}"
    );
    // The aggregation target keeps the AP's 1,000-packet FIFO far from full (Cubic: ≈ 30 ms).
    assert!(
        f.ap_delay_ms.p50 < 15.0 && f.owd_ms.p50 < 15.0 && r.ap_dropped == 0,
        "{r:?}"
    );
    let truth = aggrate::livelog::read_truth(&dir.path().join("ap_truth.csv")).unwrap();
    assert!(truth.iter().any(|t| t.ampdus > 0), "{truth:?}");
    let reports = aggrate::livelog::read_reports(&dir.path().join("recv_0.csv")).unwrap();
    assert!(reports.len() >= 30, "{}", reports.len());
    // The sender's log: a line per step of its loop, the rate rising out of start-up.
    let steps = std::fs::read_to_string(dir.path().join("send.csv")).unwrap();
    assert!(
        steps.starts_with("t_ns,update,starting,bottleneck,level,driven,rate_mbps_0"),
        "{steps}"
    );
    let rates: Vec<f64> = steps
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(6)?.parse().ok())
        .collect();
    assert!(rates.len() >= 20 && rates[rates.len() - 1] > rates[0], "{steps}");
    // The watcher reads what the receiver reads: the same estimator on the same packets through
    // another socket, interval by interval.
    let watched = aggrate::livelog::read_reports(&watch_log).unwrap();
    let same = reports
        .iter()
        .filter(|r| r.packets > 1000)
        .filter_map(|r| watched.iter().find(|w| w.start_ns == r.start_ns).map(|w| (r, w)))
        .collect::<Vec<_>>();
    let close = same
        .iter()
        .filter(|(r, w)| (w.level / r.level - 1.0).abs() < 0.03 && w.packets.abs_diff(r.packets) < r.packets / 50)
        .count();
    assert!(same.len() >= 10, "{} intervals both reported; {said}", same.len());
    // Two sockets stamp the same packets: under hypervisor steal one is sometimes held off its
    // core and an interval's stamps part (CI saw 26 of 30 alike once) — another run then.
    if close * 10 < same.len() * 9 {
        assert!(!last, "{close} of {} intervals alike in every run; {said}", same.len());
        eprintln!("{close} of {} intervals alike", same.len());
        return false;
    }
    // And what it counts against the AP's own count, in the intervals where the AP kept its
    // timing (release p99 ≤ 1 ms: on this 2-core VM the hypervisor sometimes holds the AP's
    // thread for milliseconds, the AP then idles and bursts, and its queue guard sees delay
    // spikes — the run's table flags it) and the loop was past its ramp (A-MPDUs of 8 or more):
    // the frame count, which this plain veth path does not blur, within 10 % (median).
    let j = aggrate::livelog::join(&truth, &watched, 0, 0, (&watch_log, &watch_log)).unwrap();
    let near: Vec<aggrate::metrics::LevelPair> = j
        .pairs
        .iter()
        .filter(|(t, _)| t.mpdus >= 8 * t.ampdus.max(1) && t.release_p99_us <= 1000.0)
        .map(|(t, w)| aggrate::metrics::LevelPair {
            start: Ts(t.start_ns),
            estimate: w.frame_count,
            truth: t.mpdus as f64 / t.ampdus.max(1) as f64,
            ampdus: t.ampdus,
        })
        .collect();
    let level = aggrate::metrics::LevelError::of(&near).filter(|l| l.intervals >= 3);
    let Some(level) = level else {
        assert!(!last, "no 3 intervals where the AP kept its timing in any run; {said}");
        return false;
    };
    assert!(level.mae_rel_median <= 0.10, "watch against the AP: {level:?}; {said}");
    true
}

#[test]
fn the_aps_ampdu_marks_give_the_receivers_every_frame() {
    let _room = common::room(module_path!());
    // aggrate-mac: the AP marks each A-MPDU in the DSCP bits and `recv --ap-marks` reads them as
    // MAC timestamps — its frame count is the AP's own, interval by interval.
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use aggrate::testbed::compare::{aggrate_run, AggrateRun};
    use aggrate::testbed::downlink::Downlink;
    let dir = tempfile::tempdir().unwrap();
    let d = Downlink::up(1).unwrap();
    d.set_ampdu_marks(true);
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_aggrate"));
    let run = AggrateRun::new(exe, 5, std::time::Duration::from_millis(250), 1, dir.path());
    let r = aggrate_run(&d, &downlink_wlan(&[9]), &run).unwrap().0;
    let f = &r.flows[0];
    assert_eq!(f.sender, "aggrate-mac");
    let count = f.frame_count.expect("the frame count joined with the truth");
    assert!(count.intervals >= 8 && count.mae_rel_median < 0.02, "{count:?}");
    assert!(f.goodput_mbps > 20.0 && r.ap_dropped == 0, "{r:?}");
}

/// A child process killed and reaped when dropped (a failing test leaves none behind).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_packet_socket_stamps_what_an_interface_receives_and_names_what_is_missing() {
    let _room = common::room(module_path!());
    if !require_root() {
        return;
    }
    use aggrate::rxstamp::{Options, PacketSocket};
    let o = Options {
        read_timeout: Some(std::time::Duration::from_millis(50)),
        ..Options::default()
    };
    let mut sock = PacketSocket::open("lo", &o).unwrap();
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..20 {
        tx.send_to(&[7u8; 100], rx.local_addr().unwrap()).unwrap();
    }
    // On loopback each datagram leaves (outgoing) and arrives (stamped, IPv4 of 128 bytes).
    let (mut incoming, mut outgoing) = (0, 0);
    let mut buf = [0u8; 2048];
    let mut last = 0u64;
    // Bounded: at most 200 reads of at most 50 ms each.
    for _ in 0..200 {
        if incoming == 20 {
            break;
        }
        let Some(p) = sock.recv(&mut buf).unwrap() else {
            continue;
        };
        let ip = aggrate::watch::parse_ip(&buf[..p.len]);
        if ip.is_none_or(|ip| ip.len != 128) {
            continue; // other traffic on lo
        }
        if p.outgoing {
            outgoing += 1;
        } else {
            let t = p.kernel.expect("a kernel time").as_nanos();
            assert!(t >= last, "times go forward");
            last = t;
            incoming += 1;
        }
    }
    assert_eq!((incoming, outgoing), (20, 20));
    let e = PacketSocket::open("no-such-if0", &o)
        .err()
        .expect("an unknown interface is refused");
    assert!(e.to_string().contains("finding the interface"), "{e}");
}
