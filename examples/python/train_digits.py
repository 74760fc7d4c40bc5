#!/usr/bin/python3
"""Trains the digits CNN from Python: scikit-learn's 8x8 digits and an untrained CNN
(examples/train-digits/prepare.py), compiled with dlc.compile(train=True), then
dlc.TrainingSession steps over shuffled batches, the accuracy on held-out digits from
evaluate(), a checkpoint, and the trained model exported as ONNX.

usage: PYTHONPATH=build/python examples/python/train_digits.py [--epochs 2] [--device auto|cuda|emu] [--out DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

import dlc

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--device", default="auto")
ap.add_argument("--out", default=None, help="keep the data, package, checkpoint and trained model here")
a = ap.parse_args()
scratch = None if a.out else tempfile.TemporaryDirectory(prefix="dlc-train-")
work = a.out or scratch.name
os.makedirs(work, exist_ok=True)
subprocess.run([sys.executable, os.path.join(here, "..", "train-digits", "prepare.py"), "--out", work, "--batch", "32"],
               check=True, stdout=subprocess.DEVNULL)
train, test = np.load(os.path.join(work, "train.npz")), np.load(os.path.join(work, "test.npz"))
package = dlc.compile(os.path.join(work, "digits_untrained.onnx"), os.path.join(work, "digits_train.dlc"),
                      train=True, optimizer="adam", lr=0.01)
t = dlc.TrainingSession(package, device=a.device)
print("device:", t.device)
batch = 32
rng = np.random.default_rng(0)
for epoch in range(a.epochs):
    order = rng.permutation(len(train["image"]))
    losses = [t.step({"image": train["image"][idx], "label": train["label"][idx]})
              for idx in (order[i:i + batch] for i in range(0, len(order) - batch + 1, batch))]
    print(f"epoch {epoch + 1}: mean loss {np.mean(losses):.4f}")
correct = total = 0
for i in range(0, len(test["image"]) - batch + 1, batch):
    t.evaluate({"image": test["image"][i:i + batch], "label": test["label"][i:i + batch]})
    correct += int((t.outputs()["probs"].argmax(1) == test["label"][i:i + batch]).sum())
    total += batch
print(f"test accuracy: {correct / total:.4f} ({correct}/{total})")
t.save_checkpoint(os.path.join(work, "digits.npz"))
print("exported:", t.export_onnx(os.path.join(work, "digits_trained.onnx")))
if scratch:
    scratch.cleanup()
