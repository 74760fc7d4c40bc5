#!/usr/bin/env python3
"""Exports reference models to ONNX with PyTorch, next to their reference outputs.

Layout (the ONNX backend-test layout, so dlc-conformance can run it):
    OUT/<model>_op<opset>/model.onnx
    OUT/<model>_op<opset>/test_data_set_0/input_<i>.pb, output_<i>.pb

Weights are random with fixed seeds; nothing is downloaded. Reference outputs
come from PyTorch in eval mode, computed in float64 (a copy of the model and its
float inputs in double) and rounded to float32: a float32 PyTorch reference carries
its own accumulation-order error, which differs between CPUs (oneDNN picks kernels
by ISA), so a tight tolerance would test the machine rather than dlc. Run with Debian's /usr/bin/python3
(python3-torch, python3-torchvision, python3-onnx).
"""
import argparse
import copy
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
from onnx import numpy_helper

warnings.filterwarnings("ignore")


class TransformerEncoderModel(nn.Module):
    """Two post-norm encoder layers (d=64, 4 heads) over token embeddings."""

    def __init__(self, vocab=100, d=64, heads=4, ff=128, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class GptBlock(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GptDecoder(nn.Module):
    """A GPT-style decoder: token + position embeddings, two pre-norm blocks with
    causal self-attention and a GELU MLP, a final LayerNorm and an LM head tied to
    the token embedding."""

    def __init__(self, vocab=100, d=64, heads=4, seq=16, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([GptBlock(d, heads, seq) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class SequenceModel(nn.Module):
    """A 2-layer recurrent encoder (LSTM or bidirectional GRU) with a linear head."""

    def __init__(self, cell):
        super().__init__()
        if cell == "lstm":
            self.rnn = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        else:
            self.rnn = nn.GRU(16, 24, num_layers=1, batch_first=True, bidirectional=True)
        self.head = nn.Linear(self.rnn.hidden_size * (2 if self.rnn.bidirectional else 1), 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


# The model suite (README: Model suite).
MODELS = ["resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "transformer", "gpt", "lstm", "gru", "digits"]


def build(name):
    """(module, example inputs as a tuple of tensors)."""
    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(weights=None), (torch.randn(1, 3, 224, 224),)
    if name == "mobilenet_v2":
        import torchvision
        model = torchvision.models.mobilenet_v2(weights=None)
        # torchvision's init makes this network's output ~1e-9 (a comparison at any
        # tolerance would pass): fan-in init and non-trivial BN statistics give O(1).
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                m.running_var.uniform_(0.5, 1.5)
                m.running_mean.uniform_(-0.1, 0.1)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.1, 0.1)
        return model, (torch.randn(1, 3, 224, 224),)
    if name == "transformer":
        return TransformerEncoderModel(), (torch.randint(0, 100, (2, 16)),)
    if name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(weights=None)
        # With torchvision's init every bottleneck adds a unit-variance branch and the
        # logits reach ~1e2, where float32 rounding alone (in PyTorch as in dlc) exceeds
        # a 1e-4 relative error on the small logits. Trained ResNets have small gammas
        # on each block's last BN; so does this one, which keeps the logits O(1).
        for m in model.modules():
            if isinstance(m, torchvision.models.resnet.Bottleneck):
                m.bn3.weight.data.uniform_(0.2, 0.5)
        return model, (torch.randn(1, 3, 224, 224),)
    if name == "squeezenet1_1":
        import torchvision
        return torchvision.models.squeezenet1_1(weights=None), (torch.randn(1, 3, 224, 224),)
    if name == "digits":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "digits"))
        from digits_model import DigitsCNN
        model = DigitsCNN()
        for m in model.modules():  # non-trivial running statistics, so BN folding is exercised
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        return model, (torch.rand(1, 1, 8, 8),)
    if name == "gpt":
        return GptDecoder(), (torch.randint(0, 100, (2, 16)),)
    if name in ("lstm", "gru"):
        return SequenceModel(name), (torch.randn(2, 12, 16),)
    raise SystemExit(f"unknown model {name}")


def export(name, opset, out_root):
    model, inputs = build(name)
    model.eval()
    # Run a fixed path: PyTorch's fused inference fast path is not what the ONNX export traces.
    torch.backends.mha.set_fastpath_enabled(False) if hasattr(torch.backends, "mha") else None
    case = os.path.join(out_root, f"{name}_op{opset}")
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with torch.no_grad():
        exact = copy.deepcopy(model).double()
        outputs = exact(*[t.double() if t.is_floating_point() else t for t in inputs])
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    input_names = [f"input_{i}" for i in range(len(inputs))]
    output_names = [f"output_{i}" for i in range(len(outputs))]
    torch.onnx.export(model, inputs, os.path.join(case, "model.onnx"), opset_version=opset,
                      input_names=input_names, output_names=output_names,
                      do_constant_folding=True)
    for i, t in enumerate(inputs):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), input_names[i]).SerializeToString())
    for i, t in enumerate(outputs):
        with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy().astype(np.float32), output_names[i])
                    .SerializeToString())
    print(f"exported {case}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--opsets", default="13,17")
    a = p.parse_args()
    for m in a.models.split(","):
        for o in a.opsets.split(","):
            if os.path.exists(os.path.join(a.out, f"{m}_op{o}", "test_data_set_0", "output_0.pb")):
                continue
            export(m, int(o), a.out)


if __name__ == "__main__":
    sys.exit(main())
