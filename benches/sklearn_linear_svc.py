"""scikit-learn peer for `aggrate train --model svm` (squared hinge, C = 1): the same rows
(`aggrate features` Parquet), the same contiguous k-fold split per capture, StandardScaler +
LinearSVC (liblinear; primal Newton, as scikit-learn picks when rows outnumber features). Prints
fit time and F1 per rate as JSON. Called by benches/train_vs_sklearn.sh."""
import json
import sys
import time

import numpy as np
from peer_common import contiguous_folds, load_rows
from sklearn.metrics import f1_score
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

files, k = sys.argv[1:-1], int(sys.argv[-1])
x, y, group, rate = load_rows(files)
folds = contiguous_folds(group, k)

start = time.perf_counter()
pred = np.zeros(len(y), dtype=bool)
for test in folds:
    mask = np.ones(len(y), dtype=bool)
    mask[test] = False
    sc = StandardScaler().fit(x[mask])
    m = LinearSVC(C=1.0, loss="squared_hinge", dual=False, max_iter=1000).fit(sc.transform(x[mask]), y[mask])
    pred[test] = m.predict(sc.transform(x[test]))
secs = time.perf_counter() - start
per_rate = {str(r): f1_score(y[rate == r], pred[rate == r]) for r in np.unique(rate)}
print(json.dumps({"rows": int(len(y)), "folds": k, "fit_seconds": secs, "f1_per_rate": per_rate}))
