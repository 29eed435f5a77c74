"""scikit-learn peer for the slot SVR: the same slot rows (a `<model>.slots.csv` written by
`aggrate train --model svr`), the same contiguous k-fold split per capture, StandardScaler + RBF
SVR at the same (C, gamma, epsilon). Prints fit time and RMSE as JSON. Called by
benches/train_vs_sklearn.sh."""
import json
import sys
import time

import numpy as np
from peer_common import contiguous_folds
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR

path, k, c, gamma, eps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
data = np.genfromtxt(path, delimiter=",", names=True)
names = data.dtype.names
xcols = names[names.index("mean_1"):]
x = np.column_stack([data[c_] for c_ in xcols])
y = data["true_level"]
group = data["group"].astype(int)
folds = contiguous_folds(group, k)
start = time.perf_counter()
pred = np.zeros(len(y))
for test in folds:
    mask = np.ones(len(y), dtype=bool)
    mask[test] = False
    sc = StandardScaler().fit(x[mask])
    m = SVR(kernel="rbf", C=c, gamma=gamma, epsilon=eps, tol=1e-3).fit(sc.transform(x[mask]), y[mask])
    pred[test] = m.predict(sc.transform(x[test]))
secs = time.perf_counter() - start
print(json.dumps({"rows": int(len(y)), "fit_seconds": secs, "rmse": float(np.sqrt(np.mean((pred - y) ** 2)))}))
