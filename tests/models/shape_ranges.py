#!/usr/bin/env python3
"""Shape ranges: one package compiled with `--input-shape` ranges serves every shape in
them.
- A CNN (conv, BatchNorm, residual add, pooling, linear, softmax) exported with a
  dynamic batch, compiled once for batch 1..32, runs at batch 1, 7 and 32 and matches
  PyTorch and ONNX Runtime.
- An OCR-style model (conv + BiLSTM + a CTC-style log-softmax head over the width)
  exported with a dynamic width, compiled once for width 32..640, runs at widths 32,
  203 and 640 and matches PyTorch and ONNX Runtime.
- Bad input is one clear error with a non-zero exit and no output file: a shape
  outside the range (naming the input, the dimension and the range), an empty range,
  an --opt-shape outside its range, --train with a range.
`dlc inspect --json` must report the ranges and one schedule per shape.

usage: shape_ranges.py --dlc build/tools/dlc --work DIR
"""
import argparse
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_models import ORT, ensure_ort, sh  # noqa: E402

warnings.filterwarnings("ignore")


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.block = nn.Conv2d(16, 16, 3, padding=1)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        x = torch.relu(x + self.block(x))
        x = torch.max_pool2d(torch.relu(self.down(x)), 2)
        return torch.softmax(self.fc(x.mean((2, 3))), -1)


class Ocr(nn.Module):
    """Conv features over a text line, a BiLSTM along the width, per-column class scores."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.rnn = nn.LSTM(16 * 4, 24, bidirectional=True)
        self.head = nn.Linear(48, 12)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
        n, c, h, w = x.shape
        y, _ = self.rnn(x.reshape(n, c * h, w).permute(2, 0, 1))
        return torch.log_softmax(self.head(y), -1)


def fails(cmd, *needles):
    """Runs cmd, which must fail with one error line containing every needle."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    err = r.stderr.strip()
    ok = r.returncode != 0 and all(n in err for n in needles) and "Traceback" not in err
    print(f"  {'ok' if ok else 'WRONG'}: {' '.join(os.path.basename(c) for c in cmd[1:4])} ... -> {err}")
    return 0 if ok else 1


def check(dlc, work, name, model, example, names, axes, spec, shapes, tol):
    """Exports `model`, compiles it once with the range `spec`, runs it at each shape."""
    path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, example, path, input_names=names[:1], output_names=names[1:],
                      dynamic_axes=axes, opset_version=13)
    pkg = os.path.join(work, name + ".dlc")
    sh([dlc, "compile", path, "--target", "emu", "-o", pkg, "-q", "--input-shape", spec])
    insp = json.loads(sh([dlc, "inspect", pkg, "--json"]))
    ranges = insp["shape_ranges"]
    (axis, lo, hi), = [(r["axis"], r["min"], r["max"]) for r in ranges["ranges"]]
    failures = 0
    if ranges["schedules"] != hi - lo + 1:
        print(f"{name}: {ranges['schedules']} schedules for the range {lo}..{hi}")
        failures += 1
    for shape in shapes:
        w = os.path.join(work, f"{name}-{shape[axis]}")
        os.makedirs(w, exist_ok=True)
        x = torch.randn(*shape)
        with torch.no_grad():
            ref = model(x).numpy()
        np.save(os.path.join(w, "x.npy"), x.numpy())
        spec_in = f"{names[0]}={w}/x.npy"
        sh([dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(w, "dlc"), spec_in])
        sh(["node", os.path.join(ORT, "ort.js"), "run", path, os.path.join(w, "ort"), spec_in])
        got = np.load(os.path.join(w, "dlc", names[1] + ".npy"))
        ort = np.load(os.path.join(w, "ort", names[1] + ".npy"))
        ok = got.shape == ref.shape == ort.shape and np.allclose(got, ref, rtol=tol, atol=tol) and \
            np.allclose(got, ort, rtol=tol, atol=tol)
        failures += not ok
        print(f"{name} {list(shape)}: output {list(got.shape)}, |dlc - torch| {np.abs(got - ref).max():.2e}, "
              f"|dlc - ort| {np.abs(got - ort).max():.2e} {'ok' if ok else 'MISMATCH'}")
    return failures, path, pkg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    ensure_ort()
    torch.manual_seed(0)
    cnn = Cnn().eval()
    with torch.no_grad():  # BatchNorm statistics that are not the identity
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 2.0)
    failures, _, cnn_pkg = check(a.dlc, a.work, "cnn", cnn, torch.randn(1, 3, 16, 16), ["x", "probs"],
                                 {"x": {0: "N"}, "probs": {0: "N"}}, "x=1..32,3,16,16",
                                 [(1, 3, 16, 16), (7, 3, 16, 16), (32, 3, 16, 16)], 1e-4)
    f, ocr_onnx, ocr_pkg = check(a.dlc, a.work, "ocr", Ocr().eval(), torch.randn(1, 1, 16, 64), ["image", "logp"],
                                 {"image": {3: "W"}, "logp": {0: "T"}}, "image=1,1,16,32..640",
                                 [(1, 1, 16, 32), (1, 1, 16, 203), (1, 1, 16, 640)], 1e-4)
    failures += f

    print("bad input:")
    x = os.path.join(a.work, "wide.npy")
    np.save(x, np.zeros((1, 1, 16, 641), np.float32))
    out = os.path.join(a.work, "wide-out")
    failures += fails([a.dlc, "run", ocr_pkg, "--device", "emu", "--output-dir", out, f"image={x}"],
                      "input 'image' dimension 3 is 641", "outside the range 32..640")
    if os.path.exists(out):
        print("  WRONG: a run that failed wrote an output directory")
        failures += 1
    np.save(x, np.zeros((33, 3, 16, 16), np.float32))
    failures += fails([a.dlc, "bench", cnn_pkg, "--device", "emu", "--iterations", "1", f"x={x}"],
                      "input 'x' dimension 0 is 33", "outside the range 1..32")
    bad = os.path.join(a.work, "bad.dlc")
    for extra, needles in ((["--input-shape", "image=1,1,16,640..32"], ["the range '640..32'", "is empty"]),
                           (["--input-shape", "image=1,1,16,32..640", "--opt-shape", "image=1,1,16,700"],
                            ["--opt-shape", "dimension 3 is 700, outside 32..640"]),
                           (["--input-shape", "image=1,1,16,32..640", "--max-shape-variants", "100"],
                            ["span more than 100 shapes"]),
                           (["--input-shape", "image=1,1,16,32..640", "--train", "--loss", "cross-entropy"],
                            ["--train takes one shape per input, not a range"]),
                           (["--input-shape", "image=1,1,16,32..640", "--emit", "lib"],
                            ["--emit lib takes one shape per input, not a range"])):
        failures += fails([a.dlc, "compile", ocr_onnx, "--target", "emu", "-o", bad] + extra, *needles)
        if os.path.exists(bad):
            print("  WRONG: a failed compile wrote its output")
            failures += 1
    print(f"shape ranges: {'all checks pass' if not failures else f'{failures} failures'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
