#!/usr/bin/python3
"""Writes the bad-input corpus into a directory (argv[1]): the malformed ONNX models of
tests/lit/frontend/make_bad_models.py plus graph contradictions, corrupted .dlc
packages (made from a good one, argv[2]) and broken .npy files. run_bad_inputs.py
feeds each to dlc."""
import os
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out, good_pkg = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(out, exist_ok=True)
subprocess.run([sys.executable, os.path.join(here, "..", "lit", "frontend", "make_bad_models.py"), out], check=True)


def save(name, m):
    with open(os.path.join(out, name), "wb") as f:
        f.write(m.SerializeToString())


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="dlc-bad-inputs")


vi = helper.make_tensor_value_info
# Graph contradictions.
save("dtype_mismatch.onnx", model([helper.make_node("Add", ["x", "i"], ["y"], name="mixed")],
                                  [vi("x", TensorProto.FLOAT, [2]), vi("i", TensorProto.INT64, [2])],
                                  [vi("y", TensorProto.FLOAT, [2])]))
save("shape_mismatch.onnx", model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                                  [vi("a", TensorProto.FLOAT, [2, 3]), vi("b", TensorProto.FLOAT, [4, 5])],
                                  [vi("y", TensorProto.FLOAT, [2, 5])]))
save("negative_dim.onnx", model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                [vi("x", TensorProto.FLOAT, [2, -3])], [vi("y", TensorProto.FLOAT, [2, -3])]))
bad_init = numpy_helper.from_array(np.zeros(4, np.float32), "w")
bad_init.dims[:] = [3, 5]  # 15 elements declared, 4 stored
save("initializer_size.onnx", model([helper.make_node("Add", ["x", "w"], ["y"], name="addw")],
                                    [vi("x", TensorProto.FLOAT, [3, 5])], [vi("y", TensorProto.FLOAT, [3, 5])],
                                    [bad_init]))
save("undefined_output.onnx", model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                    [vi("x", TensorProto.FLOAT, [2])], [vi("nowhere", TensorProto.FLOAT, [2])]))

# The same contradictions in a model above the ONNX library's IR 8 / opset 17, which
# dlc checks itself.
for name in ["dtype_mismatch", "shape_mismatch", "negative_dim", "initializer_size", "undefined_output"]:
    m = onnx.load(os.path.join(out, name + ".onnx"))
    m.opset_import[0].version = 18
    m.ir_version = 9
    save(name + "18.onnx", m)

# Corrupted packages, from a good one.
good = open(good_pkg, "rb").read()
w = lambda name, data: open(os.path.join(out, name), "wb").write(data)
w("truncated.dlc", good[: len(good) // 2])
w("header_only.dlc", good[:64])
w("empty.dlc", b"")
w("not_a_package.dlc", b"PK\x03\x04 this is a zip file, not a package" * 8)
flipped = bytearray(good)
flipped[len(good) // 2] ^= 0x40
w("flipped_byte.dlc", bytes(flipped))
w("wrong_magic.dlc", b"DLCPKG\x00\x09" + good[8:])
w("appended_garbage.dlc", good + b"\x00garbage")

# Broken .npy inputs (the good package takes x: f32[2,4]).
def npy(name, header, body=b"", magic=b"\x93NUMPY\x01\x00"):
    h = header.encode()
    h += b" " * ((64 - (len(magic) + 2 + len(h) + 1) % 64) % 64) + b"\n"
    w(name, magic + struct.pack("<H", len(h)) + h + body)


floats = np.zeros(8, np.float32).tobytes()
npy("npy_bad_magic.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", floats,
    magic=b"\x93NUMPX\x01\x00")
w("npy_truncated_header.npy", b"\x93NUMPY\x01\x00\x40\x00{'descr': '<f4'")
npy("npy_complex.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (2, 4), }", floats * 2)
npy("npy_wrong_shape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 1), }", floats)
npy("npy_wrong_dtype.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 4), }", floats * 2)
npy("npy_short_data.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", floats[:12])
npy("npy_fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 4), }", floats)
npy("npy_big_endian.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 4), }", floats)
npy("npy_huge_shape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", floats)
npy("npy_garbage_header.npy", "{'descr': '<f4', 'shape': (2, 4 ", floats)

# Textual IR.
w("syntax_error.ir", b"graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %y = Relu(%x : f32[2]\n  return %y\n}\n")
w("undefined_value.ir", b"graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %y = Relu(%z) : f32[2]\n  return %y\n}\n")
w("wrong_result_type.ir", b"graph @g(%x: f32[2]) -> (\"y\": f32[3]) {\n  %y = Relu(%x) : f32[3]\n  return %y\n}\n")
print(f"wrote the bad-input corpus to {out}")
