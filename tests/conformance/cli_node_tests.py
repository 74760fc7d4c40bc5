#!/usr/bin/env python3
"""The ONNX node tests through the command line, as a user runs them: for each case,
`dlc compile model.onnx --target emu`, then `dlc run` on its inputs with `--expect`
(the conformance runner's tolerances: rtol 1e-3, atol 1e-5).

When the compile fails because an op needs an input at compile time (a shape, axes or
sizes input, an If condition), the error names the input and suggests --bind; like a
user, this script then binds that input to the test's value (`--bind NAME=input_k.pb`)
and compiles again.

Writes one JSON line per case to --report and prints the counts:
  pass, pass-bound (passed with --bind), fail (wrong values), compile-error, run-error,
  timeout.

usage: cli_node_tests.py --dlc build/tools/dlc [--data DIR] [--work DIR] [--jobs 2]
                         [--only SUBSTRING] [--report FILE]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import onnx
from onnx import numpy_helper
import numpy as np

BIND_HINT = re.compile(r"--bind ([^=\s]+)=VALUES")


def output_file_name(name):
    """dlc run's file name for an output (runtime/cli/Cli.cpp: outputFileName)."""
    s = "".join(c if (c.isascii() and c.isalnum()) or c in "_.-" else "_" for c in name)
    return ("output" if s in ("", ".", "..") else s) + ".npy"


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired:
        return None, "timeout"


def one_case(case_dir, dlc, work, timeout):
    name = os.path.basename(case_dir)
    data = os.path.join(case_dir, "test_data_set_0")
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    in_files = {n: os.path.join(data, f"input_{k}.pb") for k, n in enumerate(inputs)}
    out = os.path.join(work, name)
    os.makedirs(out, exist_ok=True)
    pkg = os.path.join(out, "model.dlc")
    bound = []
    while True:
        cmd = [dlc, "compile", os.path.join(case_dir, "model.onnx"), "--target", "emu", "-o", pkg, "-q"]
        for b in bound:
            cmd += ["--bind", f"{b}={in_files[b]}"]
        rc, text = run(cmd, timeout)
        if rc is None:
            return {"case": name, "result": "timeout", "stage": "compile"}
        if rc == 0:
            break
        wanted = [b for b in BIND_HINT.findall(text) if b in in_files and b not in bound]
        if not wanted:
            return {"case": name, "result": "compile-error", "bound": bound, "message": text.strip()[-400:]}
        bound += wanted
    expect = os.path.join(out, "expected")
    os.makedirs(expect, exist_ok=True)
    for k, o in enumerate(outputs):
        t = onnx.TensorProto()
        with open(os.path.join(data, f"output_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        a = numpy_helper.to_array(t)
        declared = model.graph.output[k].type.tensor_type.elem_type
        if onnx.TensorProto.BFLOAT16 in (t.data_type, declared) and a.dtype == np.uint16:  # bf16 bit patterns
            a = (a.astype(np.uint32) << 16).view(np.float32)
        np.save(os.path.join(expect, output_file_name(o)), a)
    cmd = [dlc, "run", pkg, "--device", "emu", "--threads", "1", "--expect", expect, "--rtol", "1e-3",
           "--atol", "1e-5", "-q", "--output-dir", os.path.join(out, "got")]
    for n in inputs:
        if n not in bound:
            cmd += ["--input", f"{n}={in_files[n]}"]
    rc, text = run(cmd, timeout)
    if rc is None:
        return {"case": name, "result": "timeout", "stage": "run"}
    if rc == 0:
        return {"case": name, "result": "pass-bound" if bound else "pass", "bound": bound}
    return {"case": name, "result": "fail" if rc == 3 else "run-error", "bound": bound,
            "message": text.strip()[-400:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--data", default="/usr/share/libonnx-testdata/data/node")
    ap.add_argument("--work", default="")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--only", default="")
    ap.add_argument("--report", default="")
    a = ap.parse_args()
    cases = sorted(os.path.join(a.data, d) for d in os.listdir(a.data)
                   if a.only in d and os.path.isdir(os.path.join(a.data, d)))
    work = a.work or tempfile.mkdtemp(prefix="dlc-cli-node-")
    results = []
    with ThreadPoolExecutor(a.jobs) as pool:
        for i, r in enumerate(pool.map(lambda c: one_case(c, os.path.abspath(a.dlc), work, a.timeout), cases)):
            results.append(r)
            if sys.stderr.isatty():
                print(f"\r{i + 1}/{len(cases)} {r['case'][:60]:60}", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if a.report:
        with open(a.report, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    counts = {}
    for r in results:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    passed = counts.get("pass", 0) + counts.get("pass-bound", 0)
    print(f"CLI path (dlc compile + dlc run, emu): {passed}/{len(results)} pass "
          f"({counts.get('pass-bound', 0)} of them with --bind); " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if not k.startswith("pass")))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
