#!/usr/bin/env python3
"""Attention's gradient on tensor cores (FlashAttention, FlashAttentionGrad) against
torch.autograd in float64.

Each case is textual IR in FP16 or BF16: Q, K and V are parameters [B, H, S, d], the
scores MatMul(Q, K') scaled by 1/sqrt(d), optionally plus a bias (a key-padding mask
with -inf, or a finite position bias), optionally masked causally (Where of a constant
mask, as GPT exports it), Softmax, optionally training-mode Dropout (its Philox mask
reproduced in the reference), MatMul by V, and the loss sum(O * R) for a
fixed random R. `dlc opt --passes autodiff` rewrites the attention into FlashAttention
(checked), whose gradient is one FlashAttentionGrad node; the reference interpreter
(float64 references of both ops) and emu (attention_mma with its log-sum-exp, then
attention_grad_prep and attention_grad_mma twice, with mma.sync, ldmatrix and cp.async
as the PTX ISA defines them) must both match PyTorch's gradients of the same
computation on the same rounded inputs: within 1e-2 (FP16) or 3e-2 (BF16) of each
gradient's largest magnitude on emu (FP16/BF16 operands of the products, FP32
accumulation), 1e-3 (FP16) or 8e-3 (BF16) on the interpreter (its results' rounding
only); the loss, which
sums O rounded to the precision, within 1e-2 or 3e-2 on both.

Shapes cover head sizes 16, 32, 40 (padded to 48: chunk predicates), 64, 96 and 128,
V's head size other than Q's and K's (one, two and three ldmatrix groups; 96 and
128 stream 32-row tiles), sequence lengths that are not multiples of the tiles (the
edge forms: keys, queries and padded LSE rows), several tiles (the interior form),
causal masks with the diagonal in and across tiles, and Sq != Sk with a causal reach
(bottom-right alignment).

usage: flash_attention.py --dlc build/tools/dlc --work DIR
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch

CASES = [  # name, precision, B, H, Sq, Sk, d, causal, bias
    ("d32-causal-s40", "f16", 1, 2, 40, 40, 32, True, None),
    ("d64-s200", "f16", 1, 2, 200, 200, 64, False, None),
    ("d64-causal-s200", "f16", 2, 1, 200, 200, 64, True, None),
    ("d128-causal-s130", "f16", 1, 2, 130, 130, 128, True, None),
    ("d96-s77", "bf16", 1, 2, 77, 77, 96, False, None),
    ("d32-causal-q24-k72", "bf16", 1, 3, 24, 72, 32, True, None),
    ("d40-s50", "f16", 2, 1, 50, 50, 40, False, None),
    ("d16-causal-s9", "f16", 1, 1, 9, 9, 16, True, None),
    ("d64-padmask-s150", "f16", 2, 2, 150, 150, 64, False, "pad"),
    ("d32-posbias-causal-s70", "bf16", 1, 2, 70, 70, 32, True, "pos"),
    ("d64-padmask-causal-s90", "f16", 2, 1, 90, 90, 64, True, "pad"),
    ("d64-dv128-s100", "f16", 1, 2, 100, 100, (64, 128), False, None),
    ("d128-dv32-causal-s60", "bf16", 1, 2, 60, 60, (128, 32), True, None),
    # Dropout of the probabilities (training mode, ratio 0.2): the same Philox mask as
    # the Dropout op's, reproduced here by philox_uniform.
    ("d64-dropout-s130", "f16", 1, 2, 130, 130, 64, False, "dropout"),
    ("d32-dropout-padmask-causal-s70", "bf16", 2, 1, 70, 70, 32, True, "pad+dropout"),
]
DROPOUT, SEED, STEP = 0.2, 11, 5


def philox_uniform(seed, stream, index):
    """Philox4x32-10's first word for counters (index, stream) and key seed, as a
    uniform number in [0, 1) with 24 bits (ir/include/dlc/ir/Philox.h; Salmon et al.,
    SC 2011): the Dropout op's random numbers, for the reference."""
    m = np.uint64(0xFFFFFFFF)
    index = np.asarray(index, np.uint64)
    c0, c1 = index & m, index >> np.uint64(32)
    c2 = np.full_like(c0, stream & 0xFFFFFFFF)
    c3 = np.full_like(c0, stream >> 32)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return (c0 >> np.uint64(8)).astype(np.float64) / 16777216.0
LIMIT = {"f16": 1e-2, "bf16": 3e-2}
INTERP_LIMIT = {"f16": 1e-3, "bf16": 8e-3}  # (results rounded to 11 or 8 significant bits)
NP = {"f16": np.float16, "bf16": None}


def rounded(a, precision):
    """a rounded to the precision (BF16: round to nearest even on the top 16 bits)."""
    if precision == "f16":
        return a.astype(np.float16).astype(np.float64)
    b = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) << np.uint64(16)
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def dense(a, precision):
    if precision == "f16":
        raw = a.astype(np.float16).tobytes()
    elif precision == "bf16":
        raw = (rounded(a, "bf16").astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    else:
        raw = a.tobytes()
    return "dense<0x" + raw.hex().upper() + ">"


def case_ir(name, precision, b, h, sq, sk, d, causal, bias, rng):
    d, dv = d if isinstance(d, tuple) else (d, d)  # (Q and K's head size, V's)
    shp = {"q": (b, h, sq, d), "k": (b, h, sk, d), "v": (b, h, sk, dv), "r": (b, h, sq, dv)}
    vals = {n: rounded(rng.uniform(-1, 1, s), precision) for n, s in shp.items()}
    t = precision
    dims = lambda s: "[" + ",".join(str(x) for x in s) + "]"
    lines = [f'graph @{name.replace("-", "_")}() -> ("loss": f32[]) {{']
    for n in "qkv":
        lines.append(f"  %{n} = param {t}{dims(shp[n])} {dense(vals[n], t)}")
    lines.append(f"  %r = const {t}{dims(shp['r'])} {dense(vals['r'], t)}")
    scale = 1.0 / np.sqrt(d)
    lines.append(f"  %sc = const {t}[] dense<[{scale!r}]>")
    lines.append(f"  %kt = Transpose(%k) {{perm = [0, 1, 3, 2]}} : {t}{dims((b, h, d, sk))}")
    ss = dims((b, h, sq, sk))
    lines.append(f"  %s = MatMul(%q, %kt) : {t}{ss}")
    lines.append(f"  %s2 = Mul(%s, %sc) : {t}{ss}")
    score = "%s2"
    # An additive bias after the scale: a key-padding mask [B, 1, 1, Sk] (-inf on each
    # sequence's last keys, as BERT-style exports add it) or a position bias [1, H, Sq, Sk].
    add = None
    dropout = bias is not None and "dropout" in bias
    bias = bias.replace("+dropout", "").replace("dropout", "") or None if bias else None
    if bias == "pad":
        add = np.zeros((b, 1, 1, sk))
        for i in range(b):
            add[i, :, :, sk - 5 - 7 * i:] = -np.inf
    elif bias == "pos":
        add = rounded(rng.uniform(-2, 2, (1, h, sq, sk)), precision)
    if add is not None:
        lines.append(f"  %bias = const {t}{dims(add.shape)} {dense(add, t)}")
        lines.append(f"  %sb = Add(%s2, %bias) : {t}{ss}")
        score = "%sb"
    # Bottom-right causal alignment: query i sees keys up to i + (sk - sq).
    future = np.triu(np.ones((sq, sk), bool), 1 + sk - sq)
    if causal:
        lines.append(f"  %m = const bool{dims((sq, sk))} {dense(future, None)}")
        lines.append(f"  %ninf = const {t}[] dense<[-inf]>")
        lines.append(f"  %s3 = Where(%m, %ninf, {score}) : {t}{ss}")
        score = "%s3"
    lines.append(f"  %p = Softmax({score}) {{axis = -1}} : {t}{ss}")
    probs = "%p"
    if dropout:
        lines.append(f"  %step = const i64[] dense<[{STEP}]>")
        lines.append(f"  %pd = Dropout(%p, %step) {{ratio = {DROPOUT}, seed = {SEED}}} : {t}{ss}")
        probs = "%pd"
    lines.append(f"  %o = MatMul({probs}, %v) : {t}{dims(shp['r'])}")
    lines.append(f"  %w = Mul(%o, %r) : {t}{dims(shp['r'])}")
    lines.append(f'  %wf = Cast(%w) {{to = "f32"}} : f32{dims(shp["r"])}')
    lines.append("  %loss = ReduceSum(%wf) {keepdims = 0} : f32[]")
    lines.append("  return %loss")
    lines.append("}")
    # The reference: the same computation in float64 on the same rounded values (the
    # scale as the IR holds it).
    sc = rounded(np.array(scale), precision).item()
    tq, tk, tv = (torch.tensor(vals[n], dtype=torch.float64, requires_grad=True) for n in "qkv")
    s = torch.matmul(tq, tk.transpose(-1, -2)) * sc
    if add is not None:
        s = s + torch.from_numpy(add)
    if causal:
        s = s.masked_fill(torch.from_numpy(future), float("-inf"))
    p = torch.softmax(s, -1)
    if dropout:  # element (bh, q, k) of P [B, H, Sq, Sk], as the Dropout op numbers it
        keep = philox_uniform(SEED, STEP, np.arange(p.numel(), dtype=np.uint64)) >= DROPOUT
        p = p * torch.from_numpy(keep.reshape(p.shape) / (1.0 - DROPOUT))
    o = torch.matmul(p, tv)
    loss = (o * torch.from_numpy(vals["r"])).sum()
    loss.backward()
    want = {"q": tq.grad.numpy(), "k": tk.grad.numpy(), "v": tv.grad.numpy()}
    return "\n".join(lines) + "\n", want, loss.item()


def load(path):
    """An output as float64 (BF16 arrives as 2-byte raw values, |V2)."""
    a = np.load(path)
    if a.dtype.kind == "V" and a.dtype.itemsize == 2:
        a = (a.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    return a.astype(np.float64)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = np.random.default_rng(3)
    failures = 0
    for name, precision, b, h, sq, sk, d, causal, bias in CASES:
        folder = os.path.join(args.work, name)
        os.makedirs(folder, exist_ok=True)
        text, want, want_loss = case_ir(name, precision, b, h, sq, sk, d, causal, bias, rng)
        src, grad_ir = os.path.join(folder, "attn.ir"), os.path.join(folder, "grad.ir")
        with open(src, "w") as f:
            f.write(text)
        # (Dropout joins the fused attention only on request: --fused-attention-dropout.)
        run([args.dlc, "opt", src, "--passes", "autodiff", "--verify-each", "-o", grad_ir]
            + (["--train", "--fused-attention-dropout"] if bias and "dropout" in bias else []))
        with open(grad_ir) as f:
            ir = f.read()
        rewritten = ("FlashAttention(" in ir and "FlashAttentionGrad(" in ir and "Softmax(" not in ir
                     and "Dropout(" not in ir)
        if not rewritten:
            print(f"{name}: autodiff did not rewrite the attention into FlashAttention: FAIL")
            failures += 1
            continue
        pkg = os.path.join(folder, "grad.dlc")
        run([args.dlc, "compile", grad_ir, "--target", "emu", "-o", pkg, "-q"])
        kernels = run([args.dlc, "inspect", pkg])
        uses = all(k in kernels for k in ("attention_mma", "attention_grad_prep", "attention_grad_mma"))
        for backend, limit in (("interp", INTERP_LIMIT[precision]), ("emu", LIMIT[precision])):
            out = os.path.join(folder, "out-" + backend)
            if backend == "interp":
                run([args.dlc, "interpret", grad_ir, "--output-dir", out])
            else:
                run([args.dlc, "run", pkg, "--device", "emu", "--output-dir", out, "--quiet"])
            errs = {}
            for n in "qkv":
                got = load(os.path.join(out, f"grad.{n}.npy"))
                ref = want[n]
                errs[n] = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)) \
                    if got.shape == ref.shape and np.isfinite(got).all() else float("inf")
            loss = float(np.load(os.path.join(out, "loss.npy")))
            loss_err = abs(loss - want_loss) / max(1.0, abs(want_loss))
            # (The loss sums O rounded to the precision, on either backend.)
            ok = all(e <= limit for e in errs.values()) and loss_err <= LIMIT[precision] and \
                (backend == "interp" or uses)
            failures += not ok
            print(f"{name:22} {precision:4} {backend:6} dQ {errs['q']:.1e}  dK {errs['k']:.1e}  "
                  f"dV {errs['v']:.1e}  loss {loss_err:.1e}  (limit {limit:.0e})  "
                  f"{'ok' if ok else 'FAIL'}{'' if uses or backend == 'interp' else ' (kernels missing)'}",
                  flush=True)
    if failures:
        sys.exit(f"{failures} check(s) failed")
    print(f"all {2 * len(CASES)} checks passed")


if __name__ == "__main__":
    main()
