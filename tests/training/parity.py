#!/usr/bin/env python3
"""One-step parity with PyTorch: `dlc compile --train` + `dlc train` against
torch.optim on the same model, data and hyper-parameters.

For each model (an MLP, a ResNet-style CNN with BatchNorm, a Transformer encoder
layer, an LSTM followed by a bidirectional GRU) and each optimizer (sgd, momentum, adam, adamw), the model is exported to
ONNX, compiled for emu, trained for exactly one step on one batch, and the loss
and every parameter after the step are compared with a PyTorch step (relative
error, normalized by the largest magnitude of the reference). The BatchNorm
running statistics are checked against the ONNX definition (ONNX's running
variance uses the population variance of the batch; PyTorch's the unbiased one).
"""
import argparse
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")

OPTIMIZERS = {
    "sgd": (["--lr", "0.1"], lambda p: torch.optim.SGD(p, lr=0.1)),
    "momentum": (["--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.01"],
                 lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
    "adam": (["--lr", "0.01"], lambda p: torch.optim.Adam(p, lr=0.01)),
    "adamw": (["--lr", "0.01", "--weight-decay", "0.1", "--beta1", "0.8", "--beta2", "0.99"],
              lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, betas=(0.8, 0.99))),
}


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.block = Block(4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.stem(x))), 2)
        x = self.block(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(6, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, activation="gelu")
        self.head = nn.Linear(16, 3)

        with torch.no_grad():  # distinct values: the exporter merges equal initializers
            for norm in (self.layer.norm1, self.layer.norm2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.head(self.layer(self.emb(x)).mean(1))


class Recurrent(nn.Module):
    """An LSTM, then a bidirectional GRU, then a classifier on the last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 6, batch_first=True)
        self.gru = nn.GRU(6, 4, batch_first=True, bidirectional=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        return self.head(y[:, -1])


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    yield "mlp", mlp, torch.randn(4, 8), torch.tensor([0, 3, 1, 3])
    torch.manual_seed(1)
    yield "resnet", ResNetish(), torch.randn(4, 1, 12, 12), torch.tensor([4, 0, 2, 1])
    torch.manual_seed(2)
    yield "encoder", Encoder(), torch.randn(2, 5, 6), torch.tensor([2, 0])
    torch.manual_seed(3)
    yield "recurrent", Recurrent(), torch.randn(3, 4, 5), torch.tensor([1, 2, 0])


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape == b.shape and a.size == 0:
        return 0.0
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)) if a.shape == b.shape else float("inf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--optimizers", default="", help="comma-separated optimizer names (default: all)")
    ap.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32",
                    help="mixed-precision training (FP32 master weights) against torch's FP32 step")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    def run(cmd):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        return p

    failures, checks = [], 0
    for name, model, x, label in models():
        if args.only and name not in args.only.split(","):
            continue
        onnx_path = os.path.join(args.work, f"{name}.onnx")
        # An eval-mode export folds BatchNorm into the convolutions: export the
        # training form, as a user fine-tuning BatchNorm layers does.
        bn = any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
        model.train(bn)
        torch.onnx.export(model, x, onnx_path, input_names=["x"], output_names=["logits"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING if bn else torch.onnx.TrainingMode.EVAL)
        data = os.path.join(args.work, f"{name}.npz")
        np.savez(data, x=x.numpy(), label=label.numpy().astype(np.int64))
        init = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for opt_name, (flags, make) in OPTIMIZERS.items():
            if args.optimizers and opt_name not in args.optimizers.split(","):
                continue
            tag = f"{name}/{opt_name}" + ("" if args.precision == "fp32" else f"/{args.precision}")
            if args.precision != "fp32":
                flags = flags + [f"--{args.precision}"]
            stem = f"{name}-{opt_name}-{args.precision}"
            pkg = os.path.join(args.work, f"{stem}.dlc")
            ck = os.path.join(args.work, f"{stem}.npz")
            log = os.path.join(args.work, f"{stem}.jsonl")
            run([args.dlc, "compile", onnx_path, "--train", "--optimizer", opt_name, *flags, "--target", "emu",
                 "-o", pkg, "-q"])
            run([args.dlc, "train", pkg, "--data", data, "--epochs", "1", "--no-shuffle", "--checkpoint", ck,
                 "--log", log, "--device", "emu", "-q"])
            got = dict(np.load(ck))
            dlc_loss = json.loads(open(log).readline())["loss"]

            model.load_state_dict(init)
            model.train()
            opt = make(model.parameters())
            opt.zero_grad()
            loss = F.cross_entropy(model(x), label)
            loss.backward()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            opt.step()
            checks += 1
            e = abs(dlc_loss - loss.item()) / max(abs(loss.item()), 1e-6)
            if e > args.rtol:
                failures.append(f"{tag}: loss {dlc_loss} vs torch {loss.item()}")
            for pname, p in model.named_parameters():
                checks += 1
                if pname not in got:
                    failures.append(f"{tag}: parameter '{pname}' is missing from the checkpoint")
                    continue
                want, have = p.detach().numpy(), got[pname]
                if opt_name.startswith("adam") and have.shape == want.shape:
                    # Adam divides by |gradient|: where the exact gradient is zero (a
                    # bias that softmax or BatchNorm cancels) the step is the sign of
                    # rounding noise. There only the step's bound lr (1 + wd) is checked.
                    # With 16-bit gradients, "zero" is below the format's unit roundoff
                    # of the largest one (a 6e-6-relative FP16 gradient's sign is noise).
                    g = grads[pname].abs().numpy()
                    unit = {"fp32": 1e-6, "fp16": 2.0**-11, "bf16": 2.0**-8}[args.precision]
                    noise = g <= unit * max(g.max(), 1e-30)
                    init_p = init[pname].numpy()
                    if (np.abs(have - init_p)[noise] > 0.011 * (1 + np.abs(init_p[noise]))).any():
                        failures.append(f"{tag}: '{pname}' moved more than lr where its gradient is zero")
                    have, want = have[~noise], want[~noise]
                e = rel(have, want)
                if e > args.rtol:
                    failures.append(f"{tag}: '{pname}' after one step: max rel error {e:.3g}")
            for mod_name, mod in model.named_modules():
                if not isinstance(mod, nn.BatchNorm2d):
                    continue
                # ONNX: running = momentum * running + (1 - momentum) * batch statistic (population
                # variance); torch's momentum is ONNX's 1 - momentum.
                xin = {}
                h = mod.register_forward_hook(lambda m, i, o: xin.setdefault("x", i[0].detach()))
                model.load_state_dict(init)
                model(x)
                h.remove()
                xb = xin["x"].double()
                bm, bv = xb.mean((0, 2, 3)), xb.var((0, 2, 3), unbiased=False)
                m = 1 - mod.momentum
                for stat, batch in (("running_mean", bm), ("running_var", bv)):
                    checks += 1
                    want = m * init[f"{mod_name}.{stat}"].double() + (1 - m) * batch
                    key = f"{mod_name}.{stat}"
                    e = rel(got.get(key, np.array([np.inf])), want.numpy())
                    if e > args.rtol:
                        failures.append(f"{tag}: {key}: max rel error {e:.3g}")
            print(f"{tag}: loss {dlc_loss:.6f} (torch {loss.item():.6f})", flush=True)
    for f in failures:
        print("FAIL", f)
    print(f"parity: {checks - len(failures)}/{checks} checks within {args.rtol}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
