//! `aggrate watch -i IFACE`: the online estimator on an interface's live traffic (root or
//! CAP_NET_RAW), one line per report interval; the library's `watch::Watcher` fed by
//! `transport::io::run_watcher`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use aggrate::transport::io;
use aggrate::watch::Watcher;

use super::super::progress::Ui;
use super::super::Exit;
use super::CsvLog;

#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// Interface to listen on (its received packets; `ip link` lists them). In a network
    /// namespace: `ip netns exec NS aggrate watch -i DEV`.
    #[arg(short = 'i', long)]
    pub(crate) interface: String,
    /// Model file (default: the shipped model embedded in the binary).
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// The link's PHY rate (Mb/s), e.g. from `iw dev IFACE link`: the level from airtime. Without
    /// it the level is the frame count.
    #[arg(long)]
    pub(crate) phy_mbps: Option<f64>,
    /// Report interval (ms); `recv`'s default, so the lines meet `ap --truth`'s grid.
    #[arg(long, default_value_t = 500)]
    pub(crate) interval_ms: u64,
    /// Seconds to watch (default: until Ctrl-C).
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Packets longer than this (merged by GRO) count as this many bytes each (bytes).
    #[arg(long, default_value_t = 1500)]
    pub(crate) mtu: u32,
    /// Write every report (the CSV of `recv --log`), for `aggrate join` with the AP's --truth.
    #[arg(long)]
    pub(crate) log: Option<PathBuf>,
}

pub(crate) fn watch(ui: &Ui, a: WatchArgs) -> Result<Exit> {
    let (model, _) = super::super::common::model_or_shipped(a.model.as_deref())?;
    let phy = match a.phy_mbps {
        Some(m) if !(m.is_finite() && m > 0.0 && m * 1e6 <= aggrate::transport::wire::MAX_RATE_BPS) => {
            bail!("--phy-mbps {m}: a PHY rate in Mb/s, above 0 and at most 9607.8")
        }
        Some(m) => Some((m * 1e6) as u64),
        None => {
            ui.warn("no --phy-mbps: the level is the frame count; give the link's PHY rate for the level from airtime");
            None
        }
    };
    if !(10..=60_000).contains(&a.interval_ms) {
        bail!("--interval-ms {}: 10..=60000", a.interval_ms);
    }
    let duration = match a.duration {
        Some(d) if !(d > 0.0 && d <= 86_400.0) => bail!("--duration {d}: (0, 86400] s"),
        Some(d) => Duration::from_secs_f64(d),
        None => Duration::from_secs(u32::MAX as u64),
    };
    let mut w = Watcher::new(&model, Duration::from_millis(a.interval_ms), phy, a.mtu).context("the estimator")?;
    let mut sock = io::watch_socket(&a.interface).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut log = a
        .log
        .as_deref()
        .map(|p| CsvLog::create(p, aggrate::livelog::REPORT_HEADER))
        .transpose()?;
    // Ctrl-C ends the watch; the log keeps every report up to it.
    let stop = super::super::common::stop_on_signals()?;
    ui.info(format!(
        "watching {} (report every {} ms{})",
        a.interface,
        a.interval_ms,
        if a.duration.is_some() { "" } else { ", until Ctrl-C" }
    ));
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    // A closed stdout (`| head`) ends the watch; the error is returned once the log is safe.
    let mut out_err = writeln!(
        out,
        "interval_end_s      packets   rx_Mbps    mu_N  frame_count  owd_ms  lost"
    )
    .err();
    let mut reports = 0u64;
    let stats = io::run_watcher(&mut sock, &mut w, duration, &stop, |r| {
        reports += 1;
        if let Some(l) = log.as_mut() {
            l.line(&aggrate::livelog::report_line(r));
        }
        if out_err.is_none() {
            out_err = writeln!(
                out,
                "{:>14.1}  {:>11}  {:>8.1}  {:>6.1}  {:>11.1}  {:>6}  {:>4}",
                r.end.as_nanos() as f64 / 1e9,
                r.packets,
                r.rx_rate_bps / 1e6,
                r.level(),
                r.mean_agg,
                r.owd_mean_ms.map_or("–".into(), |d| format!("{d:.2}")),
                r.lost
            )
            .err();
            if out_err.is_some() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    drop(out);
    let logged = log.map(|l| l.finish()).transpose()?;
    let s = match stats {
        Ok(s) => s,
        Err(e) => {
            // A log of no report does not look like a run.
            if let (0, Some(p)) = (reports, &logged) {
                let _ = std::fs::remove_file(p);
            }
            return Err(anyhow::anyhow!("{e}"));
        }
    };
    ui.info(format!(
        "{} packets ({} merged by GRO and split, {} of aggrate's), skipped: {} sent, {} not IP, {} unstamped; {} dropped by the socket{}",
        s.packets,
        s.merged,
        s.aggrate_data,
        s.outgoing,
        s.not_ip,
        s.unstamped,
        s.socket_drops,
        logged.map_or(String::new(), |p| format!("; reports in {}", p.display()))
    ));
    if let Some(e) = out_err {
        return Err(anyhow::Error::new(e).context("writing to stdout"));
    }
    Ok(Exit::Ok)
}
