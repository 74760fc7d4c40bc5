#!/usr/bin/python3
"""The GPU kit's kernel-family cases: one small ONNX model per kernel family of
codegen/device/ (and the cuBLASLt GEMM path), with awkward extents (odd, prime, not
multiples of a tile or of 4), exported by PyTorch at opset 17, with inputs and
reference outputs computed by PyTorch in float64 and rounded to the output dtype.

Layout, per case:  OUT/<case>/model.onnx
                   OUT/<case>/inputs/<name>.npy   OUT/<case>/inputs.txt (NAME=inputs/FILE lines)
                   OUT/<case>/expected/<name>.npy

Also the review's bad-index case: `gather/bad_inputs` holds inputs with an index out of
range; dlc must fail with a data error that names the node (not a trap, which would
kill the CUDA context).

`--suite-case CASE --out DIR` instead writes the inputs and references of one exported
model-suite case (tests/models/export_models.py layout) in the same layout.

`--templates --out DIR` instead writes the timing cases of `dlc calibrate`'s kernel
comparison: each kernel-library template at three shapes (ResNet-50's and a
transformer's), OUT/<template>_<i>/model.onnx and a `flags` file of extra `dlc compile`
flags (--fp16). No inputs or references: the kit times them with random inputs and
prints dlc inspect's modeled time beside the measured one.

usage: /usr/bin/python3 scripts/gpu_kit_cases.py --out DIR [--suite-case CASE | --templates]
"""
import argparse
import copy
import os
import re
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.strided = nn.Conv2d(5, 7, 3, stride=2, padding=1)
        self.depthwise = nn.Conv2d(5, 5, 3, padding=1, groups=5)
        self.pointwise = nn.Conv2d(5, 13, 1)
        self.transposed = nn.ConvTranspose2d(5, 3, 3, stride=2)

    def forward(self, x):
        return (torch.relu(self.strided(x)), self.pointwise(self.depthwise(x)), self.transposed(x))


class ConvTc(nn.Module):
    """Convolutions for conv_fprop_mma (channels-last, tensor cores): an RGB stem (C = 3,
    packed; 49 taps, the 64-bit mask), a dilated 3x3, a grouped 3x3 (8 channels a group)
    and a pointwise one, at odd extents."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 7, stride=2, padding=3)
        self.dilated = nn.Conv2d(32, 40, 3, padding=2, dilation=2)
        self.grouped = nn.Conv2d(40, 40, 3, padding=1, groups=5)
        self.pointwise = nn.Conv2d(40, 24, 1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        return (s, self.pointwise(torch.relu(self.grouped(torch.relu(self.dilated(s))))))


class Pool(nn.Module):
    def forward(self, x):
        return (nn.functional.max_pool2d(x, 3, stride=2, padding=1), nn.functional.avg_pool2d(x, 2),
                x.mean(dim=(2, 3), keepdim=True))


class Reduce(nn.Module):
    def forward(self, x):
        return x.mean(dim=1, keepdim=True), x.amax(dim=-1), x.sum(dim=(0, 2))


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(45)
        self.bn = nn.BatchNorm2d(3)
        self.gn = nn.GroupNorm(3, 9)

    def forward(self, seq, img, grp):
        return self.ln(seq), self.bn(img), self.gn(grp)


class Attention(nn.Module):
    """Softmax, and scaled dot-product attention: 3 heads of 24 over 11 tokens."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(72, 216)

    def forward(self, x, logits):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, 3, 24).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (24 ** 0.5), dim=-1)
        return (att @ v).transpose(1, 2).reshape(b, t, d), torch.softmax(logits, dim=-1)


class Gemm(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(65, 17)

    def forward(self, x, a, b):
        return nn.functional.gelu(self.linear(x), approximate="tanh"), a @ b


class Rnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(7, 19, num_layers=2, batch_first=True)
        self.gru = nn.GRU(7, 11, bidirectional=True, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0], self.gru(x)[0]


class Movement(nn.Module):
    def forward(self, x, y):
        idx = torch.tensor([4, 0, 2, 2], dtype=torch.long)
        return (x.permute(0, 2, 3, 1).contiguous(), torch.cat([x, y], dim=1)[:, :, 1::2, ::3],
                torch.index_select(x, 3, idx), nn.functional.interpolate(x, scale_factor=2, mode="nearest"),
                nn.functional.pad(x, (1, 2, 0, 1)))


class Elementwise(nn.Module):
    def forward(self, a, b):
        s = a * b + torch.sigmoid(a - b)
        return s, torch.tanh(s).clamp(-0.5, 0.7), nn.functional.gelu(a + b), torch.where(a > b, a, b * 0.5)


class ArgTopK(nn.Module):
    def forward(self, x):
        values, indices = torch.topk(x, 3, dim=-1)
        return x.argmax(dim=-1), values, indices, torch.cumsum(x, dim=1)


class Gather(nn.Module):
    def forward(self, table, indices):
        return (table[indices] * 2.0,)


def rng_inputs(seed, *shapes):
    g = np.random.default_rng(seed)
    return [g.standard_normal(s).astype(np.float32) for s in shapes]


CASES = {
    "conv": (Conv, ["x"], lambda: rng_inputs(1, (1, 5, 13, 11)), ["strided", "depthwise_pointwise", "transposed"]),
    "conv_tc_fp16": (ConvTc, ["x"], lambda: rng_inputs(12, (2, 3, 29, 31)), ["stem", "out"]),
    "conv_tc_tf32": (ConvTc, ["x"], lambda: rng_inputs(12, (2, 3, 29, 31)), ["stem", "out"]),
    "pool": (Pool, ["x"], lambda: rng_inputs(2, (2, 3, 17, 15)), ["max", "avg", "global"]),
    "reduce": (Reduce, ["x"], lambda: rng_inputs(3, (3, 37, 5)), ["mean", "max", "sum"]),
    "norm": (Norm, ["seq", "img", "grp"], lambda: rng_inputs(4, (2, 7, 45), (2, 3, 5, 9), (2, 9, 3, 7)),
             ["layer_norm", "batch_norm", "group_norm"]),
    "attention": (Attention, ["x", "logits"], lambda: rng_inputs(5, (2, 11, 72), (2, 3, 13)), ["attention", "softmax"]),
    "gemm": (Gemm, ["x", "a", "b"], lambda: rng_inputs(6, (3, 33, 65), (2, 7, 19), (2, 19, 23)), ["linear_gelu", "bmm"]),
    "rnn": (Rnn, ["x"], lambda: rng_inputs(7, (3, 5, 7)), ["lstm", "gru"]),
    "movement": (Movement, ["x", "y"], lambda: rng_inputs(8, (2, 3, 5, 7), (2, 2, 5, 7)),
                 ["permute", "concat_slice", "gather", "resize", "pad"]),
    "elementwise": (Elementwise, ["a", "b"], lambda: rng_inputs(9, (3, 1, 7), (1, 5, 7)),
                    ["mul_add_sigmoid", "tanh_clip", "gelu", "where"]),
    "arg_topk_cumsum": (ArgTopK, ["x"], lambda: rng_inputs(10, (4, 29)), ["argmax", "topk_values", "topk_indices", "cumsum"]),
    "gather": (Gather, ["table", "indices"],
               lambda: rng_inputs(11, (10, 6)) + [np.array([3, 0, 9, 3], dtype=np.int64)], ["rows"]),
}


class ConvLayer(nn.Module):
    def __init__(self, cin, cout, k, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups)

    def forward(self, x):
        return (torch.relu(self.conv(x)),)


class MatMul(nn.Module):
    def forward(self, a, b):
        return (torch.matmul(a, b),)


class SoftmaxRows(nn.Module):
    def forward(self, x):
        return (torch.softmax(x, dim=-1),)


class LayerNormRows(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return (self.ln(x),)


class AddRelu(nn.Module):
    def forward(self, a, b):
        return (torch.relu(a + b),)


class AttentionHeads(nn.Module):
    """softmax(q k' / sqrt(hd)) v over [B, H, S, hd] inputs, as exporters write scaled
    dot-product attention; causal: GPT's constant mask (Where of -inf above the
    diagonal)."""

    def __init__(self, s, causal):
        super().__init__()
        self.causal = causal
        self.register_buffer("mask", torch.triu(torch.ones(s, s, dtype=torch.bool), 1))

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        if self.causal:
            scores = scores.masked_fill(self.mask, float("-inf"))
        return (torch.matmul(torch.softmax(scores, dim=-1), v),)


class AttentionTraining(nn.Module):
    """One training step of attention: Q, K and V are the input X [B, H, S, hd] scaled
    per channel by the weights (hd values each: the package stays small), the input R
    weighs the output, the loss is sum(attention(Q, K, V) R) (compiled with --train
    --loss none --fp16: FlashAttention and its gradient, then the three weights'
    gradients, one reduction each, and their SGD update)."""

    def __init__(self, hd, s, causal):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.wq, self.wk, self.wv = (nn.Parameter(torch.rand(hd, generator=g) + 0.5) for _ in range(3))
        self.heads = AttentionHeads(s, causal)

    def forward(self, x, r):
        return ((self.heads(x * self.wq, x * self.wk, x * self.wv)[0] * r).sum(),)


class GlobalPool(nn.Module):
    def forward(self, x):
        return (x.mean(dim=(2, 3)),)


# Cases compiled with more flags (a `flags` file), compared with looser tolerances (an
# `expect_args` file, for the reference and for emu: FP16 and TF32 round differently
# from float64, and the GPU's products may sum in another order than emu's).
CASE_FLAGS = {
    "conv_tc_fp16": (["--fp16"], ["--rtol", "1e-2", "--atol", "1e-2"]),
    "conv_tc_tf32": (["--tf32"], ["--rtol", "3e-3", "--atol", "3e-3"]),
}


# Each template at three shapes: (module factory, input shapes, compile flags).
TEMPLATES = {
    "conv3x3_fp16": [(lambda c=c: ConvLayer(c, c, 3), [(n, c, h, h)], ["--fp16"])
                     for n, c, h in [(1, 64, 56), (1, 256, 14), (8, 128, 28), (32, 128, 28)]],
    "conv3x3_tf32": [(lambda c=c: ConvLayer(c, c, 3), [(n, c, h, h)], ["--tf32"])
                     for n, c, h in [(1, 64, 56), (8, 128, 28), (32, 128, 28)]],
    "conv3x3_g8_fp16": [(lambda c=c: ConvLayer(c, c, 3, groups=8), [(n, c, h, h)], ["--fp16"])
                        for n, c, h in [(1, 128, 28), (8, 256, 14), (32, 128, 28)]],
    "conv3x3_fp32": [(lambda c=c: ConvLayer(c, c, 3), [(n, c, h, h)], ["--no-tf32"])
                     for n, c, h in [(1, 64, 56), (1, 256, 14), (8, 128, 28)]],
    "conv1x1_fp16": [(lambda ci=ci, co=co: ConvLayer(ci, co, 1), [(n, ci, h, h)], ["--fp16"])
                     for n, ci, co, h in [(1, 256, 64, 56), (1, 1024, 256, 14), (8, 512, 128, 28),
                                          (32, 256, 1024, 14)]],
    "matmul_fp16": [(MatMul, [a, b], ["--fp16"])
                    for a, b in [((128, 768), (768, 768)), ((2048, 1024), (1024, 1024)),
                                 ((8, 512, 64), (8, 64, 512))]],
    "softmax": [(SoftmaxRows, [s], []) for s in [(128, 1000), (2048, 512), (64, 8192)]],
    # (scripts/gpu_kit_torch_kernels.py times PyTorch's scaled_dot_product_attention at
    # these shapes: keep the two lists alike.)
    # (The causal mask is a [S, S] bool constant in the package: S = 512 keeps the kit
    # within its size.)
    "attention_fp16": [(lambda s=s: AttentionHeads(s, False), [(b, h, s, d)] * 3, ["--fp16"])
                       for b, h, s, d in [(1, 12, 512, 64), (8, 16, 1024, 64), (4, 8, 2048, 128)]],
    "attention_causal_fp16": [(lambda s=s: AttentionHeads(s, True), [(b, h, s, d)] * 3, ["--fp16"])
                              for b, h, s, d in [(1, 12, 512, 64), (16, 16, 512, 128)]],
    # Attention's training step (FlashAttention forward and backward; torch_kernels.py
    # times SDPA's forward and backward at this shape; one shape: the kit's 62 MiB).
    "attention_train_fp16": [(lambda s=s, c=c: AttentionTraining(s[3], s[2], c), [s, s],
                              ["--fp16", "--train", "--loss", "none"])
                             for s, c in [((4, 16, 512, 64), True)]],
    "layernorm": [(lambda d=s[-1]: LayerNormRows(d), [s], []) for s in [(128, 768), (2048, 1024), (64, 8192)]],
    "add_relu": [(AddRelu, [s, s], []) for s in [(1, 64, 56, 56), (8, 256, 28, 28), (16, 512, 14, 14)]],
    "global_pool": [(GlobalPool, [s], []) for s in [(1, 2048, 7, 7), (32, 2048, 7, 7), (8, 512, 28, 28)]],
}


def write_templates(out):
    for name, shapes in TEMPLATES.items():
        for i, (make, in_shapes, flags) in enumerate(shapes):
            torch.manual_seed(i)
            d = os.path.join(out, f"{name}_{i}")
            os.makedirs(d, exist_ok=True)
            inputs = tuple(torch.randn(*s) for s in in_shapes)
            names = [f"in{k}" for k in range(len(inputs))]
            torch.onnx.export(make().eval(), inputs, os.path.join(d, "model.onnx"), input_names=names,
                              output_names=["out"], opset_version=17)
            with open(os.path.join(d, "flags"), "w") as f:
                f.write(" ".join(flags) + "\n")


def sanitize(name):
    """The file name the runtime's CLI gives an output (runtime/cli/Cli.cpp)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def write_data(d, in_names, inputs, out_names, outputs):
    """inputs/, inputs.txt and expected/ of one case (float64 outputs as float32)."""
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    with open(os.path.join(d, "inputs.txt"), "w") as f:
        for n, a in zip(in_names, inputs):
            np.save(os.path.join(d, "inputs", sanitize(n) + ".npy"), a)
            f.write(f"{n}=inputs/{sanitize(n)}.npy\n")
    for n, o in zip(out_names, outputs):
        np.save(os.path.join(d, "expected", sanitize(n) + ".npy"), o.astype(np.float32) if o.dtype == np.float64 else o)


def write_case(out, name, module, in_names, inputs, out_names):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    torch.onnx.export(module, tuple(torch.from_numpy(a) for a in inputs), os.path.join(d, "model.onnx"),
                      input_names=in_names, output_names=out_names, opset_version=17)
    ref = copy.deepcopy(module).double()
    with torch.no_grad():
        outs = ref(*(torch.from_numpy(a.astype(np.float64) if a.dtype == np.float32 else a) for a in inputs))
    write_data(d, in_names, inputs, out_names, [o.numpy() for o in outs])


def write_suite_case(case, d):
    """A model-suite case's test_data_set_0 as .npy inputs and references."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    ins = [i.name for i in m.graph.input if i.name not in inits]
    outs = [o.name for o in m.graph.output]

    def load(kind, i):
        t = onnx.TensorProto()
        with open(os.path.join(case, "test_data_set_0", f"{kind}_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)

    write_data(d, ins, [load("input", i) for i in range(len(ins))], outs, [load("output", i) for i in range(len(outs))])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--suite-case")
    p.add_argument("--templates", action="store_true")
    args = p.parse_args()
    if args.suite_case:
        return write_suite_case(args.suite_case, args.out)
    if args.templates:
        return write_templates(args.out)
    torch.manual_seed(0)
    for name, (cls, in_names, make_inputs, out_names) in CASES.items():
        torch.manual_seed(len(name))
        module = cls().eval()
        if name == "norm":  # running statistics that are not the identity
            module.bn.running_mean.uniform_(-0.5, 0.5)
            module.bn.running_var.uniform_(0.5, 2.0)
        write_case(args.out, name, module, in_names, make_inputs(), out_names)
        # (FP32 cases are strict FP32: they are compared with float64 at 1e-3.)
        flags, expect = CASE_FLAGS.get(name, (["--no-tf32"], []))
        for file, words in (("flags", flags), ("expect_args", expect)):
            if words:
                with open(os.path.join(args.out, name, file), "w") as f:
                    f.write(" ".join(words) + "\n")
    # The bad-index case: the gather model, with an index past the table's 10 rows.
    bad = os.path.join(args.out, "gather", "bad_inputs")
    os.makedirs(bad, exist_ok=True)
    np.save(os.path.join(bad, "table.npy"), rng_inputs(11, (10, 6))[0])
    np.save(os.path.join(bad, "indices.npy"), np.array([3, 0, 99, 3], dtype=np.int64))
    with open(os.path.join(bad, "inputs.txt"), "w") as f:
        f.write("table=table.npy\nindices=indices.npy\n")
    # A reference off by 1% in one element: the comparison itself must catch it.
    wrong = os.path.join(args.out, "gather", "wrong_expected")
    os.makedirs(wrong, exist_ok=True)
    rows = np.load(os.path.join(args.out, "gather", "expected", "rows.npy"))
    rows.flat[5] *= 1.01
    np.save(os.path.join(wrong, "rows.npy"), rows)


if __name__ == "__main__":
    main()
