#!/usr/bin/python3
"""A script written against ONNX Runtime's Python API, run unchanged with another
module in its place: `ort_script.py dlc DIR` is `import dlc as ort`,
`ort_script.py onnxruntime DIR` the original. For every case of the model suite in DIR
(tests/models/export_models.py's layout: CASE/model.onnx, CASE/test_data_set_0/
{input,output}_K.pb with PyTorch's outputs) it opens an InferenceSession on the .onnx
file, feeds the inputs by the names get_inputs() gives, runs all outputs and compares
them with PyTorch's at rtol 1e-3, atol 1e-4.

With --same-as DIR (tests/models/check_models.py's work folder), each output must
also equal `dlc run`'s (DIR/CASE/dlc/NAME.npy) at rtol 1e-5.

usage: ort_script.py MODULE MODELS_DIR [--only SUBSTRING] [--same-as DIR]
"""
import argparse
import glob
import importlib
import os
import sys
import time
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

ap = argparse.ArgumentParser()
ap.add_argument("module")
ap.add_argument("models_dir")
ap.add_argument("--only", default="")
ap.add_argument("--same-as", default=None)
a = ap.parse_args()
ort = importlib.import_module(a.module)  # `import dlc as ort`, or onnxruntime itself


def tensors(case, kind):
    out = []
    for p in sorted(glob.glob(os.path.join(case, "test_data_set_0", kind + "_*.pb")),
                    key=lambda p: int(p.rsplit("_", 1)[1][:-3])):
        t = onnx.TensorProto()
        with open(p, "rb") as f:
            t.ParseFromString(f.read())
        out.append(numpy_helper.to_array(t))
    return out


failures = cases = 0
for case in sorted(glob.glob(os.path.join(a.models_dir, "*"))):
    if a.only not in os.path.basename(case) or not os.path.exists(os.path.join(case, "model.onnx")):
        continue
    cases += 1
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dlc notes that providers= is ignored
        sess = ort.InferenceSession(os.path.join(case, "model.onnx"), providers=["CPUExecutionProvider"])
    opened = time.monotonic() - t0
    feed = {i.name: x for i, x in zip(sess.get_inputs(), tensors(case, "input"))}
    t0 = time.monotonic()
    got = sess.run(None, feed)
    ran = time.monotonic() - t0
    want = tensors(case, "output")
    ok = len(got) == len(want) and all(
        g.shape == w.shape and np.allclose(g, w, rtol=1e-3, atol=1e-4) for g, w in zip(got, want))
    err = max((float(np.max(np.abs(g.astype(np.float64) - w))) if g.shape == w.shape and g.size else 0.0)
              for g, w in zip(got, want)) if got else float("nan")
    if a.same_as:
        # dlc run writes NAME.npy per output, NAME sanitized to [A-Za-z0-9_.-].
        names = ["".join(c if c.isalnum() or c in "_.-" else "_" for c in o.name) for o in sess.get_outputs()]
        cli = [os.path.join(a.same_as, os.path.basename(case), "dlc", n + ".npy") for n in names]
        same = all(os.path.exists(p) and np.allclose(g, np.load(p), rtol=1e-5, atol=1e-7) for g, p in zip(got, cli))
        ok = ok and same
        if not same:
            print(f"{os.path.basename(case)}: differs from dlc run's outputs in {a.same_as}")
    failures += not ok
    print(f"{os.path.basename(case):22} {len(got)} outputs  max |err| {err:.2e}  session {opened:6.2f} s  "
          f"run {ran:6.2f} s  {'ok' if ok else 'MISMATCH'}")
print(f"{a.module}: {cases - failures}/{cases} models match PyTorch through ONNX Runtime's API")
sys.exit(1 if failures or not cases else 0)
