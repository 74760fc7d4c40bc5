#!/usr/bin/env python3
"""Prepares the train-digits example: scikit-learn's bundled 8x8 digits (Debian
python3-sklearn; nothing is downloaded) as train.npz / test.npz, and the digits CNN
of examples/digits with fresh random weights as digits_untrained.onnx.

The arrays are named after the model's input ("image", f32 [N,1,8,8] in [0, 1])
and the label `dlc compile --train` adds ("label", int64 class indices). The model
is exported at the training batch size with its BatchNorm layers in training form
(PyTorch's TrainingMode.TRAINING), as for any model a user trains or fine-tunes.

usage: prepare.py --out DIR [--batch 32] [--seed 0]
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch
from sklearn.datasets import load_digits

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "digits"))
from digits_model import DigitsCNN  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)

digits = load_digits()
x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
y = digits.target.astype(np.int64)
order = np.random.default_rng(a.seed).permutation(len(x))
train, test = order[:1500], order[1500:]
np.savez(os.path.join(a.out, "train.npz"), image=x[train], label=y[train])
np.savez(os.path.join(a.out, "test.npz"), image=x[test], label=y[test])

torch.manual_seed(a.seed)
model = DigitsCNN().train()
torch.onnx.export(model, torch.zeros(a.batch, 1, 8, 8), os.path.join(a.out, "digits_untrained.onnx"),
                  opset_version=17, input_names=["image"], output_names=["logits", "probs"],
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
print(f"wrote {len(train)} training and {len(test)} test digits and an untrained model "
      f"(batch {a.batch}) to {a.out}")
