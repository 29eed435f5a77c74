//! `aggrate ap`, `aggrate send`, `aggrate recv`: the live loop over UDP. `ap` runs the emulator
//! in real time between the sender and the receivers; `send` and `recv` run the reference
//! transport. [`live_loop`] runs all three on threads (used by `aggrate demo`).
//!
//! This is an IO edge: it reads the real clock for its live table.
#![allow(clippy::disallowed_methods)]

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use aggrate::control::PiParams;
use aggrate::model::ModelFile;
use aggrate::runtime::{AggReport, OnlineEstimator};
use aggrate::transport::wire::Psk;
use aggrate::transport::{io, Receiver, Sender};
use aggrate::wlan::WlanConfig;

use super::progress::Ui;
use super::Exit;

pub(crate) use ap::{ap, ApArgs};
pub(crate) use impair::{impair, ImpairArgs};

mod ap;
mod csvlog;
mod impair;
mod keys;
mod loopback;
mod send;
mod transfer;
mod watch;
use csvlog::CsvLog;
pub(crate) use keys::{keygen, load_key, KeygenArgs};
pub(crate) use loopback::live_loop;
pub(crate) use send::{send, SendArgs};
pub(crate) use watch::{watch, WatchArgs};

/// Settings shared by `send` and `recv`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SessionArgs {
    /// File with the pre-shared key, hex (`aggrate keygen FILE` writes one; both ends use the
    /// same). Without it, the key is read from the AGGRATE_KEY environment variable (hex).
    /// There is no default key, and a key is never taken as an argument (it would show in `ps`).
    #[arg(long, env = "AGGRATE_KEY_FILE")]
    pub(crate) key_file: Option<PathBuf>,
    /// Seconds to run (default 20; with `send --file` / `recv --out`, until the transfer ends,
    /// at most a day).
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Report interval Δ (ms).
    #[arg(long, default_value_t = 500)]
    pub(crate) interval_ms: u64,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RecvArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub(crate) listen: SocketAddr,
    /// Model file (default: the shipped model embedded in the binary, models/mlp8_m5_ctx1024.json).
    #[arg(long)]
    pub(crate) model: Option<std::path::PathBuf>,
    /// PHY rate to report as μ_R (Mb/s), e.g. what the OS says.
    #[arg(long)]
    pub(crate) phy_mbps: Option<f64>,
    /// Set the model's operating point from this receiver's own receive times while it runs:
    /// every 16,384 packets, the shipped model's training receivers that time packets most like
    /// these lend their best threshold (as `calibrate --no-labels --measured`, without a
    /// capture). Needs the shipped model (or a calibrated copy). Give --phy-mbps too: at the
    /// training WLAN's PHY rate it takes no distance limit. Measured in the closed loop on
    /// receivers never trained on: it removes the standing queue where the model calls starts
    /// inside frames (when the loop steers by the frame count), and leaves a receiver unlike
    /// every training receiver (e.g. another WLAN) as it is (models/README.md).
    #[arg(long)]
    pub(crate) self_calibrate: bool,
    /// With --self-calibrate: a window whose nearest training receiver lies farther than this
    /// (standardised distance) keeps the model's own threshold at its load. Default: none when
    /// --phy-mbps is the model's training WLAN's (866.7: VHT MCS 9, 2 SS, 80 MHz), else 1.
    #[arg(long, requires = "self_calibrate")]
    pub(crate) max_distance: Option<f64>,
    /// Share of the channel other transmissions take (0 ≤ x < 1), e.g. from `iw dev IFACE survey
    /// dump` (busy time less this station's receive time, over the survey's time): the airtime
    /// level counts it. Unknown (0): the level is the least the station can be at.
    #[arg(long, default_value_t = 0.0, conflicts_with = "survey_file")]
    pub(crate) others_share: f64,
    /// A channel survey kept current by the radio's side (one line, `active_ns busy_ns
    /// own_ns`, cumulative; the testbed's AP writes one): read every 50 ms, the share of the
    /// channel others took since the last reading sets --others-share as it moves. A survey
    /// that stops moving for 1 s is no longer counted (a warning names it, another when it
    /// moves again); one that goes backwards starts over (a warning).
    #[arg(long, value_name = "FILE")]
    pub(crate) survey_file: Option<PathBuf>,
    /// Write every report sent (CSV: interval, packets, frames, frame count, the level steered
    /// by, receive rate, delay, losses), for `aggrate join` with the AP's --truth.
    #[arg(long)]
    pub(crate) log: Option<PathBuf>,
    /// Frames from the A-MPDU marks the testbed's AP puts in each packet's DSCP bits (`testbed
    /// run --senders aggrate-mac`), not from a model: what MAC timestamps would give, the
    /// estimator's upper bound. Only behind that AP.
    #[arg(long, conflicts_with_all = ["model", "self_calibrate"])]
    pub(crate) ap_marks: bool,
    /// What the reports give the sender as the level to steer by: `level` (the model's level:
    /// learned when the model carries one, else the airtime level), `airtime` (the airtime
    /// level alone; needs --phy-mbps) or `frame-count` (packets ÷ predicted starts alone; with
    /// a slot-SVR model, its correction of them) —
    /// to compare the estimators in the same loop (`testbed run --senders aggrate-airtime,
    /// aggrate-count`).
    #[arg(long, value_enum, default_value_t = super::common::SteerArg::Level, conflicts_with = "ap_marks")]
    pub(crate) steer: super::common::SteerArg,
    /// Receive a file (`send --file`) to this path (an existing directory: the sender's file
    /// name inside it; `-`: standard output) and exit once it is whole. It is written under
    /// PATH.aggrate-part and becomes PATH only when its size and SHA-256 match the sender's;
    /// an interrupted transfer leaves the part, to resume with `send --offset`. Without
    /// --duration it runs until the transfer ends (at most a day).
    #[arg(long, value_name = "PATH")]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) file_out: transfer::OutArgs,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
}

/// How often `recv --self-calibrate` says what its windows did, at most.
const SELF_CAL_LOG_EVERY: Duration = Duration::from_secs(5);

/// The online self-calibrator `recv --self-calibrate` runs for `model` (the shipped one when
/// `None`) on a receiver of PHY rate `phy_mbps` (if known).
pub(crate) fn self_calibrator(
    model: Option<&ModelFile>,
    max_distance: Option<f64>,
    phy_mbps: Option<f64>,
) -> Result<aggrate::train::online::OnlineCalibrator> {
    use aggrate::train::online::{for_receiver, DistanceLimit};
    let limit = DistanceLimit::given(max_distance).context("--max-distance")?;
    let shipped;
    let file = match model {
        Some(f) => f,
        None => {
            shipped = ModelFile::shipped()?;
            &shipped
        }
    };
    for_receiver(file, limit, phy_mbps.map(|m| (m * 1e6) as u64)).context("--self-calibrate")
}

fn wlan(mcs: &[u8], n: usize) -> Result<aggrate::wlan::ValidWlanConfig> {
    Ok(WlanConfig::vht_stations(&super::mcs_per_station(mcs, n)?).check()?)
}

impl SessionArgs {
    /// How long to run: --duration, else 20 s, or a day for a transfer (which ends the run
    /// itself).
    pub(crate) fn seconds(&self, transfer: bool) -> Result<Duration> {
        secs(self.duration.unwrap_or(if transfer { 86_400.0 } else { 20.0 }))
    }
}

fn secs(d: f64) -> Result<Duration> {
    if !(d > 0.0 && d <= 86_400.0) {
        bail!("--duration = {d}: (0, 86400] s");
    }
    Ok(Duration::from_secs_f64(d))
}

fn estimator(model: Option<&ModelFile>, interval: Duration) -> Result<OnlineEstimator> {
    Ok(match model {
        Some(f) => OnlineEstimator::from_model(f, interval)?,
        // No model given: the shipped one, embedded in the binary (trained across receivers).
        None => OnlineEstimator::from_model(&ModelFile::shipped()?, interval)?,
    })
}

/// `recv --self-calibrate`'s lines: one per [`SELF_CAL_LOG_EVERY`] at most (a window ends every
/// 0.4 s at 500 Mb/s) — the first window, then what the windows since came to.
fn self_cal_lines(ui: &Ui) -> impl FnMut(&aggrate::selfcal::Step) + '_ {
    // What the windows since the last line came to: (windows, too far).
    let (mut logged, mut since) = (None, (0u64, 0u64));
    move |s| {
        since.0 += 1;
        since.1 += u64::from(s.too_far);
        if logged.is_none_or(|t: std::time::Instant| t.elapsed() >= SELF_CAL_LOG_EVERY) {
            ui.info(format!(
                "self-calibration: {} window(s) ({} too far) up to window {}: {:.0} Mb/s, nearest training receiver {} at {:.2}{}, threshold {:+.3} at load {:.3} ({} knots)",
                since.0,
                since.1,
                s.window,
                s.rate_mbps,
                s.nearest,
                s.distance,
                if s.too_far { " (too far: the model's own)" } else { "" },
                s.threshold,
                s.load,
                s.knots
            ));
            logged = Some(std::time::Instant::now());
            since = (0, 0);
        }
    }
}

/// The report interval `send` and `recv` share: what the estimator accepts.
pub(crate) fn check_interval(ms: u64) -> Result<()> {
    if !(10..=60_000).contains(&ms) {
        bail!("--interval-ms {ms}: between 10 and 60000");
    }
    Ok(())
}

pub(crate) fn recv(ui: &Ui, a: RecvArgs) -> Result<Exit> {
    check_interval(a.session.interval_ms)?;
    let model = a.model.as_deref().map(ModelFile::load).transpose()?;
    let interval = Duration::from_millis(a.session.interval_ms);
    let mut rx = Receiver::new(
        load_key(&a.session)?,
        io::entropy()?,
        if a.ap_marks {
            OnlineEstimator::new(
                aggrate::runtime::Mode::Mac,
                aggrate::features::FeatureSpec::default(),
                interval,
            )?
        } else {
            estimator(model.as_ref(), interval)?
        },
    );
    rx.phy_rate_bps = a.phy_mbps.map(|m| (m * 1e6) as u64);
    match a.phy_mbps {
        Some(m) if !(m.is_finite() && m > 0.0 && m * 1e6 <= aggrate::transport::wire::MAX_RATE_BPS) => {
            bail!("--phy-mbps {m}: a PHY rate in Mb/s, above 0 and at most 9607.8")
        }
        Some(_) => {}
        None => ui.warn(
            "no --phy-mbps: the level is the frame count (packets ÷ predicted starts), which receive paths that hide \
             frame starts read high; give the link's PHY rate for the level from airtime",
        ),
    }
    if !(a.others_share.is_finite() && (0.0..1.0).contains(&a.others_share)) {
        bail!("--others-share {}: a share in [0, 1)", a.others_share);
    }
    rx.estimator_mut().set_others_share(a.others_share);
    if a.steer == super::common::SteerArg::Airtime && a.phy_mbps.is_none() {
        bail!("--steer airtime needs --phy-mbps (the airtime level is computed from the PHY rate)");
    }
    aggrate::sim::Steer::from(a.steer).apply(rx.estimator_mut())?;
    let mut log = a
        .log
        .as_deref()
        .map(|p| CsvLog::create(p, aggrate::livelog::REPORT_HEADER))
        .transpose()?;
    let mut cal = match a.self_calibrate {
        true => Some(self_calibrator(model.as_ref(), a.max_distance, a.phy_mbps)?),
        false => None,
    };
    let sock = io::timestamped_socket_with(a.listen, a.ap_marks)?;
    let stop = AtomicBool::new(false);
    let mut incoming = a
        .out
        .as_deref()
        .map(|out| transfer::Incoming::new(ui, out, &a.file_out, &mut rx))
        .transpose()?;
    let mut survey = a
        .survey_file
        .as_deref()
        .map(|p| io::SurveyFeed::open(p, |m| eprintln!("warning: {m}")))
        .transpose()?;
    let mut hooks = io::ReceiverHooks::new();
    hooks.cal = cal.as_mut();
    hooks.survey = survey.as_mut();
    hooks.on_report = Box::new(|r| {
        if let Some(l) = log.as_mut() {
            l.line(&aggrate::livelog::report_line(r));
        }
        ui.info(format!(
            "μ_N {:5.1} (frame count {:5.1})  rx {:7.1} Mb/s  owd {:6.2} ms  lost {}",
            r.level(),
            r.mean_agg,
            r.rx_rate_bps / 1e6,
            r.owd_mean_ms.unwrap_or(f64::NAN),
            r.lost
        ))
    });
    hooks.on_step = Box::new(self_cal_lines(ui));
    let duration = a.session.seconds(incoming.is_some())?;
    if let Some(inc) = incoming.as_mut() {
        hooks.each = Box::new(|rx| inc.poll(rx));
    }
    let stats = io::run_receiver_with(&sock, &mut rx, duration, &stop, hooks)?;
    if let Some(l) = log {
        l.finish()?;
    }
    let survey_notes = survey.map(|s| s.notes()).unwrap_or_default();
    io::receiver_warnings(&stats)
        .into_iter()
        .chain(survey_notes)
        .for_each(|w| ui.warn(w));
    let mut out = serde_json::to_value(stats)?;
    if let (Some(c), serde_json::Value::Object(o)) = (&cal, &mut out) {
        o.insert("self_calibration".into(), serde_json::to_value(c.summary())?);
    }
    if let (Some(b), serde_json::Value::Object(o)) = (rx.bulk(), &mut out) {
        o.insert("transfer".into(), serde_json::to_value(b.stats())?);
    }
    let Some(inc) = incoming else {
        outln!("{out}");
        return Ok(Exit::Ok);
    };
    // The file may be on standard output: the summary goes to standard error then.
    if inc.to_stdout() {
        ui.info(out.to_string());
    } else {
        outln!("{out}");
    }
    let path = inc.finish(&rx)?;
    ui.info(format!("{} arrived whole", path.display()));
    Ok(Exit::Ok)
}
