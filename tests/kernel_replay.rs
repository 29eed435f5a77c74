//! The real-kernel noise source, alone in its test binary: it runs in real time, and the CPU-heavy
//! simulations of the other test binaries must not share the two cores with it.

mod common;

use aggrate::capture::io::open_path;
use aggrate::label::label_frames;
use common::{aggrate, text};

/// The real-kernel noise source: MAC times replayed over loopback, SO_TIMESTAMPNS read back.
/// Only structure is asserted (real time on a shared machine is not precise): packets arrive or
/// are counted lost, kernel times come after MAC times' schedule start, and A-MPDU starts stand
/// out from the packets inside an A-MPDU. A loaded machine can miss the schedule for a whole
/// run (everything then goes out back to back), so the structure gets three attempts; a broken
/// replay (wrong timestamps, lost grouping) fails all three.
#[test]
fn kernel_replay_over_loopback() {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (s, i) = replay_once();
        if s > 2 * i.max(1) {
            return;
        }
        seen.push((s, i));
    }
    panic!("median gap at A-MPDU starts vs inside (ns), three attempts: {seen:?}");
}

fn replay_once() -> (i128, i128) {
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
    (start_gaps[start_gaps.len() / 2], inner_gaps[inner_gaps.len() / 2])
}
