#!/usr/bin/env python3
"""The GPU kit's tactics models (README: Tactics): layers that carry cuDNN or cuBLASLt
candidates beside dlc's kernels, for `dlc-run PKG --bench --tactics` on a GPU.

  resnet50_convs  ResNet-50's distinct convolutions (stage 1 to 3, batch 8), each with
                  its bias and ReLU, then a mean per channel (one output per layer)
  gpt_block       a GPT-2-small decoder block (batch 4 x 512 tokens, d 768, 12 heads):
                  the QKV projection and the causal attention, the output projection
                  and the MLP's GEMMs
  vit_block       a ViT-B/16 encoder block (batch 8 x 197 tokens, d 768, 12 heads),
                  likewise without the mask

Weights are computed at run time (Expand of a scalar input `s`), so that
the files stay a few kilobytes and constant folding keeps them out of the package: the
kit carries at most 62 MiB. Compile with --fp16. Usage: gpu_kit_tactics.py OUTDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (C, K, kernel, stride, input H=W): stages 1-3 of ResNet-50, each shape once.
RESNET_CONVS = [
    (64, 64, 1, 1, 56), (64, 64, 3, 1, 56), (64, 256, 1, 1, 56), (256, 64, 1, 1, 56),
    (256, 128, 1, 1, 56), (128, 128, 3, 2, 56), (128, 128, 3, 1, 28), (128, 512, 1, 1, 28),
    (512, 128, 1, 1, 28), (256, 512, 1, 2, 56), (512, 256, 1, 1, 28), (256, 256, 3, 2, 28),
    (256, 256, 3, 1, 14), (256, 1024, 1, 1, 14), (1024, 256, 1, 1, 14), (512, 1024, 1, 2, 28),
]


class Builder:
    def __init__(self):
        self.nodes, self.inits, self.inputs, self.outputs, self.n = [], [], [], [], 0

    def name(self, p):
        self.n += 1
        return "%s%d" % (p, self.n)

    def weight(self, shape):
        """A run-time tensor of `shape`, every element the scalar input `s`."""
        w = self.name("w")
        self.nodes.append(helper.make_node("Expand", ["s", self.const(list(shape), np.int64)], [w]))
        return w

    def const(self, values, dtype):
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.array(values, dtype), n))
        return n

    def model(self, name):
        self.inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]))
        g = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def resnet_convs(batch=8):
    b = Builder()
    for i, (c, k, r, stride, hw) in enumerate(RESNET_CONVS):
        x = "x%d" % i
        b.inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, c, hw, hw]))
        w = b.weight([k, c, r, r])
        bias = b.const(np.linspace(-0.1, 0.1, k), np.float32)
        y = b.name("conv")
        b.nodes.append(helper.make_node("Conv", [x, w, bias], [y], pads=[r // 2] * 4,
                                        strides=[stride, stride], name="conv%d_%dx%d_%d_%d_s%d" %
                                        (i, r, r, c, k, stride)))
        relu = b.name("relu")
        b.nodes.append(helper.make_node("Relu", [y], [relu]))
        # (A small output: the layer's own output stays an intermediate, as in the
        # network, which cuDNN may write with its fused bias and ReLU.)
        out = "y%d" % i
        b.nodes.append(helper.make_node("ReduceMean", [relu], [out], axes=[2, 3], keepdims=0))
        b.outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, k]))
    return b.model("resnet50_convs")


def block(name, batch, tokens, d, hidden, heads, causal):
    """A transformer block's tactic layers: the QKV projection feeding the attention
    (scaled, causal for GPT; its heads split by views, merged back into the output),
    and the attention-output, MLP up and MLP down GEMMs, each on its own input so that
    no fusion changes their shapes."""
    b = Builder()
    rows, hd = batch * tokens, d // heads
    b.inputs.append(helper.make_tensor_value_info("x0", TensorProto.FLOAT, [rows, d]))
    qkv = b.name("qkv")
    b.nodes.append(helper.make_node("MatMul", ["x0", b.weight([d, 3 * d])], [qkv],
                                    name="gemm_qkv_%dx%dx%d" % (rows, 3 * d, d)))
    q3 = b.name("qkv3")
    b.nodes.append(helper.make_node("Reshape", [qkv, b.const([batch, tokens, 3 * d], np.int64)], [q3]))
    heads_of = {}
    for i, part in enumerate("qkv"):
        sl, rs, tr = b.name(part), b.name(part + "r"), b.name(part + "t")
        b.nodes.append(helper.make_node("Slice", [q3, b.const([i * d], np.int64), b.const([(i + 1) * d], np.int64),
                                                  b.const([2], np.int64)], [sl]))
        b.nodes.append(helper.make_node("Reshape", [sl, b.const([batch, tokens, heads, hd], np.int64)], [rs]))
        b.nodes.append(helper.make_node("Transpose", [rs], [tr], perm=[0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]))
        heads_of[part] = tr
    s, ss, p, o, ot, y = (b.name(n) for n in ("s", "ss", "p", "o", "ot", "attn"))
    b.nodes.append(helper.make_node("MatMul", [heads_of["q"], heads_of["k"]], [s]))
    b.nodes.append(helper.make_node("Mul", [s, b.const(1.0 / np.sqrt(hd), np.float32)], [ss]))
    logits = ss
    if causal:
        masked = b.name("masked")
        keep = np.tril(np.ones((tokens, tokens), bool))
        b.nodes.append(helper.make_node("Where", [b.const(keep, bool), ss, b.const(-np.inf, np.float32)],
                                        [masked]))
        logits = masked
    b.nodes.append(helper.make_node("Softmax", [logits], [p], axis=-1))
    b.nodes.append(helper.make_node("MatMul", [p, heads_of["v"]], [o], name="attention_%dx%dx%dx%d" %
                                    (batch, heads, tokens, hd)))
    b.nodes.append(helper.make_node("Transpose", [o], [ot], perm=[0, 2, 1, 3]))
    b.nodes.append(helper.make_node("Reshape", [ot, b.const([rows, d], np.int64)], ["attn"]))
    b.outputs.append(helper.make_tensor_value_info("attn", TensorProto.FLOAT, [rows, d]))
    for i, (kdim, ndim) in enumerate([(d, d), (d, hidden), (hidden, d)], start=1):
        x = "x%d" % i
        b.inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [rows, kdim]))
        out = "y%d" % i
        b.nodes.append(helper.make_node("MatMul", [x, b.weight([kdim, ndim])], [out],
                                        name="gemm%d_%dx%dx%d" % (i, rows, ndim, kdim)))
        b.outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [rows, ndim]))
    return b.model(name)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    models = {"resnet50_convs": resnet_convs(),
              "gpt_block": block("gpt_block", 4, 512, 768, 3072, 12, causal=True),
              "vit_block": block("vit_block", 8, 197, 768, 3072, 12, causal=False)}
    for name, m in models.items():
        onnx.checker.check_model(m)
        os.makedirs(os.path.join(out, name), exist_ok=True)
        onnx.save(m, os.path.join(out, name, "model.onnx"))


if __name__ == "__main__":
    main()
