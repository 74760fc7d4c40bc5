#!/usr/bin/env python3
"""dlc quantize on a model-suite CNN, measured by ONNX Runtime.

The suite's CNNs (tests/models/export_models.py: torchvision architectures with random
weights) have no labels, so "accuracy" is top-1 agreement with the FP32 model. Images
are smooth random fields (random noise blurred, normalized as ImageNet inputs), seeded:
--calib of them calibrate, --eval others measure.

Prints: dlc quantize's own report (method, its measured agreement), ONNX Runtime's
agreement of the written QDQ file with FP32, dlc's predictions on the written file
against ONNX Runtime's, and `dlc inspect`'s integer and INT8 tensor-core fractions of
the compiled file (modeled from the kernels dlc instantiates; nothing runs on a GPU).

usage: scripts/bench_quantize.py --dlc build/tools/dlc --model build/tests/models-gen/models/resnet18_op17/model.onnx
       [--calib 32] [--eval 64] [--method entropy] [--work DIR] [--sensitivity]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORT = os.path.join(ROOT, "tools", "ort", "ort.js")


def images(n, shape, seed):
    """Smooth random images: white noise blurred by a box filter, per-channel normalized."""
    r = np.random.RandomState(seed)
    x = r.randn(n, *shape).astype(np.float32)
    for axis in (2, 3):
        x = (x + np.roll(x, 1, axis) + np.roll(x, -1, axis) + np.roll(x, 2, axis) + np.roll(x, -2, axis)) / 5
    x = (x - x.mean(axis=(2, 3), keepdims=True)) / (x.std(axis=(2, 3), keepdims=True) + 1e-6)
    return x.astype(np.float32)


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def batched(path, out):
    m = onnx.load(path)
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.shape.dim:
            v.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(m, out)
    return out


def ort_scores(model, name, x, work):
    np.save(os.path.join(work, "x.npy"), x)
    out = os.path.join(work, "ort-" + os.path.basename(model))
    run(["node", ORT, "run", model, out, f"{name}=" + os.path.join(work, "x.npy")])
    files = sorted(os.listdir(out))
    return np.load(os.path.join(out, files[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--method", default="entropy")
    ap.add_argument("--sensitivity", action="store_true")
    ap.add_argument("--work")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="dlc-bench-quantize-")
    os.makedirs(work, exist_ok=True)
    m = onnx.load(a.model)
    inits = {i.name for i in m.graph.initializer}
    inp = [i for i in m.graph.input if i.name not in inits][0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim][1:]
    calib, held = images(a.calib, shape, 1), images(a.eval, shape, 2)
    np.savez(os.path.join(work, "calib.npz"), **{inp.name: calib})
    np.savez(os.path.join(work, "held.npz"), **{inp.name: held})
    q = os.path.join(work, "int8.onnx")
    t0 = time.time()
    rep = json.loads(run([a.dlc, "quantize", a.model, "--calibrate", os.path.join(work, "calib.npz"), "--eval-data",
                          os.path.join(work, "held.npz"), "-o", q, "--json", "-q", "--method", a.method]
                         + ([] if a.sensitivity else ["--no-sensitivity"])))
    seconds = time.time() - t0
    fp32 = ort_scores(batched(a.model, os.path.join(work, "fp32.onnx")), inp.name, held, work)
    qb = batched(q, os.path.join(work, "int8-b.onnx"))
    ort_q = ort_scores(qb, inp.name, held, work)
    pkg = os.path.join(work, "int8.dlc")
    run([a.dlc, "compile", qb, "--target", "emu", "--no-tf32", "--input-shape",
         f"{inp.name}={a.eval}," + ",".join(map(str, shape)), "-o", pkg, "-q"])
    run([a.dlc, "run", pkg, "--device", "emu", "--quiet", "--output-dir", os.path.join(work, "dlc"),
         f"{inp.name}=" + os.path.join(work, "x.npy")])
    dlc_q = np.load(os.path.join(work, "dlc", sorted(os.listdir(os.path.join(work, "dlc")))[0]))
    ins = json.loads(run([a.dlc, "inspect", pkg, "--json"]))
    agree_ort = float(np.mean(ort_q.argmax(1) == fp32.argmax(1)))
    agree_dlc_ort = float(np.mean(dlc_q.argmax(1) == ort_q.argmax(1)))
    print(f"model {a.model}: {rep['int8_layers']} INT8 layers of {len(rep['layers'])}, method {rep['method']}, "
          f"{a.calib} calibration / {a.eval} held-out images, dlc quantize took {seconds:.0f} s (emu)")
    agreement = rep["top1_agreement"]
    print(f"  dlc quantize's report: top-1 agreement with FP32 "
          f"{'-' if agreement is None else f'{agreement:.4f}'}, relative error {rep['relative_error']:.4f}")
    print(f"  ONNX Runtime: the QDQ file agrees with FP32 on {agree_ort:.4f} of the top-1 predictions")
    print(f"  dlc vs ONNX Runtime on the QDQ file: {agree_dlc_ort:.4f} of the predictions agree, "
          f"max |logit difference| {float(np.max(np.abs(dlc_q - ort_q))):.4g}")
    print(f"  dlc inspect: integer {ins['integer_flops'] / ins['flops']:.3f} of the FLOPs, "
          f"int8_tensor_core_flop_fraction {ins['int8_tensor_core_flop_fraction']:.3f} (modeled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
