#!/usr/bin/env python3
"""Control flow from a TorchScript export: an If on a bool input, an If on a value the
model computes (x.sum() > 0), and a Loop over column chunks (unrolled at compile time).
Then a Loop that stops on a value it computes (a bounded loop with a break, built with
onnx.helper: TorchScript exports `break` as an unbounded while loop, which needs --loop-bound),
a Scan (reverse input, two scan outputs on different axes, one reversed), and loops whose
iterations are decided at run time compiled with --loop-bound (a TorchScript while loop,
a trip count given as an input), with the error when a run needs more than the bound.
dlc compiles the package once; it must match PyTorch and ONNX Runtime
(onnxruntime-node) for all four branch combinations, `dlc inspect` must report steps
that run on one side only, and a trip count above --max-loop-unroll must be a clear
error.

usage: control_flow.py --dlc build/tools/dlc --work DIR
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
from loop_models import save_power_loop  # noqa: E402

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
        acc = torch.zeros(4, 2)
        for i in range(x.size(1) // 2):  # a Loop in the export (its trip count folds)
            acc = acc + torch.tanh(y[:, i * 2:(i + 1) * 2])
        return y, acc


def check_break_loop(dlc, work):
    """total = 0; for i in range(8): total += relu(x[:, i]); stop once sum(total) >= 3."""
    import onnx
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["xi"], axis=1),
         helper.make_node("Relu", ["xi"], ["r"]),
         helper.make_node("Add", ["total", "r"], ["total_out"]),
         helper.make_node("ReduceSum", ["total_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "three"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("total", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("total_out", TensorProto.FLOAT, [4])],
        [helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["m", "c", "zero"], ["total"], body=body)],
        "break_loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [4])],
        [helper.make_tensor("m", TensorProto.INT64, [], [8]), helper.make_tensor("c", TensorProto.BOOL, [], [True]),
         helper.make_tensor("zero", TensorProto.FLOAT, [4], [0, 0, 0, 0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = os.path.join(work, "break.onnx")
    onnx.save(model, path)
    pkg = os.path.join(work, "break.dlc")
    sh([dlc, "compile", path, "--target", "emu", "-o", pkg, "-q"])
    failures = 0
    for scale, name in ((0.4, "stops early"), (0.05, "runs all 8")):
        x = np.abs(np.random.RandomState(1).randn(4, 8)).astype(np.float32) * scale
        total, steps = np.zeros(4, np.float32), 0
        for i in range(8):
            total = total + np.maximum(x[:, i], 0)
            steps += 1
            if total.sum() >= 3.0:
                break
        assert (1 < steps < 8) if name == "stops early" else steps == 8, steps
        w = os.path.join(work, "break-" + name.replace(" ", "-"))
        os.makedirs(w, exist_ok=True)
        np.save(os.path.join(w, "x.npy"), x)
        sh([dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(w, "dlc"), f"x={w}/x.npy"])
        sh(["node", os.path.join(ORT, "ort.js"), "run", path, os.path.join(w, "ort"), f"x={w}/x.npy"])
        got, ort = np.load(os.path.join(w, "dlc", "total.npy")), np.load(os.path.join(w, "ort", "total.npy"))
        ok = np.allclose(got, total, rtol=1e-5, atol=1e-6) and np.allclose(got, ort, rtol=1e-5, atol=1e-6)
        failures += not ok
        print(f"break loop ({name}: {steps} iterations): |dlc - numpy| {np.abs(got - total).max():.2e}, "
              f"|dlc - ort| {np.abs(got - ort).max():.2e} {'ok' if ok else 'MISMATCH'}")
    return failures


def check_scan(dlc, work):
    """Scan (built with onnx.helper: PyTorch does not export it) over axis 1 of x, from
    the end, with a running state and two scan outputs stacked on different axes, one
    of them in reverse; against numpy and ONNX Runtime."""
    import onnx
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Tanh", ["xt"], ["t"]),
         helper.make_node("Add", ["s", "t"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "xt"], ["y"]),
         helper.make_node("ReduceSum", ["s_out"], ["z"], keepdims=0)],
        "body",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("xt", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["s0", "x"], ["s_final", "ys", "zs"], body=body, num_scan_inputs=1,
                          scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1, 0],
                          scan_output_directions=[0, 1])],
        "scan",
        [helper.make_tensor_value_info("s0", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 3])],
        [helper.make_tensor_value_info("s_final", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, [2, 5, 3]),
         helper.make_tensor_value_info("zs", TensorProto.FLOAT, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = os.path.join(work, "scan.onnx")
    onnx.save(model, path)
    pkg = os.path.join(work, "scan.dlc")
    sh([dlc, "compile", path, "--target", "emu", "-o", pkg, "-q"])
    limited = os.path.join(work, "scan-limit.dlc")
    try:
        sh([dlc, "compile", path, "--target", "emu", "--max-loop-unroll", "3", "-o", limited, "-q"])
        raise AssertionError("a Scan longer than --max-loop-unroll compiled")
    except RuntimeError as e:
        assert "Scan over 5 steps exceeds the unroll limit of 3 iterations" in str(e), e
        assert not os.path.exists(limited)
    rng = np.random.RandomState(2)
    s0, x = rng.randn(2, 3).astype(np.float32), rng.randn(2, 5, 3).astype(np.float32)
    s, ys, zs = s0.copy(), [], []
    for t in range(5):
        xt = x[:, 4 - t]
        s = s + np.tanh(xt)
        ys.append(s * xt)
        zs.append(s.sum())
    ref = {"s_final": s, "ys": np.stack(ys, 1), "zs": np.array(zs[::-1], np.float32)}
    np.save(os.path.join(work, "s0.npy"), s0)
    np.save(os.path.join(work, "xs.npy"), x)
    specs = [f"s0={work}/s0.npy", f"x={work}/xs.npy"]
    sh([dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(work, "scan-dlc")] + specs)
    sh(["node", os.path.join(ORT, "ort.js"), "run", path, os.path.join(work, "scan-ort")] + specs)
    failures = 0
    for name, want in ref.items():
        got = np.load(os.path.join(work, "scan-dlc", name + ".npy"))
        ort = np.load(os.path.join(work, "scan-ort", name + ".npy"))
        ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5) and \
            np.allclose(got, ort, rtol=1e-5, atol=1e-5)
        failures += not ok
        print(f"scan {name} {list(got.shape)}: |dlc - numpy| {np.abs(got - want).max():.2e}, "
              f"|dlc - ort| {np.abs(got - ort).max():.2e} {'ok' if ok else 'MISMATCH'}")
    return failures


class While(nn.Module):
    def forward(self, x):
        total = torch.zeros_like(x)
        while bool(total.sum() < 10.0):
            total = total + torch.relu(x) + 0.1
        return total


def check_runtime_loops(dlc, work):
    """Loops whose iterations are decided at run time, compiled with --loop-bound: a
    TorchScript while loop, and a Loop whose trip count is an input. Each must match
    numpy (and ONNX Runtime) below the bound, and a run that needs more iterations must
    fail naming the loop; without --loop-bound they are refused."""
    failures = 0
    path = os.path.join(work, "while.onnx")
    torch.onnx.export(torch.jit.script(While()), (torch.randn(2, 3),), path, input_names=["x"],
                      output_names=["total"], opset_version=17)
    power = save_power_loop(os.path.join(work, "power.onnx"))
    for onnx_path in (path, power):
        try:
            sh([dlc, "compile", onnx_path, "--target", "emu", "-o", os.path.join(work, "unbounded.dlc"), "-q"])
            print(f"{os.path.basename(onnx_path)}: compiled without --loop-bound")
            failures += 1
        except RuntimeError as e:
            if "give a bound with --loop-bound N" not in str(e):
                print(f"unexpected error: {e}")
                failures += 1

    def run(pkg, onnx_path, inputs, name):
        w = os.path.join(work, name)
        os.makedirs(w, exist_ok=True)
        specs = []
        for k, v in inputs.items():
            np.save(os.path.join(w, k + ".npy"), v)
            specs.append(f"{k}={w}/{k}.npy")
        sh([dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(w, "dlc")] + specs)
        sh(["node", os.path.join(ORT, "ort.js"), "run", onnx_path, os.path.join(w, "ort")] + specs)
        return w

    pkg = os.path.join(work, "while.dlc")
    sh([dlc, "compile", path, "--target", "emu", "-o", pkg, "-q", "--loop-bound", "24"])
    for name, x in (("few", np.array([[0.5, 1, 2], [-1, 0.2, 0.3]], np.float32)),
                    ("many", np.full((2, 3), -1, np.float32))):
        total, steps = np.zeros_like(x), 0
        while total.sum() < 10.0:
            total, steps = total + np.maximum(x, 0) + np.float32(0.1), steps + 1
        w = run(pkg, path, {"x": x}, "while-" + name)
        got, ort = np.load(os.path.join(w, "dlc", "total.npy")), np.load(os.path.join(w, "ort", "total.npy"))
        ok = np.allclose(got, total, rtol=1e-5, atol=1e-5) and np.allclose(got, ort, rtol=1e-5, atol=1e-5)
        failures += not ok
        print(f"while loop ({steps} iterations, bound 24): |dlc - numpy| {np.abs(got - total).max():.2e}, "
              f"|dlc - ort| {np.abs(got - ort).max():.2e} {'ok' if ok else 'MISMATCH'}")
    pkg = os.path.join(work, "power.dlc")
    sh([dlc, "compile", power, "--target", "emu", "-o", pkg, "-q", "--loop-bound", "6"])
    x = np.array([1.5, -2.0, 0.5], np.float32)
    for n in (0, 3, 6):
        w = run(pkg, power, {"x": x, "n": np.array(n, np.int64)}, f"power-{n}")
        got, ort = np.load(os.path.join(w, "dlc", "acc.npy")), np.load(os.path.join(w, "ort", "acc.npy"))
        ok = np.allclose(got, x ** n, rtol=1e-6) and np.allclose(got, ort, rtol=1e-6)
        failures += not ok
        print(f"trip count n={n} (bound 6): |dlc - numpy| {np.abs(got - x ** n).max():.2e} {'ok' if ok else 'MISMATCH'}")
    np.save(os.path.join(work, "n7.npy"), np.array(7, np.int64))
    r = subprocess.run([dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(work, "power-7"),
                        f"x={work}/power-6/x.npy", f"n={work}/n7.npy"], capture_output=True, text=True)
    want = "node 'power': the loop needs more than 6 iterations"
    if r.returncode == 0 or want not in r.stderr:
        print(f"n=7 past the bound 6: expected an error containing {want!r}, got rc={r.returncode}: {r.stderr}")
        failures += 1
    else:
        print(f"n=7 past the bound 6: {r.stderr.strip().splitlines()[-1]}")
    return failures


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
                      output_names=["y", "acc"], opset_version=17)
    pkg = os.path.join(a.work, "gate.dlc")
    sh([a.dlc, "compile", onnx_path, "--target", "emu", "--no-tf32", "-o", pkg, "-q"])
    limited = os.path.join(a.work, "limit.dlc")
    if os.path.exists(limited):
        os.remove(limited)
    try:
        sh([a.dlc, "compile", onnx_path, "--target", "emu", "--max-loop-unroll", "3", "-o", limited, "-q"])
        raise AssertionError("a trip count above --max-loop-unroll compiled")
    except RuntimeError as e:
        assert "exceeds the unroll limit of 3 iterations" in str(e), e
        assert not os.path.exists(limited)
    insp = json.loads(sh([a.dlc, "inspect", pkg, "--json"]))
    assert insp["conditional_steps"] >= 2, insp["conditional_steps"]
    ensure_ort()
    seen = set()
    failures = 0
    for use_a in (True, False):
        for shift in (1.0, -1.0):  # the second If both ways
            x = torch.randn(4, 8) * 0.5 + shift
            with torch.no_grad():
                y, acc = (t.numpy() for t in model(x, torch.tensor(use_a)))
            second = bool(x.sum() > 0)
            seen.add((use_a, second))
            w = os.path.join(a.work, f"{int(use_a)}{int(second)}")
            os.makedirs(w, exist_ok=True)
            np.save(os.path.join(w, "x.npy"), x.numpy())
            np.save(os.path.join(w, "use_a.npy"), np.array(use_a))
            specs = [f"x={w}/x.npy", f"use_a={w}/use_a.npy"]
            sh([a.dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", os.path.join(w, "dlc")] + specs)
            sh(["node", os.path.join(ORT, "ort.js"), "run", onnx_path, os.path.join(w, "ort")] + specs)
            errs, ok = [], True
            for name, ref in (("y", y), ("acc", acc)):
                got = np.load(os.path.join(w, "dlc", name + ".npy"))
                ort = np.load(os.path.join(w, "ort", name + ".npy"))
                ok &= np.allclose(got, ref, rtol=1e-4, atol=1e-5) and np.allclose(got, ort, rtol=1e-4, atol=1e-5)
                errs.append(f"{name}: |dlc - torch| {np.abs(got - ref).max():.2e}, |dlc - ort| {np.abs(got - ort).max():.2e}")
            failures += not ok
            print(f"use_a={use_a} sum(x)>0={second}: {'; '.join(errs)} {'ok' if ok else 'MISMATCH'}")
    failures += check_break_loop(a.dlc, a.work)
    failures += check_scan(a.dlc, a.work)
    failures += check_runtime_loops(a.dlc, a.work)
    if len(seen) != 4:
        print(f"only {len(seen)} of the 4 branch combinations were exercised")
        failures += 1
    print(f"control flow: {4 - failures if failures <= 4 else 0}/4 branch combinations match; "
          f"{insp['conditional_steps']} conditional steps")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
