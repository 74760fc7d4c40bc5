#!/usr/bin/env python3
"""Fused attention against PyTorch: scaled dot-product attention written as PyTorch's
math path (softmax(q k' / sqrt(d) + mask) v, the definition of
torch.nn.functional.scaled_dot_product_attention), exported to ONNX, compiled with dlc
for emu and run there, against the same module in float64.

Head sizes 32, 64, 128 and 256; causal (a constant mask, as GPT exports it) and not; an
additive key-padding mask given at run time; grouped-query heads (K and V expanded
from fewer heads); FP32 (--no-tf32: the CUDA-core kernel), FP32 on TF32 (--tf32), and
FP16 and BF16 through --fp16/--bf16, the last three with `--attention-kernel mma`
(attention_mma, on tensor cores; emu runs its mma.sync, ldmatrix and cp.async as the
PTX ISA defines them, TF32's rounding of the operands included). Limits: FP32 1e-4,
TF32 3e-3, FP16 1e-2, BF16 3e-2 of the output's largest magnitude (BF16 keeps 8
significant bits, TF32 and FP16 11; FP16 also rounds P and the output). Each case also checks that the package uses the
kernel it is meant to.

usage: attention_torch.py --dlc build/tools/dlc --work DIR
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

LIMIT = {"fp32": 1e-4, "tf32": 3e-3, "fp16": 1e-2, "bf16": 3e-2}


class Sdpa(torch.nn.Module):
    def __init__(self, s, causal, groups):
        super().__init__()
        self.causal, self.groups = causal, groups
        self.register_buffer("future", torch.triu(torch.ones(s, s, dtype=torch.bool), 1))

    def forward(self, q, k, v, mask):
        if self.groups > 1:  # grouped-query heads: each K/V head serves `groups` query heads
            b, h, s, d = k.shape
            k = k[:, :, None].expand(b, h, self.groups, s, d).reshape(b, h * self.groups, s, d)
            v = v[:, :, None].expand(b, h, self.groups, s, d).reshape(b, h * self.groups, s, d)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5) + mask
        if self.causal:
            scores = scores.masked_fill(self.future, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def run(dlc, work, name, b, h, s, d, causal, groups, precision):
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    rng = np.random.RandomState(len(name))
    q = rng.uniform(-1, 1, (b, h, s, d)).astype(np.float32)
    k = rng.uniform(-1, 1, (b, h // groups, s, d)).astype(np.float32)
    v = rng.uniform(-1, 1, (b, h // groups, s, d)).astype(np.float32)
    mask = np.zeros((b, 1, 1, s), np.float32)
    mask[:, :, :, s - 3:] = -np.inf  # the last keys are padding (every row keeps key 0)
    module = Sdpa(s, causal, groups).eval()
    path = os.path.join(folder, "model.onnx")
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    torch.onnx.export(module, tuple(torch.from_numpy(x) for x in feeds.values()), path,
                      input_names=list(feeds), output_names=["y"], opset_version=17)
    with torch.no_grad():
        want = module.double()(*(torch.from_numpy(x).double() for x in feeds.values())).numpy()
    pkg = os.path.join(folder, "m.dlc")
    flags = {"fp32": ["--no-tf32"], "tf32": ["--tf32", "--attention-kernel", "mma"],
             "fp16": ["--fp16", "--attention-kernel", "mma"],
             "bf16": ["--bf16", "--attention-kernel", "mma"]}[precision]
    subprocess.run([dlc, "compile", path, "--target", "emu", "-o", pkg, "-q", *flags], check=True)
    kernels = json.loads(subprocess.run([dlc, "inspect", pkg, "--json"], check=True, text=True,
                                        stdout=subprocess.PIPE).stdout)["kernels"]
    names = " ".join(k["name"] for k in kernels)
    expect = "attention_mma" if precision != "fp32" else "attention_"
    args = [dlc, "run", pkg, "--device", "emu", "--output-dir", os.path.join(folder, "out"), "--quiet"]
    for n, x in feeds.items():
        np.save(os.path.join(folder, n + ".npy"), x)
        args += ["--input", f"{n}={os.path.join(folder, n + '.npy')}"]
    subprocess.run(args, check=True)
    got = np.load(os.path.join(folder, "out", "y.npy")).astype(np.float64)
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    ok = err <= LIMIT[precision] and expect in names and np.isfinite(got).all()
    print(f"{name:34} {precision}  max error {err:.2e} (limit {LIMIT[precision]:.0e})  "
          f"{'ok' if ok else 'FAIL'}{'' if expect in names else ' (no ' + expect + ')'}", flush=True)
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dlc", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cases = [  # name, batch, heads, sequence, head size, causal, groups, precisions
        ("hd32", 2, 2, 70, 32, False, 1, ["fp32", "tf32", "fp16"]),
        ("hd64_causal", 1, 3, 80, 64, True, 1, ["fp32", "tf32", "fp16", "bf16"]),
        ("hd128_gqa", 1, 4, 40, 128, False, 2, ["tf32", "fp16", "bf16"]),
        ("hd256_causal", 1, 2, 33, 256, True, 1, ["fp16"]),
    ]
    failed = 0
    for name, b, h, s, d, causal, groups, precisions in cases:
        for precision in precisions:
            failed += not run(a.dlc, a.work, f"{name}_{precision}", b, h, s, d, causal, groups, precision)
    if failed:
        print(f"attention_torch: {failed} case(s) failed")
        sys.exit(1)
    print("attention_torch: every case matches PyTorch")


if __name__ == "__main__":
    main()
