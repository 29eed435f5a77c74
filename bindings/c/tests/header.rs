//! include/aggrate.h is what cbindgen makes of src/lib.rs today (AGGRATE_BLESS=1 rewrites it).

#[test]
fn the_checked_in_header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let cfg = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_src(format!("{dir}/src/lib.rs"))
        .with_config(cfg)
        .generate()
        .expect("cbindgen")
        .write(&mut out);
    let path = format!("{dir}/include/aggrate.h");
    if std::env::var_os("AGGRATE_BLESS").is_some() {
        std::fs::write(&path, &out).unwrap();
    }
    let have = std::fs::read(&path).unwrap_or_default();
    assert!(
        have == out,
        "include/aggrate.h is stale: run AGGRATE_BLESS=1 cargo test -p aggrate-ffi --test header"
    );
    let text = String::from_utf8(out).unwrap();
    for f in [
        "aggrate_model_from_json",
        "aggrate_estimator_push",
        "aggrate_estimator_poll_report",
        "aggrate_controller_on_report",
        "aggrate_last_error",
    ] {
        assert!(text.contains(f), "{f} missing from the header");
    }
}
