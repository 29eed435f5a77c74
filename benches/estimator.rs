//! Criterion: the online estimator's per-packet cost (target ≤ 50 ns per packet), with the
//! shipped perceptron on receiver-context rows (the default model), the logistic model
//! (m = 20 with σ) and in MAC-timestamp mode, on a realistic arrival pattern (A-MPDUs of 32
//! packets, 10 µs apart inside, ~600 µs between frames).
//!
//! Also: the online self-calibrator's cost per window (`self_calibration`).
//!
//! Run: `cargo bench --bench estimator`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use aggrate::features::FeatureSpec;
use aggrate::model::ModelFile;
use aggrate::runtime::{Mode, OnlineEstimator, RxPacket};
use aggrate::{Ts, Tsft};

fn packets(n: usize) -> Vec<RxPacket> {
    (0..n)
        .map(|i| {
            let (f, k) = (i / 32, i % 32);
            let host = Ts::from_micros(1_000 + f as u64 * 600 + k as u64 * 10 + (i as u64 * 7919 % 3));
            RxPacket {
                host,
                seq: Some(i as u64),
                sent: Some(host.saturating_sub(Duration::from_millis(1))),
                len: 1500,
                tsft: Some(Tsft(f as u64 * 600)),
                phy_rate_bps: Some(866_700_000),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let model = ModelFile::from_json(
        include_str!("../models/logistic_m20_sigma.json"),
        "models/logistic_m20_sigma.json",
    )
    .expect("shipped model");
    let mlp = ModelFile::from_json(
        include_str!("../models/mlp8_m5_ctx1024.json"),
        "models/mlp8_m5_ctx1024.json",
    )
    .expect("shipped model");
    let pk = packets(100_000);
    let mut g = c.benchmark_group("estimator_push");
    g.throughput(Throughput::Elements(pk.len() as u64));
    g.bench_function("mlp8_m5_ctx1024", |b| {
        b.iter_batched_ref(
            || OnlineEstimator::from_model(&mlp, Duration::from_millis(500)).unwrap(),
            |e| {
                for p in &pk {
                    std::hint::black_box(e.push(p));
                }
                e.poll_report(Ts::from_millis(100_000))
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("logistic_m20_sigma", |b| {
        b.iter_batched_ref(
            || OnlineEstimator::from_model(&model, Duration::from_millis(500)).unwrap(),
            |e| {
                for p in &pk {
                    std::hint::black_box(e.push(p));
                }
                e.poll_report(Ts::from_millis(100_000))
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("mac_timestamps", |b| {
        b.iter_batched_ref(
            || OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), Duration::from_millis(500)).unwrap(),
            |e| {
                for p in &pk {
                    std::hint::black_box(e.push(p));
                }
                e.poll_report(Ts::from_millis(100_000))
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
    // The models' decision alone, on one context row.
    let mut g = c.benchmark_group("decision");
    let row: Vec<f64> = (0..mlp.spec.width()).map(|i| 0.5 + i as f64 * 0.25).collect();
    g.bench_function("mlp8_m5_ctx1024", |b| {
        b.iter(|| aggrate::train::Predict::decision(&mlp.model, std::hint::black_box(&row)))
    });
    g.finish();
    // The feature windows alone.
    let mut g = c.benchmark_group("gap_window_push");
    g.throughput(Throughput::Elements(pk.len() as u64));
    for (name, spec) in [
        ("m20_sigma", FeatureSpec::default()),
        (
            "m5_ctx1024",
            FeatureSpec {
                m: 5,
                sigma: false,
                context: 1024,
                ..FeatureSpec::default()
            },
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || aggrate::features::GapWindow::new(&spec),
                |w| {
                    let mut s = 0.0;
                    for p in &pk {
                        if let Some(r) = w.push(p.host) {
                            s += r[0];
                        }
                    }
                    s
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
    // Online self-calibration (`recv --self-calibrate`): a push is a store into the window's
    // buffer; the packet that completes a window of WINDOW_GAPS gaps pays for its summary, the
    // nearest training receivers and their threshold - the receive thread's pause per window.
    {
        use aggrate::train::online::{for_model, Likeness, WINDOW_GAPS};
        let like = Likeness {
            k: aggrate::train::online::DEFAULT_K,
            max_distance: f64::INFINITY,
        };
        let cal = for_model(&mlp, like).expect("the shipped model's bank");
        let win = packets(WINDOW_GAPS + 1);
        let mut g = c.benchmark_group("self_calibration");
        g.throughput(Throughput::Elements(win.len() as u64));
        g.bench_function("window_of_16385", |b| {
            b.iter_batched_ref(
                || cal.clone(),
                |c| {
                    let mut step = None;
                    for p in &win {
                        step = step.or(c.push(p.host, 1472));
                    }
                    assert!(step.is_some(), "one window per WINDOW_GAPS + 1 packets");
                    step
                },
                BatchSize::LargeInput,
            )
        });
        g.finish();
    }
    // The per-datagram cost of authenticated data (HMAC-SHA-256 over the whole datagram): what
    // a sender pays per packet to emit and a receiver to verify, at the demo's 1,472-byte size.
    use aggrate::transport::wire::{self, Data, Psk, SessionKeys};
    let keys = SessionKeys::derive(
        &Psk::new(b"benchmark pre-shared key").unwrap(),
        1,
        0,
        &[1; wire::NONCE_LEN],
        &[2; wire::NONCE_LEN],
    );
    let payload = 1472 - wire::DATA_HEADER_LEN;
    let mut g = c.benchmark_group("wire_data_1472B");
    g.throughput(Throughput::Bytes(1472));
    let mut buf = Vec::with_capacity(1472);
    let d = Data {
        seq: 7,
        sent: aggrate::Ts(1),
    };
    g.bench_function("emit_tagged", |b| {
        b.iter(|| {
            wire::emit_data(&mut buf, &keys, &d, payload);
            buf.len()
        })
    });
    wire::emit_data(&mut buf, &keys, &d, payload);
    g.bench_function("parse_verified", |b| {
        b.iter(|| wire::parse_data(std::hint::black_box(&buf), &keys).map(|x| x.1))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
