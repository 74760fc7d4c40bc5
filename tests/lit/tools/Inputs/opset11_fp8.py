"""An opset-11 model whose ops changed incompatibly by opset 19: attributes made inputs
(Split's split, ReduceMean's, Squeeze's and Unsqueeze's axes, Dropout's ratio), a Split
without sizes (opset 18 needs num_outputs) and Softmax's flattening at its default axis
1 (before opset 13; a LogSoftmax on axis -1 needs nothing), around a Conv; and a check
that its FP8 form (dlc quantize --fp8, written at opset 19) computes what it does.

usage: opset11_fp8.py OUT.onnx                      write the model
       opset11_fp8.py --check MODEL.onnx FP8.onnx   compare, with ONNX Runtime
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if sys.argv[1] != "--check":
    r = np.random.RandomState(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Split", ["c"], ["s1", "s2"], name="split", axis=1, split=[1, 3]),
        helper.make_node("ReduceMean", ["s2"], ["m"], name="mean", axes=[1], keepdims=1),
        helper.make_node("Add", ["s1", "m"], ["a"], name="add"),
        helper.make_node("Squeeze", ["a"], ["q"], name="squeeze", axes=[0, 1]),
        helper.make_node("Unsqueeze", ["q"], ["y"], name="unsqueeze", axes=[0]),
        helper.make_node("Dropout", ["c"], ["dr"], name="dropout", ratio=0.3),
        helper.make_node("Softmax", ["dr"], ["z"], name="softmax"),
        helper.make_node("LogSoftmax", ["c"], ["ls"], name="logsoftmax", axis=-1),
        helper.make_node("Split", ["c"], ["h1", "h2"], name="halves", axis=1),
        helper.make_node("Sub", ["h1", "h2"], ["v"], name="sub"),
    ]
    g = helper.make_graph(nodes, "opset11", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 6]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 6, 6]),
                           helper.make_tensor_value_info("ls", TensorProto.FLOAT, [1, 4, 6, 6]),
                           helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 2, 6, 6])],
                          [numpy_helper.from_array(r.randn(4, 4, 3, 3).astype(np.float32) * 0.3, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 6
    onnx.save(m, sys.argv[1])
    sys.exit(0)

model, fp8 = sys.argv[2], sys.argv[3]
m = onnx.load(fp8)
moved = {n.name: (len(n.input), sorted(a.name for a in n.attribute)) for n in m.graph.node
         if n.name in ("split", "mean", "squeeze", "unsqueeze", "dropout", "softmax", "logsoftmax", "halves")}
print("opset", m.opset_import[0].version, "ir", m.ir_version, sorted(moved.items()))
ort = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tools", "ort", "ort.js")
work = os.path.dirname(os.path.abspath(fp8))
x = np.random.RandomState(1).rand(1, 4, 6, 6).astype(np.float32)
np.save(os.path.join(work, "x11.npy"), x)
out = {}
for name, path in [("fp32", model), ("fp8", fp8)]:
    d = os.path.join(work, "ort11-" + name)
    subprocess.run(["node", ort, "run", path, d, "x=" + os.path.join(work, "x11.npy")], check=True,
                   env=dict(os.environ, ORT_OPT_LEVEL="basic"))
    out[name] = [np.load(os.path.join(d, o + ".npy")) for o in ("y", "z", "ls", "v")]
for k, o in enumerate(("y", "z", "ls", "v")):
    f8, f32 = out["fp8"][k], out["fp32"][k]
    err = float(np.abs(f8 - f32).max() / np.abs(f32).max())
    # (z: the softmax over all 144 values of the image, as opset 11's Softmax flattens.)
    print(o, "shape", f8.shape, "sums", round(float(f8.sum()), 3), "relative error below 0.1:", err < 0.1)
