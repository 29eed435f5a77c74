//! `ap` + `recv` + `send` on threads over loopback, with a live table (`aggrate demo`).
#![allow(clippy::disallowed_methods)]

use super::*;
use aggrate::report::LiveRow;

/// The AP's true level of the interval starting at `start` (NaN when it has none yet).
fn true_level(truth: &[aggrate::wlan::live::TruthRow], start: aggrate::Ts) -> f64 {
    truth
        .iter()
        .find(|t| t.start_ns == start.as_nanos() && t.ampdus > 0)
        .map_or(f64::NAN, |t| t.mpdus as f64 / t.ampdus as f64)
}

fn free_port() -> Result<SocketAddr> {
    let s = UdpSocket::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(s.local_addr()?)
}

/// `ap` + `recv` + `send` on threads over loopback for `duration`, one station at `mcs`;
/// prints a live table each report and writes `live.csv` and PNGs into `out`.
pub(crate) fn live_loop(
    ui: &Ui,
    model: Option<&ModelFile>,
    mcs: u8,
    duration: Duration,
    out: &Path,
) -> Result<Vec<LiveRow>> {
    let interval = Duration::from_millis(500);
    let (ap_port, rx_addr) = (free_port()?, free_port()?);
    let rx_sock = io::timestamped_socket(rx_addr)?;
    // A fresh key for this run only: both ends live in this process.
    let key = Psk::new(&io::entropy()?)?;
    let mut rx = Receiver::new(key.clone(), io::entropy()?, estimator(model, interval)?);
    let cfg = wlan(&[mcs], 1)?;
    // The station's PHY rate, as a receiver reads its link speed: the level from airtime.
    rx.phy_rate_bps = cfg.modes()[0].rate_bps();
    let stop = Arc::new(AtomicBool::new(false));
    let reports: Arc<Mutex<Vec<AggReport>>> = Arc::new(Mutex::new(Vec::new()));
    let truth: Arc<Mutex<Vec<aggrate::wlan::live::TruthRow>>> = Arc::new(Mutex::new(Vec::new()));
    let rates: Arc<Mutex<Vec<(f64, f64)>>> = Arc::new(Mutex::new(Vec::new()));
    let t0 = io::realtime();
    std::thread::scope(|sc| -> Result<()> {
        let (stop_ap, stop_rx, stop_tx) = (stop.clone(), stop.clone(), stop.clone());
        let tr = truth.clone();
        let ap_key = key.clone();
        let ap = sc.spawn(move || {
            let mut keep = |r: &aggrate::wlan::live::TruthRow| {
                if let Ok(mut v) = tr.lock() {
                    v.push(*r);
                }
            };
            aggrate::wlan::live::run_ap(
                &[ap_port],
                &[rx_addr],
                cfg,
                1,
                duration + Duration::from_millis(300),
                &stop_ap,
                aggrate::wlan::live::ApOptions {
                    truth: Some(aggrate::wlan::live::ApTruth {
                        interval,
                        on_row: &mut keep,
                    }),
                    release_tick: Duration::ZERO,
                    on_release: None,
                    survey: None,
                    // The AP holds the key too: it verifies what it lets into the air.
                    key: Some(ap_key),
                },
            )
        });
        let reps = reports.clone();
        let rxh = sc.spawn(move || {
            io::run_receiver(
                &rx_sock,
                &mut rx,
                duration + Duration::from_millis(200),
                &stop_rx,
                |r| {
                    if let Ok(mut v) = reps.lock() {
                        v.push(*r);
                    }
                },
            )
        });
        let rt = rates.clone();
        let txh = sc.spawn(move || -> Result<aggrate::transport::SenderStats> {
            std::thread::sleep(Duration::from_millis(50));
            let sock = UdpSocket::bind("127.0.0.1:0").context("binding the sender")?;
            let mut tx = Sender::new(
                key,
                io::entropy()?,
                1,
                1472 - aggrate::transport::wire::DATA_HEADER_LEN,
                PiParams::default(),
                interval,
                io::realtime(),
            )?;
            Ok(io::run_sender(
                &sock,
                &[ap_port],
                &mut tx,
                duration,
                &stop_tx,
                |now, s| {
                    if let Ok(mut v) = rt.lock() {
                        v.push((now.saturating_since(t0).as_secs_f64(), s.rate(0).mbps));
                    }
                },
            )?)
        });
        // The live table, from the main thread.
        show_table(ui, duration, t0, &reports, &rates, &truth);
        let ap_stats = ap.join().map_err(|_| anyhow::anyhow!("AP thread panicked"))??;
        rxh.join().map_err(|_| anyhow::anyhow!("receiver thread panicked"))??;
        let tx_stats = txh.join().map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
        ui.info(format!(
            "AP: {} in, {} out, {} A-MPDUs, {} dropped; sender: {} sent, {} feedback ({} refused)",
            ap_stats.data_in,
            ap_stats.data_out,
            ap_stats.ampdus,
            ap_stats.dropped,
            tx_stats.sent,
            tx_stats.feedback,
            tx_stats.feedback_dropped
        ));
        Ok(())
    })?;
    let rate_series = rates.lock().map(|v| v.clone()).unwrap_or_default();
    let rows = live_rows(t0, &reports, &rate_series, &truth);
    aggrate::report::write_live(out, &rows, &rate_series)?;
    Ok(rows)
}

/// The live table on stderr while the loop runs: one line per report as it arrives.
fn show_table(
    ui: &Ui,
    duration: Duration,
    t0: aggrate::Ts,
    reports: &Mutex<Vec<AggReport>>,
    rates: &Mutex<Vec<(f64, f64)>>,
    truth: &Mutex<Vec<aggrate::wlan::live::TruthRow>>,
) {
    ui.info("     t s   send Mb/s   μ_N   true μ_N   rx Mb/s   one-way ms   lost");
    let mut shown = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < duration + Duration::from_millis(400) {
        std::thread::sleep(Duration::from_millis(100));
        let reps = reports.lock().map(|v| v.clone()).unwrap_or_default();
        let rate = rates.lock().ok().and_then(|v| v.last().map(|x| x.1)).unwrap_or(0.0);
        let tr = truth.lock().map(|v| v.clone()).unwrap_or_default();
        for r in reps.iter().skip(shown) {
            ui.info(format!(
                "  {:6.1}   {:9.1}   {:5.1}   {:8.1}   {:8.1}   {:10.2}   {:4}",
                r.end.saturating_since(t0).as_secs_f64(),
                rate,
                r.level(),
                true_level(&tr, r.start),
                r.rx_rate_bps / 1e6,
                r.owd_mean_ms.unwrap_or(f64::NAN),
                r.lost
            ));
        }
        shown = reps.len();
    }
}

/// One row per report: its time, the send rate then, the levels, rate, delay and losses.
fn live_rows(
    t0: aggrate::Ts,
    reports: &Mutex<Vec<AggReport>>,
    rate_series: &[(f64, f64)],
    truth: &Mutex<Vec<aggrate::wlan::live::TruthRow>>,
) -> Vec<LiveRow> {
    let reps = reports.lock().map(|v| v.clone()).unwrap_or_default();
    let tr = truth.lock().map(|v| v.clone()).unwrap_or_default();
    reps.iter()
        .map(|r| {
            let t = r.end.saturating_since(t0).as_secs_f64();
            let rate = rate_series.iter().rev().find(|(tt, _)| *tt <= t).map_or(0.0, |x| x.1);
            LiveRow {
                t_s: t,
                rate_mbps: rate,
                mean_agg: r.level(),
                count_agg: r.mean_agg,
                true_agg: true_level(&tr, r.start),
                rx_mbps: r.rx_rate_bps / 1e6,
                owd_ms: r.owd_mean_ms.unwrap_or(f64::NAN),
                lost: r.lost,
            }
        })
        .collect()
}
