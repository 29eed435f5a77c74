//! The core crate stays lean: a transport that embeds the estimator must not compile the
//! training and capture stack. Reads `cargo tree` of `aggrate-core` (normal dependencies).

use std::process::Command;

#[test]
fn the_core_crate_depends_on_no_heavy_or_io_crate() {
    let root = env!("CARGO_MANIFEST_DIR");
    let o = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "aggrate-core",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(root)
        .output()
        .expect("running cargo tree");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let crates: std::collections::BTreeSet<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains("aggrate-core") && crates.contains("hmac"), "{crates:?}");
    for banned in [
        "polars",
        "clap",
        "plotters",
        "nix",
        "rand",
        "rand_core",
        "rand_chacha",
        "indicatif",
        "pcap-file",
        "prost",
        "aggrate",
    ] {
        assert!(!crates.contains(banned), "aggrate-core depends on {banned}: {crates:?}");
    }
    // What it may use: serde (+ serde_json), thiserror, the HMAC/HKDF/SHA-2 crates and theirs.
    assert!(crates.len() < 40, "{} crates: {crates:?}", crates.len());
}
