#!/usr/bin/python3
"""Writes the fuzzers' seed corpora (tests/fuzz/seeds/<target>/, committed): small
valid and invalid inputs of each format. Run from the repository root after a build:
    /usr/bin/python3 tests/fuzz/make_seeds.py build/tools/dlc tests/fuzz/seeds
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

dlc, out = sys.argv[1], sys.argv[2]
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for t in ("onnx", "package", "npy", "textir"):
    shutil.rmtree(os.path.join(out, t), ignore_errors=True)
    os.makedirs(os.path.join(out, t))
tmp = tempfile.mkdtemp()

# ONNX: the bad-model corpus plus a few small node tests.
subprocess.run([sys.executable, os.path.join(root, "tests", "lit", "frontend", "make_bad_models.py"), tmp],
               check=True)
for f in glob.glob(os.path.join(tmp, "*.onnx")):
    if os.path.getsize(f) < 64 * 1024:
        shutil.copy(f, os.path.join(out, "onnx"))
node = "/usr/share/libonnx-testdata/data/node"
for case in ("test_relu", "test_conv_with_strides_padding", "test_gemm_default_matrix_bias", "test_lstm_defaults",
             "test_softmax_axis_1", "test_reshape_reordered_all_dims", "test_slice", "test_layer_normalization_4d_axis1",
             "test_gather_0", "test_resize_upsample_scales_linear"):
    f = os.path.join(node, case, "model.onnx")
    if os.path.exists(f):
        shutil.copy(f, os.path.join(out, "onnx", case + ".onnx"))

# Textual IR: the unit corpus and small lit inputs.
for f in glob.glob(os.path.join(root, "tests", "unit", "ir", "corpus", "*.ir")) + \
        glob.glob(os.path.join(root, "tests", "lit", "*", "Inputs", "*.ir")):
    if os.path.getsize(f) < 16 * 1024:
        shutil.copy(f, os.path.join(out, "textir", os.path.basename(f)))

# Packages: small graphs compiled for emu, covering every table of the format: a
# training step (variables, update lanes, an evaluation schedule), steps conditional on
# a run-time If, inputs bound at compile time, shape ranges, and a data-parallel step
# (an all-reduce bucket and its wait).
graphs = {
    "relu": 'graph @g(%x: f32[2,4]) -> ("y": f32[2,4]) {\n  %y = Relu(%x) : f32[2,4]\n  return %y\n}\n',
    "mlp": open(os.path.join(root, "tests", "lit", "tools", "Inputs", "mlp.ir")).read(),
    "sgd": """graph @sgd(%x: f32[3]) -> ("loss": f32[], "dlc.eval.loss": f32[]) {
  %w = param f32[3] dense<[1.0, 2.0, 3.0]>
  %lr = const f32[] dense<[0.5]>
  %p = Mul(%x, %w) : f32[3]
  %loss = ReduceSum(%p) {keepdims = 0} : f32[]
  %e = ReduceMax(%p) {keepdims = 0} : f32[]
  %g = Mul(%x, %lr) : f32[3]
  %w1 = Sub(%w, %g) : f32[3]
  update %w = %w1
  return %loss, %e
}
""",
    "dp": open(os.path.join(root, "tests", "lit", "tools", "Inputs", "data_parallel.ir")).read(),
    "branches": """graph @branches(%x: f32[2,4], %c: bool[]) -> ("y": f32[2,4]) {
  %a = ReduceSum(%x) {axes = [1], keepdims = 1} : f32[2,1]
  %t = Mul(%x, %a) : f32[2,4]
  %b = Softmax(%x) {axis = 1} : f32[2,4]
  %y = Where(%c, %t, %b) : f32[2,4]
  return %y
}
""",
}
for name, text in graphs.items():
    ir = os.path.join(tmp, name + ".ir")
    open(ir, "w").write(text)
    subprocess.run([dlc, "compile", ir, "--target", "emu", "-o", os.path.join(out, "package", name + ".dlc"), "-q"],
                   check=True)
bind = os.path.join(tmp, "bind.onnx")
subprocess.run([sys.executable, os.path.join(root, "tests", "lit", "tools", "Inputs", "make_bind_model.py"), bind],
               check=True)
subprocess.run([dlc, "compile", bind, "--target", "emu", "--bind", "shape=3,4", "-o",
                os.path.join(out, "package", "bound.dlc"), "-q"], check=True)
# A shape-range package (its schedule variants over shared kernels): batch 1..3.
import onnx
from onnx import TensorProto, helper
ranged = helper.make_model(helper.make_graph(
    [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=1)], "ranged",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])]), opset_imports=[helper.make_opsetid("", 13)])
ranged.ir_version = 8
onnx.save(ranged, os.path.join(tmp, "ranged.onnx"))
subprocess.run([dlc, "compile", os.path.join(tmp, "ranged.onnx"), "--target", "emu", "--input-shape", "x=1..3,4",
                "-o", os.path.join(out, "package", "ranged.dlc"), "-q"], check=True)

# .npy: every supported dtype, a scalar, an empty array, format 2.0.
for dt in ("<f4", "<f8", "<i8", "<i4", "|u1", "|b1", "<f2"):
    np.save(os.path.join(out, "npy", "a_" + dt.strip("<|") + ".npy"), np.zeros((2, 3), dtype=np.dtype(dt)))
np.save(os.path.join(out, "npy", "scalar.npy"), np.float32(1.5))
np.save(os.path.join(out, "npy", "empty.npy"), np.zeros((0, 4), np.float32))
with open(os.path.join(out, "npy", "v2.npy"), "wb") as f:
    np.lib.format.write_array(f, np.ones((3,), np.float32), version=(2, 0))
shutil.rmtree(tmp)
print("seeds:", {t: len(os.listdir(os.path.join(out, t))) for t in ("onnx", "package", "npy", "textir")})
