//! The radiotap parser on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = aggrate::capture::radiotap::parse(data) {
        let _ = r.phy_rate_bps();
        let _ = r.has_fcs();
    }
});
