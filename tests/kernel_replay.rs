//! The real-kernel noise source, alone in its test binary: it runs in real time, and the CPU-heavy
//! simulations of the other test binaries must not share the two cores with it.

mod common;

use aggrate::capture::io::open_path;
use aggrate::label::label_frames;
use common::{aggrate, text};

/// The real-kernel noise source: MAC times replayed over loopback, SO_TIMESTAMPNS read back.
/// Only structure is asserted (real time on a shared machine is not precise): packets arrive or
/// are counted lost, kernel times come after MAC times' schedule start, and A-MPDU starts stand
/// out from the packets inside an A-MPDU.
#[test]
fn kernel_replay_over_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let o = aggrate(
        dir.path(),
        &[
            "simulate",
            "--rate-mbps",
            "100",
            "--duration",
            "0.4",
            "--kernel-replay",
            "-o",
            "k.pcapng",
        ],
    );
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("lost in the kernel"), "{err}");
    let recs: Vec<_> = open_path(&dir.path().join("k.pcapng"))
        .unwrap()
        .reader
        .map(|r| r.unwrap())
        .collect();
    assert!(recs.len() > 3000, "{} packets", recs.len());
    let labels = label_frames(&recs, 64).unwrap();
    let mut start_gaps = Vec::new();
    let mut inner_gaps = Vec::new();
    for (k, w) in recs.windows(2).enumerate() {
        let g = w[1].host.as_nanos() as i128 - w[0].host.as_nanos() as i128;
        if labels.first_of_frame[k + 1] {
            start_gaps.push(g)
        } else {
            inner_gaps.push(g)
        }
    }
    start_gaps.sort();
    inner_gaps.sort();
    let (s, i) = (start_gaps[start_gaps.len() / 2], inner_gaps[inner_gaps.len() / 2]);
    assert!(s > 2 * i.max(1), "median gap at A-MPDU starts {s} ns vs inside {i} ns");
}
