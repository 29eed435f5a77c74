"""Shared by the scikit-learn peer scripts: the rows of `aggrate features` Parquet files and
aggrate's contiguous k-fold split (each capture cut into k blocks, never shuffled)."""
import numpy as np
import pyarrow.parquet as pq


def load_rows(files):
    """x (gap_us_* + sigma_us), y (first of frame), group (file index), rate (Mb/s)."""
    xs, ys, groups, rates = [], [], [], []
    for g, f in enumerate(files):
        t = pq.read_table(f)
        cols = [c for c in t.column_names if c.startswith("gap_us_")] + ["sigma_us"]
        xs.append(np.column_stack([t[c].to_numpy() for c in cols]))
        ys.append(t["y"].to_numpy(zero_copy_only=False).astype(bool))
        groups.append(np.full(t.num_rows, g))
        rates.append(t["rate_mbps"].to_numpy())
    return np.vstack(xs), np.concatenate(ys), np.concatenate(groups), np.concatenate(rates)


def contiguous_folds(group, k):
    """Fold f tests on block f of every group, as aggrate's `contiguous_folds`."""
    folds = [[] for _ in range(k)]
    for g in np.unique(group):
        idx = np.nonzero(group == g)[0]
        n = len(idx)
        for f in range(k):
            folds[f].extend(idx[n * f // k : n * (f + 1) // k])
    return folds
