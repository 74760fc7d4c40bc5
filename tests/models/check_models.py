#!/usr/bin/python3
"""The model suite against two references: PyTorch (the exporter's outputs) and
ONNX Runtime (onnxruntime-node, CPU). For every exported case (export_models.py
layout) it compiles the model with dlc (all targets), runs it on the emu backend,
runs it with ONNX Runtime, and compares dlc with both (strict FP32, --no-tf32: rtol
1e-3) and ONNX Runtime with PyTorch. The opset-17 cases also run as compiled by default
(FP32 convolutions and GEMMs in TF32), within TF32_TOL of PyTorch's outputs (max abs
error over max |output|). With --table it prints the README's model table (compile time
measured without the compilation cache).

usage: check_models.py --dlc build/tools/dlc --models-dir DIR [--table] [--work DIR]
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORT = os.path.join(ROOT, "tools", "ort")
RTOL, ATOL = 1e-3, 1e-4
# TF32 keeps 10 mantissa bits of each product's inputs, as FP16 does; measured worst
# case mobilenet_v2, 9.5e-3.
TF32_TOL = 3e-2


def sh(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.strip()}")
    return p.stdout


def max_rel(a, b):
    """Largest |a-b| / (|b| + atol/rtol) and whether a matches b at (RTOL, ATOL)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    ok = np.allclose(a, b, rtol=RTOL, atol=ATOL)
    err = np.max(np.abs(a - b) / (np.abs(b) + ATOL / RTOL)) if a.size else 0.0
    return float(err), bool(ok)


def npy_name(output):
    """The file `dlc run --output-dir` writes an output to."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", output) + ".npy"


def ensure_ort():
    if not os.path.isdir(os.path.join(ORT, "node_modules", "onnxruntime-node")):
        env = dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip")
        sh(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=ORT, env=env)


def check(dlc, case, work, table):
    name = os.path.basename(case)
    w = os.path.join(work, name)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    model_path = os.path.join(case, "model.onnx")
    m = onnx.load(model_path)
    inits = {i.name for i in m.graph.initializer}
    in_names = [i.name for i in m.graph.input if i.name not in inits]
    out_names = [o.name for o in m.graph.output]
    data = os.path.join(case, "test_data_set_0")
    specs = []
    for i, n in enumerate(in_names):
        t = onnx.TensorProto()
        t.ParseFromString(open(os.path.join(data, f"input_{i}.pb"), "rb").read())
        npy = os.path.join(w, f"in{i}.npy")
        np.save(npy, numpy_helper.to_array(t))
        specs.append(f"{n}={npy}")
    torch_out = []
    for i in range(len(out_names)):
        t = onnx.TensorProto()
        t.ParseFromString(open(os.path.join(data, f"output_{i}.pb"), "rb").read())
        torch_out.append(numpy_helper.to_array(t))

    pkg = os.path.join(w, "model.dlc")
    cmd = [dlc, "compile", model_path, "--no-tf32", "-o", pkg]
    if table:
        cmd.append("--no-cache")
    t0 = time.time()
    log = sh(cmd + ([] if table else ["-q"]))
    compile_s = time.time() - t0
    sh([dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(w, "dlc")] + specs)
    sh(["node", os.path.join(ORT, "ort.js"), "run", model_path, os.path.join(w, "ort")] + specs)
    insp = json.loads(sh([dlc, "inspect", pkg, "--json"]))

    row = {"case": name, "ok": True, "vs_torch": 0.0, "vs_ort": 0.0, "ort_vs_torch": 0.0,
           "kernels": insp["launches"], "unique": insp["unique_kernels"], "gemms": insp["library_calls"],
           "arena": insp["arena_bytes"],
           "compile_s": compile_s, "detail": ""}
    for i, ref in enumerate(torch_out):
        if np.abs(ref).max() < 1e-2:  # a comparison against ~0 would pass whatever dlc computes
            row["ok"] = False
            row["detail"] += f" reference output {i} is degenerate (max |x| = {np.abs(ref).max():.2g});"
    for i, n in enumerate(out_names):
        got = np.load(os.path.join(w, "dlc", npy_name(n)))
        ort = np.load(os.path.join(w, "ort", npy_name(n)))
        for key, (a, b) in {"vs_torch": (got, torch_out[i]), "vs_ort": (got, ort),
                            "ort_vs_torch": (ort, torch_out[i])}.items():
            if a.shape != b.shape:
                row["ok"] = False
                row["detail"] += f" {key} {n}: shape {a.shape} vs {b.shape};"
                continue
            err, ok = max_rel(a, b)
            row[key] = max(row[key], err)
            if not ok:
                row["ok"] = False
                row["detail"] += f" {key} {n}: max rel error {err:.3g};"
    if name.endswith("_op17") and not table:  # the default: TF32
        tf32 = os.path.join(w, "tf32.dlc")
        sh([dlc, "compile", model_path, "--target", "emu", "-o", tf32, "-q"])
        sh([dlc, "run", tf32, "-q", "--device", "emu", "--output-dir", os.path.join(w, "tf32")] + specs)
        row["tf32"] = 0.0
        for i, n in enumerate(out_names):
            got = np.load(os.path.join(w, "tf32", npy_name(n)))
            ref = torch_out[i].astype(np.float64)
            err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got.shape == ref.shape else np.inf
            row["tf32"] = max(row["tf32"], err)
        if not row["tf32"] <= TF32_TOL:
            row["ok"] = False
            row["detail"] += f" tf32: error {row['tf32']:.3g} of the output's range (limit {TF32_TOL});"
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--work", default=os.path.join("/tmp", "dlc-model-check"))
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args()
    ensure_ort()
    rows = []
    for case in sorted(glob.glob(os.path.join(a.models_dir, "*_op*"))):
        try:
            r = check(a.dlc, case, a.work, a.table)
        except RuntimeError as e:
            r = {"case": os.path.basename(case), "ok": False, "detail": str(e)}
        rows.append(r)
        print(("pass: " if r["ok"] else "FAIL: ") + r["case"] +
              (f" (vs PyTorch {r['vs_torch']:.2e}, vs ONNX Runtime {r['vs_ort']:.2e}" if "vs_torch" in r else "") +
              (f"; TF32 vs PyTorch {r['tf32']:.2e} of the range" if "tf32" in r else "") +
              (")" if "vs_torch" in r else "") +
              (" -" + r["detail"] if r["detail"] else ""), flush=True)
    if a.table:
        print("\n| model | status | max rel. error vs PyTorch | vs ONNX Runtime | unique kernels / launches + GEMMs "
              "| arena | compile (all targets, no cache) |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            if "kernels" not in r:
                print(f"| {r['case']} | error | | | | | |")
                continue
            print(f"| {r['case']} | {'pass' if r['ok'] else 'FAIL'} | {r['vs_torch']:.1e} | {r['vs_ort']:.1e} "
                  f"| {r['unique']} / {r['kernels']} + {r['gemms']} | {r['arena'] / 2**20:.2f} MiB | {r['compile_s']:.1f} s |")
    failed = [r["case"] for r in rows if not r["ok"]]
    if failed or not rows:
        sys.exit(f"{len(failed)} of {len(rows)} models failed: {', '.join(failed)}")
    print(f"all {len(rows)} models match PyTorch and ONNX Runtime")


if __name__ == "__main__":
    main()
