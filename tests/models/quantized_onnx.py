#!/usr/bin/env python3
"""Quantized ONNX against ONNX Runtime (onnxruntime-node, CPU).

Models are built with onnx.helper; each runs through `dlc compile --target emu` +
`dlc run` and ONNX Runtime on the same inputs:
  - integer outputs (QuantizeLinear, QLinearConv, QLinearMatMul, ConvInteger,
    MatMulInteger, DynamicQuantizeLinear's y and zero point) must be equal;
  - float outputs (dequantized) must agree within one quantization step of the
    output (the scale the case names), and exactly where nothing but dequantizing
    happens.
Cases: QuantizeLinear/DequantizeLinear per tensor and per axis, u8 and i8, FP32 and
FP16 inputs, opsets 10, 13 and 21; blocked (opset 21), with INT4/UINT4 weights; DynamicQuantizeLinear on mixed, positive, negative
and zero inputs; ConvInteger and MatMulInteger (the DynamicQuantizeLinear + ConvInteger
pattern of ONNX Runtime's dynamic quantization, as IS-Net's quint8 model); QLinearConv
(per-channel weights, a bias) and QLinearMatMul; QDQ MatMul, Gemm (transB, int32 bias,
Relu), a QDQ CNN (int8 per-channel weights, int32 biases) and a QDQ transformer MLP;
com.microsoft MatMulNBits (2-, 4- and 8-bit, blocks of 16 and 32, packed zero points, a
bias; few rows on the packed kernel, 20 through the weights dequantized at import);
com.microsoft QLinearAdd, QLinearMul, QLinearConcat and QLinearGlobalAveragePool; float8
(e4m3fn, e5m2) QuantizeLinear, DequantizeLinear and Cast, and a float8 QDQ Conv. Compiled
in strict FP32 (--no-tf32, as ONNX Runtime's CPU provider), and the QDQ and dynamic
cases also with --fp16.

usage: quantized_onnx.py --dlc build/tools/dlc --work DIR [--only SUBSTRING] [--device cuda]
(--device cuda: the same comparisons run on a GPU: tests/gpu/gpu_smoke.sh)
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_models import ensure_ort  # noqa: E402
from modern_onnx import npy_out, run_dlc, run_ort  # noqa: E402

TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.uint8: TensorProto.UINT8,
         np.int8: TensorProto.INT8, np.int32: TensorProto.INT32}


class Model:
    def __init__(self, seed=7):
        self.rng = np.random.RandomState(seed)
        self.inputs, self.outputs, self.inits, self.nodes, self.feeds = [], [], [], [], {}
        self.step = {}  # output name -> the tolerance (a quantization step; 0: exact)
        self.fp16_rel, self.fp16_step = {}, {}

    def input(self, name, value):
        value = np.asarray(value)
        self.inputs.append(helper.make_tensor_value_info(name, TYPES[value.dtype.type], list(value.shape)))
        self.feeds[name] = value
        return name

    def const(self, name, value, dtype):
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op, ins, outs, domain="", **attrs):
        self.nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{len(self.nodes)}", domain=domain, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def output(self, name, dtype, rank, step=0.0, fp16_rel=None, fp16_step=None):
        """`step`: the tolerance (integers: 0 unless both runtimes compute in float);
        under --fp16, `fp16_step` instead where given, and `fp16_rel` the relative one
        of a float island (else exact)."""
        self.outputs.append(helper.make_tensor_value_info(name, TYPES[dtype], [f"{name}_{i}" for i in range(rank)]))
        self.step[name] = step
        self.fp16_rel[name] = fp16_rel
        self.fp16_step[name] = step if fp16_step is None else fp16_step

    def build(self, opset):
        g = helper.make_graph(self.nodes, "g", self.inputs, self.outputs, self.inits)
        ops = [helper.make_opsetid("", opset)]
        if any(n.domain == "com.microsoft" for n in self.nodes):
            ops.append(helper.make_opsetid("com.microsoft", 1))
        m = helper.make_model(g, opset_imports=ops, producer_name="dlc-quantized")
        m.ir_version = 7 if opset <= 15 else 8 if opset <= 18 else 9 if opset <= 20 else 10
        return m


CASES = []


def case(name, opset, fp16=False):
    """`fp16`: also compiled with --fp16, against the same ONNX Runtime result (the
    integer regions stay exact; the float islands within the output's step)."""
    def wrap(f):
        CASES.append((name, opset, f, fp16))
        return f
    return wrap


def weights_i8(rng, shape):
    return rng.randint(-127, 128, shape).astype(np.int8)


@case("qdq_per_tensor_u8_i8", 13)
def _(m):
    x = m.input("x", (m.rng.randn(2, 3, 5) * 4).astype(np.float32))
    # Values at exact halves of the step, to see rounding half to even and saturation.
    h = m.input("h", np.array([-3.0, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 600.0, -600.0, np.nan], np.float32))
    s, zu, zi = m.const("s", 0.05, np.float32), m.const("zu", 128, np.uint8), m.const("zi", -3, np.int8)
    m.node("QuantizeLinear", [x, s, zu], ["qu"])
    m.node("QuantizeLinear", [x, s, zi], ["qi"])
    m.node("QuantizeLinear", [x, s], ["qn"])  # no zero point: u8, 0
    m.node("QuantizeLinear", [h, m.const("one", 1.0, np.float32), zi], ["qh"])
    m.node("DequantizeLinear", ["qu", s, zu], ["du"])
    m.node("DequantizeLinear", ["qi", s, zi], ["di"])
    for n, t in [("qu", np.uint8), ("qi", np.int8), ("qn", np.uint8), ("qh", np.int8)]:
        m.output(n, t, 3 if n != "qh" else 1)
    m.output("du", np.float32, 3)
    m.output("di", np.float32, 3)


@case("qdq_per_axis", 13)
def _(m):
    x = m.input("x", (m.rng.randn(2, 4, 3, 3) * 2).astype(np.float32))
    s = m.const("s", [0.01, 0.02, 0.05, 0.1], np.float32)
    z = m.const("z", [0, 10, -10, 5], np.int8)
    m.node("QuantizeLinear", [x, s, z], ["q"], axis=1)
    m.node("DequantizeLinear", ["q", s, z], ["d"], axis=1)
    w = m.input("w", m.rng.randint(-128, 128, (3, 5)).astype(np.int8))
    m.node("DequantizeLinear", [w, m.const("ws", [0.5, 0.25, 0.125, 2.0, 1.0], np.float32),
                                m.const("wz", [0, 1, 2, 3, 4], np.int8)], ["wd"], axis=-1)
    m.node("DequantizeLinear", [m.input("acc", m.rng.randint(-100000, 100000, (4, 3)).astype(np.int32)),
                                m.const("as", 0.001, np.float32)], ["ad"])
    m.output("q", np.int8, 4)
    m.output("d", np.float32, 4)
    m.output("wd", np.float32, 2)
    m.output("ad", np.float32, 2)


@case("qdq_fp16_opset21", 21)
def _(m):
    x = m.input("x", (m.rng.randn(3, 8) * 3).astype(np.float16))
    s = m.const("s", 0.03, np.float16)
    m.node("QuantizeLinear", [x, s, m.const("z", 3, np.uint8)], ["q"])
    m.node("DequantizeLinear", ["q", s, "z"], ["d"])
    m.node("QuantizeLinear", [x, s], ["qi"], output_dtype=TensorProto.INT8)
    m.output("q", np.uint8, 2)
    m.output("d", np.float16, 2)
    m.output("qi", np.int8, 2)


@case("dynamic_quantize_linear", 11, fp16=True)
def _(m):
    for i, v in enumerate([m.rng.randn(4, 7) * 3, np.abs(m.rng.randn(5)) + 0.5, -np.abs(m.rng.randn(2, 3)) - 1,
                           np.array([[-1.0, 0.0, 2.5]]), np.zeros((2, 2))]):  # zeros: scale 1, zero point 0
        x = m.input(f"x{i}", v.astype(np.float32))
        m.node("DynamicQuantizeLinear", [x], [f"y{i}", f"s{i}", f"z{i}"])
        m.output(f"y{i}", np.uint8, v.ndim)
        m.output(f"s{i}", np.float32, 0)
        m.output(f"z{i}", np.uint8, 0)


@case("conv_integer_dynamic", 11, fp16=True)
def _(m):
    # ONNX Runtime's dynamic quantization of a conv (IS-Net quint8): the activations
    # quantized at run time, the weights u8 with a zero point, the int32 sums scaled back.
    x = m.input("x", (m.rng.randn(1, 3, 9, 9)).astype(np.float32))
    y, s, z = m.node("DynamicQuantizeLinear", [x], ["xq", "xs", "xz"])
    w = m.const("w", m.rng.randint(0, 256, (4, 3, 3, 3)), np.uint8)
    acc = m.node("ConvInteger", [y, w, z, m.const("wz", 131, np.uint8)], ["acc"], pads=[1, 1, 1, 1],
                 strides=[2, 2])
    f = m.node("Cast", [acc], ["accf"], to=TensorProto.FLOAT)
    sc = m.node("Mul", [s, m.const("ws", 0.004, np.float32)], ["sc"])
    m.node("Mul", [f, sc], ["out"])
    m.node("ConvInteger", [m.input("xi", m.rng.randint(-128, 128, (2, 4, 5, 5)).astype(np.int8)),
                           m.const("wi", weights_i8(m.rng, (6, 2, 3, 3)), np.int8),
                           m.const("xiz", -5, np.int8), m.const("wiz", 3, np.int8)],
           ["acci"], group=2, auto_pad="SAME_UPPER")
    m.output("acc", np.int32, 4)
    m.output("out", np.float32, 4, fp16_rel=1e-2)  # float(sums) * scale: FP16 under --fp16
    m.output("acci", np.int32, 4)


@case("matmul_integer", 10)
def _(m):
    a = m.input("a", m.rng.randint(0, 256, (2, 5, 16)).astype(np.uint8))
    b = m.const("b", m.rng.randint(0, 256, (16, 6)), np.uint8)
    m.node("MatMulInteger", [a, b, m.const("az", 120, np.uint8), m.const("bz", [1, 2, 3, 4, 5, 250], np.uint8)],
           ["y"])
    a2 = m.input("a2", m.rng.randint(-128, 128, (4, 8)).astype(np.int8))
    m.node("MatMulInteger", [a2, m.const("b2", weights_i8(m.rng, (8, 3)), np.int8),
                             m.const("a2z", -2, np.int8)], ["y2"])
    m.output("y", np.int32, 3)
    m.output("y2", np.int32, 2)


@case("qlinear_conv_matmul", 10)
def _(m):
    x = m.input("x", m.rng.randint(0, 256, (1, 4, 6, 6)).astype(np.uint8))
    ins = [x, m.const("xs", 0.02, np.float32), m.const("xz", 128, np.uint8),
           m.const("w", weights_i8(m.rng, (5, 4, 3, 3)), np.int8),
           m.const("ws", [0.01, 0.02, 0.005, 0.03, 0.015], np.float32), m.const("wz", [0] * 5, np.int8),
           m.const("ys", 0.05, np.float32), m.const("yz", 100, np.uint8),
           m.const("b", m.rng.randint(-500, 500, 5), np.int32)]
    m.node("QLinearConv", ins, ["y"], pads=[1, 1, 1, 1])
    a = m.input("a", m.rng.randint(0, 256, (3, 32)).astype(np.uint8))
    m.node("QLinearMatMul", [a, m.const("as", 0.03, np.float32), m.const("az", 110, np.uint8),
                             m.const("mb", m.rng.randint(0, 256, (32, 7)), np.uint8), m.const("bs", 0.02, np.float32),
                             m.const("bz", 125, np.uint8), m.const("ms", 0.4, np.float32),
                             m.const("mz", 10, np.uint8)], ["z"])
    m.output("y", np.uint8, 4)
    m.output("z", np.uint8, 2)


@case("qdq_matmul", 13, fp16=True)
def _(m):
    # DequantizeLinear operands into a MatMul into QuantizeLinear (ONNX Runtime fuses it
    # into a QLinearMatMul; dlc's fold-qdq computes the same int32 sums), per-column
    # int8 weight scales, batched A.
    a = m.input("a", m.rng.randint(0, 256, (2, 5, 24)).astype(np.uint8))
    ad = m.node("DequantizeLinear", [a, m.const("as", 0.02, np.float32), m.const("az", 117, np.uint8)], ["ad"])
    bd = m.node("DequantizeLinear", [m.const("b", weights_i8(m.rng, (24, 6)), np.int8),
                                     m.const("bs", m.rng.rand(6) * 0.01 + 0.001, np.float32),
                                     m.const("bz", [0] * 6, np.int8)], ["bd"], axis=1)
    mm = m.node("MatMul", [ad, bd], ["mm"])
    m.node("QuantizeLinear", [mm, m.const("ys", 0.05, np.float32), m.const("yz", 3, np.int8)], ["y"])
    m.output("y", np.int8, 3)
    # i8 activations with a zero point (ONNX Runtime's quantizer with asymmetric QInt8).
    i = m.input("i", m.rng.randint(-128, 128, (3, 24)).astype(np.int8))
    idq = m.node("DequantizeLinear", [i, "as", m.const("iz", -7, np.int8)], ["idq"])
    m.node("QuantizeLinear", [m.node("MatMul", [idq, bd], ["im"]), "ys", "yz"], ["yi"])
    m.output("yi", np.int8, 2)


@case("qdq_gemm", 13, fp16=True)
def _(m):
    # A quantized fully connected layer as quantization tools write it: Gemm with transB
    # and an int32 bias (scale a_scale * b_scale), per-output-channel int8 weights, then
    # a Relu, into QuantizeLinear (ONNX Runtime fuses it into QGemm).
    a = m.input("a", m.rng.randint(0, 256, (4, 32)).astype(np.uint8))
    a_s = np.float32(0.02)
    ad = m.node("DequantizeLinear", [a, m.const("as", a_s, np.float32), m.const("az", 120, np.uint8)], ["ad"])
    b_s = (m.rng.rand(10) * 0.01 + 0.001).astype(np.float32)
    bd = m.node("DequantizeLinear", [m.const("b", weights_i8(m.rng, (10, 32)), np.int8),
                                     m.const("bs", b_s, np.float32), m.const("bz", [0] * 10, np.int8)],
                ["bd"], axis=0)
    cd = m.node("DequantizeLinear", [m.const("c", m.rng.randint(-3000, 3000, 10), np.int32),
                                     m.const("cs", (a_s * b_s).astype(np.float32), np.float32)], ["cd"], axis=0)
    g = m.node("Gemm", [ad, bd, cd], ["g"], transB=1)
    r = m.node("Relu", [g], ["r"])
    m.node("QuantizeLinear", [r, m.const("ys", 0.1, np.float32), m.const("yz", 0, np.uint8)], ["y"])
    m.output("y", np.uint8, 2)


def pack_bits(q, bits):
    """Rows of `bits`-bit values packed low bits first into bytes."""
    per = 8 // bits
    q = q.reshape(q.shape[0], -1, per).astype(np.uint16)
    return sum(q[:, :, i] << (bits * i) for i in range(per)).astype(np.uint8)


@case("matmul_nbits", 17, fp16=True)
def _(m):
    # ONNX Runtime's weight-only GEMM (com.microsoft MatMulNBits, LLM exports): 4-bit with K
    # = 40 in blocks of 16 (the last one padded), with and without packed zero points, a
    # bias; and 8-bit.
    K, N, block = 40, 6, 16
    blocks = (K + block - 1) // block
    a = m.input("a", m.rng.randn(2, 3, K).astype(np.float32))
    q = m.rng.randint(0, 16, (N, blocks * block))
    q[:, K:] = 0
    b = pack_bits(q, 4).reshape(N, blocks, block // 2)
    scales = (m.rng.rand(N * blocks) * 0.1 + 0.01).astype(np.float32)
    zps = pack_bits(np.pad(m.rng.randint(0, 16, (N, blocks)), ((0, 0), (0, blocks % 2))), 4).reshape(-1)
    m.node("MatMulNBits", [a, m.const("b", b, np.uint8), m.const("s", scales, np.float32),
                           m.const("z", zps, np.uint8)], ["y"], domain="com.microsoft", K=K, N=N, bits=4, accuracy_level=1,
           block_size=block)
    m.node("MatMulNBits", [a, "b", "s", "", "", m.const("bias", m.rng.randn(N), np.float32)], ["y2"],
           domain="com.microsoft", K=K, N=N, bits=4, block_size=block, accuracy_level=1)
    # 8-bit weights, K a whole number of blocks (32), no zero points (128).
    q8 = m.rng.randint(0, 256, (N, 32))
    m.node("MatMulNBits", [m.input("a8", m.rng.randn(3, 32).astype(np.float32)),
                           m.const("b8", q8.reshape(N, 2, 16), np.uint8),
                           m.const("s8", (m.rng.rand(N * 2) * 0.01).astype(np.float32), np.float32)], ["y3"],
           domain="com.microsoft", K=32, N=N, bits=8, block_size=16, accuracy_level=1)
    # (Under --fp16 the activations are FP16: within 0.05 of ONNX Runtime's FP32.)
    # 2-bit weights; and 20 rows, more than the packed kernel takes (dequantized at import).
    q2 = m.rng.randint(0, 4, (N, 64))
    m.node("MatMulNBits", [m.input("a2", m.rng.randn(2, 64).astype(np.float32)),
                           m.const("b2", pack_bits(q2, 2).reshape(N, 2, 8), np.uint8),
                           m.const("s2", (m.rng.rand(N * 2) * 0.1).astype(np.float32), np.float32)], ["y4"],
           domain="com.microsoft", K=64, N=N, bits=2, block_size=32, accuracy_level=1)
    m.node("MatMulNBits", [m.input("a20", m.rng.randn(20, K).astype(np.float32)), "b", "s", "z"], ["y5"],
           domain="com.microsoft", K=K, N=N, bits=4, block_size=block, accuracy_level=1)
    m.output("y", np.float32, 3, step=1e-4, fp16_step=0.05)
    m.output("y2", np.float32, 3, step=1e-4, fp16_step=0.05)
    m.output("y3", np.float32, 2, step=1e-4, fp16_step=0.05)
    m.output("y4", np.float32, 2, step=1e-4, fp16_step=0.05)
    m.output("y5", np.float32, 2, step=1e-4, fp16_step=0.05)


def four_bit(name, q, signed):
    """An INT4 (signed) or UINT4 constant: two values to a byte, the first in the low
    nibble (IR 10; onnx 1.12's helpers predate the types)."""
    flat = (np.asarray(q).reshape(-1).astype(np.int16) & 0xF).astype(np.uint8)
    flat = np.pad(flat, (0, flat.size % 2))
    t = TensorProto()
    t.name, t.data_type = name, 22 if signed else 21
    t.dims.extend(np.asarray(q).shape)
    t.raw_data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()
    return t


@case("qdq_blocked_4bit", 21)
def _(m):
    # Opset 21's blocked quantization: the 4-bit weight-only form of LLM exports
    # (ONNX Runtime's MatMul4BitsQuantizer in QDQ format: int4 weights [K, N], a scale and
    # zero point per block of K), u4 likewise with K not whole blocks, and an int8
    # activation quantized and dequantized in blocks along its last axis.
    K, N, block = 40, 6, 16
    blocks = (K + block - 1) // block
    a = m.input("a", m.rng.randn(2, 3, K).astype(np.float32))
    w4 = m.rng.randint(-8, 8, (K, N))
    m.inits.append(four_bit("w4", w4, True))
    m.inits.append(four_bit("z4", m.rng.randint(-8, 8, (blocks, N)), True))
    s4 = m.const("s4", m.rng.rand(blocks, N) * 0.1 + 0.01, np.float32)
    wd = m.node("DequantizeLinear", ["w4", s4, "z4"], ["w4d"], axis=0, block_size=block)
    m.node("MatMul", [a, wd], ["y"])
    m.inits.append(four_bit("u4", m.rng.randint(0, 16, (N, K)), False))
    ud = m.node("DequantizeLinear", ["u4", m.const("su", m.rng.rand(N, blocks) * 0.1 + 0.01, np.float32)], ["u4d"],
                axis=1, block_size=block)
    m.node("Gemm", [m.input("a2", m.rng.randn(3, K).astype(np.float32)), ud], ["y2"], transB=1)
    x = m.input("x", (m.rng.randn(3, 10) * 3).astype(np.float32))
    xs = m.const("xs", m.rng.rand(3, 3) * 0.05 + 0.01, np.float32)
    xz = m.const("xz", m.rng.randint(-5, 5, (3, 3)), np.int8)
    m.node("QuantizeLinear", [x, xs, xz], ["xq"], axis=1, block_size=4)
    m.node("DequantizeLinear", ["xq", xs, xz], ["xd"], axis=1, block_size=4)
    # A block longer than the dimension: one block.
    m.node("DequantizeLinear", ["w4", m.const("s1", m.rng.rand(1, N) * 0.1 + 0.01, np.float32)], ["w1d"], axis=0,
           block_size=64)
    m.output("w1d", np.float32, 2)
    m.output("w4d", np.float32, 2)
    m.output("y", np.float32, 3, step=1e-4)
    m.output("y2", np.float32, 2, step=1e-4)
    m.output("xq", np.int8, 2)
    m.output("xd", np.float32, 2)


def float8(name, bits, shape, e5m2=False):
    """A FLOAT8E4M3FN (or FLOAT8E5M2) constant of the given bit patterns (IR 9; onnx
    1.12's helpers predate the types)."""
    t = TensorProto()
    t.name, t.data_type = name, 19 if e5m2 else 17
    t.dims.extend(shape)
    t.raw_data = np.asarray(bits, np.uint8).reshape(-1).tobytes()
    return t


@case("qdq_float8", 19, fp16=True)
def _(m):
    # Float8 QDQ (opset 19): e4m3fn and e5m2, per tensor and per axis, with the zero point
    # tensor that gives the type; values at ties of both grids (1.0625, 3 * 2^-10,
    # 2^-17), beyond the largest (448, 57344: saturated), infinities and NaN.
    special = [0.0, -0.0, 1.0625, 1.1875, -1.1875, 464.0, 480.0, 500.0, 1e9, -1e9, np.inf, -np.inf, np.nan,
               2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -17, 3 * 2.0 ** -17, 61440.0, 57343.0, 0.0156]
    h = m.input("h", np.array(special, np.float32))
    one = m.const("one", 1.0, np.float32)
    m.inits.append(float8("z43", [0], []))
    m.inits.append(float8("z52", [0], [], e5m2=True))
    m.node("QuantizeLinear", [h, one, "z43"], ["h43"])
    m.node("DequantizeLinear", ["h43", one, "z43"], ["d43"])
    m.node("QuantizeLinear", [h, one, "z52"], ["h52"])
    m.node("DequantizeLinear", ["h52", one, "z52"], ["d52"])
    m.node("Cast", [h], ["c43"], to=17)
    m.node("Cast", ["c43"], ["dc"], to=TensorProto.FLOAT)
    # Per axis, and a random input over the whole range.
    x = m.input("x", (m.rng.randn(2, 4, 3, 3) * np.array([0.01, 1, 30, 300]).reshape(1, 4, 1, 1)).astype(np.float32))
    s = m.const("s", [0.001, 0.5, 0.25, 2.0], np.float32)
    m.inits.append(float8("z4", [0] * 4, [4]))
    m.node("QuantizeLinear", [x, s, "z4"], ["xq"], axis=1)
    m.node("DequantizeLinear", ["xq", s, "z4"], ["xd"], axis=1)
    # A float8 Conv as FP8 quantization tools write it: per-channel e4m3 weights
    # (random finite bit patterns) and a per-tensor e4m3 activation.
    bits = m.rng.randint(0, 256, (6, 4, 3, 3))
    bits[(bits & 0x7F) == 0x7F] = 0x38  # not NaN: 1.0
    m.inits.append(float8("w8", bits, [6, 4, 3, 3]))
    wd = m.node("DequantizeLinear", ["w8", m.const("ws", m.rng.rand(6) * 0.01 + 0.001, np.float32)], ["wd"], axis=0)
    a = m.node("DequantizeLinear", [m.node("QuantizeLinear", ["xd", m.const("as", 0.05, np.float32), "z43"], ["aq"]),
                                    "as", "z43"], ["ad"])
    m.node("Conv", [a, wd], ["y"], pads=[1, 1, 1, 1])
    for n in ["d43", "d52", "dc", "xd"]:
        m.output(n, np.float32, 1 if n != "xd" else 4)
    # (|y| up to about 100: FP16's step there is 0.0625.)
    m.output("y", np.float32, 4, step=1e-3, fp16_step=0.2)


@case("qlinear_contrib", 13, fp16=True)
def _(m):
    # ONNX Runtime's com.microsoft quantized element-wise ops, u8 and i8, broadcasting
    # both ways (A or B constant along the innermost dimension), C's zero point absent,
    # scales far apart (values saturate), and values where the rounding is close.
    ms = lambda op, ins, out, **kw: m.node(op, ins, [out], domain="com.microsoft", **kw)
    for t, lo, hi in [(np.uint8, 0, 256), (np.int8, -128, 128)]:
        k = np.dtype(t).name
        a = m.input(f"a_{k}", m.rng.randint(lo, hi, (2, 3, 4, 5)).astype(t))
        b = m.input(f"b_{k}", m.rng.randint(lo, hi, (2, 3, 4, 5)).astype(t))
        c = m.input(f"c_{k}", m.rng.randint(lo, hi, (1, 3, 1, 1)).astype(t))
        s = [m.const(f"s{i}_{k}", v, np.float32) for i, v in enumerate([0.0137, 0.0211, 0.0173, 0.31, 0.0009])]
        z = [m.const(f"z{i}_{k}", v, t) for i, v in enumerate([3, 7, 11] if t == np.uint8 else [-3, 5, 0])]
        ms("QLinearAdd", [a, s[0], z[0], b, s[1], z[1], s[2], z[2]], f"add_{k}")
        ms("QLinearAdd", [c, s[1], z[1], a, s[0], z[0], s[2], z[2]], f"add_bc_{k}")  # A broadcast
        ms("QLinearAdd", [a, s[0], z[2], c, s[3], z[1], s[4]], f"add_sat_{k}")  # B broadcast
        ms("QLinearMul", [a, s[0], z[0], b, s[1], z[1], s[4], z[2]], f"mul_{k}")
        ms("QLinearMul", [c, s[3], z[1], a, s[0], z[0], s[2]], f"mul_bc_{k}")
        d = m.input(f"d_{k}", m.rng.randint(lo, hi, (2, 1, 4, 5)).astype(t))
        # (b at the output's scale and zero point: copied.)
        ms("QLinearConcat", [s[2], z[2], a, s[0], z[0], b, s[2], z[2], d, s[3], z[1]], f"cat_{k}", axis=-3)
        # Scalars (ONNX Runtime takes scales of shape [] only).
        one = [m.const(f"o{i}_{k}", v, np.float32) for i, v in enumerate([0.05, 0.07, 0.09])]
        ms("QLinearAdd", [m.input(f"sa_{k}", np.array(lo + 77, t)), one[0], z[0], m.input(f"sb_{k}", np.array(hi - 50, t)),
                          one[1], z[1], one[2], z[2]], f"add_scalar_{k}")
        ms("QLinearMul", [f"sa_{k}", one[0], z[0], f"sb_{k}", one[1], z[1], one[2], z[2]], f"mul_scalar_{k}")
        m.output(f"add_scalar_{k}", t, 0)
        m.output(f"mul_scalar_{k}", t, 0)
        ms("QLinearGlobalAveragePool", [a, s[0], z[0], s[1], z[1]], f"gap_{k}")
        ms("QLinearGlobalAveragePool", [a, s[0], z[0], s[3], z[2]], f"gap_nhwc_{k}", channels_last=1)
        # Pairs whose sum rounds differently when computed as documented, (A - zA) * sA +
        # (B - zB) * sB over sC (u8), or with the multiply-adds rounded twice (i8):
        # found by enumerating all pairs at scales 0.5, 0.25 and 0.3.
        pairs = ([(0, b) for b in [10, 16, 28, 34, 40, 52, 58, 64, 70, 76, 88, 94]] if t == np.uint8 else
                 [(a, b) for a, bs in [(-128, [102, 114, 126]), (-127, [100, 112, 124]),
                                       (-126, [98, 110, 122]), (-125, [96, 108, 120])] for b in bs])
        ta = m.input(f"ta_{k}", np.array([p[0] for p in pairs], t))
        tb = m.input(f"tb_{k}", np.array([p[1] for p in pairs], t))
        ts = [m.const(f"ts{i}_{k}", v, np.float32) for i, v in enumerate([0.5, 0.25, 0.3])]
        ms("QLinearAdd", [ta, ts[0], z[0], tb, ts[1], z[1], ts[2], z[2]], f"add_tie_{k}")
        m.output(f"add_tie_{k}", t, 1)
        for o in ["add", "add_bc", "add_sat", "mul", "mul_bc", "cat", "gap", "gap_nhwc"]:
            m.output(f"{o}_{k}", t, 4)


@case("qdq_cnn", 13, fp16=True)
def _(m):
    # The QDQ form quantization tools write: int8 per-channel weights and int32 biases
    # (scale x_scale * w_scale) dequantized into a float Conv, the activations quantized
    # and dequantized (u8) around it. ONNX Runtime fuses each Conv (with its Relu) into a
    # QLinearConv; dlc computes the same int32 sums (the fold-qdq pass).
    x = m.input("x", m.rng.rand(2, 3, 12, 12).astype(np.float32))
    act_z = m.const("az", 0, np.uint8)
    s_in = 1 / 255
    xq = m.node("QuantizeLinear", [x, m.const("as", s_in, np.float32), act_z], ["xq"])
    h = m.node("DequantizeLinear", [xq, "as", act_z], ["xd"])
    for i, (cin, cout, s_out) in enumerate([(3, 8, 0.02), (8, 8, 0.03)]):
        ws = (m.rng.rand(cout) * 0.01 + 0.002).astype(np.float32)
        wd = m.node("DequantizeLinear", [m.const(f"w{i}", weights_i8(m.rng, (cout, cin, 3, 3)), np.int8),
                                         m.const(f"ws{i}", ws, np.float32),
                                         m.const(f"wz{i}", [0] * cout, np.int8)], [f"wd{i}"], axis=0)
        bs = (np.float32(s_in) * ws).astype(np.float32)
        bd = m.node("DequantizeLinear", [m.const(f"b{i}", m.rng.randint(-2000, 2000, cout), np.int32),
                                         m.const(f"bs{i}", bs, np.float32)], [f"bd{i}"], axis=0)
        c = m.node("Conv", [h, wd, bd], [f"c{i}"], pads=[1, 1, 1, 1])
        r = m.node("Relu", [c], [f"r{i}"])
        q = m.node("QuantizeLinear", [r, m.const(f"s{i}", s_out, np.float32), act_z], [f"q{i}"])
        h = m.node("DequantizeLinear", [q, f"s{i}", act_z], [f"d{i}"])
        s_in = s_out
    m.node("GlobalAveragePool", [h], ["y"])
    m.output("q0", np.uint8, 4)
    m.output("q1", np.uint8, 4)
    m.output("y", np.float32, 4, step=0.03)  # one step of the last activation


@case("qdq_transformer_mlp", 13, fp16=True)
def _(m):
    x = m.input("x", m.rng.randn(2, 6, 16).astype(np.float32))
    xs, xz = m.const("xs", 0.03, np.float32), m.const("xz", 0, np.int8)
    xd = m.node("DequantizeLinear", [m.node("QuantizeLinear", [x, xs, xz], ["xq"]), xs, xz], ["xd"])
    w1 = m.node("DequantizeLinear", [m.const("w1", weights_i8(m.rng, (16, 32)), np.int8),
                                     m.const("w1s", m.rng.rand(32) * 0.01 + 0.001, np.float32),
                                     m.const("w1z", [0] * 32, np.int8)], ["w1d"], axis=1)
    h = m.node("MatMul", [xd, w1], ["h"])
    g = m.node("Relu", [m.node("Add", [h, m.const("b1", m.rng.randn(32) * 0.1, np.float32)], ["hb"])], ["g"])
    gs = m.const("gs", 0.01, np.float32)
    gd = m.node("DequantizeLinear", [m.node("QuantizeLinear", [g, gs, xz], ["gq"]), gs, xz], ["gd"])
    w2 = m.node("DequantizeLinear", [m.const("w2", weights_i8(m.rng, (32, 16)), np.int8),
                                     m.const("w2s", 0.004, np.float32)], ["w2d"])
    m.node("Add", [m.node("MatMul", [gd, w2], ["o"]), xd], ["y"])
    # (The MatMul's float bias keeps ONNX Runtime, and dlc, on float arithmetic for the
    # first layer: equal in strict FP32; under --fp16 a rounding may differ by a step.)
    m.output("gq", np.int8, 3, fp16_step=1)
    m.output("y", np.float32, 3, step=0.01)


def compare(got, want, step, rel=1e-6):
    """(ok, the largest difference): integers must be equal; floats within `step` (a
    quantization step), or `rel` relative where step is 0 (1e-6: dequantizing alone;
    an FP16 island under --fp16: what the case says)."""
    if got.shape != want.shape:
        return False, float("inf")
    if np.issubdtype(want.dtype, np.integer):
        d = np.abs(got.astype(np.int64) - want.astype(np.int64))
        return bool((d <= step).all()), float(d.max()) if d.size else 0.0
    got, want = got.astype(np.float64), want.astype(np.float64)
    if np.any(np.isnan(got) != np.isnan(want)):
        return False, float("inf")
    d = np.abs(np.nan_to_num(got) - np.nan_to_num(want))
    err = float(d.max()) if d.size else 0.0
    bound = step if step else rel * max(1.0, float(np.abs(np.nan_to_num(want)).max()) if want.size else 1.0)
    return err <= bound, err


def check(dlc, name, opset, build, work, extra, device):
    d = os.path.join(work, name + ("-fp16" if "--fp16" in extra else ""))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    m = Model()
    build(m)
    model = m.build(opset)
    path = os.path.join(d, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    try:
        got_dir, _ = run_dlc(dlc, path, m.feeds, d, extra, device)
        want_dir = run_ort(path, m.feeds, d)
    except RuntimeError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return None
    def rel(name):
        return m.fp16_rel[name] if "--fp16" in extra and m.fp16_rel[name] else 1e-6
    def step(name):
        return m.fp16_step[name] if "--fp16" in extra else m.step[name]
    return {o.name: compare(npy_out(got_dir, o.name), npy_out(want_dir, o.name), step(o.name), rel(o.name))
            for o in model.graph.output}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="emu", choices=["emu", "cuda"])
    a = ap.parse_args()
    ensure_ort()
    os.makedirs(a.work, exist_ok=True)
    failed, ran = 0, 0
    for name, opset, build, fp16 in CASES:
        if a.only not in name:
            continue
        # (Strict FP32, as ONNX Runtime's CPU provider computes: no TF32.)
        for extra in [["--no-tf32"]] + ([["--fp16", "--no-tf32"]] if fp16 else []):
            ran += 1
            worst = check(a.dlc, name, opset, build, a.work, extra, a.device)
            ok = worst is not None and all(good for good, _ in worst.values())
            failed += not ok
            detail = "error" if worst is None else ", ".join(
                f"{k} {d:.2g}{'' if good else ' FAIL'}" for k, (good, d) in worst.items())
            label = name + (" --fp16" if "--fp16" in extra else "")
            print(f"{label:34} opset {opset:2}  {'pass' if ok else 'FAIL'}  ({detail})")
    print(json.dumps({"cases": ran, "failed": failed}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
