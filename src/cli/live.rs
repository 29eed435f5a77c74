//! `aggrate ap`, `aggrate send`, `aggrate recv`: the live loop over UDP. `ap` runs the emulator
//! in real time between the sender and the receivers; `send` and `recv` run the reference
//! transport. [`live_loop`] runs all three on threads (used by `aggrate demo`).
//!
//! This is an IO edge: it reads the real clock for its live table.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
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

/// Settings shared by `send` and `recv`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SessionArgs {
    /// File with the pre-shared key, hex (`aggrate keygen FILE` writes one; both ends use the
    /// same). Without it, the key is read from the AGGRATE_KEY environment variable (hex).
    /// There is no default key, and a key is never taken as an argument (it would show in `ps`).
    #[arg(long, env = "AGGRATE_KEY_FILE")]
    pub(crate) key_file: Option<PathBuf>,
    /// Seconds to run.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) duration: f64,
    /// Report interval Δ (ms).
    #[arg(long, default_value_t = 500)]
    pub(crate) interval_ms: u64,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ApArgs {
    /// Address of station 0's port; station i listens on port + i.
    #[arg(long, default_value = "127.0.0.1:7000")]
    pub(crate) listen: SocketAddr,
    /// Receiver address per station.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) stations: Vec<SocketAddr>,
    /// VHT MCS per station (one value applies to all).
    #[arg(long, value_delimiter = ',', default_values_t = [9u8])]
    pub(crate) mcs: Vec<u8>,
    /// Seconds to run.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) duration: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Write what the AP sent each station per report interval (CSV: A-MPDUs, MPDUs, level, and
    /// how late it released its bursts), on the receivers' grid: `aggrate join --truth FILE
    /// --reports RECV.csv` scores a receiver's `recv --log` against it.
    #[arg(long)]
    pub(crate) truth: Option<PathBuf>,
    /// Report interval of --truth (ms): the receivers' (`recv --interval-ms`, default 500).
    #[arg(long, default_value_t = 500)]
    pub(crate) interval_ms: u64,
    /// Release each A-MPDU at the next multiple of this period (µs) after its end, as a station
    /// driver that hands frames to the host on a timer does (for testbeds of real receive paths;
    /// 0: at its end).
    #[arg(long, default_value_t = 0)]
    pub(crate) release_tick_us: u64,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SendArgs {
    /// Where station i's data goes (the AP's ports, or receivers directly).
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) to: Vec<SocketAddr>,
    /// UDP payload bytes per datagram (header included).
    #[arg(long, default_value_t = 1472)]
    pub(crate) size: usize,
    /// Target aggregation level N_ε.
    #[arg(long, default_value_t = 32.0)]
    pub(crate) target: f64,
    /// The most the sender ever sends per station (Mb/s), whatever the reports say.
    #[arg(long, default_value_t = 2000.0)]
    pub(crate) max_rate_mbps: f64,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
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
    #[arg(long, default_value_t = 0.0)]
    pub(crate) others_share: f64,
    /// Write every report sent (CSV: interval, packets, frames, frame count, the level steered
    /// by, receive rate, delay, losses), for `aggrate join` with the AP's --truth.
    #[arg(long)]
    pub(crate) log: Option<PathBuf>,
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

/// The pre-shared key from `--key-file` or `AGGRATE_KEY`, checked.
/// Longest key file read: a 1,024-byte key in hex (what `keygen` can write at most), a newline
/// and some whitespace.
const MAX_KEY_FILE: u64 = 2 * aggrate::transport::wire::MAX_KEY_LEN as u64 + 64;

pub(crate) fn load_key(a: &SessionArgs) -> Result<Psk> {
    if let Some(p) = &a.key_file {
        use std::io::Read;
        let f = std::fs::File::open(p).with_context(|| format!("reading the key file {}", p.display()))?;
        let meta = f
            .metadata()
            .with_context(|| format!("reading the key file {}", p.display()))?;
        if !meta.is_file() {
            bail!(
                "key file {}: not a regular file (a device, pipe or folder); `aggrate keygen FILE` writes one",
                p.display()
            );
        }
        let mut text = String::new();
        f.take(MAX_KEY_FILE + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading the key file {}: not hex text", p.display()))?;
        if text.len() as u64 > MAX_KEY_FILE {
            bail!(
                "key file {}: longer than {MAX_KEY_FILE} bytes, not a key (`aggrate keygen FILE` writes 64 hex digits)",
                p.display()
            );
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(m) = std::fs::metadata(p) {
                if m.permissions().mode() & 0o077 != 0 {
                    eprintln!(
                        "warning: key file {} is readable by others (mode {:o}); chmod 600 it",
                        p.display(),
                        m.permissions().mode() & 0o777
                    );
                }
            }
        }
        return Psk::from_hex(&text).with_context(|| format!("key file {}", p.display()));
    }
    match std::env::var("AGGRATE_KEY") {
        Ok(v) => Psk::from_hex(&v).context("AGGRATE_KEY"),
        Err(_) => bail!(
            "no key: give --key-file FILE (or AGGRATE_KEY_FILE) or set AGGRATE_KEY to hex; `aggrate keygen FILE` writes a random one, and both ends need the same"
        ),
    }
}

/// `aggrate keygen FILE`: 32 random bytes as hex, mode 0600, never over an existing file.
pub(crate) fn keygen(ui: &Ui, a: KeygenArgs) -> Result<Exit> {
    use std::io::Write;
    let key = io::entropy()?;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o
        .open(&a.file)
        .with_context(|| format!("creating {} (it must not exist yet)", a.file.display()))?;
    writeln!(f, "{}", Psk::to_hex(&key)).with_context(|| format!("writing {}", a.file.display()))?;
    ui.info(format!(
        "wrote a 256-bit key to {} (mode 600); copy it to the other end over a channel you trust",
        a.file.display()
    ));
    Ok(Exit::Ok)
}

#[derive(Debug, clap::Args)]
pub(crate) struct KeygenArgs {
    /// Where to write the key (must not exist).
    pub(crate) file: PathBuf,
}

fn wlan(mcs: &[u8], n: usize) -> Result<aggrate::wlan::ValidWlanConfig> {
    Ok(WlanConfig::vht_stations(&super::mcs_per_station(mcs, n)?).check()?)
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

/// A CSV log written line by line as a run goes (`ap --truth`, `recv --log`): the first write
/// error is kept and reported when the run ends, so a full disk neither stops the run nor goes
/// unnoticed.
struct CsvLog {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    err: Option<std::io::Error>,
}

impl CsvLog {
    fn create(path: &Path, header: &str) -> Result<CsvLog> {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        writeln!(out, "{header}").with_context(|| format!("writing {}", path.display()))?;
        Ok(CsvLog {
            path: path.to_path_buf(),
            out,
            err: None,
        })
    }

    fn line(&mut self, text: &str) {
        if let Err(e) = writeln!(self.out, "{text}") {
            self.err.get_or_insert(e);
        }
    }

    fn finish(mut self) -> Result<PathBuf> {
        if let Some(e) = self.err.take() {
            return Err(e).with_context(|| format!("writing {}", self.path.display()));
        }
        self.out
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(self.path)
    }
}

pub(crate) fn ap(ui: &Ui, a: ApArgs) -> Result<Exit> {
    let n = a.stations.len();
    let listen: Vec<SocketAddr> = (0..n)
        .map(|i| SocketAddr::new(a.listen.ip(), a.listen.port() + i as u16))
        .collect();
    let stop = AtomicBool::new(false);
    ui.info(format!("AP: stations {:?} behind {:?}", a.stations, listen));
    if !(10..=60_000).contains(&a.interval_ms) {
        bail!("--interval-ms {}: between 10 and 60000", a.interval_ms);
    }
    let mut truth_out = a
        .truth
        .as_deref()
        .map(|p| CsvLog::create(p, aggrate::livelog::TRUTH_HEADER))
        .transpose()?;
    let mut on_row = |r: &aggrate::wlan::live::TruthRow| {
        if let Some(log) = truth_out.as_mut() {
            log.line(&aggrate::livelog::truth_line(r));
        }
    };
    if a.release_tick_us > 100_000 {
        bail!("--release-tick-us {}: at most 100000", a.release_tick_us);
    }
    let opts = aggrate::wlan::live::ApOptions {
        truth: a.truth.is_some().then(|| aggrate::wlan::live::ApTruth {
            interval: Duration::from_millis(a.interval_ms),
            on_row: &mut on_row,
        }),
        release_tick: Duration::from_micros(a.release_tick_us),
    };
    let s = aggrate::wlan::live::run_ap(
        &listen,
        &a.stations,
        wlan(&a.mcs, n)?,
        a.seed,
        secs(a.duration)?,
        &stop,
        opts,
    )?;
    if let Some(log) = truth_out {
        let p = log.finish()?;
        ui.info(format!("wrote the AP's truth per interval to {}", p.display()));
    }
    outln!("{}", serde_json::to_string(&s)?);
    Ok(Exit::Ok)
}

pub(crate) fn send(ui: &Ui, a: SendArgs) -> Result<Exit> {
    let min = aggrate::transport::wire::DATA_HEADER_LEN;
    if !(min..=65_000).contains(&a.size) {
        bail!("--size = {}: {min}..=65000", a.size);
    }
    let sock = UdpSocket::bind("0.0.0.0:0").context("binding the sender")?;
    let interval = Duration::from_millis(a.session.interval_ms);
    let control = PiParams {
        target: a.target,
        max_mbps: a.max_rate_mbps,
        initial_mbps: PiParams::default().initial_mbps.min(a.max_rate_mbps),
        min_mbps: PiParams::default().min_mbps.min(a.max_rate_mbps),
        ..PiParams::default()
    }
    .check()
    .with_context(|| format!("--max-rate-mbps {}", a.max_rate_mbps))?;
    let mut tx = Sender::new(
        load_key(&a.session)?,
        io::entropy()?,
        a.to.len(),
        a.size - aggrate::transport::wire::DATA_HEADER_LEN,
        control,
        interval,
        io::realtime(),
    )?;
    let stop = AtomicBool::new(false);
    let mut last_print = aggrate::Ts::ZERO;
    let stats = io::run_sender(&sock, &a.to, &mut tx, secs(a.session.duration)?, &stop, |now, s| {
        if now.saturating_since(last_print) >= Duration::from_secs(1) {
            last_print = now;
            let rates: Vec<String> = (0..a.to.len()).map(|i| format!("{:.1}", s.rate(i).mbps)).collect();
            ui.info(format!("rates Mb/s: {}", rates.join(", ")));
        }
    })?;
    if let Some(v) = stats.other_version_seen {
        ui.warn(format!(
            "{} datagrams of protocol version {v} came back: the receiver runs another aggrate (this one speaks version {}); run the same version at both ends",
            stats.other_version,
            aggrate::transport::wire::VERSION
        ));
    }
    outln!("{}", serde_json::to_string(&stats)?);
    Ok(Exit::Ok)
}

pub(crate) fn recv(ui: &Ui, a: RecvArgs) -> Result<Exit> {
    let model = a.model.as_deref().map(ModelFile::load).transpose()?;
    let interval = Duration::from_millis(a.session.interval_ms);
    let mut rx = Receiver::new(
        load_key(&a.session)?,
        io::entropy()?,
        estimator(model.as_ref(), interval)?,
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
    let mut log = a
        .log
        .as_deref()
        .map(|p| CsvLog::create(p, aggrate::livelog::REPORT_HEADER))
        .transpose()?;
    let mut cal = match a.self_calibrate {
        true => Some(self_calibrator(model.as_ref(), a.max_distance, a.phy_mbps)?),
        false => None,
    };
    let sock = io::timestamped_socket(a.listen)?;
    let stop = AtomicBool::new(false);
    // What the windows since the last line came to: (windows, too far).
    let (mut logged, mut since) = (None, (0u64, 0u64));
    let stats = io::run_receiver_with(
        &sock,
        &mut rx,
        secs(a.session.duration)?,
        &stop,
        cal.as_mut(),
        |r| {
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
        },
        |s| {
            // One line per SELF_CAL_LOG_EVERY at most (a window ends every 0.4 s at 500 Mb/s):
            // the first window, then what the windows since came to.
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
        },
    )?;
    if let Some(l) = log {
        l.finish()?;
    }
    if let Some(v) = stats.other_version_seen {
        ui.warn(format!(
            "{} datagrams of protocol version {v}: the sender runs another aggrate (this one speaks version {}); run the same version at both ends",
            stats.other_version,
            aggrate::transport::wire::VERSION
        ));
    }
    if stats.clock_skewed > 0 {
        ui.warn(format!(
            "{} packets carried a send time more than an hour from their receive time: the sender's and this \
             host's clocks disagree, so the reports carried no one-way delay for them (sync the clocks, e.g. NTP)",
            stats.clock_skewed
        ));
    }
    if stats.replayed > 0 || stats.hellos_limited > 0 || stats.hellos_refused > 0 {
        ui.warn(format!(
            "refused {} replayed data datagrams, {} hellos over the rate, {} hellos while another address's handshake was pending",
            stats.replayed, stats.hellos_limited, stats.hellos_refused
        ));
    }
    let mut out = serde_json::to_value(stats)?;
    if let (Some(c), serde_json::Value::Object(o)) = (&cal, &mut out) {
        o.insert("self_calibration".into(), serde_json::to_value(c.summary())?);
    }
    outln!("{out}");
    Ok(Exit::Ok)
}

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

use aggrate::report::LiveRow;

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
    let reps = reports.lock().map(|v| v.clone()).unwrap_or_default();
    let rate_series = rates.lock().map(|v| v.clone()).unwrap_or_default();
    let tr = truth.lock().map(|v| v.clone()).unwrap_or_default();
    let rows: Vec<LiveRow> = reps
        .iter()
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
        .collect();
    aggrate::report::write_live(out, &rows, &rate_series)?;
    Ok(rows)
}
