//! Datasets that span receivers, leave-one-receiver-out training, and evaluation on a sniffer
//! capture joined with a receiver's kernel log.

use crate::common;

use std::path::Path;

use aggrate::capture::io::open_path;
use common::{aggrate, text};

const MANIFEST: &str = r#"
name = "rx"
seed = 40
packets = 4000
train_rates_mbps = [200, 500]

[[receivers]]
preset = "phone"

[[receivers]]
random = 2

[[receivers]]
name = "usb"
stages = [
  { kind = "timer_tick", period_us = 125.0, slack_us = 10.0 },
  { kind = "per_packet", us = 2.0 },
]

[base.wlan]
stations = [{ vht = true, mcs = 9, nss = 2, bw_mhz = 80, short_gi = true }]

[[base.flows]]
arrival = { kind = "cbr" }
"#;

/// The phone preset on another WLAN (MCS 7, 1000-byte packets), named apart from `MANIFEST`'s
/// receivers.
const OTHER_WLAN: &str = r#"
name = "other"
seed = 41
packets = 3000
train_rates_mbps = [200]

[[receivers]]
preset = "phone"
name = "mcs7-phone"

[base.wlan]
stations = [{ vht = true, mcs = 7, nss = 2, bw_mhz = 80, short_gi = true }]

[[base.flows]]
arrival = { kind = "cbr" }
ip_len = 1000
"#;

/// A receive path in none of the training draws: per-MPDU hand-off released at 120 µs timer
/// ticks.
const UNSEEN_RECEIVER: &str = r#"stages = [
  { kind = "per_mpdu_handoff" },
  { kind = "timer_tick", period_us = 120.0, slack_us = 15.0 },
  { kind = "per_packet", us = 2.0, jitter_us = 1.0 },
]
"#;

/// `aggrate -q simulate ARGS` in `dir`, which must succeed.
fn simulate(dir: &Path, args: &[&str]) {
    let mut argv = vec!["-q", "simulate"];
    argv.extend_from_slice(args);
    let o = aggrate(dir, &argv);
    assert!(o.status.success(), "{}", text(&o).1);
}

/// `aggrate simulate` of half a second at 400 Mb/s through the `noise` preset into `out`.
fn simulate_half_second_at_400(dir: &Path, seed: &str, noise: &str, out: &str) {
    simulate(
        dir,
        &[
            "--rate-mbps",
            "400",
            "--duration",
            "0.5",
            "--seed",
            seed,
            "--noise",
            noise,
            "-o",
            out,
        ],
    );
}

fn build(dir: &Path) -> serde_json::Value {
    std::fs::write(dir.join("rx.toml"), MANIFEST).unwrap();
    let o = aggrate(dir, &["-q", "dataset", "build", "rx.toml", "--out", "rx"]);
    assert!(o.status.success(), "{}", text(&o).1);
    serde_json::from_str(&std::fs::read_to_string(dir.join("rx/manifest.json")).unwrap()).unwrap()
}

#[test]
fn a_receivers_manifest_names_every_run_and_capture() {
    let dir = tempfile::tempdir().unwrap();
    let built = build(dir.path());
    let runs = built["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4 * 2, "4 receivers × 2 rates");
    let names: Vec<&str> = runs.iter().map(|r| r["receiver"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "phone",
            "phone",
            "random-01",
            "random-01",
            "random-02",
            "random-02",
            "usb",
            "usb"
        ]
    );
    assert_ne!(
        runs[2]["receiver_path"], runs[4]["receiver_path"],
        "two different random draws"
    );
    assert_eq!(runs[6]["receiver_path"][0]["kind"], "timer_tick");
    for r in runs {
        let file = dir.path().join("rx").join(r["stations"][0]["file"].as_str().unwrap());
        assert!(file.to_string_lossy().contains(r["receiver"].as_str().unwrap()));
        // The capture says which receive path made it.
        let f = open_path(&file).unwrap();
        let c: serde_json::Value = serde_json::from_str(&f.reader.section_comments()[0]).unwrap();
        assert_eq!(c["receiver"], r["receiver"]);
        assert_eq!(c["receive_path"]["stages"], r["receiver_path"]);
    }
    // The same manifest builds the same bytes.
    let again = tempfile::tempdir().unwrap();
    build(again.path());
    let f = runs[3]["stations"][0]["file"].as_str().unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("rx").join(f)).unwrap(),
        std::fs::read(again.path().join("rx").join(f)).unwrap()
    );
}

#[test]
fn train_holds_out_whole_receivers() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    for (model, extra) in [
        ("logistic", vec!["--m", "5"]),
        (
            "mlp",
            vec![
                "--m",
                "4",
                "--context",
                "64",
                "--epochs",
                "1",
                "--max-rows",
                "4000",
                "--hidden",
                "4",
            ],
        ),
    ] {
        let mut args = loro_args(model, "out");
        args.extend(extra);
        let o = aggrate(dir.path(), &args);
        assert!(o.status.success(), "{model}: {}", text(&o).1);
        let stem = if model == "logistic" {
            "logistic_m5_sigma"
        } else {
            "mlp4_m4_ctx64"
        };
        let rep: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(format!("out/{stem}.receivers.json"))).unwrap(),
        )
        .unwrap();
        let recv = rep["receivers"].as_array().unwrap();
        assert_eq!(recv.len(), 4);
        for r in recv {
            let per_rate = r["per_rate"].as_array().unwrap();
            assert_eq!(per_rate.len(), 2);
            for p in per_rate {
                for key in ["held_out", "own", "threshold_held_out", "threshold_own"] {
                    let f1 = p[key]["f1"].as_f64().unwrap();
                    assert!((0.0..=1.0).contains(&f1), "{key}: {f1}");
                }
            }
        }
        assert_eq!(rep["verdicts"].as_array().unwrap().len(), 4);
        let md = std::fs::read_to_string(dir.path().join(format!("out/{stem}.receivers.md"))).unwrap();
        assert!(md.contains("receivers pass") && md.contains("| usb | model |"), "{md}");
        assert!(dir.path().join(format!("out/{stem}.receivers.png")).exists());
        // The final model (fitted on every receiver) loads and runs.
        let m = aggrate::model::ModelFile::load(&dir.path().join(format!("out/{stem}.json"))).unwrap();
        assert_eq!(m.model.kind(), model);
        assert_eq!(m.metrics["group_by"], "receiver");
    }
    // `--test`: usb is in no training set; it gets a table of its own, scored with the model
    // fitted on the three others, and the model file says what it was trained on.
    let mut caps: Vec<String> = std::fs::read_dir(dir.path().join("rx"))
        .unwrap()
        .map(|e| format!("rx/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".pcapng"))
        .collect();
    caps.sort();
    let (usb, others): (Vec<&str>, Vec<&str>) = caps.iter().map(String::as_str).partition(|f| f.contains("_usb_"));
    assert_eq!((usb.len(), others.len()), (2, 6));
    let with = |test: &[&str], extra: &[&str]| {
        let mut args = vec![
            "-q",
            "train",
            "--model",
            "threshold",
            "--own-folds",
            "2",
            "-o",
            "tout",
            "--dataset",
        ];
        args.extend_from_slice(&others);
        args.push("--test");
        args.extend_from_slice(test);
        args.extend_from_slice(extra);
        let o = aggrate(dir.path(), &args);
        (o.status.success(), text(&o).1)
    };
    // With label-free calibration too (a small bank for speed): test receivers get it as well.
    write_small_bank(dir.path(), 6);
    let self_cal = [
        "--group-by",
        "receiver",
        "--self-calibrate",
        "--bank",
        "bank.toml",
        "--neighbours",
        "2",
    ];
    let (ok, err) = with(&usb, &self_cal);
    assert!(ok, "{err}");
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("tout").join(f)).unwrap()).unwrap()
    };
    let trained = read("threshold_m1.receivers.json");
    let tested = read("threshold_m1.test.receivers.json");
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["receivers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["receiver"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&trained), ["phone", "random-01", "random-02"]);
    assert_eq!(names(&tested), ["usb"]);
    assert_eq!(tested["receivers"][0]["test"], true);
    assert_eq!(tested["receivers"][0]["per_rate"].as_array().unwrap().len(), 2);
    for p in tested["receivers"][0]["per_rate"].as_array().unwrap() {
        let f1 = p["self_calibrated"]["f1"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&f1), "{p}");
        assert!(p["self_calibration_distance"].as_f64().unwrap() >= 0.0, "{p}");
    }
    assert!(tested["verdicts"][0]["self_calibrated_pass"].is_boolean());
    assert!(trained["receivers"][0].get("test").is_none());
    let m = aggrate::model::ModelFile::load(&dir.path().join("tout/threshold_m1.json")).unwrap();
    assert_eq!(m.metrics["test_receivers"], serde_json::json!(["usb"]));
    assert_eq!(m.training.captures.len(), 6, "{:?}", m.training.captures);
    assert!(m.training.captures.iter().all(|c| !c.contains("usb")));
    let md = std::fs::read_to_string(dir.path().join("tout/threshold_m1.test.receivers.md")).unwrap();
    assert!(md.contains("in no training set") && md.contains("| usb |"), "{md}");
    // A test receiver on another WLAN (MCS 7, 1000-byte packets): its bank is emulated at the
    // WLAN its captures show, the training receivers' at theirs, and the reports say which.
    std::fs::write(dir.path().join("other.toml"), OTHER_WLAN).unwrap();
    let o = aggrate(dir.path(), &["-q", "dataset", "build", "other.toml", "--out", "other"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let (ok, err) = with(&["other"], &self_cal);
    assert!(ok, "{err}");
    let (trained, tested) = (
        read("threshold_m1.receivers.json"),
        read("threshold_m1.test.receivers.json"),
    );
    assert_eq!(names(&tested), ["mcs7-phone"]);
    let wlan = |v: &serde_json::Value| v["bank_wlan"].as_str().unwrap().to_string();
    assert_eq!(
        wlan(&tested["receivers"][0]),
        "VHT MCS 7, 2 SS, 80 MHz, 1000-byte packets"
    );
    for r in trained["receivers"].as_array().unwrap() {
        assert_eq!(wlan(r), "VHT MCS 9, 2 SS, 80 MHz, 1500-byte packets", "{r}");
    }
    let md = std::fs::read_to_string(dir.path().join("tout/threshold_m1.test.receivers.md")).unwrap();
    assert!(
        md.contains("(the bank emulated at VHT MCS 7, 2 SS, 80 MHz, 1000-byte packets)"),
        "{md}"
    );
    let md = std::fs::read_to_string(dir.path().join("tout/threshold_m1.receivers.md")).unwrap();
    assert!(
        md.contains("(the bank emulated at VHT MCS 9, 2 SS, 80 MHz, 1500-byte packets)"),
        "{md}"
    );
    // A test receiver that is also trained on, and --test without --group-by receiver: refused.
    let (ok, err) = with(&[others[0]], &["--group-by", "receiver"]);
    assert!(!ok && err.contains("receiver phone is in the training data"), "{err}");
    let (ok, err) = with(&usb, &[]);
    assert!(
        !ok && err.contains("--test") && err.contains("--group-by receiver"),
        "{err}"
    );
    // A capture that names no receiver (the ns-3 sample has no pcapng comment) is refused clearly.
    let ns3 = common::ns3_pcap(dir.path());
    let o = aggrate(
        dir.path(),
        &[
            "-q",
            "train",
            "--dataset",
            ns3.to_str().unwrap(),
            "rx/rx_usb_200mbps.pcapng",
            "--group-by",
            "receiver",
        ],
    );
    assert!(!o.status.success());
    let err = text(&o).1;
    assert!(err.contains("which receiver") && err.contains("ns3.pcap"), "{err}");
}

/// `seq,host_ns` lines of a capture's flow.
fn seq_log(path: &Path) -> Vec<(u32, u64)> {
    open_path(path)
        .unwrap()
        .reader
        .filter_map(|r| r.ok())
        .filter_map(|r| r.payload_seq(0).map(|s| (s, r.host.as_nanos())))
        .collect()
}

fn write_log(path: &Path, lines: &[(u32, u64)]) {
    let mut s = String::from("seq,host_ns\n");
    for (a, b) in lines {
        s.push_str(&format!("{a},{b}\n"));
    }
    std::fs::write(path, s).unwrap();
}

#[test]
fn eval_intervals_show_what_the_shipped_level_is_made_of() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    simulate_half_second_at_400(d, "5", "laptop", "lap_400mbps.pcapng");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/mlp8_m5_ctx1024.json");
    let o = aggrate(
        d,
        &[
            "-q",
            "eval",
            "--model",
            model.to_str().unwrap(),
            "lap_400mbps.pcapng",
            "--interval-ms",
            "100",
            "-o",
            "ev",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let csv = std::fs::read_to_string(d.join("ev/mlp8_m5_ctx1024.eval.intervals.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| {
        head.iter()
            .position(|h| *h == n)
            .unwrap_or_else(|| panic!("no column {n} in {head:?}"))
    };
    let names = aggrate::level::feature_names();
    assert_eq!(head.len(), 14 + names.len(), "{head:?}");
    assert!(names.iter().all(|n| head.contains(&n.as_str())));
    let (level, airtime, trees) = (col("level"), col("airtime"), col("trees"));
    let mut rows = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), head.len(), "{l}");
        let x = |i: usize| f[i].parse::<f64>().unwrap();
        // The shipped rule: the trees' level, never below the airtime level.
        let want = x(trees).max(x(airtime)).clamp(1.0, 64.0);
        assert!((x(level) - want).abs() <= 2e-4 * want, "{l}");
        rows += 1;
    }
    assert!(rows >= 3, "{csv}");
}

#[test]
fn eval_scores_a_sniffer_capture_joined_with_a_receiver_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/logistic_m20_sigma.json");
    let model = model.to_str().unwrap();
    // The same run seen by a sniffer (MAC times) and by a phone's kernel (noisy times).
    for (name, noise) in [("sniff_400mbps.pcapng", "none"), ("phone_400mbps.pcapng", "phone")] {
        simulate_half_second_at_400(d, "3", noise, name);
    }
    let log = seq_log(&d.join("phone_400mbps.pcapng"));
    write_log(&d.join("phone.csv"), &log);
    let run = |args: &[&str]| {
        let o = aggrate(d, args);
        (o.status.success(), text(&o).1)
    };
    let (ok, err) = run(&["-q", "eval", "--model", model, "phone_400mbps.pcapng", "-o", "direct"]);
    assert!(ok, "{err}");
    let (ok, err) = run(&[
        "eval",
        "--model",
        model,
        "sniff_400mbps.pcapng",
        "--kernel",
        "phone.csv",
        "-o",
        "joined",
    ]);
    assert!(ok, "{err}");
    let read = |dir: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join(dir).join("logistic_m20_sigma.eval.json")).unwrap())
            .unwrap()
    };
    let (a, b) = (read("direct"), read("joined"));
    assert_eq!(a["rows"], b["rows"]);
    assert_eq!(
        a["per_rate"], b["per_rate"],
        "joined kernel times score exactly like the receiver's own capture"
    );
    assert!(b["f1"].as_f64().unwrap() > 0.5);
    assert!(d.join("joined/logistic_m20_sigma.eval.md").exists());
    // A log of another flow (no sequence number in common) is refused, naming both files.
    let shifted: Vec<(u32, u64)> = log.iter().map(|(s, t)| (s + 10_000_000, *t)).collect();
    write_log(&d.join("other.csv"), &shifted);
    let (ok, err) = run(&[
        "eval",
        "--model",
        model,
        "sniff_400mbps.pcapng",
        "--kernel",
        "other.csv",
        "-o",
        "x",
    ]);
    assert!(!ok);
    assert!(
        err.contains("no sequence number in common") && err.contains("other.csv") && err.contains("sniff_400mbps"),
        "{err}"
    );
    // Partial overlap: scored, with the counts on stderr.
    write_log(&d.join("half.csv"), &log[..log.len() / 2]);
    let (ok, err) = run(&[
        "eval",
        "--model",
        model,
        "sniff_400mbps.pcapng",
        "--kernel",
        "half.csv",
        "-o",
        "h",
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("without a kernel time"), "{err}");
    // A folder of logs is paired by name; a missing one is named.
    std::fs::create_dir(d.join("logs")).unwrap();
    write_log(&d.join("logs/sniff_400mbps.csv"), &log);
    let (ok, err) = run(&[
        "-q",
        "eval",
        "--model",
        model,
        "sniff_400mbps.pcapng",
        "--kernel",
        "logs",
        "-o",
        "f",
    ]);
    assert!(ok, "{err}");
    assert_eq!(read("f")["per_rate"], a["per_rate"]);
    let (ok, err) = run(&[
        "eval",
        "--model",
        model,
        "phone_400mbps.pcapng",
        "--kernel",
        "logs",
        "-o",
        "g",
    ]);
    assert!(!ok && err.contains("no log for"), "{err}");
}

#[test]
fn train_and_eval_read_feature_tables() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    simulate(
        d,
        &[
            "--rate-mbps",
            "300",
            "--duration",
            "1",
            "--seed",
            "5",
            "-o",
            "c_300mbps.pcapng",
        ],
    );
    for (out, extra) in [
        ("t.parquet", vec!["--m", "5"]),
        ("t.csv", vec!["--m", "5"]),
        ("ctx.parquet", vec!["--m", "3", "--context", "64"]),
    ] {
        let mut args = vec!["-q", "features", "c_300mbps.pcapng", "-o", out];
        args.extend(extra);
        let o = aggrate(d, &args);
        assert!(o.status.success(), "{}", text(&o).1);
    }
    // Training on the capture and on its table gives the same model.
    for src in ["c_300mbps.pcapng", "t.parquet", "t.csv"] {
        let o = aggrate(
            d,
            &[
                "-q",
                "train",
                "--dataset",
                src,
                "--m",
                "5",
                "--folds",
                "3",
                "-o",
                &format!("m_{src}"),
            ],
        );
        assert!(o.status.success(), "{src}: {}", text(&o).1);
    }
    let w = |src: &str| {
        let f = aggrate::model::ModelFile::load(&d.join(format!("m_{src}/logistic_m5_sigma.json"))).unwrap();
        serde_json::to_value(&f.model).unwrap()
    };
    assert_eq!(w("c_300mbps.pcapng"), w("t.parquet"));
    assert_eq!(w("t.parquet"), w("t.csv"));
    // A table without the model's columns is refused, naming the column.
    let o = aggrate(
        d,
        &[
            "eval",
            "--model",
            "m_t.csv/logistic_m5_sigma.json",
            "ctx.parquet",
            "-o",
            "e",
        ],
    );
    assert!(!o.status.success());
    assert!(text(&o).1.contains("no column `gap_us_1`"), "{}", text(&o).1);
}

#[test]
fn the_shipped_model_is_embedded_and_holds_on_a_receiver_it_never_saw() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shipped = aggrate::model::ModelFile::shipped().unwrap();
    let on_disk = aggrate::model::ModelFile::load(&root.join("models/mlp8_m5_ctx1024.json")).unwrap();
    assert_eq!(shipped.to_json(), on_disk.to_json(), "the binary embeds models/");
    assert_eq!(shipped.model.kind(), "mlp");
    // A receive path in none of the training draws (per-MPDU hand-off released at 120 µs timer
    // ticks), where the gap scale a fixed threshold learned on the phone preset is wrong.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("unseen.toml"), UNSEEN_RECEIVER).unwrap();
    simulate(
        d,
        &[
            "--rate-mbps",
            "400",
            "--duration",
            "0.5",
            "--seed",
            "11",
            "--receiver",
            "unseen.toml",
            "-o",
            "unseen_400mbps.pcapng",
        ],
    );
    let score = |name: &str| -> (f64, f64) {
        let model = root.join("models").join(format!("{name}.json"));
        let out = format!("ev_{name}");
        let o = aggrate(
            d,
            &[
                "-q",
                "eval",
                "--model",
                model.to_str().unwrap(),
                "unseen_400mbps.pcapng",
                "-o",
                &out,
            ],
        );
        assert!(o.status.success(), "{}", text(&o).1);
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(out).join(format!("{name}.eval.json"))).unwrap())
                .unwrap();
        // Only the shipped model knows its training receivers: how alike they time packets.
        let like = &r["training_likeness"];
        if name == "mlp8_m5_ctx1024" {
            let i = &like["inputs"][0];
            assert_eq!(i["rate_mbps"], 400.0, "{like}");
            assert!(
                i["distance"].as_f64().unwrap() >= 0.0 && i["nearest"].is_string(),
                "{like}"
            );
        } else {
            assert!(like.is_null(), "{like}");
        }
        (r["f1"].as_f64().unwrap(), r["precision"].as_f64().unwrap())
    };
    let (f1, precision) = score("mlp8_m5_ctx1024");
    let (f1_phone, precision_phone) = score("logistic_m20_sigma");
    // A training receiver (the phone preset, another seed) is near its own runs: no warning.
    simulate_half_second_at_400(d, "12", "phone", "phone_400mbps.pcapng");
    let shipped_file = root.join("models/mlp8_m5_ctx1024.json");
    let o = aggrate(
        d,
        &[
            "eval",
            "--model",
            shipped_file.to_str().unwrap(),
            "phone_400mbps.pcapng",
            "-o",
            "ev_phone",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(!text(&o).1.contains("unlike every receiver"), "{}", text(&o).1);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("ev_phone/mlp8_m5_ctx1024.eval.json")).unwrap()).unwrap();
    let i = &r["training_likeness"]["inputs"][0];
    assert_eq!(i["nearest"], "phone", "{i}");
    assert_eq!(i["familiar"], true, "{i}");
    assert!(
        i["distance"].as_f64().unwrap() < aggrate::train::bank::FAMILIAR_DISTANCE,
        "{i}"
    );
    let md = std::fs::read_to_string(d.join("ev_phone/mlp8_m5_ctx1024.eval.md")).unwrap();
    assert!(
        md.contains("## Like the training receivers?") && md.contains("| phone |"),
        "{md}"
    );
    eprintln!("unseen receiver, 400 Mb/s: shipped F1 {f1:.3} precision {precision:.3}; phone-trained logistic F1 {f1_phone:.3} precision {precision_phone:.3}");
    // Trained across receivers, it does not collapse as the phone-trained model does (0.40).
    assert!(precision > 0.9, "the shipped model keeps its precision: {precision}");
    assert!(
        f1 > f1_phone + 0.15,
        "and beats the one-receiver model: {f1} vs {f1_phone}"
    );
}

/// `aggrate calibrate`: a sniffer capture of a receiver the shipped model never saw, joined with
/// that receiver's own capture as its kernel log, sets a threshold per load; on another stretch
/// of the same receiver (another seed) the calibrated model fixes what the shipped one gets
/// wrong — too many starts at 200 Mb/s (precision) — and loses nothing at 400, where the
/// shipped model's operating point is nearly right.
#[test]
fn calibrate_sets_a_receivers_operating_point_per_load() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("unseen.toml"), UNSEEN_RECEIVER).unwrap();
    for seed in ["11", "12"] {
        for rate in ["200", "400"] {
            for (kind, recv) in [("rx", ["--receiver", "unseen.toml"]), ("sniff", ["--noise", "none"])] {
                let name = format!("{kind}{seed}_{rate}mbps.pcapng");
                let mut args = vec!["--rate-mbps", rate, "--duration", "0.5", "--seed", seed, "-o", &name];
                args.extend(recv);
                simulate(d, &args);
            }
        }
    }
    let o = aggrate(
        d,
        &[
            "-q",
            "calibrate",
            "sniff11_200mbps.pcapng",
            "sniff11_400mbps.pcapng",
            "--kernel",
            "rx11_200mbps.pcapng",
            "rx11_400mbps.pcapng",
            "-o",
            "cal/unseen.json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let file = aggrate::model::ModelFile::load(&d.join("cal/unseen.json")).unwrap();
    let aggrate::model::EstimatorModel::Mlp(m) = &file.model else {
        panic!("still the shipped perceptron")
    };
    let knots = &m.load_offset.as_ref().expect("a load offset").knots;
    assert_eq!(knots.len(), 2, "one threshold per calibrated load: {knots:?}");
    assert!(
        knots[0][1] < knots[1][1],
        "the heavier load (shorter mean gap) wants the lower threshold here: {knots:?}"
    );
    assert!(file.metrics["calibration"]["half_split_check"]["rest_after"].is_object());
    assert!(std::fs::read_to_string(d.join("cal/unseen.calibration.md"))
        .unwrap()
        .contains("Decision threshold by load"));
    // Another stretch of the same receiver, shipped vs calibrated.
    let per_rate = |model: &str, out: &str| -> Vec<(f64, f64, f64)> {
        let o = aggrate(
            d,
            &[
                "-q",
                "eval",
                "--model",
                model,
                "rx12_200mbps.pcapng",
                "rx12_400mbps.pcapng",
                "-o",
                out,
            ],
        );
        assert!(o.status.success(), "{}", text(&o).1);
        let stem = Path::new(model).file_stem().unwrap().to_str().unwrap().to_string();
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(out).join(format!("{stem}.eval.json"))).unwrap())
                .unwrap();
        r["per_rate"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["f1"].as_f64().unwrap(),
                    x["precision"].as_f64().unwrap(),
                    x["recall"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/mlp8_m5_ctx1024.json");
    let before = per_rate(shipped.to_str().unwrap(), "before");
    let after = per_rate("cal/unseen.json", "after");
    eprintln!("unseen receiver, another seed (F1, precision, recall) at 200 / 400 Mb/s: shipped {before:?}, calibrated {after:?}");
    assert!(after[0].1 > before[0].1 + 0.1, "200 Mb/s: precision up");
    assert!(after[1].2 >= before[1].2, "400 Mb/s: recall not down");
    assert!(
        after[0].0 > before[0].0 && after[1].0 > before[1].0,
        "F1 up at both loads"
    );
    // A share outside (0, 1] is refused, naming the flag's range.
    let o = aggrate(
        d,
        &["calibrate", "sniff11_200mbps.pcapng", "--share", "1.5", "-o", "x.json"],
    );
    assert!(!o.status.success());
    assert!(text(&o).1.contains("(0, 1]"), "{}", text(&o).1);
    assert!(!d.join("x.json").exists());
}

/// Ethernet + IPv4/UDP 10.0.0.1:7000 → 10.0.0.2:5001 whose payload starts with `seq`: what a
/// receiver's own capture (tcpdump on the phone) holds — no radio header, no A-MPDU ground truth.
fn ethernet_udp(seq: u32) -> Vec<u8> {
    let mut v = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    v.extend_from_slice(&common::ipv4_udp(seq));
    v
}

/// A receiver's own capture of `log` (`seq`, receive ns; written in µs) as Ethernet frames.
fn write_receiver_capture(path: &Path, log: &[(u32, u64)]) {
    let frames: Vec<(u64, Vec<u8>)> = log.iter().map(|(s, ns)| (ns / 1000, ethernet_udp(*s))).collect();
    let refs: Vec<(u64, &[u8])> = frames.iter().map(|(t, f)| (*t, &f[..])).collect();
    std::fs::write(path, common::pcap_bytes(1, &refs)).unwrap();
}

/// `bank.toml` in `d`: a small bank of `receivers` random receive paths, for speed (the
/// embedded one has 128); returns its text.
fn write_small_bank(d: &Path, receivers: u32) -> String {
    let bank = format!(
        "name = \"b\"\nseed = 3\npackets = 2500\ntrain_rates_mbps = [1]\n[[receivers]]\nrandom = {receivers}\n"
    );
    std::fs::write(d.join("bank.toml"), &bank).unwrap();
    bank
}

/// `unseen.toml` (the receive path in no training draw) and a small `bank.toml` of 12
/// receivers in `d`; returns the bank's text.
fn write_unseen_and_small_bank(d: &Path) -> String {
    std::fs::write(d.join("unseen.toml"), UNSEEN_RECEIVER).unwrap();
    write_small_bank(d, 12)
}

/// `aggrate -q train --dataset rx --model MODEL --group-by receiver --own-folds 2 -o OUT`: leave
/// one receiver out of the test dataset, two own-CV folds; more arguments follow.
fn loro_args<'a>(model: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "-q",
        "train",
        "--dataset",
        "rx",
        "--model",
        model,
        "--group-by",
        "receiver",
        "--own-folds",
        "2",
        "-o",
        out,
    ]
}

/// `aggrate calibrate --no-labels`: the operating point from emulated receivers that time
/// packets like this one, read from the receiver's own capture alone. The same receive times
/// joined to a sniffer capture (labels present) give the very same model — the labels are not
/// read, only reported — and the report says which bank receivers set each threshold.
#[test]
fn calibrate_without_labels_reads_only_the_receivers_timing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bank = write_unseen_and_small_bank(d);
    for rate in ["200", "400"] {
        for (kind, recv) in [("rx", ["--receiver", "unseen.toml"]), ("sniff", ["--noise", "none"])] {
            let name = format!("{kind}_{rate}mbps.pcapng");
            let mut args = vec!["--rate-mbps", rate, "--duration", "0.3", "--seed", "11", "-o", &name];
            args.extend(recv);
            simulate(d, &args);
        }
        // The receiver's own capture (µs times) and the same times as a kernel log.
        let log: Vec<(u32, u64)> = seq_log(&d.join(format!("rx_{rate}mbps.pcapng")))
            .into_iter()
            .map(|(s, ns)| (s, ns / 1000 * 1000))
            .collect();
        write_receiver_capture(&d.join(format!("phone_{rate}mbps.pcap")), &log);
        write_log(&d.join(format!("phone_{rate}.csv")), &log);
    }
    let run = |args: &[&str]| {
        let o = aggrate(d, args);
        (o.status.success(), text(&o).1)
    };
    // The receiver's own captures, and the same times joined to the sniffer's.
    for (inputs, out) in [
        (&["phone_200mbps.pcap", "phone_400mbps.pcap"][..], "own.json"),
        (
            &[
                "sniff_200mbps.pcapng",
                "sniff_400mbps.pcapng",
                "--kernel",
                "phone_200.csv",
                "phone_400.csv",
            ][..],
            "joined.json",
        ),
    ] {
        let mut args = vec![
            "-q",
            "calibrate",
            "--no-labels",
            "--bank",
            "bank.toml",
            "--neighbours",
            "4",
            "--max-distance",
            "inf",
        ];
        args.extend_from_slice(inputs);
        args.extend_from_slice(&["-o", out]);
        let (ok, err) = run(&args);
        assert!(ok, "{err}");
    }
    let own = aggrate::model::ModelFile::load(&d.join("own.json")).unwrap();
    let joined = aggrate::model::ModelFile::load(&d.join("joined.json")).unwrap();
    assert_eq!(own.model, joined.model, "the labels change nothing");
    let aggrate::model::EstimatorModel::Mlp(m) = &own.model else {
        panic!("still the shipped perceptron")
    };
    let knots = &m.load_offset.as_ref().expect("a load offset").knots;
    assert_eq!(knots.len(), 2, "one threshold per load: {knots:?}");
    let cal = &own.metrics["calibration"];
    assert_eq!(cal["labels"], "none (emulated bank)");
    let runs = cal["self_calibration"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["neighbours"].as_array().unwrap().len(), 4);
        assert!(r["neighbours"][0].as_str().unwrap().starts_with("random-"));
    }
    let md = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
    assert!(
        md("own.calibration.md").contains("no A-MPDU ground truth"),
        "{}",
        md("own.calibration.md")
    );
    assert!(md("joined.calibration.md").contains("Scored with the inputs' labels"));
    assert!(joined.metrics["calibration"]["scored_with_labels"]["after"].is_array());
    // `calibrate --no-labels --bank BANK ARGS… -o x.json` (or r.json where it must succeed).
    let no_labels = |bank: &str, args: &[&str], out: &str| {
        let mut v = vec!["calibrate", "--no-labels", "--bank", bank];
        v.extend_from_slice(args);
        v.extend_from_slice(&["-o", out]);
        run(&v)
    };
    // Without a rate tag the rate comes from the packet rate, said on stderr.
    std::fs::copy(d.join("phone_200mbps.pcap"), d.join("phone.pcap")).unwrap();
    let (ok, err) = no_labels("bank.toml", &["phone.pcap"], "r.json");
    assert!(ok, "{err}");
    assert!(err.contains("from its packet rate"), "{err}");
    let rates = ["phone.pcap", "phone_400mbps.pcap", "--rate", "1", "2", "3"];
    let (ok, err) = no_labels("bank.toml", &rates, "x.json");
    assert!(!ok && err.contains("3 rates for 2 inputs"), "{err}");
    let (ok, err) = no_labels("bank.toml", &["phone.pcap", "--share", "0.5"], "x.json");
    assert!(!ok && err.contains("--share 0.5"), "{err}");
    let (ok, err) = no_labels("bank.toml", &["phone.pcap", "--max-distance=-1"], "x.json");
    assert!(!ok && err.contains("--max-distance -1"), "{err}");
    // Inputs too far from the embedded emulated bank keep the model's threshold, and the shipped
    // model's measured training receivers are pointed to (the sniffer shows the training WLAN;
    // the receiver's own capture here has small packets, another WLAN: no pointer); not so with
    // a bank of one's own.
    let (ok, err) = run(&[
        "calibrate",
        "--no-labels",
        "phone_400mbps.pcap",
        "--max-distance",
        "0",
        "-o",
        "far0.json",
    ]);
    assert!(ok && !err.contains("--measured:"), "{err}");
    let (ok, err) = run(&[
        "calibrate",
        "--no-labels",
        "sniff_400mbps.pcapng",
        "--kernel",
        "phone_400.csv",
        "--max-distance",
        "0",
        "-o",
        "far.json",
    ]);
    assert!(
        ok && err.contains("1 of 1 inputs lie too far") && err.contains("--measured"),
        "{err}"
    );
    let joined = [
        "sniff_400mbps.pcapng",
        "--kernel",
        "phone_400.csv",
        "--max-distance",
        "0",
    ];
    let (ok, err) = no_labels("bank.toml", &joined, "far2.json");
    assert!(ok && !err.contains("--measured:"), "{err}");
    // A bank that must lie nearer than any run can: every capture keeps the model's own
    // threshold (a zero offset at each load), and the report says why.
    let args = [
        "phone_200mbps.pcap",
        "phone_400mbps.pcap",
        "--neighbours",
        "4",
        "--max-distance",
        "0",
    ];
    let (ok, err) = no_labels("bank.toml", &args, "far.json");
    assert!(ok, "{err}");
    let far = aggrate::model::ModelFile::load(&d.join("far.json")).unwrap();
    let aggrate::model::EstimatorModel::Mlp(fm) = &far.model else {
        panic!("still the shipped perceptron")
    };
    let far_knots = &fm.load_offset.as_ref().expect("a load offset").knots;
    assert_eq!(far_knots.len(), 2);
    assert!(far_knots.iter().all(|k| k[1] == 0.0), "{far_knots:?}");
    assert!(
        knots.iter().any(|k| k[1] != 0.0),
        "near enough, the bank moves a threshold: {knots:?}"
    );
    assert!(
        md("far.calibration.md").contains("too far"),
        "{}",
        md("far.calibration.md")
    );
    // A bank with a real-kernel receiver is refused, naming the file; so is a capture too short
    // to summarise, and a capture without ground truth when labels are wanted.
    std::fs::write(d.join("kbank.toml"), format!("{bank}[[receivers]]\nkernel = \"gro\"\n")).unwrap();
    let (ok, err) = no_labels("kbank.toml", &["phone.pcap"], "x.json");
    assert!(
        !ok && err.contains("kbank.toml") && err.contains("real-kernel"),
        "{err}"
    );
    write_receiver_capture(&d.join("short.pcap"), &seq_log(&d.join("phone.pcap"))[..40]);
    let (ok, err) = no_labels("bank.toml", &["short.pcap"], "x.json");
    assert!(
        !ok && err.contains("short.pcap") && err.contains("packets or more"),
        "{err}"
    );
    let (ok, err) = run(&["calibrate", "phone.pcap", "-o", "x.json"]);
    assert!(!ok && err.contains("ground truth"), "{err}");
    assert!(!d.join("x.json").exists());
}

/// `calibrate --no-labels --mcs/--nss/--bw/--ip-len`: the bank is emulated at the receiver's
/// WLAN, whose airtimes set the gaps inside and between A-MPDUs — so a receiver on MCS 3 with
/// one stream (an MPDU takes ~4× as long as on the paper's MCS 9, 2 SS) finds bank runs that
/// time packets far more like it, and the report says which WLAN the bank had. A sniffer-style
/// capture (radiotap) gives its WLAN without the flags.
#[test]
fn label_free_calibration_emulates_the_bank_at_the_receivers_wlan() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_unseen_and_small_bank(d);
    let args = [
        "--rate-mbps",
        "60",
        "--duration",
        "0.6",
        "--seed",
        "5",
        "--mcs",
        "3",
        "--nss",
        "1",
        "--receiver",
        "unseen.toml",
        "-o",
        "rx_60mbps.pcapng",
    ];
    simulate(d, &args);
    let calibrate_on = |input: &str, extra: &[&str], out: &str| {
        // Not quiet: what the bank's WLAN came from is said on stderr.
        let mut v = vec!["calibrate", "--no-labels", "--bank", "bank.toml", "--neighbours", "3"];
        v.extend_from_slice(extra);
        v.extend_from_slice(&[input, "-o", out]);
        let o = aggrate(d, &v);
        (o.status.success(), text(&o).1)
    };
    let calibrate = |extra: &[&str], out: &str| calibrate_on("rx_60mbps.pcapng", extra, out);
    let (ok, err) = calibrate(&["--mcs", "9", "--nss", "2"], "paper.json");
    assert!(ok, "{err}");
    let (ok, err) = calibrate(&["--mcs", "3", "--nss", "1", "--ip-len", "1500"], "own.json");
    assert!(ok, "{err}");
    // Without the flags, a capture with radiotap headers says its WLAN itself (said on stderr).
    let (ok, err) = calibrate(&[], "seen.json");
    assert!(ok, "{err}");
    assert!(
        err.contains("bank WLAN from the inputs") && err.contains("VHT MCS 3, 1 SS, 80 MHz"),
        "{err}"
    );
    let cal = |f: &str| aggrate::model::ModelFile::load(&d.join(f)).unwrap().metrics["calibration"].clone();
    let (paper, own) = (cal("paper.json"), cal("own.json"));
    assert_eq!(cal("seen.json")["self_calibration"], own["self_calibration"]);
    // The same rows as a feature table (which says nothing of its WLAN: the flags do).
    let o = aggrate(
        d,
        &[
            "-q",
            "features",
            "rx_60mbps.pcapng",
            "--m",
            "5",
            "--context",
            "1024",
            "-o",
            "rx_60mbps.parquet",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let (ok, err) = calibrate_on(
        "rx_60mbps.parquet",
        &["--mcs", "3", "--nss", "1", "--ip-len", "1500"],
        "table.json",
    );
    assert!(ok, "{err}");
    assert_eq!(cal("table.json")["self_calibration"], own["self_calibration"]);
    assert_eq!(paper["bank_wlan"], "VHT MCS 9, 2 SS, 80 MHz, 1500-byte packets");
    assert_eq!(own["bank_wlan"], "VHT MCS 3, 1 SS, 80 MHz, 1500-byte packets");
    let dist = |c: &serde_json::Value| c["self_calibration"]["runs"][0]["distance"].as_f64().unwrap();
    assert!(
        dist(&own) < dist(&paper),
        "the receiver's own WLAN is nearer: {} vs {}",
        dist(&own),
        dist(&paper)
    );
    let md = std::fs::read_to_string(d.join("own.calibration.md")).unwrap();
    assert!(md.contains("emulated at VHT MCS 3, 1 SS"), "{md}");
    // A WLAN the emulator cannot have is refused before any work, naming the flags.
    let (ok, err) = calibrate(&["--mcs", "12"], "x.json");
    assert!(!ok && err.contains("--mcs") && err.contains("mcs"), "{err}");
    assert!(!d.join("x.json").exists());
}

/// `train` records the WLAN its captures were sent over, and `eval` warns when it scores the
/// model on captures of another (MCS here), with the difference in its report.
#[test]
fn eval_warns_when_the_captures_wlan_is_not_the_models() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, mcs) in [
        ("a_200mbps.pcapng", "9"),
        ("b_200mbps.pcapng", "9"),
        ("c_100mbps.pcapng", "5"),
    ] {
        simulate(
            d,
            &[
                "--rate-mbps",
                &name[2..5],
                "--duration",
                "0.3",
                "--seed",
                "4",
                "--mcs",
                mcs,
                "-o",
                name,
            ],
        );
    }
    let o = aggrate(
        d,
        &[
            "-q",
            "train",
            "--model",
            "threshold",
            "--folds",
            "2",
            "--dataset",
            "a_200mbps.pcapng",
            "-o",
            "m",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let m = aggrate::model::ModelFile::load(&d.join("m/threshold_m1.json")).unwrap();
    assert_eq!(
        m.metrics["training_wlan"],
        serde_json::json!({"ip_len": 1500, "mcs": 9, "nss": 2, "bw_mhz": 80})
    );
    let eval = |cap: &str| {
        let o = aggrate(d, &["eval", "--model", "m/threshold_m1.json", cap, "-o", "ev"]);
        assert!(o.status.success(), "{}", text(&o).1);
        let rep: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("ev/threshold_m1.eval.json")).unwrap()).unwrap();
        (text(&o).1, rep["wlan"]["unlike"].clone())
    };
    let (err, unlike) = eval("b_200mbps.pcapng");
    assert!(!err.contains("trained on"), "{err}");
    assert_eq!(unlike, serde_json::json!([]));
    let (err, unlike) = eval("c_100mbps.pcapng");
    assert!(err.contains("these captures are MCS 5 (trained on 9)"), "{err}");
    assert_eq!(unlike, serde_json::json!(["MCS 5 (trained on 9)"]));
}

/// `train --like`: tailored to one receiver without its labels. With that receiver's own
/// captures as the target, it is the nearest training receiver (distance 0); its rows are all
/// kept and the others' thinned to one in --like-weight; the model file says what was chosen.
#[test]
fn train_like_weights_the_receivers_that_time_packets_alike() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let mut usb: Vec<String> = std::fs::read_dir(dir.path().join("rx"))
        .unwrap()
        .map(|e| format!("rx/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.contains("_usb_") && f.ends_with(".pcapng"))
        .collect();
    usb.sort();
    assert_eq!(usb.len(), 2);
    let train = |out: &str, data: &[&str], extra: &[&str]| {
        let mut args = vec![
            "-q",
            "train",
            "--model",
            "logistic",
            "--m",
            "5",
            "--folds",
            "2",
            "-o",
            out,
            "--dataset",
        ];
        args.extend_from_slice(data);
        args.extend_from_slice(extra);
        let o = aggrate(dir.path(), &args);
        (o.status.success(), text(&o).1)
    };
    let rows = |out: &str| {
        aggrate::model::ModelFile::load(&dir.path().join(out).join("logistic_m5_sigma.json"))
            .unwrap()
            .training
            .rows
    };
    let usb_refs: Vec<&str> = usb.iter().map(String::as_str).collect();
    assert!(train("all", &["rx"], &[]).0);
    assert!(train("usb", &usb_refs, &[]).0);
    let mut like = vec!["--like-receivers", "1", "--like-weight", "4", "--like"];
    like.extend_from_slice(&usb_refs);
    let (ok, err) = train("like", &["rx"], &like);
    assert!(ok, "{err}");
    let m = aggrate::model::ModelFile::load(&dir.path().join("like/logistic_m5_sigma.json")).unwrap();
    let chosen = &m.metrics["like"];
    assert_eq!(chosen["receivers"].as_array().unwrap().len(), 1, "{chosen}");
    assert_eq!(chosen["receivers"][0]["receiver"], "usb", "{chosen}");
    assert!(
        chosen["receivers"][0]["distance"].as_f64().unwrap().abs() < 1e-9,
        "{chosen}"
    );
    assert_eq!(chosen["weight"], 4);
    // usb's rows whole, one in four of each of the 6 other captures' (from its first).
    let (all, own) = (rows("all"), rows("usb"));
    let others = all - own;
    let kept = rows("like") - own;
    assert!((others / 4..=others / 4 + 6).contains(&kept), "{kept} of {others}");
    // Refused before any work: with --group-by receiver, and a zero weight.
    let (ok, err) = train("x", &["rx"], &[&["--group-by", "receiver"][..], &like[..]].concat());
    assert!(
        !ok && err.contains("--like") && err.contains("--group-by receiver"),
        "{err}"
    );
    let (ok, err) = train("x", &["rx"], &[&like[..], &["--like-weight", "0"]].concat());
    assert!(!ok && err.contains("--like-weight"), "{err}");
    // Leave one receiver out with each held-out model tailored too. Tailored on every other
    // receiver at weight 1, it trains on the held-out model's very rows: the same scores.
    let loro = |out: &str, k: &str, w: &str, d: &str, extra: &[&str]| {
        let mut args = loro_args("threshold", out);
        args.extend([
            "--like-held-out",
            "--like-receivers",
            k,
            "--like-weight",
            w,
            "--like-max-distance",
            d,
        ]);
        args.extend_from_slice(extra);
        let o = aggrate(dir.path(), &args);
        assert!(o.status.success(), "{}", text(&o).1);
        let rep: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(out).join("threshold_m1.receivers.json")).unwrap(),
        )
        .unwrap();
        rep
    };
    // With label-free calibration as well (a small bank for speed), the tailored model is
    // self-calibrated too: the same model, so the same score as the held-out one's.
    write_small_bank(dir.path(), 6);
    let self_cal = ["--self-calibrate", "--bank", "bank.toml", "--neighbours", "2"];
    let same = loro("t_all", "3", "1", "inf", &self_cal);
    let mut scored = 0;
    for r in same["receivers"].as_array().unwrap() {
        for p in r["per_rate"].as_array().unwrap() {
            assert_eq!(p["tailored"]["f1"], p["held_out"]["f1"], "{p}");
            assert!(p["self_calibrated"]["f1"].is_f64(), "{p}");
            assert_eq!(p["tailored_self_calibrated"]["f1"], p["self_calibrated"]["f1"], "{p}");
            scored += 1;
        }
    }
    assert_eq!(scored, 8);
    let md = std::fs::read_to_string(dir.path().join("t_all/threshold_m1.receivers.md")).unwrap();
    assert!(md.contains("|  | tailored, self-calibrated |"), "{md}");
    // Too far to tailor on (no receiver lies at distance 0 from another): the held-out model
    // stands, and the receivers it would have weighted are named.
    let far = loro("t_far", "2", "4", "0", &[]);
    for r in far["receivers"].as_array().unwrap() {
        assert_eq!(r["tailored_from"].as_array().unwrap().len(), 2, "{r}");
        for p in r["per_rate"].as_array().unwrap() {
            assert_eq!(p["tailored"]["f1"], p["held_out"]["f1"], "{p}");
        }
    }
    // With calibration on the training receivers as well (each held-out receiver's own rows
    // never among them).
    let one = loro(
        "t_one",
        "1",
        "4",
        "inf",
        &["--self-calibrate-on-training", "--training-neighbours", "1"],
    );
    for v in one["verdicts"].as_array().unwrap() {
        assert!(v["tailored_pass"].is_boolean(), "{v}");
        assert!(v["self_calibrated_on_training_pass"].is_boolean(), "{v}");
    }
    for r in one["receivers"].as_array().unwrap() {
        for p in r["per_rate"].as_array().unwrap() {
            let f1 = p["self_calibrated_on_training"]["f1"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&f1), "{p}");
            // Its distance to the receivers its model trained on (its own captures never among
            // them: a receiver is at distance 0 from itself).
            let d = p["training_distance"].as_f64().unwrap();
            assert!(d > 0.0, "{p}");
        }
    }
    let f1s: Vec<f64> = one["receivers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["per_rate"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["tailored"]["f1"].as_f64().unwrap())
        })
        .collect();
    assert!(f1s.len() == 8 && f1s.iter().all(|f| (0.0..=1.0).contains(f)), "{f1s:?}");
    let md = std::fs::read_to_string(dir.path().join("t_one/threshold_m1.receivers.md")).unwrap();
    assert!(
        md.contains("the `tailored` lines") && md.contains("|  | tailored |"),
        "{md}"
    );
    let csv = std::fs::read_to_string(dir.path().join("t_one/threshold_m1.receivers.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(header.contains(",tailored_f1,"), "{csv}");
    let col = header.split(',').position(|c| c == "tailored_f1").unwrap();
    assert!(
        csv.lines().skip(1).all(|l| !l.split(',').nth(col).unwrap().is_empty()),
        "{csv}"
    );
    assert!(
        !md.contains("tailored, self-calibrated"),
        "no bank, no stacked line: {md}"
    );
    assert!(md.contains("|  | self-calibrated on training receivers |"), "{md}");
    assert!(md.contains("## By distance to the nearest training receiver"), "{md}");
    assert!(dir.path().join("t_one/threshold_m1.receivers.distance.png").exists());
    // `calibrate --no-labels` on measured receivers: usb's own captures against the dataset
    // that holds usb — its nearest capture at each rate is its own, at distance 0.
    let mut cal = vec!["-q", "calibrate", "--no-labels"];
    cal.extend_from_slice(&usb_refs);
    cal.extend(["--bank-dataset", "rx", "--dataset-neighbours", "1", "-o", "cal/m.json"]);
    let o = aggrate(dir.path(), &cal);
    assert!(o.status.success(), "{}", text(&o).1);
    let m = aggrate::model::ModelFile::load(&dir.path().join("cal/m.json")).unwrap();
    let c = &m.metrics["calibration"];
    assert_eq!(c["labels"], "none (measured bank)", "{c}");
    let runs = c["self_calibration"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), usb_refs.len(), "{c}");
    for r in runs {
        assert_eq!(r["neighbours"], serde_json::json!(["usb"]), "{r}");
        assert!(r["distance"].as_f64().unwrap().abs() < 1e-9, "{r}");
    }
    let md = std::fs::read_to_string(dir.path().join("cal/m.calibration.md")).unwrap();
    assert!(md.contains("measured receivers of rx"), "{md}");
    // The same bank summarised for the shipped model (`dataset summarise`): the same
    // neighbours at the same distance, without reading the dataset's captures.
    let o = aggrate(
        dir.path(),
        &["-q", "dataset", "summarise", "rx", "-o", "cal/rx.bank.json.xz"],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let mut cal = vec!["-q", "calibrate", "--no-labels"];
    cal.extend_from_slice(&usb_refs);
    cal.extend([
        "--bank-dataset",
        "cal/rx.bank.json.xz",
        "--dataset-neighbours",
        "1",
        "-o",
        "cal/s.json",
    ]);
    let o = aggrate(dir.path(), &cal);
    assert!(o.status.success(), "{}", text(&o).1);
    let s = aggrate::model::ModelFile::load(&dir.path().join("cal/s.json")).unwrap();
    assert_eq!(
        s.metrics["calibration"]["self_calibration"]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["neighbours"].clone(), r["distance"].as_f64().unwrap()))
            .collect::<Vec<_>>(),
        runs.iter()
            .map(|r| (r["neighbours"].clone(), r["distance"].as_f64().unwrap()))
            .collect::<Vec<_>>()
    );
    // The embedded summary of the shipped model's own training receivers (`--measured`); a
    // model calibrated so is the same model for it (its offset is not its identity) …
    for (model, out) in [(None, "cal/e.json"), (Some("cal/m.json"), "cal/e2.json")] {
        let mut cal = vec!["-q", "calibrate", "--no-labels", "--measured", "-o", out];
        cal.extend_from_slice(&usb_refs);
        if let Some(m) = model {
            cal.extend(["--model", m]);
        }
        let o = aggrate(dir.path(), &cal);
        assert!(o.status.success(), "{}", text(&o).1);
        let e = aggrate::model::ModelFile::load(&dir.path().join(out)).unwrap();
        let c = &e.metrics["calibration"];
        assert!(c["bank"].as_str().unwrap().contains("embedded summary"), "{c}");
        for r in c["self_calibration"]["runs"].as_array().unwrap() {
            assert_eq!(r["neighbours"].as_array().unwrap().len(), 5, "{r}");
        }
    }
    // … another model is refused, and so are a broken summary and a summary beside folders.
    let mut cal = vec![
        "calibrate",
        "--no-labels",
        "--measured",
        "--model",
        "t_one/threshold_m1.json",
    ];
    cal.extend_from_slice(&usb_refs);
    cal.extend(["-o", "cal/x.json"]);
    let o = aggrate(dir.path(), &cal);
    assert!(
        !o.status.success() && text(&o).1.contains("bank summary was made for model"),
        "{}",
        text(&o).1
    );
    std::fs::write(dir.path().join("cal/bad.json"), "{\"format\": 3}").unwrap();
    for (bank, says) in [
        (vec!["cal/bad.json"], "cal/bad.json: not a bank summary"),
        (vec!["cal/rx.bank.json.xz", "rx"], "give it alone"),
    ] {
        let mut cal = vec![
            "calibrate",
            "--no-labels",
            usb_refs[0],
            "-o",
            "cal/x.json",
            "--bank-dataset",
        ];
        cal.extend(bank);
        let o = aggrate(dir.path(), &cal);
        assert!(!o.status.success() && text(&o).1.contains(says), "{}", text(&o).1);
    }
    // A measured bank is for calibration without labels only.
    let o = aggrate(
        dir.path(),
        &["calibrate", usb_refs[0], "--bank-dataset", "rx", "-o", "cal/x.json"],
    );
    assert!(
        !o.status.success() && text(&o).1.contains("--no-labels"),
        "{}",
        text(&o).1
    );
    let (ok, err) = train("x", &["rx"], &["--self-calibrate-on-training"]);
    assert!(
        !ok && err.contains("--self-calibrate-on-training") && err.contains("--group-by receiver"),
        "{err}"
    );
    // A sniffer capture joined with the receiver's kernel log stands for the receiver's own
    // capture (--like-kernel); the sniffer's own times do not.
    std::fs::write(dir.path().join("unseen.toml"), UNSEEN_RECEIVER).unwrap();
    for rate in ["200", "500"] {
        for (kind, recv) in [("own", ["--receiver", "unseen.toml"]), ("sniff", ["--noise", "none"])] {
            let name = format!("{kind}_{rate}mbps.pcapng");
            let mut args = vec!["--rate-mbps", rate, "--duration", "0.3", "--seed", "11", "-o", &name];
            args.extend(recv);
            simulate(dir.path(), &args);
        }
        write_log(
            &dir.path().join(format!("own_{rate}.csv")),
            &seq_log(&dir.path().join(format!("own_{rate}mbps.pcapng"))),
        );
    }
    let chosen = |out: &str, extra: &[&str]| -> Vec<(String, f64)> {
        let mut args = vec!["--like-receivers", "2", "--like-max-distance", "inf"];
        args.extend_from_slice(extra);
        let (ok, err) = train(out, &["rx"], &args);
        assert!(ok, "{err}");
        let m = aggrate::model::ModelFile::load(&dir.path().join(out).join("logistic_m5_sigma.json")).unwrap();
        m.metrics["like"]["receivers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["receiver"].as_str().unwrap().to_string(),
                    r["distance"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let own = chosen("l_own", &["--like", "own_200mbps.pcapng", "own_500mbps.pcapng"]);
    let joined = chosen(
        "l_joined",
        &[
            "--like",
            "sniff_200mbps.pcapng",
            "sniff_500mbps.pcapng",
            "--like-kernel",
            "own_200.csv",
            "own_500.csv",
        ],
    );
    let sniff = chosen("l_sniff", &["--like", "sniff_200mbps.pcapng", "sniff_500mbps.pcapng"]);
    assert_eq!(own.len(), 2);
    for (a, b) in own.iter().zip(&joined) {
        assert_eq!(a.0, b.0);
        assert!((a.1 - b.1).abs() < 0.05, "{own:?} vs {joined:?}");
    }
    assert!(
        own.iter()
            .zip(&sniff)
            .any(|(a, b)| a.0 != b.0 || (a.1 - b.1).abs() > 0.5),
        "{own:?} vs {sniff:?}"
    );
    let (ok, err) = train("x", &["rx"], &["--like-kernel", "own_200.csv"]);
    assert!(!ok && err.contains("--like-kernel"), "{err}");
    // --like too far: trained on every row alike, said in the model file.
    let mut far_args = vec!["--like-receivers", "2", "--like-max-distance", "0", "--like"];
    far_args.extend_from_slice(&usb_refs);
    let (ok, err) = train("far", &["rx"], &far_args);
    assert!(ok, "{err}");
    let m = aggrate::model::ModelFile::load(&dir.path().join("far/logistic_m5_sigma.json")).unwrap();
    assert_eq!(m.metrics["like"]["too_far"], true, "{}", m.metrics["like"]);
    assert_eq!(rows("far"), all);
    let (ok, err) = train("x", &["rx"], &[&like[..], &["--like-max-distance", "NaN"]].concat());
    assert!(!ok && err.contains("--like-max-distance"), "{err}");
    let (ok, err) = train("x", &["rx"], &["--like-held-out"]);
    assert!(
        !ok && err.contains("--like-held-out") && err.contains("--group-by receiver"),
        "{err}"
    );
}

/// A sniffer's capture holds the other networks' frames: tshark decodes them as protected data
/// frames, reading them back gives exactly the medium time the emulator gave them, and `eval`
/// scores the estimator per share of others with that time as a survey and without it.
/// The medium time (s) the frames of others in a sniffer's capture took, as `eval` reads them.
fn sniffed_air_s(capture: &Path) -> f64 {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/mlp8_m5_ctx1024.json");
    let spec = aggrate::model::ModelFile::load(&model).unwrap().spec;
    let mut others = aggrate::pipeline::air::OthersAir::default();
    aggrate::pipeline::capture_rows_heard(
        capture,
        &aggrate::pipeline::RowsOptions::new(spec),
        &mut aggrate::progress::NoProgress,
        |_, _| {},
        Some(&mut others),
    )
    .unwrap();
    others.spans().total_ns() as f64 * 1e-9
}

#[test]
fn a_sniffers_capture_gives_eval_the_air_others_took() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = [
        "--rate-mbps",
        "300",
        "--duration",
        "1",
        "--seed",
        "3",
        "--noise",
        "laptop",
    ];
    let mut args = vec!["-q", "simulate", "--json", "-o", "sniff_300mbps.pcapng", "--sniffer"];
    args.extend_from_slice(&base);
    args.extend_from_slice(&["--contenders", "1", "--contender-mbps", "20"]);
    let o = aggrate(d, &args);
    assert!(o.status.success(), "{}", text(&o).1);
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (frames, air_s) = (
        run["contender_frames"].as_u64().unwrap(),
        run["others_air_s"].as_f64().unwrap(),
    );
    assert!(frames > 1000, "{run}");
    // The same run without a sniffer: the station's own frames only.
    let mut args = vec!["-q", "simulate", "-o", "own_300mbps.pcapng"];
    args.extend_from_slice(&base);
    args.extend_from_slice(&["--contenders", "1", "--contender-mbps", "20"]);
    let o = aggrate(d, &args);
    assert!(o.status.success(), "{}", text(&o).1);

    // tshark: every contender frame, protected (CCMP), at the contenders' VHT MCS 7; the flow's
    // packets as many as delivered.
    let rows = common::tshark_fields(
        &d.join("sniff_300mbps.pcapng"),
        &[
            "wlan.fc.protected",
            "wlan.ccmp.extiv",
            "radiotap.vht.mcs.0",
            "udp.dstport",
        ],
    );
    let prot: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "1" || r[0] == "True").collect();
    assert_eq!(prot.len() as u64, frames);
    assert!(
        prot.iter().all(|r| !r[1].is_empty() && r[2] == "7" && r[3].is_empty()),
        "{:?}",
        prot[0]
    );
    let udp = rows.iter().filter(|r| r[3] == "5001").count() as u64;
    assert_eq!(udp, run["delivered"].as_u64().unwrap());

    // Read back: the frames' medium time is the emulator's, to the nanosecond per exchange.
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/mlp8_m5_ctx1024.json");
    let sniffed = sniffed_air_s(&d.join("sniff_300mbps.pcapng"));
    assert!(
        (sniffed - air_s).abs() < 1e-6 * frames as f64,
        "sniffed {sniffed} s, emulated {air_s} s"
    );

    let o = aggrate(
        d,
        &[
            "-q",
            "eval",
            "--model",
            model.to_str().unwrap(),
            "sniff_300mbps.pcapng",
            "own_300mbps.pcapng",
            "--interval-ms",
            "100",
            "-o",
            "ev",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let csv = std::fs::read_to_string(d.join("ev/mlp8_m5_ctx1024.eval.intervals.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (cap, share, truth) = (col("capture"), col("others_share_sniffed"), col("true_level"));
    let (air, air_sv, lvl_sv) = (col("airtime"), col("airtime_surveyed"), col("level_surveyed"));
    let (mut err_plain, mut err_sv, mut n) = (0.0, 0.0, 0);
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        if f[cap] == "own_300mbps.pcapng" {
            assert!(
                f[share] == "0.0000" && f[lvl_sv] == f[col("level")],
                "nobody else heard: {l}"
            );
            continue;
        }
        let x = |i: usize| f[i].parse::<f64>().unwrap();
        if x(col("true_ampdus")) < 5.0 {
            continue; // the flow's last packets: not scored
        }
        // 20 Mb/s of single frames at MCS 7, one stream: about a fifth of the air.
        assert!((0.12..0.35).contains(&x(share)), "{l}");
        assert!(x(air_sv) > x(air), "the survey lifts the airtime level: {l}");
        err_plain += ((x(air) - x(truth)) / x(truth)).abs();
        err_sv += ((x(air_sv) - x(truth)) / x(truth)).abs();
        n += 1;
    }
    assert!(n >= 8, "{csv}");
    assert!(
        err_sv < 0.8 * err_plain,
        "the sniffed survey brings the airtime level nearer: {err_sv} vs {err_plain}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("ev/mlp8_m5_ctx1024.eval.json")).unwrap()).unwrap();
    let bins = report["mu_per_contention"].as_array().unwrap();
    assert!(
        !bins.is_empty() && bins.iter().all(|b| b["level"]["intervals"].as_u64().unwrap() > 0),
        "{bins:?}"
    );
    let md = std::fs::read_to_string(d.join("ev/mlp8_m5_ctx1024.eval.md")).unwrap();
    assert!(md.contains("μ_N by the share of the air others took"), "{md}");
}

/// Stations of the AP's own network uploading to it (`--contender-bss own`): a sniffer's capture
/// shows their frames addressed to the flow's AP, and `eval` counts them as others' air (the
/// flow does not get that time) — to the nanosecond of the emulator's truth, as for another
/// network's.
#[test]
fn the_aps_own_uploading_stations_are_others_air_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = aggrate(
        d,
        &[
            "-q",
            "simulate",
            "--json",
            "-o",
            "up_200mbps.pcapng",
            "--sniffer",
            "--rate-mbps",
            "200",
            "--duration",
            "0.5",
            "--seed",
            "5",
            "--contenders",
            "2",
            "--contender-mbps",
            "10",
            "--contender-ampdu",
            "4",
            "--contender-bss",
            "own",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (frames, air_s) = (
        run["contender_frames"].as_u64().unwrap(),
        run["others_air_s"].as_f64().unwrap(),
    );
    assert!(frames > 200 && air_s > 0.0, "{run}");
    // tshark: the uploads go to the flow's AP (to-DS, receiver = the BSSID the flow comes from).
    let rows = common::tshark_fields(
        &d.join("up_200mbps.pcapng"),
        &["wlan.fc.protected", "wlan.fc.tods", "wlan.ra", "wlan.ta", "udp.dstport"],
    );
    let is = |v: &str| v == "1" || v == "True";
    let flow_ap = rows.iter().find(|r| r[4] == "5001").map(|r| r[3].clone()).unwrap();
    let up: Vec<&Vec<String>> = rows.iter().filter(|r| is(&r[0])).collect();
    assert_eq!(up.len() as u64, frames);
    assert!(
        up.iter().all(|r| is(&r[1]) && r[2] == flow_ap && r[3] != flow_ap),
        "{:?}",
        up[0]
    );

    let sniffed = sniffed_air_s(&d.join("up_200mbps.pcapng"));
    assert!(
        (sniffed - air_s).abs() < 1e-6 * frames as f64,
        "sniffed {sniffed} s, emulated {air_s} s"
    );
}
