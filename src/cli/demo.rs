//! `aggrate demo`: the main job on embedded defaults. Today: unpack the embedded ns-3 802.11ac
//! sample, inspect it and write its feature table. (Training, export and the live closed loop
//! join as their issues land.)

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::features::FeaturesArgs;
use super::inspect::InspectArgs;
use super::progress::Ui;
use super::{Exit, FlowArgs};

/// The ns-3.37 802.11ac sample (VHT MCS 9, 2 SS, 80 MHz, SGI, 300 Mb/s UDP), xz-compressed.
const SAMPLE: &[u8] = include_bytes!("../../tests/data/ns3_vht_mcs9_2ss_300mbps.pcap.xz");

#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Where to write the demo's files.
    #[arg(long, default_value = "aggrate-demo")]
    pub(crate) out: PathBuf,
}

pub(crate) fn run(ui: &Ui, a: DemoArgs) -> Result<Exit> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let capture = a.out.join("ns3_vht_mcs9_2ss_300mbps.pcap.xz");
    std::fs::write(&capture, SAMPLE).with_context(|| format!("writing {}", capture.display()))?;
    let flow = FlowArgs {
        mac: None,
        ip: None,
        port: None,
        proto: None,
        n_max: 64,
        keep_going: false,
    };
    ui.info(format!("== inspect {}", capture.display()));
    super::inspect::run(
        ui,
        InspectArgs {
            capture: capture.clone(),
            json: false,
            flow: flow.clone(),
        },
    )?;
    let output = a.out.join("features.parquet");
    ui.info(format!("== features → {}", output.display()));
    super::features::run(
        ui,
        FeaturesArgs {
            captures: vec![capture],
            output,
            format: None,
            m: 20,
            no_sigma: false,
            rate_mbps: None,
            kernel: None,
            seq_offset: 0,
            flow,
        },
    )?;
    Ok(Exit::Ok)
}
