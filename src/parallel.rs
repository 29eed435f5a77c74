//! Independent pieces of work spread over the cores (capture reads, emulator runs, grid points):
//! one small work queue instead of a thread pool crate, because every caller wants its results
//! back on its own thread as they come in — for a progress bar, or to drop rows as soon as they
//! are summarised — and a thread count it chooses.

/// Threads for work spread over every core.
pub fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Run `work(i)` for every `i` in `0..n` on up to `threads` scoped threads, each taking the next
/// index from a shared counter (so long and short items balance), and hand each result to
/// `done(i, result)` on the calling thread as it arrives, in any order. A worker that panics is
/// joined here and its items are missing from `done`: callers that need every result check.
pub fn for_each<T: Send>(n: usize, threads: usize, work: impl Fn(usize) -> T + Sync, mut done: impl FnMut(usize, T)) {
    let threads = threads.clamp(1, n.max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, T)>();
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (next, work, tx) = (&next, &work, tx.clone());
                sc.spawn(move || loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n || tx.send((i, work(i))).is_err() {
                        break;
                    }
                })
            })
            .collect();
        drop(tx);
        for (i, r) in rx {
            done(i, r);
        }
        for w in workers {
            let _ = w.join();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item once, whatever the thread count; a panicking item is missing, not fatal.
    #[test]
    fn every_item_comes_back_once() {
        for threads in [1, 3, 64] {
            let mut got = Vec::new();
            for_each(50, threads, |i| i * i, |i, r| got.push((i, r)));
            got.sort_unstable();
            assert_eq!(
                got,
                (0..50).map(|i| (i, i * i)).collect::<Vec<_>>(),
                "{threads} threads"
            );
        }
        // The other worker takes the items the panicked one would have: only item 3 is missing.
        let mut got = Vec::new();
        for_each(
            10,
            2,
            |i| {
                if i == 3 {
                    panic!("item 3 (expected by this test)")
                } else {
                    i
                }
            },
            |i, _| got.push(i),
        );
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 4, 5, 6, 7, 8, 9]);
        let mut none = 0;
        for_each(0, 4, |i| i, |_, _| none += 1);
        assert_eq!(none, 0);
    }
}
