"""Run an exported aggrate ONNX model with real ONNX Runtime (and the onnx checker) on rows
from a CSV file; print one line per row: decision[,probability]. Used by tests/suite/onnx_export.rs."""
import sys

import numpy as np
import onnx
import onnxruntime as ort

model_path, rows_path = sys.argv[1], sys.argv[2]
onnx.checker.check_model(onnx.load(model_path), full_check=True)
x = np.loadtxt(rows_path, delimiter=",", ndmin=2).astype(np.float64)
sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
names = [o.name for o in sess.get_outputs()]
outs = sess.run(names, {"x": x})
for i in range(x.shape[0]):
    print(",".join(repr(float(o[i][0])) for o in outs))
