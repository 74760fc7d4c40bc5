#!/usr/bin/python3
"""Shape-range packages against single-shape ones: compile time (cold cache), package
size, schedules, and the modeled latency (dlc inspect's cost model, not a measurement)
at the smallest, opt and largest shape. Models: the CNN (batch 1..32) and the OCR-style
model (width 32..640) of tests/models/shape_ranges.py.

usage: scripts/bench_shape_ranges.py [--dlc build/tools/dlc] [--targets LIST] [--work DIR]
(default targets: the GPU architectures and PTX, as `dlc compile` without --target
but without emu, whose host compile would dominate.)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import torch

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "tests", "models"))
from shape_ranges import Cnn, Ocr  # noqa: E402

warnings.filterwarnings("ignore")


def compile_timed(dlc, onnx, out, targets, shape):
    cache = tempfile.mkdtemp()  # cold: every kernel compiled
    t0 = time.monotonic()
    subprocess.run([dlc, "compile", onnx, "-o", out, "-q", "--target", targets, "--cache-dir", cache,
                    "--input-shape", shape], check=True)
    wall = time.monotonic() - t0
    shutil.rmtree(cache)
    info = json.loads(subprocess.run([dlc, "inspect", out, "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    return wall, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", default=os.path.join(root, "build", "tools", "dlc"))
    ap.add_argument("--targets", default="sm_80,sm_86,sm_89,sm_90,compute_80")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    models = [("cnn", Cnn().eval(), (1, 3, 16, 16), ["x", "probs"], {"x": {0: "N"}, "probs": {0: "N"}},
               "x=32,3,16,16", "x=1..32,3,16,16"),
              ("ocr", Ocr().eval(), (1, 1, 16, 64), ["image", "logp"], {"image": {3: "W"}, "logp": {0: "T"}},
               "image=1,1,16,640", "image=1,1,16,32..640")]
    print(f"targets {a.targets}; latency: dlc inspect's model (not a measurement), H100 / A100")
    print(f"{'model':6} {'package':28} {'schedules':>9} {'kernels':>7} {'compile s':>9} {'size MB':>8} "
          f"{'arena MB':>8}  {'min us':>13} {'opt us':>13} {'max us':>13}")
    for name, model, example, names, axes, single, ranged in models:
        onnx = os.path.join(work, name + ".onnx")
        torch.onnx.export(model, torch.randn(*example), onnx, input_names=names[:1], output_names=names[1:],
                          dynamic_axes=axes, opset_version=13)
        for label, shape in ((single, single), (ranged, ranged)):
            wall, info = compile_timed(a.dlc, onnx, os.path.join(work, name + ".dlc"), a.targets, shape)
            lat = info["modeled_latency_us"]
            sr = info["shape_ranges"]
            fmt = lambda d: f"{d['H100']:6.1f}/{d['A100']:6.1f}"  # noqa: E731
            lo = fmt(sr["modeled_latency_us_at_min"]) if sr else "-"
            hi = fmt(sr["modeled_latency_us_at_max"]) if sr else fmt(lat)
            print(f"{name:6} {label:28} {sr['schedules'] if sr else 1:9d} {info['unique_kernels']:7d} {wall:9.2f} "
                  f"{info['package_bytes'] / 1e6:8.2f} {info['arena_bytes'] / 1e6:8.2f}  {lo:>13} "
                  f"{fmt(lat):>13} {hi:>13}")
    if not a.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
