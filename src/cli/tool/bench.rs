//! The hidden tools that time things (benchmarks print one JSON line) or make hostile
//! fixtures.

use std::fs::File;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::super::progress::Ui;
use super::super::Exit;

#[allow(clippy::disallowed_methods)] // the CLI may read the clock: this is a benchmark
pub(super) fn ingest_rate(ui: &Ui, input: &std::path::Path) -> Result<Exit> {
    use aggrate::capture::filter::FlowCounts;
    use aggrate::dataset::RowExtractor;
    use aggrate::features::FeatureSpec;

    let start = std::time::Instant::now();
    let mut counts = FlowCounts::default();
    let mut ex = RowExtractor::new(FeatureSpec::default(), 0)?;
    let mut acc = 0.0f64;
    let mut sink = |_: &aggrate::dataset::RowMeta, x: &[f64]| acc += x[0];
    let out = super::super::for_each_record(ui, input, false, |r| {
        counts.push(r);
        if r.l3.is_some_and(|l| l.flow.proto == 17) {
            ex.push(r, Some(r.host), &mut sink);
        }
    })?;
    ex.finish(&mut sink);
    let secs = start.elapsed().as_secs_f64();
    let records = out.records;
    out.fatal_damage(input)?;

    // The Parquet writer alone: the same rows, already in memory, written as `features` does.
    let spec = FeatureSpec::default();
    let mut rows: Vec<(aggrate::dataset::RowMeta, Vec<f64>)> = Vec::new();
    let opts = aggrate::pipeline::RowsOptions::new(spec);
    aggrate::pipeline::capture_rows(input, &opts, &mut aggrate::progress::NoProgress, |m, x| {
        rows.push((*m, x.to_vec()))
    })?
    .check()?;
    let tmp = std::env::temp_dir().join(format!("aggrate-write-rate-{}.parquet", std::process::id()));
    let start = std::time::Instant::now();
    let mut table = aggrate::pipeline::table::RowTable::create(&tmp, aggrate::pipeline::table::Format::Parquet, &spec)?;
    table.begin_capture("bench", 0, None)?;
    for (m, x) in &rows {
        table.push(m, x)?;
    }
    table.finish()?;
    let write_secs = start.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&tmp);
    outln!(
        "{}",
        serde_json::json!({
            "records": records,
            "flows": counts.sorted().len(),
            "rows": ex.rows_out,
            "seconds": secs,
            "checksum": acc,
            "parquet_write_rows": rows.len(),
            "parquet_write_seconds": write_secs,
            "parquet_bytes": bytes,
        })
    );
    Ok(Exit::Ok)
}

/// A capture's packets as an estimator gets them (its model's layout read by the pipeline), in
/// receive order.
fn capture_packets(input: &Path, spec: aggrate::features::FeatureSpec) -> Result<Vec<aggrate::runtime::RxPacket>> {
    let opts = aggrate::pipeline::RowsOptions::new(spec);
    let mut pkts = Vec::new();
    aggrate::pipeline::capture_rows(input, &opts, &mut aggrate::progress::NoProgress, |m, _| {
        pkts.push(aggrate::runtime::RxPacket {
            host: m.host,
            seq: m.seq.map(u64::from),
            sent: None,
            len: m.ip_len,
            tsft: None,
            phy_rate_bps: m.phy_rate_bps,
        })
    })?
    .check()?;
    pkts.sort_by_key(|p| p.host);
    Ok(pkts)
}

pub(super) fn self_calibrate(input: &Path, phy_mbps: f64, interval_ms: u64) -> Result<Exit> {
    use aggrate::runtime::{OnlineEstimator, RxPacket};
    use aggrate::train::online::{for_receiver, DistanceLimit};
    let file = aggrate::model::ModelFile::shipped()?;
    let phy = (phy_mbps * 1e6) as u64;
    let mut est = OnlineEstimator::from_model(&file, Duration::from_millis(interval_ms))?;
    let mut level = est.level_config().clone();
    level.phy_rate_bps = Some(phy);
    level.l3_overhead_bytes = 28;
    est.set_level_config(level)?;
    let mut cal = for_receiver(&file, DistanceLimit::ByPhy, Some(phy))?;
    let mut levels = Vec::new();
    let pkts = capture_packets(input, file.spec)?;
    for p in &pkts {
        // As recv: the UDP payload of a 1,500-byte IP packet, into the estimator, then into the
        // calibrator, which hands the estimator its operating point.
        let p = RxPacket {
            len: 1472,
            phy_rate_bps: None,
            ..*p
        };
        est.push(&p);
        cal.feed(&mut est, p.host, p.len);
        while let Some(r) = est.poll_report(p.host) {
            levels.push(r.level());
        }
    }
    outln!(
        "{}",
        serde_json::json!({ "calibration": cal.summary(), "levels": levels })
    );
    Ok(Exit::Ok)
}

#[allow(clippy::disallowed_methods)] // the CLI may read the clock: this is a benchmark
pub(super) fn estimator_rate(input: &Path, model: Option<&Path>, repeat: u32) -> Result<Exit> {
    use aggrate::runtime::OnlineEstimator;
    let file = match model {
        Some(p) => aggrate::model::ModelFile::load(p)?,
        None => aggrate::model::ModelFile::shipped()?,
    };
    let pkts = capture_packets(input, file.spec)?;
    let mut best = f64::INFINITY;
    let mut reports = 0usize;
    for _ in 0..repeat.max(1) {
        let mut est = OnlineEstimator::from_model(&file, Duration::from_millis(500))?;
        let start = std::time::Instant::now();
        reports = 0;
        for p in &pkts {
            std::hint::black_box(est.push(p));
            while est.poll_report(p.host).is_some() {
                reports += 1;
            }
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    outln!(
        "{}",
        serde_json::json!({ "packets": pkts.len(), "reports": reports, "ns_per_packet": best * 1e9 / pkts.len().max(1) as f64 })
    );
    Ok(Exit::Ok)
}

#[allow(clippy::disallowed_methods)] // the CLI may read the clock: this is a benchmark
pub(super) fn svr_cv(path: &std::path::Path, k: usize, c: f64, gamma: f64, epsilon: f64) -> Result<Exit> {
    use aggrate::dataset::contiguous_folds;
    use aggrate::train::{cv_predict_svr, SvrParams};
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let first_x = header.iter().position(|h| *h == "mean_1").with_context(|| {
        format!(
            "{}: no mean_1 column (not a slots.csv from train --model svr)",
            path.display()
        )
    })?;
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (gcol, tcol) = (
        col("group").context("no group column")?,
        col("true_level").context("no true_level column")?,
    );
    let (mut x, mut y, mut groups) = (Vec::new(), Vec::new(), Vec::new());
    for (n, line) in lines.enumerate() {
        let v: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> Result<f64> {
            v.get(i)
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("{}: line {}: column {} is not a number", path.display(), n + 2, i + 1))
        };
        groups.push(num(gcol)? as u32);
        y.push(num(tcol)?);
        for i in first_x..header.len() {
            x.push(num(i)?);
        }
    }
    let d = header.len() - first_x;
    let folds = contiguous_folds(&groups, k)?;
    let p = SvrParams {
        c,
        gamma,
        epsilon,
        ..SvrParams::default()
    }
    .check()?;
    let start = std::time::Instant::now();
    let pred = cv_predict_svr(&x, d, &y, &folds, &p)?;
    let secs = start.elapsed().as_secs_f64();
    let rmse = (pred.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>() / y.len().max(1) as f64).sqrt();
    outln!(
        "{}",
        serde_json::json!({ "rows": y.len(), "features": d, "folds": k, "fit_seconds": secs, "rmse": rmse })
    );
    Ok(Exit::Ok)
}

#[allow(clippy::disallowed_methods)] // the CLI may read the clock: this is a benchmark
pub(super) fn pace_bench(mbps: f64, seconds: f64) -> Result<Exit> {
    use aggrate::control::PiParams;
    use aggrate::transport::{io, Sender};
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !(mbps > 0.0 && mbps <= 100_000.0 && seconds > 0.0 && seconds <= 60.0) {
        anyhow::bail!("--mbps in (0, 100000], --seconds in (0, 60]");
    }
    // The sink is a real receiver (handshake, tags verified), reading as fast as it can.
    let sink = io::timestamped_socket("127.0.0.1:0".parse()?)?;
    let _ = nix::sys::socket::setsockopt(&sink, nix::sys::socket::sockopt::RcvBuf, &(16 << 20));
    let addr = sink.local_addr()?;
    let stop = AtomicBool::new(false);
    let key = aggrate::transport::wire::Psk::new(&io::entropy()?)?;
    // The rate is pinned (min = max) and reports are not expected for a minute.
    let p = PiParams {
        initial_mbps: mbps,
        min_mbps: mbps,
        max_mbps: mbps,
        ..PiParams::default()
    };
    let payload = 1472 - aggrate::transport::wire::DATA_HEADER_LEN;
    let mut tx = Sender::new(
        key.clone(),
        io::entropy()?,
        1,
        payload,
        p,
        Duration::from_secs(60),
        io::realtime(),
    )?;
    let est = aggrate::runtime::OnlineEstimator::new(
        aggrate::runtime::Mode::Mac,
        aggrate::features::FeatureSpec::default(),
        Duration::from_secs(60),
    )?;
    let mut rx = aggrate::transport::Receiver::new(key, io::entropy()?, est);
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let start = std::time::Instant::now();
    let (stats, rstats) = std::thread::scope(|sc| {
        let h = sc.spawn(|| io::run_receiver(&sink, &mut rx, Duration::from_secs_f64(seconds + 1.0), &stop, |_| {}));
        let r = io::run_sender(
            &sock,
            &[addr],
            &mut tx,
            Duration::from_secs_f64(seconds),
            &stop,
            |_, _| {},
        );
        std::thread::sleep(Duration::from_millis(150));
        stop.store(true, Ordering::Relaxed);
        (r, h.join())
    });
    let stats = stats?;
    let rstats = rstats.map_err(|_| anyhow::anyhow!("receiver thread panicked"))??;
    let secs = start.elapsed().as_secs_f64().min(seconds).max(1e-9);
    let sent_mbps = stats.sent as f64 * 1500.0 * 8.0 / seconds / 1e6;
    let recv_mbps = (rstats.received * 1500) as f64 * 8.0 / secs / 1e6;
    outln!(
        "{}",
        serde_json::json!({
            "target_mbps": mbps,
            "sent_mbps": sent_mbps,
            "received_mbps": recv_mbps,
            "sent_over_target": sent_mbps / mbps,
            "datagrams": stats.sent,
        })
    );
    Ok(Exit::Ok)
}

/// A hostile capture (see [`ToolCommand::Hostile`]).
pub(super) fn hostile(ui: &Ui, kind: &str, n: u32, output: &Path) -> Result<Exit> {
    use aggrate::capture::writer::{build_frame, CaptureWriter, FrameSpec, OutFormat};
    if !matches!(kind, "streams" | "flows" | "open-frame") {
        anyhow::bail!("hostile kind {kind:?}: streams, flows or open-frame");
    }
    let f = File::create(output).with_context(|| format!("creating {}", output.display()))?;
    let xz = xz2::write::XzEncoder::new(f, 6);
    let mut w = CaptureWriter::new(std::io::BufWriter::new(xz), OutFormat::Pcap, 256)?;
    let mut buf = Vec::new();
    for i in 0..n {
        let k = i as u64;
        let mut spec = FrameSpec {
            tsft_us: 1000 + k * 100,
            ampdu_ref: i,
            last: true,
            vht: true,
            mcs: 9,
            nss: 2,
            bw_mhz: 80,
            short_gi: true,
            channel_mhz: 5180,
            sta: [2, 0, 0, 0, 0, 1],
            bssid: [2, 0, 0, 0, 0, 2],
            dot11_seq: (i & 0x0fff) as u16,
            retry: false,
            ip_src: [10, 0, 0, 1],
            ip_dst: [10, 0, 0, 2],
            sport: 5000,
            dport: 5001,
            ip_len: 1500,
            seq: i,
            sent_ns: k * 100_000,
        };
        match kind {
            // A new transmitter per packet (the TID stays): one filter stream each.
            "streams" => spec.bssid = [2, (i >> 24) as u8, (i >> 16) as u8, (i >> 8) as u8, i as u8, 3],
            "flows" => {
                spec.ip_src = [10, (i >> 16) as u8, (i >> 8) as u8, i as u8];
                spec.sport = (i % 60_000) as u16 + 1024;
            }
            // One A-MPDU reference and TSFT, never the last subframe.
            _ => {
                spec.tsft_us = 1000;
                spec.ampdu_ref = 7;
                spec.last = false;
            }
        }
        let len = build_frame(&spec, 256, &mut buf);
        w.write(aggrate::Ts(1_000_000_000 + k * 10_000), &buf, len as u32)?;
    }
    w.finish()?.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?.finish()?;
    ui.info(format!("wrote {n} packets ({kind}) to {}", output.display()));
    Ok(Exit::Ok)
}
