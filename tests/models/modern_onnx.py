#!/usr/bin/env python3
"""Modern and messy ONNX against ONNX Runtime (onnxruntime-node, CPU).

Models are built with onnx.helper at an explicit IR version and opset (Debian's onnx
1.12 writes any opset and IR version; nothing here runs its checker):
  - one model per IR version 3..11, each at an opset of its time (7..23);
  - every importer handler for the semantic changes of opsets 18-23 (Bitwise*,
    CenterCropPad, Split
    num_outputs, Reduce* axes as an input and bool ReduceMax/ReduceMin, Pad axes and
    wrap, Resize keep_aspect_ratio_policy/axes and half_pixel_symmetric, Col2Im,
    GroupNormalization 18 and 21, Gelu 20, AveragePool dilations, LpPool, ScatterElements and
    ScatterND max/min) and the new ops of opset 23 (RMSNormalization, Attention,
    RotaryEmbedding);
  - ONNX Runtime's com.microsoft contrib ops (Attention, MultiHeadAttention,
    GroupQueryAttention, SkipLayerNormalization, SkipSimplifiedLayerNormalization,
    SimplifiedLayerNormalization, BiasGelu, FastGelu, QuickGelu, Gelu, BiasAdd,
    FusedMatMul, RotaryEmbedding, EmbedLayerNormalization);
  - graph hygiene: nodes out of topological order, an initializer also listed as a
    graph input, an input nothing reads.
Each runs through `dlc compile --target emu` + `dlc run` and must match ONNX Runtime in
FP32; then in FP16 twice: the model with FP16 tensors against ONNX Runtime's FP16
result, and the FP32 model compiled with --fp16 against ONNX Runtime's FP32 result.
BiasAdd has no CPU kernel in ONNX Runtime; its reference is numpy.

Then an If whose else branch cannot be built at the compiled shapes (as Silero VAD's
8 kHz branch): the then branch must match ONNX Runtime, the else branch taken at run
time must fail with a data error naming the If node and leave no output file, dlc
compile must warn and `dlc inspect` must list the deferred branch.

usage: modern_onnx.py --dlc build/tools/dlc --work DIR [--only SUBSTRING]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_models import ORT, ensure_ort, sh  # noqa: E402

MS = "com.microsoft"
TOL = {"fp32": 1e-4, "fp16": 3e-2, "fp16-compile": 3e-2}


def onnx_type(dt):
    return {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int64: TensorProto.INT64,
            np.int32: TensorProto.INT32, np.bool_: TensorProto.BOOL}[np.dtype(dt).type]


class Model:
    """A one-graph model under construction: inputs with their feeds, initializers."""

    def __init__(self, ft, seed):
        self.ft, self.rng = ft, np.random.RandomState(seed)
        self.inputs, self.outputs, self.inits, self.nodes, self.feeds = [], [], [], [], {}

    def input(self, name, shape=None, dtype=None, value=None, scale=1.0):
        dtype = dtype or self.ft
        if value is None:
            value = (self.rng.randn(*shape) * scale).astype(dtype)
        value = np.asarray(value, dtype=dtype)
        self.inputs.append(helper.make_tensor_value_info(name, onnx_type(dtype), list(value.shape)))
        self.feeds[name] = value
        return name

    def const(self, name, value=None, shape=None, dtype=None, scale=1.0):
        dtype = dtype or self.ft
        if value is None:
            value = self.rng.randn(*shape) * scale
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op, ins, outs, domain="", **attrs):
        self.nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{len(self.nodes)}", domain=domain,
                                           **attrs))
        return outs[0] if len(outs) == 1 else outs

    def output(self, *specs):
        """Outputs as "name:rank" or "name:rank:dtype" (dtype: bool, i32, f32; default the
        model's float type), with symbolic dims."""
        types = {"bool": np.bool_, "i32": np.int32, "f32": np.float32}
        for spec in specs:
            name, rank, *dt = spec.split(":")
            dtype = types[dt[0]] if dt else self.ft
            dims = [f"{name}_{i}" for i in range(int(rank))]
            self.outputs.append(helper.make_tensor_value_info(name, onnx_type(dtype), dims))

    def build(self, opset, ir, ms=False):
        inputs = list(self.inputs)
        if ir < 4:  # before IR 4, every initializer is also a graph input
            inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.inits]
        g = helper.make_graph(self.nodes, "g", inputs, self.outputs, self.inits)
        ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS, 1)] if ms else [])
        m = helper.make_model(g, opset_imports=ops, producer_name="dlc-modern-onnx")
        m.ir_version = ir
        return m


CASES = []


def case(name, opset, ir, ms=False, fp16=True, ort=True, ort_fp16=True, note=None):
    """Registers a builder f(model) -> None; `ort=False`: numpy reference (f returns it);
    `ort_fp16=False`: ONNX Runtime has no FP16 kernel for it (only the --fp16 compile)."""
    def wrap(f):
        CASES.append(dict(name=name, build=f, opset=opset, ir=ir, ms=ms, fp16=fp16, ort=ort, ort_fp16=ort_fp16,
                          note=note))
        return f
    return wrap


# --- one model per IR version, at an opset of its time ------------------------------
for ir, opset in [(3, 7), (3, 8), (4, 9), (5, 10), (6, 11), (7, 12), (7, 13), (7, 14), (8, 15), (8, 16),
                  (8, 17), (8, 18), (9, 19), (9, 20), (10, 21), (10, 22), (11, 23)]:
    def basic(m):
        x = m.input("x", [2, 3, 8, 8])
        c = m.node("Conv", [x, m.const("w", shape=[4, 3, 3, 3], scale=0.3), m.const("b", shape=[4])], ["c"],
                   pads=[1, 1, 1, 1])
        r = m.node("Relu", [c], ["r"])
        p = m.node("GlobalAveragePool", [r], ["p"])
        f = m.node("Flatten", [p], ["f"])
        gm = m.node("Gemm", [f, m.const("w2", shape=[5, 4]), m.const("b2", shape=[5])], ["gm"], transB=1)
        m.node("Softmax", [gm], ["y"], axis=1)
        m.output("y:2")
    case(f"ir{ir}_opset{opset}", opset, ir)(basic)


# --- opsets 18-23: handlers for the semantic changes --------------------------------
@case("split18_num_outputs_uneven", 18, 9)
def _(m):
    m.node("Split", [m.input("x", [2, 7])], ["a", "b", "c"], axis=1, num_outputs=3)
    m.output("a:2", "b:2", "c:2")


@case("reduce18_axes_input", 18, 9)
def _(m):
    x = m.input("x", [2, 3, 4])
    x = m.node("Abs", [x], ["ax"])  # positive for the logs
    ax = m.const("axes", [1, -1], dtype=np.int64)
    outs = []
    for op in ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
               "ReduceLogSumExp", "ReduceSumSquare"]:
        outs.append(m.node(op, [x, ax], [op.lower()], keepdims=0))
    m.node("ReduceMax", [x], ["all_kept"], keepdims=1)
    m.node("ReduceMean", [x], ["noop"], noop_with_empty_axes=1)
    m.output(*[o + ":1" for o in outs], "all_kept:3", "noop:3")


@case("bitwise18", 18, 9, fp16=False)
def _(m):
    r = np.random.RandomState(4)
    a = m.input("a", dtype=np.int32, value=r.randint(-1000, 1000, (3, 4)))
    b = m.input("b", dtype=np.int32, value=r.randint(-1000, 1000, (4,)))
    m.node("BitwiseAnd", [a, b], ["and"])
    m.node("BitwiseOr", [a, b], ["or"])
    m.node("BitwiseXor", [a, b], ["xor"])
    m.node("BitwiseNot", [a], ["not"])
    m.output("and:2:i32", "or:2:i32", "xor:2:i32", "not:2:i32")


@case("reduce20_bool", 20, 9, fp16=False)
def _(m):
    x = m.input("x", dtype=np.bool_, value=np.random.RandomState(3).rand(3, 5) > 0.5)
    ax = m.const("axes", [1], dtype=np.int64)
    m.node("ReduceMax", [x, ax], ["any"], keepdims=0)
    m.node("ReduceMin", [x, ax], ["all"], keepdims=1)
    m.output("any:1:bool", "all:2:bool")


@case("pad18_axes_and_pad19_wrap", 19, 9)
def _(m):
    x = m.input("x", [2, 3, 4])
    m.node("Pad", [x, m.const("pads", [1, 2], dtype=np.int64), m.const("v", [0.5]),
                   m.const("axes", [-1], dtype=np.int64)], ["a"])
    m.node("Pad", [x, m.const("pads2", [0, 1, 2, 0, 2, 1], dtype=np.int64)], ["b"], mode="wrap")
    m.output("a:3", "b:3")


@case("centercroppad18", 18, 9)
def _(m):
    x = m.input("x", [3, 7, 6])
    m.node("CenterCropPad", [x, m.const("s", [4, 9], dtype=np.int64)], ["a"], axes=[1, 2])
    m.node("CenterCropPad", [x, m.const("t", [4, 4, 5], dtype=np.int64)], ["b"])
    m.output("a:3", "b:3")


@case("resize18_keep_aspect_ratio", 18, 9)
def _(m):
    x = m.input("x", [1, 2, 6, 8])
    for i, policy in enumerate(["not_larger", "not_smaller"]):
        m.node("Resize", [x, "", "", m.const(f"sizes{i}", [5, 5], dtype=np.int64)], [f"y{i}"], mode="linear",
               axes=[2, 3], keep_aspect_ratio_policy=policy)
    m.node("Resize", [x, "", m.const("scales", [0.75], dtype=np.float32)], ["y2"], mode="nearest", axes=[3])
    m.output("y0:4", "y1:4", "y2:4")


@case("resize18_antialias", 18, 9)
def _(m):
    x = m.input("x", [1, 2, 9, 11])
    m.node("Resize", [x, "", m.const("s0", [1, 1, 0.6, 0.45], dtype=np.float32)], ["lin"], mode="linear",
           antialias=1)
    m.node("Resize", [x, "", "", m.const("sz", [4, 5], dtype=np.int64)], ["cub"], mode="cubic", antialias=1,
           axes=[2, 3])
    m.node("Resize", [x, "", m.const("s1", [1, 1, 1.5, 0.5], dtype=np.float32)], ["mix"], mode="linear",
           antialias=1, exclude_outside=1, coordinate_transformation_mode="pytorch_half_pixel")
    m.output("lin:4", "cub:4", "mix:4")


@case("resize19_half_pixel_symmetric", 19, 9)
def _(m):
    x = m.input("x", [1, 2, 5, 7])
    m.node("Resize", [x, "", m.const("scales", [1, 1, 1.6, 0.6], dtype=np.float32)], ["y"], mode="linear",
           coordinate_transformation_mode="half_pixel_symmetric")
    m.output("y:4")


@case("col2im18", 18, 9)
def _(m):
    # 2 channels, 2x3 blocks over a 5x6 image, stride (1, 2), dilation (1, 1), pads (1, 0, 0, 1).
    x = m.input("x", [2, 2 * 6, 5 * 3])
    m.node("Col2Im", [x, m.const("image", [5, 6], dtype=np.int64), m.const("block", [2, 3], dtype=np.int64)],
           ["y"], strides=[1, 2], pads=[1, 0, 0, 1])
    m.output("y:4")


@case("groupnorm18_and_21", 21, 10)
def _(m):
    x = m.input("x", [2, 6, 3, 3])
    # Opset 21: scale and bias per channel.
    m.node("GroupNormalization", [x, m.const("s", shape=[6]), m.const("b", shape=[6])], ["y"], num_groups=3,
           epsilon=1e-4)
    m.output("y:4")


@case("groupnorm18_per_group", 18, 9)
def _(m):
    x = m.input("x", [2, 6, 3, 3])
    m.node("GroupNormalization", [x, m.const("s", shape=[3]), m.const("b", shape=[3])], ["y"], num_groups=3)
    m.output("y:4")


@case("gelu20", 20, 9)
def _(m):
    x = m.input("x", [3, 16], scale=2.0)
    m.node("Gelu", [x], ["a"])
    m.node("Gelu", [x], ["b"], approximate="tanh")
    m.output("a:2", "b:2")


@case("averagepool19_dilations", 19, 9)
def _(m):
    x = m.input("x", [1, 2, 7, 7])
    m.node("AveragePool", [x], ["y"], kernel_shape=[3, 2], dilations=[2, 2], strides=[1, 2], pads=[1, 0, 1, 1])
    m.output("y:4")


@case("lppool18", 18, 9)
def _(m):
    x = m.input("x", [1, 2, 7, 6])
    m.node("LpPool", [x], ["a"], kernel_shape=[3, 2], pads=[1, 0, 1, 1], strides=[2, 1], p=3)
    m.node("LpPool", [x], ["b"], kernel_shape=[2, 2], dilations=[2, 1])
    m.node("GlobalLpPool", [x], ["c"], p=1)
    m.output("a:4", "b:4", "c:4")


@case("scatter18_max_min", 18, 9, ort_fp16=False)
def _(m):
    d = m.input("d", [4, 5])
    u = m.input("u", [2, 5])
    m.node("ScatterElements", [d, m.const("i", [[1, 0, 3, 1, 2], [1, 2, 0, 3, 2]], dtype=np.int64), u], ["a"],
           axis=0, reduction="max")
    m.node("ScatterND", [d, m.const("j", [[2], [2]], dtype=np.int64), u], ["b"], reduction="min")
    m.output("a:2", "b:2")


@case("rmsnormalization23", 23, 11)
def _(m):
    x = m.input("x", [2, 3, 16])
    m.node("RMSNormalization", [x, m.const("s", shape=[16])], ["a"], epsilon=1e-5)
    m.node("RMSNormalization", [x, m.const("t", shape=[3, 16])], ["b"], axis=1)
    m.output("a:3", "b:3")


@case("attention23_causal_4d", 23, 10)
def _(m):
    q, k, v = m.input("q", [2, 4, 5, 8]), m.input("k", [2, 4, 5, 8]), m.input("v", [2, 4, 5, 8])
    m.node("Attention", [q, k, v], ["y"], is_causal=1)
    m.output("y:4")


@case("attention23_gqa_3d_softcap_scale", 23, 10)
def _(m):
    q, k, v = m.input("q", [2, 6, 4 * 8]), m.input("k", [2, 7, 2 * 8]), m.input("v", [2, 7, 2 * 4])
    m.node("Attention", [q, k, v], ["y"], q_num_heads=4, kv_num_heads=2, softcap=2.0, scale=0.3)
    m.output("y:3")


@case("attention23_bool_mask_and_causal", 23, 10)
def _(m):
    q, k, v = m.input("q", [1, 2, 4, 8]), m.input("k", [1, 2, 6, 8]), m.input("v", [1, 2, 6, 8])
    keep = np.random.RandomState(5).rand(1, 2, 4, 6) > 0.4
    keep[0, 1, 2, :] = False  # a row that hides every key gives zeros
    mask = m.input("mask", dtype=np.bool_, value=keep)
    m.node("Attention", [q, k, v, mask], ["y"], is_causal=1)
    m.output("y:4")


@case("attention23_float_mask_past_and_qk", 23, 10)
def _(m):
    q, k, v = m.input("q", [1, 2, 3, 8]), m.input("k", [1, 2, 3, 8]), m.input("v", [1, 2, 3, 8])
    pk, pv = m.input("pk", [1, 2, 2, 8]), m.input("pv", [1, 2, 2, 8])
    mask = m.input("mask", [3, 5], scale=0.5)
    m.node("Attention", [q, k, v, mask, pk, pv], ["y", "present_k", "present_v", "qk"], is_causal=1,
           qk_matmul_output_mode=3)
    m.output("y:4", "present_k:4", "present_v:4", "qk:4")


@case("rotaryembedding23_4d_position_ids", 23, 11)
def _(m):
    x = m.input("x", [2, 3, 4, 16])
    cos, sin = m.const("cos", shape=[10, 8]), m.const("sin", shape=[10, 8])
    pos = m.input("pos", dtype=np.int64, value=np.array([[0, 3, 5, 9], [1, 2, 4, 8]]))
    m.node("RotaryEmbedding", [x, cos, sin, pos], ["y"])
    m.output("y:4")


@case("rotaryembedding23_3d_interleaved_partial", 23, 11)
def _(m):
    x = m.input("x", [2, 4, 3 * 16])
    cos, sin = m.input("cos", [2, 4, 4]), m.input("sin", [2, 4, 4])
    m.node("RotaryEmbedding", [x, cos, sin], ["y"], interleaved=1, num_heads=3, rotary_embedding_dim=8)
    m.output("y:3")


# --- com.microsoft contrib ops -------------------------------------------------------
@case("ms_attention_mask_forms", 17, 8, ms=True)
def _(m):
    x = m.input("x", [2, 4, 16])
    w, b = m.const("w", shape=[16, 48], scale=0.3), m.const("b", shape=[48], scale=0.1)
    lens = m.input("lens", dtype=np.int32, value=np.array([3, 4]))
    m.node("Attention", [x, w, b, lens], ["a"], domain=MS, num_heads=2)
    se = m.input("se", dtype=np.int32, value=np.array([4, 3, 1, 0]))
    m.node("Attention", [x, w, b, se], ["b2"], domain=MS, num_heads=4)
    pad = m.input("pad", dtype=np.int32, value=np.array([[1, 1, 0, 1], [1, 1, 1, 1]]))
    m.node("Attention", [x, w, b, pad], ["c"], domain=MS, num_heads=2, unidirectional=1)
    m3 = m.input("m3", dtype=np.int32, value=(np.random.RandomState(2).rand(2, 4, 4) > 0.3).astype(np.int32))
    m.node("Attention", [x, w, b, m3], ["d"], domain=MS, num_heads=2, scale=0.2)
    m.output("a:3", "b2:3", "c:3", "d:3")


@case("ms_attention_qkv_sizes_bias_present", 17, 8, ms=True)
def _(m):
    x = m.input("x", [2, 3, 12])
    w, b = m.const("w", shape=[12, 8 + 8 + 4], scale=0.3), m.const("b", shape=[20], scale=0.1)
    ab = m.input("ab", [1, 2, 3, 3])
    m.node("Attention", [x, w, b, "", "", ab], ["y"], domain=MS, num_heads=2,
           qkv_hidden_sizes=[8, 8, 4], unidirectional=1)
    m.output("y:3")


@case("ms_multiheadattention", 17, 8, ms=True)
def _(m):
    q, k, v = m.input("q", [2, 3, 16]), m.input("k", [2, 5, 16]), m.input("v", [2, 5, 8])
    b = m.const("b", shape=[40], scale=0.1)
    kpm = m.input("kpm", dtype=np.int32, value=np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]]))
    m.node("MultiHeadAttention", [q, k, v, b, kpm], ["a"], domain=MS, num_heads=2)
    m.node("MultiHeadAttention", [q, k, v], ["c", "pk", "pv"], domain=MS, num_heads=4, unidirectional=1)
    kb, vb = m.input("kb", [2, 2, 5, 8]), m.input("vb", [2, 2, 5, 8])  # BNSH: only Q takes its bias
    m.node("MultiHeadAttention", [q, kb, vb, m.const("b48", shape=[48], scale=0.1)], ["d"], domain=MS,
           num_heads=2)
    m.output("a:3", "c:3", "pk:4", "pv:4", "d:3")


@case("ms_groupqueryattention_prompt", 17, 8, ms=True)
def _(m):
    q, k, v = m.input("q", [2, 5, 4 * 16]), m.input("k", [2, 5, 2 * 16]), m.input("v", [2, 5, 2 * 16])
    seqlens = m.input("seqlens", dtype=np.int32, value=np.array([4, 2]))
    total = m.const("total", 5, dtype=np.int32)
    m.node("GroupQueryAttention", [q, k, v, "", "", seqlens, total], ["a", "pk", "pv"], domain=MS, num_heads=4,
           kv_num_heads=2)
    m.node("GroupQueryAttention", [q, k, v, "", "", seqlens, total], ["b"], domain=MS, num_heads=4,
           kv_num_heads=2, softcap=3.0, local_window_size=2, scale=0.2)
    m.output("a:3", "pk:4", "pv:4", "b:3")


@case("ms_groupqueryattention_rotary_packed", 17, 8, ms=True)
def _(m):
    qkv = m.input("qkv", [1, 6, (2 + 2 * 1) * 16])
    seqlens = m.input("seqlens", dtype=np.int32, value=np.array([5]))
    total = m.const("total", 6, dtype=np.int32)
    ang = np.arange(12)[:, None] * (1.0 / 10000 ** (np.arange(8) / 8.0))[None, :]
    cos, sin = m.const("cos", np.cos(ang)), m.const("sin", np.sin(ang))
    m.node("GroupQueryAttention", [qkv, "", "", "", "", seqlens, total, cos, sin], ["y"], domain=MS,
           num_heads=2, kv_num_heads=1, do_rotary=1)
    m.output("y:3")


@case("ms_skiplayernormalization", 17, 8, ms=True)
def _(m):
    x, s = m.input("x", [2, 3, 16]), m.input("s", [2, 3, 16])
    g, be, bi = m.const("g", shape=[16]), m.const("be", shape=[16]), m.const("bi", shape=[16])
    m.node("SkipLayerNormalization", [x, s, g, be, bi], ["y", "mean", "inv", "sum"], domain=MS, epsilon=1e-5)
    m.node("SkipLayerNormalization", [x, s, g], ["z"], domain=MS)
    m.output("y:3", "mean:3:f32", "inv:3:f32", "sum:3", "z:3")


@case("ms_skipsimplifiedlayernormalization", 17, 8, ms=True)
def _(m):
    x, s = m.input("x", [2, 3, 16]), m.input("s", [3, 16])
    g, bi = m.const("g", shape=[16]), m.const("bi", shape=[16])
    m.node("SkipSimplifiedLayerNormalization", [x, s, g, bi], ["y", "mean", "inv", "sum"], domain=MS,
           epsilon=1e-5)
    m.output("y:3", "mean:3:f32", "inv:3:f32", "sum:3")


@case("simplifiedlayernormalization", 17, 8, ms=True)
def _(m):
    x = m.input("x", [2, 3, 16])
    m.node("SimplifiedLayerNormalization", [x, m.const("g", shape=[16])], ["y", "inv"], epsilon=1e-5)
    m.node("SimplifiedLayerNormalization", [x, m.const("h", shape=[3, 16])], ["z"], axis=-2)
    m.output("y:3", "inv:3:f32", "z:3")


@case("ms_gelu_family", 17, 8, ms=True)
def _(m):
    x = m.input("x", [3, 16], scale=2.0)
    b = m.const("b", shape=[16])
    m.node("BiasGelu", [x, b], ["a"], domain=MS)
    m.node("FastGelu", [x, b], ["c"], domain=MS)
    m.node("FastGelu", [x], ["d"], domain=MS)
    m.node("QuickGelu", [x], ["e"], domain=MS)
    m.node("QuickGelu", [x], ["f"], domain=MS, alpha=1.1)
    m.node("Gelu", [x], ["g"], domain=MS)
    m.output("a:2", "c:2", "d:2", "e:2", "f:2", "g:2")


@case("ms_biasadd", 17, 8, ms=True, ort=False)
def _(m):
    x, b, s = m.input("x", [2, 3, 8]), m.const("b", shape=[8]), m.input("s", [2, 3, 8])
    m.node("BiasAdd", [x, b, s], ["y"], domain=MS)
    m.output("y:3")
    bias = numpy_helper.to_array(m.inits[-1])
    return {"y": m.feeds["x"] + bias + m.feeds["s"]}


@case("ms_fusedmatmul", 17, 8, ms=True)
def _(m):
    a, b = m.input("a", [2, 5, 3]), m.input("b", [2, 4, 5])
    m.node("FusedMatMul", [a, b], ["y"], domain=MS, alpha=0.5, transA=1, transB=1)
    c = m.input("c", [3, 2, 4])  # [M, batch, K]
    m.node("FusedMatMul", [c, m.input("d", [2, 4, 6])], ["z"], domain=MS, transBatchA=1)
    m.output("y:3", "z:3")


@case("ms_rotaryembedding", 17, 8, ms=True)
def _(m):
    x = m.input("x", [2, 4, 2 * 16])
    cos, sin = m.const("cos", shape=[12, 8]), m.const("sin", shape=[12, 8])
    off = m.input("off", dtype=np.int64, value=np.array([3]))
    m.node("RotaryEmbedding", [x, off, cos, sin], ["a"], domain=MS, num_heads=2)
    pos = m.input("pos", dtype=np.int64, value=np.array([[0, 1, 2, 3], [5, 6, 7, 9]]))
    m.node("RotaryEmbedding", [x, pos, cos, sin], ["b"], domain=MS, interleaved=1)
    x4 = m.input("x4", [2, 2, 4, 16])
    cos4, sin4 = m.const("cos4", shape=[12, 4]), m.const("sin4", shape=[12, 4])
    m.node("RotaryEmbedding", [x4, pos, cos4, sin4], ["c"], domain=MS, num_heads=2, rotary_embedding_dim=8)
    m.output("a:3", "b:3", "c:4")


@case("ms_embedlayernormalization", 17, 8, ms=True)
def _(m):
    ids = m.input("ids", dtype=np.int32, value=np.array([[3, 1, 4, 1], [5, 9, 2, 6]]))
    seg = m.input("seg", dtype=np.int32, value=np.array([[0, 0, 1, 1], [0, 1, 1, 1]]))
    mask = m.input("mask", dtype=np.int32, value=np.array([[1, 1, 1, 0], [1, 1, 0, 1]]))
    word, pos, segE = m.const("word", shape=[10, 8]), m.const("pos", shape=[6, 8]), m.const("segE", shape=[2, 8])
    g, b = m.const("g", shape=[8]), m.const("b", shape=[8])
    m.node("EmbedLayerNormalization", [ids, seg, word, pos, segE, g, b, mask], ["y", "mask_index", "sum"],
           domain=MS)
    m.output("y:3", "mask_index:1:i32", "sum:3")


# --- graph hygiene -------------------------------------------------------------------
@case("unsorted_nodes", 18, 9, note="not in topological order; dlc sorted them")
def _(m):
    x = m.input("x", [2, 3])
    m.node("Neg", [x], ["t"])
    m.node("Exp", ["t"], ["u"])
    m.node("Add", ["u", "t"], ["y"])
    m.nodes.reverse()
    m.output("y:2")


@case("initializer_listed_as_input_and_unused_input", 19, 9, note="also listed as graph inputs ('w')")
def _(m):
    x = m.input("x", [2, 3])
    w = m.const("w", shape=[3, 4])
    m.inputs.append(helper.make_tensor_value_info("w", onnx_type(m.ft), [3, 4]))
    m.input("unused", [1])
    m.inputs[-1].type.tensor_type.shape.dim[0].dim_param = "n"
    m.node("MatMul", [x, w], ["y"])
    m.output("y:2")


# --- running ---------------------------------------------------------------------------
def npy_out(d, name):
    return np.load(os.path.join(d, name.replace("/", "_") + ".npy"))


def compare(got, want, tol):
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        return 0.0 if np.array_equal(got.astype(want.dtype), want) else float("inf")
    got, want = got.astype(np.float64), want.astype(np.float64)
    if got.shape != want.shape:
        return float("inf")
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got - want)) / scale) if want.size else 0.0
    return float("inf") if np.isnan(err) else err  # max() over outputs would skip a NaN


def run_dlc(dlc, model_path, feeds, work, extra, device="emu"):
    """Compiles for emu (for the GPU's architectures with device cuda) and runs there."""
    pkg = os.path.join(work, "m.dlc")
    targets = ["--target", "emu"] if device == "emu" else []
    p = subprocess.run([dlc, "compile", model_path, *targets, "-o", pkg, *extra], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"dlc compile failed:\n{p.stderr.strip()}")
    out = os.path.join(work, "dlc")
    args = [dlc, "run", pkg, "--device", device, "--output-dir", out, "--quiet"]
    for name, v in feeds.items():
        f = os.path.join(work, f"in_{name}.npy")
        np.save(f, v)
        args += ["--input", f"{name}={f}"]
    sh(args)
    return out, p.stderr


def run_ort(model_path, feeds, work):
    out = os.path.join(work, "ort")
    args = ["node", os.path.join(ORT, "ort.js"), "run", model_path, out]
    for name, v in feeds.items():
        f = os.path.join(work, f"in_{name}.npy")
        np.save(f, v)
        args.append(f"{name}={f}")
    sh(args)
    return out


def check_case(dlc, c, work, rows):
    results = []
    variants = [("fp32", np.float32, ["--no-tf32"])]  # strict FP32, as ONNX Runtime's CPU provider
    if c["fp16"]:
        variants += [("fp16", np.float16, [])] if c["ort_fp16"] else []
        variants += [("fp16-compile", np.float32, ["--fp16"])]
    for label, ft, extra in variants:
        d = os.path.join(work, c["name"], label)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        m = Model(ft, seed=7)
        ref = c["build"](m)
        model = m.build(c["opset"], c["ir"], c["ms"])
        path = os.path.join(d, "model.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        try:
            got_dir, log = run_dlc(dlc, path, m.feeds, d, extra)
            if c["note"] and label == "fp32" and c["note"] not in log:
                raise RuntimeError(f"dlc compile did not say '{c['note']}':\n{log}")
            if c["ort"]:
                want_dir = run_ort(path, m.feeds, d)
                want = {o.name: npy_out(want_dir, o.name) for o in model.graph.output}
            else:
                want = ref
            err = max(compare(npy_out(got_dir, n), w, TOL[label]) for n, w in want.items())
            ok = err <= TOL[label]
        except RuntimeError as e:
            err, ok = float("nan"), False
            print(f"{c['name']} [{label}]: {e}", file=sys.stderr)
        results.append((label, err, ok))
    rows.append((c, results))
    return all(ok for _, _, ok in results)


def check_deferred_if(dlc, work):
    """An If whose else branch cannot be built at the compiled shapes."""
    d = os.path.join(work, "deferred_if")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", TensorProto.FLOAT, None)])
    # [N, 4] into rows of 3: possible for some N, not for N = 2 (8 elements).
    shape3 = numpy_helper.from_array(np.array([-1, 3], np.int64), "shape3")
    else_g = helper.make_graph([helper.make_node("Reshape", ["x", "shape3"], ["r"], name="rows_of_3"),
                                helper.make_node("ReduceSum", ["r"], ["e"], keepdims=1, name="total")],
                               "else", [], [vi("e", TensorProto.FLOAT, None)], [shape3])
    sr = numpy_helper.from_array(np.array(16000, np.int64), "sr16k")
    g = helper.make_graph([helper.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="rate"),
                           helper.make_node("If", ["is16k"], ["y"], name="by_rate", then_branch=then_g,
                                            else_branch=else_g)],
                          "g", [vi("x", TensorProto.FLOAT, ["N", 4]), vi("sr", TensorProto.INT64, [])],
                          [vi("y", TensorProto.FLOAT, None)], [sr])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    path = os.path.join(d, "model.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    x = np.random.RandomState(1).randn(2, 4).astype(np.float32)
    pkg = os.path.join(d, "m.dlc")
    p = subprocess.run([dlc, "compile", path, "--target", "emu", "--input-shape", "x=2,4", "-o", pkg],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    problems = []
    if p.returncode != 0:
        return [f"compile failed: {p.stderr.strip()}"]
    if "warning" not in p.stderr or "else branch" not in p.stderr or "deferred" not in p.stderr:
        problems.append(f"no warning about the deferred branch:\n{p.stderr}")
    info = sh([dlc, "inspect", pkg])
    if "deferred If branch: node 'by_rate'" not in info:
        problems.append(f"dlc inspect does not list the deferred branch:\n{info}")
    np.save(os.path.join(d, "x.npy"), x)
    for rate in (16000, 8000):
        np.save(os.path.join(d, "sr.npy"), np.array(rate, np.int64))
        out = os.path.join(d, f"dlc{rate}")
        r = subprocess.run([dlc, "run", pkg, "--device", "emu", "--input", f"x={d}/x.npy", "--input",
                            f"sr={d}/sr.npy", "--output-dir", out, "--quiet"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        ort = subprocess.run(["node", os.path.join(ORT, "ort.js"), "run", path, os.path.join(d, f"ort{rate}"),
                              f"x={d}/x.npy", f"sr={d}/sr.npy"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        if rate == 16000:
            if r.returncode != 0 or ort.returncode != 0:
                problems.append(f"the then branch failed: dlc {r.stderr.strip()} / ort {ort.stderr.strip()}")
            elif compare(npy_out(out, "y"), npy_out(os.path.join(d, f"ort{rate}"), "y"), 1e-6) > 1e-6:
                problems.append("the then branch does not match ONNX Runtime")
        else:
            if r.returncode == 0:
                problems.append("the deferred else branch ran")
            elif "by_rate" not in r.stderr or "else branch" not in r.stderr:
                problems.append(f"the error does not name the If node and branch:\n{r.stderr}")
            if os.path.exists(os.path.join(out, "y.npy")):
                problems.append("an output file was written for the failed run")
            if ort.returncode == 0:
                problems.append("ONNX Runtime ran the else branch (the model does not show the case)")

    # The same If nested in the else branch of an If on `outer`: its guard counts only
    # when the outer else branch runs.
    outer_then = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "outer_then", [],
                                   [vi("n", TensorProto.FLOAT, None)])
    outer_else = helper.make_graph([helper.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="rate"),
                                    helper.make_node("If", ["is16k"], ["inner_y"], name="by_rate",
                                                     then_branch=then_g, else_branch=else_g)],
                                   "outer_else", [], [vi("inner_y", TensorProto.FLOAT, None)])
    g2 = helper.make_graph([helper.make_node("If", ["outer"], ["y"], name="by_flag", then_branch=outer_then,
                                             else_branch=outer_else)],
                           "g", [vi("x", TensorProto.FLOAT, ["N", 4]), vi("sr", TensorProto.INT64, []),
                                 vi("outer", TensorProto.BOOL, [])],
                           [vi("y", TensorProto.FLOAT, None)], [sr])
    m2 = helper.make_model(g2, opset_imports=[helper.make_opsetid("", 18)])
    m2.ir_version = 9
    path2, pkg2 = os.path.join(d, "nested.onnx"), os.path.join(d, "nested.dlc")
    with open(path2, "wb") as f:
        f.write(m2.SerializeToString())
    p = subprocess.run([dlc, "compile", path2, "--target", "emu", "--input-shape", "x=2,4", "-o", pkg2],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        return problems + [f"nested: compile failed: {p.stderr.strip()}"]
    for outer, rate, fails in [(True, 8000, False), (False, 16000, False), (False, 8000, True)]:
        np.save(os.path.join(d, "sr.npy"), np.array(rate, np.int64))
        np.save(os.path.join(d, "outer.npy"), np.array(outer))
        r = subprocess.run([dlc, "run", pkg2, "--device", "emu", "--input", f"x={d}/x.npy", "--input",
                            f"sr={d}/sr.npy", "--input", f"outer={d}/outer.npy", "--output-dir",
                            os.path.join(d, "nested_out"), "--quiet"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if (r.returncode != 0) != fails:
            problems.append(f"nested: outer={outer} sr={rate}: {'ran' if r.returncode == 0 else 'failed'}, "
                            f"expected it to {'fail' if fails else 'run'}: {r.stderr.strip()}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    ensure_ort()
    os.makedirs(a.work, exist_ok=True)
    rows, failed = [], 0
    for c in CASES:
        if a.only in c["name"]:
            failed += not check_case(a.dlc, c, a.work, rows)
    print(f"{'case':48} {'opset':>5} {'IR':>3}  " + "  ".join(f"{v:>16}" for v in TOL))
    for c, results in rows:
        cells = {label: f"{err:.1e}{'' if ok else ' FAIL'}" for label, err, ok in results}
        print(f"{c['name']:48} {c['opset']:>5} {c['ir']:>3}  " + "  ".join(f"{cells.get(v, '-'):>16}" for v in TOL))
    if a.only in "deferred_if":
        problems = check_deferred_if(a.dlc, a.work)
        for p in problems:
            print(f"deferred_if: {p}", file=sys.stderr)
        print(f"deferred_if: {'pass' if not problems else 'FAIL'}")
        failed += bool(problems)
    print(json.dumps({"cases": len(rows), "failed": failed}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
