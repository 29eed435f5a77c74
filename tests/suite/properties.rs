//! Property tests: parsers never panic on arbitrary bytes; labelling and feature invariants.

use crate::common;

use std::io::BufReader;

use aggrate::capture::dot11::Dot11;
use aggrate::capture::{decode, net, open_capture, radiotap, LinkType, PacketRecord};
use aggrate::features::{FeatureSpec, GapWindow};
use aggrate::label::label_frames;
use aggrate::time::Ts;
use proptest::prelude::*;

const LINKS: [LinkType; 6] = [
    LinkType::Radiotap,
    LinkType::Ieee80211,
    LinkType::Ethernet,
    LinkType::RawIp,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
];

fn read_all(bytes: &[u8]) -> usize {
    match open_capture(BufReader::new(bytes)) {
        Ok(r) => r.take(100_000).count(),
        Err(_) => 0,
    }
}

proptest! {
    // Seeded, as everything random here: the same cases every run (new ones: change the seed).
    #![proptest_config(ProptestConfig {
        cases: 2000,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_2000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn radiotap_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = radiotap::parse(&bytes);
    }

    #[test]
    fn radiotap_with_plausible_header_never_panics(
        words in proptest::collection::vec(any::<u32>(), 1..6),
        body in proptest::collection::vec(any::<u8>(), 0..96),
        extra in 0usize..16,
    ) {
        let mut v = vec![0u8, 0, 0, 0];
        for (i, w) in words.iter().enumerate() {
            let w = if i + 1 < words.len() { w | 1 << 31 } else { w & !(1 << 31) };
            v.extend_from_slice(&w.to_le_bytes());
        }
        v.extend_from_slice(&body);
        let len = v.len() as u16;
        v[2..4].copy_from_slice(&len.to_le_bytes());
        v.extend(std::iter::repeat_n(0u8, extra));
        if let Ok(r) = radiotap::parse(&v) {
            prop_assert!(r.len as usize <= v.len());
            let _ = r.phy_rate_bps();
        }
    }

    #[test]
    fn dot11_and_net_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80), et in any::<u16>()) {
        let _ = Dot11::parse(&bytes);
        let _ = net::llc_snap(&bytes);
        let _ = net::ethernet(&bytes);
        let _ = net::sll(&bytes);
        let _ = net::sll2(&bytes);
        let _ = net::ip(0x0800, &bytes);
        let _ = net::ip(0x86dd, &bytes);
        let _ = net::ip(et, &bytes);
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), link in 0usize..6) {
        let l = LINKS[link];
        let _ = decode(1, 0, l, Ts(0), bytes.len() as u32, bytes.len() as u32 + 4, &bytes);
    }

    #[test]
    fn capture_reader_never_panics_on_arbitrary_streams(bytes in proptest::collection::vec(any::<u8>(), 0..400), ng in any::<bool>()) {
        let mut v = if ng {
            // A valid little-endian SHB, then arbitrary blocks.
            let mut s = vec![0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0];
            s.extend_from_slice(&(-1i64).to_le_bytes());
            s.extend_from_slice(&28u32.to_le_bytes());
            s
        } else {
            common::pcap_bytes(127, &[])
        };
        v.extend_from_slice(&bytes);
        read_all(&v);
        read_all(&bytes);
    }

    #[test]
    fn mutated_fixtures_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), ng in any::<bool>()) {
        let name = if ng { "radiotap_fields.pcapng" } else { "radiotap_fields.pcap" };
        let mut v = std::fs::read(common::data(name)).unwrap();
        for (i, b) in flips {
            let at = i.index(v.len());
            v[at] = b;
        }
        read_all(&v);
    }

    /// Frame sizes sum to the packet count; first_of_frame flags = frames = runs of A-MPDU refs.
    #[test]
    fn labels_partition_the_packets(runs in proptest::collection::vec(1usize..70, 1..40), n_max in 1u16..80) {
        let mut pkts: Vec<PacketRecord> = Vec::new();
        let mut seq = 0u32;
        for (k, len) in runs.iter().enumerate() {
            for _ in 0..*len {
                let f = common::radiotap_udp(1000 + k as u64 * 10, Some(k as u32), seq, (seq % 4096) as u16, false);
                pkts.push(decode(seq as u64 + 1, 0, LinkType::Radiotap, Ts(seq as u64 * 1000), f.len() as u32, f.len() as u32, &f).unwrap());
                seq += 1;
            }
        }
        let l = label_frames(&pkts, n_max).unwrap();
        prop_assert_eq!(l.frames.len(), runs.len());
        prop_assert_eq!(l.first_of_frame.iter().filter(|&&y| y).count(), runs.len());
        prop_assert_eq!(l.frames.iter().map(|f| f.packets as usize).sum::<usize>(), pkts.len());
        for (f, len) in l.frames.iter().zip(&runs) {
            prop_assert_eq!(f.packets as usize, *len);
            prop_assert_eq!(f.level as usize, (*len).min(n_max as usize));
        }
    }

    /// Features do not change when every timestamp shifts by a constant; σ ≥ 0.
    #[test]
    fn features_are_shift_invariant(gaps in proptest::collection::vec(0u64..5_000_000, 1..200), shift in 0u64..(1 << 50), m in 1usize..30, sigma in any::<bool>()) {
        let spec = FeatureSpec { m, sigma, ..FeatureSpec::default() };
        let mut a = GapWindow::new(&spec);
        let mut b = GapWindow::new(&spec);
        let mut t = 0u64;
        for g in gaps {
            t += g;
            let ra = a.push(Ts(t)).map(|r| r.to_vec());
            let rb = b.push(Ts(t + shift)).map(|r| r.to_vec());
            prop_assert_eq!(&ra, &rb);
            if let Some(r) = ra {
                prop_assert_eq!(r.len(), spec.width());
                prop_assert!(r.iter().all(|v| *v >= 0.0 && v.is_finite()));
            }
        }
    }
}
