#!/usr/bin/env python3
"""Trains the bundled example: a small CNN on scikit-learn's 8x8 digits.

Writes digits_cnn.onnx (opset 17, input "image" f32[1,1,8,8], outputs "logits" and
"probs") and a few held-out test images as digit_<index>_label<L>.npy. Needs
Debian's python3-torch and python3-sklearn (the digits data ships with sklearn;
nothing is downloaded). Only needed to regenerate the committed files.
"""
import os

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

from digits_model import DigitsCNN

here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)
np.random.seed(0)

digits = load_digits()
x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
y = digits.target.astype(np.int64)
order = np.random.permutation(len(x))
train, test = order[:1500], order[1500:]


model = DigitsCNN()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
xt, yt = torch.from_numpy(x[train]), torch.from_numpy(y[train])
for epoch in range(30):
    perm = torch.randperm(len(xt))
    for i in range(0, len(xt), 64):
        idx = perm[i:i + 64]
        loss = nn.functional.cross_entropy(model(xt[idx])[0], yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
model.eval()
with torch.no_grad():
    pred = model(torch.from_numpy(x[test]))[0].argmax(1).numpy()
print(f"test accuracy {np.mean(pred == y[test]):.3f} on {len(test)} held-out digits")

torch.onnx.export(model, torch.from_numpy(x[test[:1]]), os.path.join(here, "digits_cnn.onnx"),
                  opset_version=17, input_names=["image"], output_names=["logits", "probs"])
for k in range(3):
    i = test[k]
    np.save(os.path.join(here, f"digit_{k}_label{y[i]}.npy"), x[i:i + 1])
