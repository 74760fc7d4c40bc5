#!/usr/bin/env python3
"""Writes mlp.ir: a 64-32-10 multilayer perceptron with fixed pseudo-random weights.

The graph is written the way an importer sees a PyTorch export (Gemm with
transB, Flatten, Identity), so the default pipeline has something to clean up.
"""
import random
import struct

random.seed(2026)


def dense(n, scale):
    data = b"".join(struct.pack("<f", random.uniform(-scale, scale)) for _ in range(n))
    return "dense<0x" + data.hex().upper() + ">"


lines = [
    'graph @mlp(%image: f32[1,1,8,8]) -> ("logits": f32[1,10], "probs": f32[1,10]) {',
    f"  %fc1.weight = const f32[32,64] {dense(32 * 64, 0.25)}",
    f"  %fc1.bias = const f32[32] {dense(32, 0.1)}",
    f"  %fc2.weight = const f32[10,32] {dense(10 * 32, 0.3)}",
    f"  %fc2.bias = const f32[10] {dense(10, 0.1)}",
    '  %x = Flatten(%image) {axis = 1} : f32[1,64] loc("flatten")',
    '  %h = Gemm(%x, %fc1.weight, %fc1.bias) {transB = 1} : f32[1,32] loc("fc1")',
    '  %a = Relu(%h) : f32[1,32] loc("relu")',
    '  %d = Identity(%a) : f32[1,32] loc("dropout")',
    '  %logits = Gemm(%d, %fc2.weight, %fc2.bias) {transB = 1} : f32[1,10] loc("fc2")',
    '  %probs = Softmax(%logits) {axis = 1} : f32[1,10] loc("softmax")',
    "  return %logits, %probs",
    "}",
]
with open(__file__.replace("make_mlp.py", "mlp.ir"), "w") as f:
    f.write("\n".join(lines) + "\n")
