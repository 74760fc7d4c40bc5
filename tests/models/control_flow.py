#!/usr/bin/env python3
"""If with run-time conditions, from a TorchScript export: one If on a bool input and
one on a value the model computes (x.sum() > 0). dlc compiles the package once; it must
match PyTorch and ONNX Runtime (onnxruntime-node) for all four branch combinations, and
`dlc inspect` must report steps that run on one side only.

usage: control_flow.py --dlc build/tools/dlc --work DIR
"""
import argparse
import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_models import ORT, ensure_ort, sh  # noqa: E402

warnings.filterwarnings("ignore")


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x, use_a):
        if bool(use_a):
            y = torch.relu(self.a(x))
        else:
            y = torch.softmax(self.b(x), -1)
        if bool(x.sum() > 0.0):
            y = y * 2.0
        return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    torch.manual_seed(0)
    model = Gate().eval()
    onnx_path = os.path.join(a.work, "gate.onnx")
    x0 = torch.randn(4, 8)
    torch.onnx.export(torch.jit.script(model), (x0, torch.tensor(True)), onnx_path, input_names=["x", "use_a"],
                      output_names=["y"], opset_version=17)
    pkg = os.path.join(a.work, "gate.dlc")
    sh([a.dlc, "compile", onnx_path, "--target", "emu", "-o", pkg, "-q"])
    insp = json.loads(sh([a.dlc, "inspect", pkg, "--json"]))
    assert insp["conditional_steps"] >= 2, insp["conditional_steps"]
    ensure_ort()
    seen = set()
    failures = 0
    for use_a in (True, False):
        for shift in (1.0, -1.0):  # the second If both ways
            x = torch.randn(4, 8) * 0.5 + shift
            with torch.no_grad():
                y = model(x, torch.tensor(use_a)).numpy()
            second = bool(x.sum() > 0)
            seen.add((use_a, second))
            w = os.path.join(a.work, f"{int(use_a)}{int(second)}")
            os.makedirs(w, exist_ok=True)
            np.save(os.path.join(w, "x.npy"), x.numpy())
            np.save(os.path.join(w, "use_a.npy"), np.array(use_a))
            specs = [f"x={w}/x.npy", f"use_a={w}/use_a.npy"]
            sh([a.dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(w, "dlc")] + specs)
            sh(["node", os.path.join(ORT, "ort.js"), "run", onnx_path, os.path.join(w, "ort")] + specs)
            got = np.load(os.path.join(w, "dlc", "y.npy"))
            ort = np.load(os.path.join(w, "ort", "y.npy"))
            ok = np.allclose(got, y, rtol=1e-4, atol=1e-5) and np.allclose(got, ort, rtol=1e-4, atol=1e-5)
            failures += not ok
            print(f"use_a={use_a} sum(x)>0={second}: max |dlc - torch| {np.abs(got - y).max():.2e}, "
                  f"|dlc - ort| {np.abs(got - ort).max():.2e} {'ok' if ok else 'MISMATCH'}")
    if len(seen) != 4:
        print(f"only {len(seen)} of the 4 branch combinations were exercised")
        failures += 1
    print(f"control flow: {4 - failures if failures <= 4 else 0}/4 branch combinations match; "
          f"{insp['conditional_steps']} conditional steps")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
