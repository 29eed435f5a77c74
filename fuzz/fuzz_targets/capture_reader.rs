//! The capture container reader (pcap, pcapng, every link type) on arbitrary bytes: every
//! record read or refused, never a panic, and bounded work per input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = aggrate::capture::open_capture(std::io::Cursor::new(data)) {
        let _ = r.link_type();
        let _ = r.section_comments();
        for rec in r.take(10_000) {
            if let Ok(rec) = rec {
                let _ = rec.flow();
                let _ = rec.payload_seq(0);
            }
        }
    }
});
