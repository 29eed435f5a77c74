//! The 802.11ac emulator: limits, load response, determinism, round trip through the capture
//! reader, fidelity against the ns-3 sample and first principles, bad configuration.

use crate::common;

use std::collections::BTreeMap;

use aggrate::capture::io::open_path;
use aggrate::label::{label_frames, Dedup};
use aggrate::wlan::noise::NoisePreset;
use aggrate::wlan::run::{run, RunSummary, Scenario};
use aggrate::wlan::timing::{self, PhyMode, SIFS, SLOT};
use aggrate::wlan::traffic::{Arrival, BackhaulConfig, FlowConfig};
use aggrate::wlan::{Delivery, StationConfig, WlanConfig};
use common::{aggrate, text};

/// The ns-3 sample's settings: VHT MCS 9, 2 SS, 80 MHz, SGI, CBR 1500 B, RTS above 65,535 B.
fn ns3_like(rate_mbps: f64, duration_s: f64) -> Scenario {
    Scenario {
        seed: 7,
        duration_s,
        wlan: WlanConfig {
            stations: vec![StationConfig::default()],
            ..WlanConfig::default()
        },
        flows: vec![FlowConfig {
            rate_mbps,
            arrival: Arrival::Cbr,
            ..FlowConfig::default()
        }],
        noise_preset: NoisePreset::None,
        ..Scenario::default()
    }
}

fn go(s: Scenario) -> (RunSummary, Vec<Delivery>) {
    let v = s.check().unwrap();
    let mut ds = Vec::new();
    let sum = run(&v, |d, _| ds.push(*d), |_| {});
    (sum, ds)
}

#[test]
fn aggregation_rises_with_load_and_saturates_at_the_window() {
    let mut last = 0.0;
    for r in [50.0, 150.0, 300.0, 450.0, 550.0, 700.0, 900.0] {
        let (sum, _) = go(ns3_like(r, 1.0));
        let st = &sum.stations[0];
        assert!(st.mean_agg >= last, "{r} Mb/s: mean {} after {last}", st.mean_agg);
        last = st.mean_agg;
        if r <= 550.0 {
            // Below saturation everything offered arrives.
            assert!(
                (st.received_mbps - r).abs() / r < 0.01,
                "{r}: received {}",
                st.received_mbps
            );
        }
    }
    assert!(last > 63.0, "saturated level {last}");
}

#[test]
fn aggregation_never_exceeds_its_limits() {
    // Tight limits: 10 MPDUs, 8,000 bytes, and a slow MCS where the 5.484 ms PPDU cap binds.
    for (cfg, rate) in [
        (
            WlanConfig {
                max_ampdu_mpdus: 10,
                ..WlanConfig::default()
            },
            900.0,
        ),
        (
            WlanConfig {
                max_ampdu_bytes: 8_000,
                ..WlanConfig::default()
            },
            900.0,
        ),
        (
            WlanConfig {
                stations: vec![StationConfig {
                    mcs: 0,
                    nss: 1,
                    bw_mhz: 20,
                    short_gi: false,
                    vht: true,
                    rate_adaptation: None,
                }],
                ..WlanConfig::default()
            },
            50.0,
        ),
    ] {
        let max_n = cfg.max_ampdu_mpdus as usize;
        let max_b = cfg.max_ampdu_bytes;
        let max_us = cfg.max_ppdu_us as u64;
        let s = Scenario {
            wlan: cfg,
            flows: vec![FlowConfig {
                rate_mbps: rate,
                ..FlowConfig::default()
            }],
            ..ns3_like(rate, 0.5)
        };
        let (_, ds) = go(s);
        let mut by_ref: BTreeMap<u32, Vec<Delivery>> = BTreeMap::new();
        ds.iter().for_each(|d| by_ref.entry(d.ampdu_ref).or_default().push(*d));
        let mut biggest = 0;
        for (_, f) in by_ref {
            let bytes: usize = f.iter().map(|d| timing::subframe_len(d.packet.len as usize)).sum();
            assert!(f.len() <= max_n && bytes <= max_b);
            assert!(f[0].mac_time.saturating_since(f[0].ppdu_start).as_micros() as u64 <= max_us);
            assert!(f.iter().all(|d| d.count as usize == f.len() && d.tsft == f[0].tsft));
            biggest = biggest.max(f.len());
        }
        assert!(biggest > 1, "limits should bind, not prevent aggregation");
    }
}

/// Fidelity: the ns-3.37 sample (same PHY and traffic) measured 7.78 MPDUs per A-MPDU at
/// 300 Mb/s; saturation throughput from the 802.11 timing formulas (see `wlan::timing` docs).
#[test]
fn matches_ns3_and_first_principles() {
    let (sum, _) = go(ns3_like(300.0, 2.5));
    let agg = sum.stations[0].mean_agg;
    assert!(
        (agg - 7.78).abs() / 7.78 < 0.15,
        "mean aggregation {agg} vs ns-3's 7.78"
    );

    let m = PhyMode {
        vht: true,
        mcs: 9,
        nss: 2,
        bw: aggrate::phy::Bandwidth::Mhz80,
        short_gi: true,
    };
    let aifs = SIFS + SLOT * 3;
    let mean_backoff = SLOT.as_secs_f64() * 7.5;
    let psdu = 64 * timing::subframe_len(1500);
    let cycle = aifs.as_secs_f64()
        + mean_backoff
        + (timing::rts() + SIFS + timing::ack() + SIFS).as_secs_f64()
        + m.ppdu_duration(psdu).as_secs_f64()
        + (SIFS + timing::block_ack()).as_secs_f64();
    let analytic = 64.0 * 1500.0 * 8.0 / cycle / 1e6;
    let (sum, _) = go(ns3_like(1000.0, 2.0));
    let sat = sum.stations[0].received_mbps;
    assert!(
        (sat - analytic).abs() / analytic < 0.05,
        "saturation {sat} vs analytic {analytic}"
    );
    assert!((600.0..680.0).contains(&sat), "{sat}");
}

#[test]
fn same_seed_same_bytes_and_capture_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &str, seed: &str| {
        vec![
            "-q",
            "simulate",
            "--rate-mbps",
            "250",
            "--duration",
            "0.5",
            "--noise",
            "phone",
            "--seed",
            seed,
            "-o",
            out,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    for (out, seed) in [("a.pcapng", "5"), ("b.pcapng", "5"), ("c.pcapng", "6")] {
        let a = args(out, seed);
        let o = aggrate(dir.path(), &a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
        assert!(o.status.success(), "{}", text(&o).1);
    }
    let a = std::fs::read(dir.path().join("a.pcapng")).unwrap();
    assert_eq!(
        a,
        std::fs::read(dir.path().join("b.pcapng")).unwrap(),
        "same seed, same bytes"
    );
    assert_ne!(
        a,
        std::fs::read(dir.path().join("c.pcapng")).unwrap(),
        "another seed differs"
    );

    // The library run with the same scenario gives the frames the reader labels back.
    let s = Scenario {
        seed: 5,
        duration_s: 0.5,
        noise_preset: NoisePreset::Phone,
        flows: vec![FlowConfig {
            rate_mbps: 250.0,
            ..FlowConfig::default()
        }],
        ..Scenario::default()
    };
    let (_, ds) = go(s);
    let recs: Vec<_> = open_path(&dir.path().join("a.pcapng"))
        .unwrap()
        .reader
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(recs.len(), ds.len());
    let mut dedup = Dedup::default();
    let recs: Vec<_> = recs.into_iter().filter(|r| dedup.keep(r)).collect();
    let labels = label_frames(&recs, 64).unwrap();
    let mut built: Vec<usize> = Vec::new();
    let mut last_ref = None;
    for d in &ds {
        if last_ref != Some(d.ampdu_ref) {
            built.push(0);
            last_ref = Some(d.ampdu_ref);
        }
        *built.last_mut().unwrap() += 1;
    }
    let read: Vec<usize> = labels.frames.iter().map(|f| f.packets as usize).collect();
    assert_eq!(read, built);
    for (r, d) in recs.iter().zip(&ds) {
        assert_eq!(r.tsft(), Some(d.tsft));
        assert_eq!(r.payload_seq(0), Some(d.packet.seq));
        assert_eq!(r.l3.unwrap().payload_be64(4), Some(d.packet.sent.as_nanos()));
        assert!(r.host >= d.mac_time, "kernel time after MAC time");
        assert_eq!(r.phy_rate_bps(), Some(866_666_667));
    }
}

#[test]
fn emulator_captures_are_clean_for_tshark() {
    let dir = tempfile::tempdir().unwrap();
    for out in ["t.pcap", "t.pcapng"] {
        let o = aggrate(
            dir.path(),
            &[
                "-q",
                "simulate",
                "--rate-mbps",
                "200",
                "--duration",
                "0.05",
                "--mcs",
                "7",
                "--bw",
                "40",
                "-o",
                out,
            ],
        );
        assert!(o.status.success(), "{}", text(&o).1);
        let rows = common::tshark_fields(
            &dir.path().join(out),
            &[
                "_ws.malformed",
                "radiotap.vht.mcs.0",
                "radiotap.vht.bw",
                "radiotap.ampdu.reference",
                "ip.checksum.status",
                "udp.dstport",
                "frame.len",
            ],
        );
        assert!(rows.len() > 500);
        for r in &rows {
            assert!(r[0].is_empty(), "malformed packet: {r:?}");
            assert_eq!((r[1].as_str(), r[2].as_str(), r[5].as_str()), ("7", "1", "5001"));
            assert_eq!(r[6], "1578"); // 44 radiotap + 26 + 8 + 1500
        }
    }
}

#[test]
fn errors_retries_contention_and_backhaul() {
    // MPDU errors: retransmissions carry the retry flag; nothing is lost below the retry limit.
    let s = Scenario {
        wlan: WlanConfig {
            mpdu_error_rate: 0.1,
            ..WlanConfig::default()
        },
        ..ns3_like(200.0, 0.5)
    };
    let (sum, ds) = go(s);
    let st = &sum.stations[0];
    assert!(ds.iter().filter(|d| d.retry).count() > 100);
    assert_eq!(st.delivered + st.stats.dropped_retry, st.offered);
    assert!(st.stats.dropped_retry < 5);

    // Contending stations cost airtime and collide.
    let s = Scenario {
        wlan: WlanConfig {
            contenders: 4,
            contender_rate_mbps: 40.0,
            ..WlanConfig::default()
        },
        ..ns3_like(1000.0, 0.5)
    };
    let (busy, _) = go(s);
    let (alone, _) = go(ns3_like(1000.0, 0.5));
    assert!(busy.collisions > 10);
    assert!(busy.stations[0].received_mbps < alone.stations[0].received_mbps * 0.9);

    // Other kinds of other traffic. Beside a saturated AP a contender gets about one transmit
    // opportunity per AP exchange: sending single frames it falls behind its 50 Mb/s, while
    // a neighbouring AP aggregating (A-MPDUs of up to 32) carries its load and takes that air.
    let with = |ampdu: u16, arrivals: aggrate::wlan::Arrivals, mbps: f64| {
        go(Scenario {
            wlan: WlanConfig {
                contenders: 1,
                contender_rate_mbps: mbps,
                contender_ampdu: ampdu,
                contender_arrivals: arrivals,
                ..WlanConfig::default()
            },
            ..ns3_like(1000.0, 0.5)
        })
        .0
    };
    let single = with(1, aggrate::wlan::Arrivals::Poisson, 50.0);
    let neighbour = with(32, aggrate::wlan::Arrivals::Poisson, 50.0);
    // (The run goes on after the flows until the queues drain: the contenders with it.)
    let offered = 50e6 * neighbour.simulated_s / (1500.0 * 8.0);
    assert!(
        (single.contender_frames as f64) < 0.9 * offered && neighbour.contender_frames as f64 > 0.95 * offered,
        "{} / {} of {offered} frames",
        single.contender_frames,
        neighbour.contender_frames
    );
    assert!(neighbour.stations[0].received_mbps < single.stations[0].received_mbps);
    // A saturated neighbour takes whatever EDCA gives it: about half the transmit
    // opportunities, far more air than any offered load above.
    let saturated = with(8, aggrate::wlan::Arrivals::Saturated, 1.0);
    assert!(
        saturated.stations[0].received_mbps < 0.75 * alone.stations[0].received_mbps,
        "{} vs {}",
        saturated.stations[0].received_mbps,
        alone.stations[0].received_mbps
    );
    assert!(saturated.stations[0].received_mbps < single.stations[0].received_mbps);
    // On/off at the same mean load costs about what Poisson does.
    let bursty = with(
        1,
        aggrate::wlan::Arrivals::OnOff {
            on_ms: 100.0,
            off_ms: 100.0,
        },
        50.0,
    );
    let r = bursty.stations[0].received_mbps / single.stations[0].received_mbps;
    assert!((0.9..1.1).contains(&r), "{r}");

    // A backhaul below the WLAN rate is the bottleneck: WLAN aggregation stays low.
    let s = Scenario {
        backhaul: Some(BackhaulConfig {
            rate_mbps: 200.0,
            queue: 100,
            delay_us: 0,
        }),
        ..ns3_like(400.0, 0.5)
    };
    let (sum, _) = go(s);
    let st = &sum.stations[0];
    assert!((st.received_mbps - 200.0).abs() < 5.0, "{}", st.received_mbps);
    assert!(sum.backhaul_dropped > 1000);
    assert!(st.mean_agg < 5.0, "paced by the backhaul: {}", st.mean_agg);
}

#[test]
fn a_msdu_sizes_from_the_standard() {
    // One 1,500-byte packet: 14 subframe header + 8 LLC/SNAP + 1500 = 1,522 bytes.
    assert_eq!(timing::amsdu_len([1500]), 1522);
    // Three: 1,524 (padded) + 1,524 + 1,522 = 4,570; in an A-MPDU 4 + 26 + 4,570 + 4 = 4,604.
    assert_eq!(timing::amsdu_len([1500, 1500, 1500]), 4570);
    assert_eq!(timing::amsdu_subframe_len([1500, 1500, 1500]), 4604);
    // Against three MPDUs of one packet each: 3 × 1,544 = 4,632 bytes.
    assert_eq!(3 * timing::subframe_len(1500), 4632);
}

#[test]
fn a_msdus_pack_packets_into_mpdus_within_their_limits() {
    let amsdu = |k: u16, err: f64, rate: f64| Scenario {
        wlan: WlanConfig {
            amsdu_max_msdus: k,
            mpdu_error_rate: err,
            ..WlanConfig::default()
        },
        ..ns3_like(rate, 0.3)
    };
    let (sum, ds) = go(amsdu(4, 0.1, 400.0));
    let st = &sum.stations[0];
    assert_eq!(
        st.delivered + st.stats.dropped_retry,
        st.offered,
        "nothing lost below the retry limit"
    );
    assert_eq!(st.delivered, ds.len() as u64);
    assert!(
        st.stats.mpdus < st.delivered * 2 / 3,
        "A-MSDUs were built: {:?}",
        st.stats
    );
    let mut by_mpdu: BTreeMap<(u32, u16), Vec<Delivery>> = BTreeMap::new();
    let mut by_seq: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
    ds.iter().for_each(|d| {
        by_mpdu.entry((d.ampdu_ref, d.mpdu)).or_default().push(*d);
        by_seq.entry(d.dot11_seq).or_default().push(d.packet.seq);
    });
    assert_eq!(by_mpdu.len() as u64, st.stats.mpdus);
    let mut retried = 0;
    for ((_, m), f) in &by_mpdu {
        assert!(f.len() <= 4);
        assert!(timing::amsdu_len(f.iter().map(|d| d.packet.len as usize)) <= 7935);
        for (j, d) in f.iter().enumerate() {
            assert_eq!(d.msdu, (j as u16, f.len() as u16));
            assert_eq!((d.mpdu, d.dot11_seq, d.retry), (*m, f[0].dot11_seq, f[0].retry));
            assert!(d.mpdus <= 64 && d.mpdu < d.mpdus);
        }
        // A retried MPDU carries the very packets it carried the first time: every packet with
        // this 802.11 sequence number arrived in this MPDU.
        let seqs: Vec<u32> = f.iter().map(|d| d.packet.seq).collect();
        assert_eq!(by_seq[&f[0].dot11_seq], seqs);
        retried += f[0].retry as usize;
    }
    assert!(retried > 20, "retries happened: {retried}");
    // The A-MPDU's level counts packets, its MPDU count beside it.
    let mut per_ref: BTreeMap<u32, (usize, std::collections::BTreeSet<u16>)> = BTreeMap::new();
    for d in &ds {
        let e = per_ref.entry(d.ampdu_ref).or_default();
        e.0 += 1;
        e.1.insert(d.mpdu);
    }
    for d in &ds {
        let (n, m) = &per_ref[&d.ampdu_ref];
        assert_eq!((d.count as usize, d.mpdus as usize), (*n, m.len()));
    }
    // Fewer headers, delimiters and block-ack entries: more goodput at saturation.
    let (plain, _) = go(amsdu(1, 0.0, 1000.0));
    let (packed, _) = go(amsdu(4, 0.0, 1000.0));
    let (a, b) = (plain.stations[0].received_mbps, packed.stations[0].received_mbps);
    assert!(b > a * 1.05, "A-MSDU {b:.1} Mb/s against {a:.1} Mb/s");
    // One packet per MPDU is the plain emulator: same deliveries as before A-MSDUs existed.
    let (_, one) = go(amsdu(1, 0.1, 400.0));
    assert!(one
        .iter()
        .all(|d| d.msdu == (0, 1) && d.mpdu == d.index && d.mpdus == d.count));
}

#[test]
fn multi_station_round_robin_shares_airtime() {
    let stations = vec![
        StationConfig {
            mcs: 9,
            ..StationConfig::default()
        },
        StationConfig {
            mcs: 4,
            ..StationConfig::default()
        },
        StationConfig {
            mcs: 1,
            ..StationConfig::default()
        },
    ];
    let flows = (0..3)
        .map(|i| FlowConfig {
            sta: i,
            rate_mbps: 400.0,
            ..FlowConfig::default()
        })
        .collect();
    let s = Scenario {
        wlan: WlanConfig {
            stations,
            ..WlanConfig::default()
        },
        flows,
        ..ns3_like(0.0, 1.0)
    };
    let (sum, _) = go(s);
    // Saturated round robin: (nearly) equal A-MPDU counts — a station whose queue is briefly
    // empty loses its turn — so faster stations get more bytes out of the same turns.
    let a: Vec<u64> = sum.stations.iter().map(|s| s.ampdus).collect();
    let spread = (a.iter().max().unwrap() - a.iter().min().unwrap()) as f64 / a[0] as f64;
    assert!(spread < 0.03, "{a:?}");
    // Full 64-MPDU windows for MCS 9 and 4 (same bytes per turn); MCS 1 hits the 5.484 ms PPDU
    // cap first, so it gets fewer bytes per turn but the most airtime.
    let (r, air): (Vec<f64>, Vec<f64>) = sum.stations.iter().map(|s| (s.received_mbps, s.airtime_share)).unzip();
    assert!((r[0] - r[1]).abs() / r[0] < 0.03 && r[2] < r[1] * 0.95, "{r:?}");
    assert!(air[0] < air[1] && air[1] < air[2], "{air:?}");
    assert!(sum.stations[2].max_agg < 64 && sum.stations[0].max_agg == 64);
}

#[test]
fn bad_configuration_is_refused_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--mcs", "9", "--bw", "20", "--nss", "1"],
            &["stations[0].mcs = 9", "allowed: 0, 1, 2, 3, 4, 5, 6, 7, 8"],
        ),
        (&["--rate-mbps", "0"], &["flows[0].rate_mbps = 0", "> 0"]),
        (&["--rate-mbps=-5"], &["rate_mbps = -5"]),
        (&["--stations", "0"], &["--stations = 0"]),
        (&["--bw", "30"], &["stations[0].bw_mhz = 30", "20, 40, 80, 160"]),
        (&["--duration", "0"], &["duration_s = 0"]),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["simulate", "-o", "x.pcapng"];
        args.extend_from_slice(flags);
        let o = aggrate(dir.path(), &args);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{flags:?} accepted");
        for n in *needles {
            assert!(err.contains(n), "{flags:?}: {err}");
        }
        assert!(!dir.path().join("x.pcapng").exists(), "no work before the check");
    }
    std::fs::write(dir.path().join("bad.toml"), "duration_s = \"long\"\n").unwrap();
    let o = aggrate(dir.path(), &["simulate", "--config", "bad.toml", "-o", "x.pcapng"]);
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("bad.toml") && err.contains("duration_s"),
        "{err}"
    );
    let o = aggrate(dir.path(), &["simulate", "--config", "missing.toml", "-o", "x.pcapng"]);
    assert!(!o.status.success() && text(&o).1.contains("missing.toml"));
    std::fs::write(dir.path().join("typo.toml"), "durration_s = 3\n").unwrap();
    let o = aggrate(dir.path(), &["simulate", "--config", "typo.toml", "-o", "x.pcapng"]);
    assert!(!o.status.success() && text(&o).1.contains("durration_s"));
}

#[test]
fn dataset_manifests_build_and_expand() {
    use aggrate::wlan::manifest::{DatasetManifest, Role};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets");
    // Every shipped manifest parses, expands and checks.
    for (name, runs) in [("paper", 9), ("multi", 20), ("small", 9)] {
        let text = std::fs::read_to_string(root.join(format!("{name}.toml"))).unwrap();
        let m: DatasetManifest = toml::from_str(&text).unwrap();
        let planned = m.expand().unwrap();
        assert_eq!(planned.len(), runs, "{name}");
        for r in &planned {
            r.scenario.clone().check().unwrap();
            assert!(r.name.contains("mbps"));
        }
        if name == "paper" {
            assert_eq!(planned.iter().filter(|r| r.role == Role::Train).count(), 6);
            let r300 = planned.iter().find(|r| r.rate_mbps == 300.0).unwrap();
            assert!(
                (r300.scenario.duration_s - 10.0).abs() < 1e-9,
                "250k × 1500 B at 300 Mb/s"
            );
        }
    }
    // Building small.toml writes one capture per run and a manifest of what was built.
    let dir = tempfile::tempdir().unwrap();
    let out = aggrate(
        dir.path(),
        &[
            "-q",
            "dataset",
            "build",
            root.join("small.toml").to_str().unwrap(),
            "--out",
            "d",
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let built: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("d/manifest.json")).unwrap()).unwrap();
    let runs = built["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 9);
    for r in runs {
        let file = r["stations"][0]["file"].as_str().unwrap();
        assert!(dir.path().join("d").join(file).exists());
        let rate = r["rate_mbps"].as_f64().unwrap();
        let got = r["stations"][0]["received_mbps"].as_f64().unwrap();
        if rate <= 600.0 {
            assert!((got - rate).abs() / rate < 0.02, "{rate}: {got}");
            assert_eq!(r["stations"][0]["delivered"], 20_000);
        }
    }
    assert_eq!(built["seed"], 3000);
    // A bad manifest names the file and the field.
    std::fs::write(
        dir.path().join("bad.toml"),
        "name = \"x\"\nseed = 1\npackets = 0\ntrain_rates_mbps = [1]\n",
    )
    .unwrap();
    let out = aggrate(dir.path(), &["dataset", "build", "bad.toml"]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("bad.toml") && text(&out).1.contains("packets = 0"),
        "{}",
        text(&out).1
    );
}

#[test]
fn rate_adaptation_walks_the_mcs_between_ampdus() {
    use aggrate::wlan::RateAdaptation;
    let mut s = ns3_like(300.0, 2.0);
    s.wlan.stations[0].mcs = 7;
    s.wlan.stations[0].rate_adaptation = Some(RateAdaptation {
        mcs_min: 4,
        mcs_max: 9,
        dwell_ms: 20.0,
    });
    let (_, ds) = go(s.clone());
    // Per A-MPDU (equal reference): one MCS; between consecutive A-MPDUs at most one step.
    let mut per_ampdu: Vec<(u32, u8)> = Vec::new();
    for d in &ds {
        match per_ampdu.last() {
            Some((r, m)) if *r == d.ampdu_ref => assert_eq!(*m, d.mode.mcs, "one MCS per A-MPDU"),
            _ => per_ampdu.push((d.ampdu_ref, d.mode.mcs)),
        }
    }
    let mcs: Vec<u8> = per_ampdu.iter().map(|p| p.1).collect();
    assert!(mcs.windows(2).all(|w| w[0].abs_diff(w[1]) <= 1));
    assert!(mcs.iter().all(|m| (4..=9).contains(m)));
    let seen: std::collections::BTreeSet<u8> = mcs.iter().copied().collect();
    assert!(seen.len() >= 3, "2 s with a 20 ms dwell visits several MCSs: {seen:?}");
    let changes = mcs.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        (30..=200).contains(&changes),
        "≈ 100 steps in 2 s (some clamped): {changes}"
    );
    // Lower MCS, longer MPDUs on air: the PPDU time per MPDU follows the MCS.
    let per_mpdu_us = |m: u8| {
        let v: Vec<f64> = ds
            .iter()
            .filter(|d| d.mode.mcs == m && d.index == 0 && d.count >= 4)
            .map(|d| d.mac_time.saturating_since(d.ppdu_start).as_secs_f64() * 1e6 / d.count as f64)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let (lo, hi) = (*seen.iter().next().unwrap(), *seen.iter().last().unwrap());
    assert!(
        per_mpdu_us(lo) > per_mpdu_us(hi) * 1.2,
        "MCS {lo}: {} µs, MCS {hi}: {} µs",
        per_mpdu_us(lo),
        per_mpdu_us(hi)
    );
    // Deterministic, and a fixed MCS draws nothing from the RNG (old runs stay byte-identical).
    assert_eq!(go(s).1, ds);
    let mut bad = ns3_like(300.0, 0.1);
    bad.wlan.stations[0].rate_adaptation = Some(RateAdaptation {
        mcs_min: 5,
        mcs_max: 4,
        dwell_ms: 1.0,
    });
    let e = bad.check().unwrap_err().to_string();
    assert!(e.contains("rate_adaptation"), "{e}");
}

#[test]
fn codel_drops_from_a_standing_queue_and_the_fifo_default_is_unchanged() {
    use aggrate::wlan::codel::Aqm;
    // 900 Mb/s of CBR offered to an 867 Mb/s PHY (≈ 600 Mb/s of goodput): a standing queue.
    // CoDel cannot hold an unresponsive flow at its target (its drop rate grows as √count); it
    // drops from the head as the queue stands, and the tail drops fall by as many. Kernel TCP
    // through it in the testbed (tests/realtime/testbed.rs) shows the delay it keeps.
    let over = |aqm: Aqm| {
        let mut s = ns3_like(900.0, 3.0);
        s.wlan.aqm = aqm;
        go(s)
    };
    let (fifo, fifo_ds) = over(Aqm::Fifo);
    let (codel, _) = over(Aqm::codel());
    let (f, c) = (fifo.stations[0].stats, codel.stations[0].stats);
    assert_eq!(f.dropped_aqm, 0);
    assert!(c.dropped_aqm > 10, "{c:?}");
    // As many drops in all, give or take an A-MPDU (the link is saturated either way).
    assert!(
        (c.dropped_aqm + c.dropped_queue).abs_diff(f.dropped_queue) <= 64,
        "{c:?} {f:?}"
    );
    // The default is the FIFO, bit for bit.
    let (dflt, dflt_ds) = go(ns3_like(900.0, 3.0));
    assert_eq!(dflt_ds, fifo_ds);
    assert_eq!(dflt.stations[0].stats, f);
}

/// Run an emulator until nothing is left to do, handing every downlink delivery to `on_down`
/// (which may queue more, e.g. a station's ACKs) — or until `until`.
fn drain<R: rand::Rng>(
    sim: &mut aggrate::wlan::WlanSim<R>,
    until: aggrate::Ts,
    mut on_down: impl FnMut(&mut aggrate::wlan::WlanSim<R>, &Delivery),
) -> Vec<aggrate::wlan::UplinkDelivery> {
    let mut up = Vec::new();
    while let Some(t) = sim.poll_timeout().filter(|&t| t <= until) {
        sim.handle_timeout(t);
        while let Some(d) = sim.poll_delivery() {
            on_down(sim, &d);
        }
        while let Some(u) = sim.poll_uplink() {
            up.push(u);
        }
    }
    up
}

#[test]
fn the_uplink_takes_its_own_turns_and_its_air_from_the_downlink() {
    use aggrate::wlan::{Packet, StaId, WlanSim};
    use aggrate::Ts;
    use rand::SeedableRng;
    let cfg = WlanConfig {
        stations: vec![StationConfig::default()],
        ..WlanConfig::default()
    }
    .check()
    .unwrap();
    let rng = |s| rand_chacha::ChaCha8Rng::seed_from_u64(s);
    let ack = |seq| Packet {
        seq,
        len: 52,
        sent: Ts::ZERO,
    };
    // Ten TCP ACKs queued at an idle station: one A-MPDU after AIFS (no backoff yet), received
    // together at its PPDU's end, in order; nothing on the downlink.
    let mut sim = WlanSim::new(cfg.clone(), rng(1));
    for k in 0..10 {
        sim.enqueue_uplink(Ts::ZERO, StaId(0), ack(k)).unwrap();
    }
    let up = drain(&mut sim, Ts::from_millis(100), |_, d| {
        panic!("a downlink delivery {d:?}")
    });
    let c = cfg.config();
    let ppdu = cfg.modes()[0].ppdu_duration(10 * timing::subframe_len(52));
    let end = Ts::ZERO + SIFS + SLOT * c.aifsn + ppdu;
    assert_eq!(
        up.iter().map(|u| u.packet.seq).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert!(
        up.iter().all(|u| u.received == end && u.sta == StaId(0)),
        "{up:?} vs {end:?}"
    );
    let st = sim.stats()[0];
    assert_eq!((st.uplink_ampdus, st.uplink_packets, st.ampdus), (1, 10, 0));
    // Its air: from the access (after AIFS, as the AP's exchanges count) to the Block Ack's end.
    assert_eq!(
        st.uplink_airtime_ns,
        (ppdu + SIFS + timing::block_ack()).as_nanos() as u64,
        "{st:?}"
    );
    assert_eq!(sim.busy_ns(), st.uplink_airtime_ns);
    // A full station queue drops (counted).
    for k in 0..c.queue_limit as u32 + 5 {
        let _ = sim.enqueue_uplink(Ts::from_millis(200), StaId(0), ack(k));
    }
    assert_eq!(sim.stats()[0].uplink_dropped, 5);
    assert!(sim.enqueue_uplink(Ts::from_millis(200), StaId(3), ack(0)).is_err());

    // A saturated downlink of 1,500-byte packets for 0.3 s, alone and with the station sending
    // a 52-byte ACK for every second packet it receives: the ACKs take turns of their own (the
    // station's EDCA contends with the AP's), their air is the downlink's loss, and the rest
    // of the air is the downlink's as before.
    let run = |acks: bool| {
        let mut sim = WlanSim::new(cfg.clone(), rng(2));
        let until = Ts::from_millis(300);
        let mut seq = 0u32;
        let mut fill = |sim: &mut WlanSim<_>, now: Ts| {
            while sim.queue_len(StaId(0)) < 500 {
                seq += 1;
                let p = Packet {
                    seq,
                    len: 1500,
                    sent: now,
                };
                sim.enqueue(now, StaId(0), p).unwrap();
            }
        };
        fill(&mut sim, Ts::ZERO);
        let (mut bytes, mut got) = (0u64, 0u32);
        let up = drain(&mut sim, until, |sim, d| {
            bytes += u64::from(d.packet.len);
            got += 1;
            if acks && got % 2 == 0 {
                sim.enqueue_uplink(d.mac_time, StaId(0), ack(got)).unwrap();
            }
            fill(sim, d.mac_time);
        });
        // Every ACK queued came through once, in order, or was dropped, or is still queued.
        let seqs: Vec<u32> = up.iter().map(|u| u.packet.seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "uplink out of order or duplicated"
        );
        let s = sim.stats()[0];
        assert_eq!(
            up.len() as u64 + s.uplink_dropped + sim.uplink_queue_len(StaId(0)) as u64,
            if acks { u64::from(got / 2) } else { 0 }
        );
        (bytes, up.len() as u64, s, sim.busy_ns(), sim.collisions())
    };
    let (alone, none, s0, busy0, _) = run(false);
    let (shared, acked, s1, busy1, collisions) = run(true);
    assert_eq!((none, s0.uplink_airtime_ns), (0, 0));
    assert!(acked > 1000 && s1.uplink_ampdus > 100, "{s1:?}");
    // Every ACK queued before the last ones got through (a few may be in the queue at the end).
    assert!(
        acked + s1.uplink_dropped + 64 >= s1.delivered / 2,
        "{acked} of {}",
        s1.delivered / 2
    );
    let up_share = s1.uplink_airtime_ns as f64 / busy1 as f64;
    let lost = 1.0 - shared as f64 / alone as f64;
    assert!(up_share > 0.01 && up_share < 0.15, "uplink share of the air {up_share}");
    assert!(
        lost > 0.5 * up_share && lost < 2.0 * up_share + 0.01,
        "downlink lost {lost}, uplink took {up_share}"
    );
    // The medium stayed busy but for AIFS and backoff (both runs saturate it), and the two
    // EDCA functions collided now and then.
    assert!(busy0 > 255_000_000 && busy1 > 255_000_000, "{busy0} {busy1}");
    eprintln!("downlink lost {lost:.3}, uplink share {up_share:.3}, {collisions} collisions");
    assert!(collisions > 0, "{collisions}");
}
