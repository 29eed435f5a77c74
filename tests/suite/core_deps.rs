//! The core crate stays lean: a transport that embeds the estimator must not compile the
//! training and capture stack. And the bindings build without polars (most of a first build):
//! the Python package's dependencies and the C ABI's test dependencies hold none of it. Reads
//! `cargo tree`.

use std::collections::BTreeSet;
use std::process::Command;

/// The crates `package` builds with (`edges`: normal, dev, …), by name.
fn tree(package: &str, edges: &str) -> BTreeSet<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let o = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            package,
            "-e",
            edges,
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(root)
        .output()
        .expect("running cargo tree");
    assert!(
        o.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_bindings_build_without_polars() {
    for (package, edges) in [("aggrate-py", "normal"), ("aggrate-ffi", "normal,dev")] {
        let crates = tree(package, edges);
        assert!(crates.contains("aggrate"), "{package}: {crates:?}");
        assert!(
            !crates.iter().any(|c| c.starts_with("polars")),
            "{package} builds polars: {crates:?}"
        );
    }
    // The CLI reads feature tables with it (the `tables` feature, on by default).
    assert!(tree("aggrate", "normal").contains("polars"));
}

#[test]
fn the_core_crate_depends_on_no_heavy_or_io_crate() {
    let owned = tree("aggrate-core", "normal");
    let crates: BTreeSet<&str> = owned.iter().map(String::as_str).collect();
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
