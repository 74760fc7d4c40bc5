#!/usr/bin/env python3
"""A 200,000-node chain compiles in seconds and computes what numpy computes.

The passes must be linear in the length of a chain: fusion once scanned the whole graph
for every merge (a 40k chain took 6 s, 200k more than 120 s). The ctest timeout is the
bound: quadratic passes cannot finish within it, linear ones take a few seconds. The
compile time is printed for the record.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

OPS = [("Relu", lambda v: np.maximum(v, 0)), ("Neg", lambda v: -v), ("Abs", np.abs),
       ("Sigmoid", lambda v: 1 / (1 + np.exp(-v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--nodes", type=int, default=200000)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    nodes, prev = [], "x"
    for i in range(a.nodes):
        nodes.append(helper.make_node(OPS[i % len(OPS)][0], [prev], ["t%d" % i], name="n%d" % i))
        prev = "t%d" % i
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, pkg = os.path.join(a.work, "chain.onnx"), os.path.join(a.work, "chain.dlc")
    onnx.save(model, path)
    t0 = time.monotonic()
    subprocess.run([a.dlc, "compile", path, "--target", "emu", "-o", pkg, "--quiet"], check=True)
    seconds = time.monotonic() - t0
    x = np.random.RandomState(0).randn(4, 8).astype(np.float32)
    np.save(os.path.join(a.work, "x.npy"), x)
    out = os.path.join(a.work, "out")
    subprocess.run([a.dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", out, "x=" + os.path.join(a.work, "x.npy")],
                   check=True)
    want = x.astype(np.float64)
    for i in range(a.nodes):
        want = OPS[i % len(OPS)][1](want)
    got = np.load(os.path.join(out, prev + ".npy"))
    ok = np.allclose(got, want, rtol=1e-5, atol=1e-6)
    print("%d-node chain: compiled in %.1f s; |dlc - numpy| %.2e %s" % (a.nodes, seconds, np.abs(got - want).max(),
                                                                       "ok" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
