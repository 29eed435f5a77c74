//! `aggrate ap`: the emulated WLAN in real time between a sender and its receivers, on UDP
//! ([`aggrate::wlan::live::run_ap`]); with the key it verifies whose data takes the air.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use aggrate::transport::wire::Psk;
use aggrate::wlan::WlanConfig;

use super::super::progress::Ui;
use super::super::Exit;
use super::keys::load_ap_key;
use super::{secs, CsvLog};

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
    /// The pre-shared key `send` and `recv` hold (hex file, as theirs; or AGGRATE_KEY): the AP
    /// then lets only verified handshakes bind a station and only the bound session's data into
    /// the air. Without one it warns: anyone on the LAN can rebind a station or take its air.
    #[arg(long, env = "AGGRATE_KEY_FILE")]
    pub(crate) key_file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) others: super::super::common::OthersArgs,
}

pub(crate) fn ap(ui: &Ui, a: ApArgs) -> Result<Exit> {
    let n = a.stations.len();
    let listen = aggrate::wlan::live::station_ports(a.listen, n).with_context(|| {
        format!(
            "--listen {}: station i listens on port {} + i, and {n} stations need ports up to {} (at most 65535, not 0)",
            a.listen,
            a.listen.port(),
            a.listen.port() as usize + n - 1
        )
    })?;
    let stop = AtomicBool::new(false);
    let mut w = WlanConfig::vht_stations(&super::super::mcs_per_station(&a.mcs, n)?);
    a.others.apply(&mut w);
    a.others.note_bss(ui);
    let wlan = w.check()?;
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
        on_release: None,
        survey: None,
        key: ap_key(ui, a.key_file.as_deref())?,
    };
    let s = aggrate::wlan::live::run_ap(&listen, &a.stations, wlan, a.seed, secs(a.duration)?, &stop, opts)?;
    if let Some(log) = truth_out {
        let p = log.finish()?;
        ui.info(format!("wrote the AP's truth per interval to {}", p.display()));
    }
    outln!("{}", serde_json::to_string(&s)?);
    Ok(Exit::Ok)
}

/// The AP's key, or a warning of what running without one leaves open.
fn ap_key(ui: &Ui, key_file: Option<&std::path::Path>) -> Result<Option<Psk>> {
    let key = load_ap_key(key_file)?;
    if key.is_none() {
        ui.warn(
            "AP without a key (--key-file or AGGRATE_KEY): it cannot verify handshakes or data, so anyone on the LAN \
             who can spoof the station's address can rebind it, and anyone who can spoof the sender's can take its air; \
             give it the key send and recv hold",
        );
    }
    Ok(key)
}
