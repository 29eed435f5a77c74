//! One packet's bytes decoded under each link type: 802.11, radiotap, PPI, AVS, Prism, Ethernet, SLL, raw IP
//! down to IP/UDP (the first byte picks the link type).
#![no_main]
use aggrate::capture::{decode, LinkType};
use libfuzzer_sys::fuzz_target;

const LINKS: [u32; 11] = [105, 127, 1, 101, 228, 229, 113, 276, 192, 163, 119];

fuzz_target!(|data: &[u8]| {
    let Some((&k, bytes)) = data.split_first() else { return };
    let Some(link) = LinkType::from_number(LINKS[k as usize % LINKS.len()]) else {
        return;
    };
    if let Ok(rec) = decode(
        1,
        0,
        link,
        aggrate::Ts(1),
        bytes.len() as u32,
        bytes.len() as u32 + (k as u32 >> 4),
        bytes,
    ) {
        let _ = rec.flow();
        let _ = rec.tsft();
        let _ = rec.payload_seq(k as usize);
    }
});
