//! The C ABI from C: tests/c/estimate.c, compiled with the system compiler (`cc`) against the
//! static library cargo built for this test, estimates μ_N on the ns-3 sample the binary
//! embeds (tests/data at the top of the repository) and must print exactly the reports the Rust
//! runtime makes; then bad input through every door gets a status and a message, never a crash.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aggrate::capture::io::open_path;
use aggrate::model::ModelFile;
use aggrate::runtime::{OnlineEstimator, RxPacket};
use aggrate::Ts;

/// The libaggrate_ffi.a cargo built for this test: beside the test binary (target/<profile>/deps)
/// or, when built on its own, one level up.
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let here = deps.join("libaggrate_ffi.a");
    if here.exists() {
        return here;
    }
    deps.parent().unwrap().join("libaggrate_ffi.a")
}

/// Compile estimate.c into `dir`.
fn build_c(dir: &Path) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = static_lib();
    assert!(lib.exists(), "{} not built", lib.display());
    let exe = dir.join("estimate");
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("-std=c99")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(&exe)
        .arg(here.join("tests/c/estimate.c"))
        .arg("-I")
        .arg(here.join("include"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .expect("running the C compiler (cc)");
    assert!(o.status.success(), "cc failed: {}", String::from_utf8_lossy(&o.stderr));
    exe
}

/// (seq, kernel ns, len) of the sample's UDP flow, in receive order.
fn sample() -> Vec<(u64, u64, u32)> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/ns3_vht_mcs9_2ss_300mbps.pcap.xz");
    let r = open_path(&p).unwrap().reader;
    let mut by_flow: BTreeMap<String, Vec<(u64, u64, u32)>> = BTreeMap::new();
    for rec in r {
        let rec = rec.unwrap();
        if let (Some(f), Some(seq)) = (rec.flow(), rec.payload_seq(0)) {
            by_flow
                .entry(format!("{f:?}"))
                .or_default()
                .push((seq as u64, rec.host.as_nanos(), rec.len));
        }
    }
    by_flow.into_values().max_by_key(|v| v.len()).unwrap()
}

fn rust_reports(pk: &[(u64, u64, u32)]) -> String {
    let m = ModelFile::shipped().unwrap();
    let mut e = OnlineEstimator::from_model(&m, Duration::from_millis(100)).unwrap();
    let mut out = String::new();
    let mut line = |r: &aggrate::runtime::AggReport| {
        out += &format!(
            "{} {} {} {} {:?} {:?} {:?} {}\n",
            r.start.as_nanos(),
            r.end.as_nanos(),
            r.frames,
            r.packets,
            r.mean_agg,
            r.level(),
            r.rx_rate_bps,
            r.lost
        );
    };
    let mut last = 0;
    for &(seq, ns, len) in pk {
        e.push(&RxPacket {
            host: Ts(ns),
            seq: Some(seq),
            len,
            ..RxPacket::default()
        });
        while let Some(r) = e.poll_report(Ts(ns)) {
            line(&r);
        }
        last = ns;
    }
    while let Some(r) = e.poll_report(Ts(last + 1_000_000_000)) {
        line(&r);
    }
    out
}

/// C's %.17g and Rust's {:?} print the same double differently ("8" vs "8.0", exponents);
/// compare the numbers, every digit of them.
fn parse(text: &str) -> Vec<Vec<f64>> {
    text.lines()
        .map(|l| l.split_whitespace().map(|x| x.parse::<f64>().unwrap()).collect())
        .collect()
}

#[test]
fn a_c_program_estimates_the_sample_exactly_like_the_rust_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path());
    let pk = sample();
    assert!(pk.len() > 10_000, "{} packets", pk.len());
    let input = dir.path().join("packets.txt");
    let text: String = pk.iter().map(|(s, n, l)| format!("{s} {n} {l}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let model = dir.path().join("model.json");
    std::fs::write(&model, aggrate::model::SHIPPED_JSON).unwrap();
    let want = parse(&rust_reports(&pk));
    assert!(want.len() >= 10, "{} reports", want.len());
    for m in ["-", model.to_str().unwrap()] {
        let o = Command::new(&exe).arg(m).arg(&input).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = parse(&String::from_utf8_lossy(&o.stdout));
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            // Bit for bit: the same code computes them.
            let gb: Vec<u64> = g.iter().map(|x| x.to_bits()).collect();
            let wb: Vec<u64> = w.iter().map(|x| x.to_bits()).collect();
            assert_eq!(gb, wb, "C {g:?} vs Rust {w:?}");
        }
        // The sample is ns-3's 300 Mb/s run: ~8 packets per A-MPDU (see the README).
        let mean: f64 = got.iter().map(|r| r[4]).sum::<f64>() / got.len() as f64;
        assert!((5.0..12.0).contains(&mean), "mean μ_N {mean}");
    }
}

#[test]
fn bad_input_through_the_c_abi_gets_a_status_and_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path());
    let o = Command::new(&exe).arg("--abuse").output().unwrap();
    assert!(
        o.status.success(),
        "crashed: {:?} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let case = |name: &str| -> (i32, String) {
        let l = out
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        let mut it = l.splitn(3, ' ');
        it.next();
        (it.next().unwrap().parse().unwrap(), it.next().unwrap_or("").to_string())
    };
    let (s, m) = case("null_json");
    assert_eq!(s, 1, "{m}");
    assert!(m.contains("null"), "{m}");
    assert_eq!(case("null_out").0, 1);
    assert_eq!(case("empty_json").0, 2);
    let (s, m) = case("bad_model");
    assert_eq!(s, 3);
    assert!(
        m.contains("not an aggrate model file") && m.contains("FeatureSpec"),
        "{m}"
    );
    let (s, m) = case("not_utf8");
    assert_eq!(s, 3);
    assert!(m.contains("byte offset 12"), "names the offset: {m}");
    assert_eq!(case("null_model").0, 1);
    let (s, m) = case("bad_interval");
    assert_eq!(s, 4);
    assert!(m.contains("interval"), "{m}");
    assert_eq!(case("null_estimator").0, 1);
    assert_eq!(case("first_push").0, 0);
    let (s, m) = case("backwards");
    assert_eq!(s, 5);
    assert!(m.contains("4000000") && m.contains("5000000"), "{m}");
    assert_eq!(case("short_report").0, 2);
    assert_eq!(case("null_report").0, 1);
    assert_eq!(case("null_params_ok").0, 0);
    let (s, m) = case("nan_report");
    assert_eq!(s, 4);
    assert!(m.contains("mean_agg"), "{m}");
    assert_eq!(case("null_rate").0, 1);
    let (s, m) = case("bad_params");
    assert_eq!(s, 4);
    assert!(m.contains("k0"), "{m}");
}

/// Self-calibration through the C ABI: the shipped model with the embedded summary of its
/// training receivers passed in as JSON, fed the sample's packets as `recv --self-calibrate`
/// feeds its calibrator, learns the operating point the Rust receiver learns, knot for knot, and
/// reports what the Rust runtime reports (the level from airtime at the given PHY rate).
#[test]
fn a_c_program_self_calibrates_like_recv() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path());
    // UDP payloads of the sample's 1,500-byte IP packets, as a receiver's socket gives them.
    let pk: Vec<(u64, u64, u32)> = sample().into_iter().map(|(s, n, _)| (s, n, 1472)).collect();
    let input = dir.path().join("packets.txt");
    std::fs::write(
        &input,
        pk.iter().map(|(s, n, l)| format!("{s} {n} {l}\n")).collect::<String>(),
    )
    .unwrap();
    let bank = dir.path().join("bank.json");
    std::fs::write(
        &bank,
        serde_json::to_vec(&aggrate::train::bank::shipped_summary().unwrap()).unwrap(),
    )
    .unwrap();
    let phy: u64 = 866_700_000;
    // What recv does (transport::io::run_receiver_with): each accepted packet into the
    // estimator, then into the calibrator, which hands the estimator its operating point.
    let file = ModelFile::shipped().unwrap();
    let mut e = OnlineEstimator::from_model(&file, Duration::from_millis(100)).unwrap();
    let mut level = e.level_config().clone();
    level.phy_rate_bps = Some(phy);
    level.l3_overhead_bytes = 28;
    e.set_level_config(level).unwrap();
    let mut cal =
        aggrate::train::online::for_receiver(&file, aggrate::train::online::DistanceLimit::ByPhy, Some(phy)).unwrap();
    let mut levels = Vec::new();
    let mut last = 0;
    for &(seq, ns, len) in &pk {
        e.push(&RxPacket {
            host: Ts(ns),
            seq: Some(seq),
            len,
            ..RxPacket::default()
        });
        cal.feed(&mut e, Ts(ns), len);
        while let Some(r) = e.poll_report(Ts(ns)) {
            levels.push(r.level());
        }
        last = ns;
    }
    while let Some(r) = e.poll_report(Ts(last + 1_000_000_000)) {
        levels.push(r.level());
    }
    let want = cal.summary();
    assert!(want.windows >= 2 && !want.knots.is_empty(), "{want:?}");
    let o = Command::new(&exe)
        .args([
            "--calibrate",
            bank.to_str().unwrap(),
            &phy.to_string(),
            input.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let field = |prefix: &str| -> Vec<Vec<f64>> {
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| {
                l[prefix.len()..]
                    .split_whitespace()
                    .map(|x| x.parse().unwrap())
                    .collect()
            })
            .collect()
    };
    let state = &field("state ")[0];
    assert_eq!(
        state.iter().map(|&v| v as u64).collect::<Vec<_>>(),
        vec![want.windows, want.skipped, want.too_far, want.knots.len() as u64]
    );
    let knots = field("knot ");
    assert_eq!(knots.len(), want.knots.len());
    for (k, w) in knots.iter().zip(&want.knots) {
        assert_eq!(
            (k[0].to_bits(), k[1].to_bits()),
            (w[0].to_bits(), w[1].to_bits()),
            "C {k:?} vs Rust {w:?}"
        );
    }
    // The reports' level (6th column): the airtime level, as the Rust runtime's.
    let reports: Vec<f64> = out
        .lines()
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().nth(5).unwrap().parse().unwrap())
        .collect();
    assert_eq!(reports.len(), levels.len());
    assert!(reports.iter().zip(&levels).all(|(a, b)| a.to_bits() == b.to_bits()));
    // The ns-3 sample is its 300 Mb/s run: 7.8 MPDUs per A-MPDU (ns-3), the airtime relation 7.9.
    // Full intervals only: the first and last with packets are partial, then the empty ones.
    let with: Vec<f64> = reports.iter().copied().filter(|&l| l > 0.0).collect();
    let steady: Vec<f64> = with[1..with.len() - 1].to_vec();
    let mean = steady.iter().sum::<f64>() / steady.len() as f64;
    assert!(
        (7.7..8.1).contains(&mean) && steady.len() >= 20,
        "{mean} over {steady:?}"
    );
    for (name, status, says) in [
        ("not_json", 3, "not a bank summary"),
        ("negative_distance", 4, "max_distance"),
        ("short_state", 2, "sizeof(AggrateCalibration)"),
        ("null_calibrator", 1, "calibrator must not be null"),
    ] {
        let l = out
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name}: {out}"));
        let mut it = l.splitn(3, ' ').skip(1);
        assert_eq!(it.next().unwrap().parse::<i32>().unwrap(), status, "{l}");
        assert!(it.next().unwrap_or("").contains(says), "{l}");
    }
}
