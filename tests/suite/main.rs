//! Every integration test that runs on the CPU alone (virtual clocks, captures, the CLI as a
//! process, sans-IO transports), in one test binary: one link against the library instead of one
//! per file, and the long tests of different files overlap on the two cores.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod capture_formats;
mod closed_loop;
mod core_deps;
mod hostile;
mod labelling;
mod layering;
mod legacy_headers;
mod link_types;
mod notebook;
mod ns3_sample;
mod onnx_export;
mod properties;
mod receivers;
mod training;
mod tshark_crosscheck;
mod wlan_emulator;
