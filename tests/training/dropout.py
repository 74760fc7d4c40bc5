#!/usr/bin/env python3
"""Training-mode Dropout (Philox, counter-based): the reference interpreter and the
kernels on emu draw the same mask; about `ratio` of the elements are dropped and the
rest scaled by 1 / (1 - ratio); the gradient applies the same mask; another step
draws another mask. Then a PyTorch MLP with nn.Dropout, exported in training mode,
trains with `dlc compile --train` + `dlc train` (its step counter advances)."""
import json
import os
import sys
import warnings

import numpy as np
import torch

from common import parse_args, sh

warnings.filterwarnings("ignore")

IR = """graph @drop() -> ("loss": f32[]) {{
  %x = param f32[64,32] dense<0x{x}>
  %r = const f32[64,32] dense<0x{r}>
  %step = state i64[] dense<[{step}]>
  %y = Dropout(%x, %step) {{ratio = 0.25, seed = 7}} : f32[64,32]
  %m = Mul(%y, %r) : f32[64,32]
  %loss = ReduceSum(%m) {{keepdims = 0}} : f32[]
  return %loss
}}
"""


def main():
    a, w = parse_args()
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, (64, 32)).astype(np.float32)
    r = rng.uniform(-1, 1, (64, 32)).astype(np.float32)
    failures = []
    masks = {}
    for step in (3, 4):
        src, grad = os.path.join(w, f"drop{step}.ir"), os.path.join(w, f"grad{step}.ir")
        open(src, "w").write(IR.format(x=x.tobytes().hex().upper(), r=r.tobytes().hex().upper(), step=step))
        sh([a.dlc, "opt", src, "--passes", "autodiff", "--verify-each", "-o", grad])
        outs = {}
        for backend in ("interp", "emu"):
            d = os.path.join(w, f"out-{backend}-{step}")
            if backend == "interp":
                sh([a.dlc, "interpret", grad, "--output-dir", d])
            else:
                pkg = os.path.join(w, f"grad{step}.dlc")
                sh([a.dlc, "compile", grad, "--target", "emu", "-o", pkg, "-q"])
                sh([a.dlc, "run", pkg, "--device", "emu", "--output-dir", d, "-q"])
            outs[backend] = np.load(os.path.join(d, "grad.x.npy"))
        g = outs["interp"]
        if not np.array_equal(g, outs["emu"]):
            failures.append(f"step {step}: the kernels' mask differs from the reference's")
        kept = g != 0
        frac = 1 - kept.mean()
        if abs(frac - 0.25) > 0.04:  # 2048 draws: 4 sigma is 0.038
            failures.append(f"step {step}: dropped fraction {frac:.3f}, expected 0.25")
        if not np.allclose(g[kept], (r / 0.75)[kept], rtol=1e-6):
            failures.append(f"step {step}: kept gradients are not R / (1 - ratio)")
        masks[step] = kept
        print(f"step {step}: dropped {frac:.3f} of 2048, interp == emu: {np.array_equal(g, outs['emu'])}")
    if np.array_equal(masks[3], masks[4]):
        failures.append("steps 3 and 4 drew the same mask")

    # An MLP with dropout, exported in training mode, trains.
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 2))
    mlp.train()
    torch.onnx.export(mlp, torch.zeros(16, 8), os.path.join(w, "mlp.onnx"), input_names=["x"], output_names=["y"],
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    xs = rng.normal(size=(256, 8)).astype(np.float32)
    ys = (xs[:, 0] + xs[:, 1] > 0).astype(np.int64)
    np.savez(os.path.join(w, "data.npz"), x=xs, label=ys)
    pkg = os.path.join(w, "mlp.dlc")
    sh([a.dlc, "compile", os.path.join(w, "mlp.onnx"), "--train", "--optimizer", "adam", "--lr", "0.01",
         "--target", "emu", "-o", pkg, "-q"])
    log = os.path.join(w, "log.jsonl")
    ck = os.path.join(w, "ck.npz")
    sh([a.dlc, "train", pkg, "--data", os.path.join(w, "data.npz"), "--epochs", "5", "--log", log,
         "--checkpoint", ck, "--device", "emu", "-q"])
    losses = [json.loads(l)["loss"] for l in open(log)]
    first, last = np.mean(losses[:16]), np.mean(losses[-16:])
    step = int(np.load(ck)["dlc.dropout_step"])
    print(f"MLP with dropout: mean loss {first:.3f} (epoch 1) -> {last:.3f} (epoch 5), dropout step {step}")
    if not last < 0.7 * first:
        failures.append(f"the dropout MLP did not train: {first:.3f} -> {last:.3f}")
    if step != len(losses):
        failures.append(f"the dropout step counter is {step} after {len(losses)} steps")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
