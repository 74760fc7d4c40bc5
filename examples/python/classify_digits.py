#!/usr/bin/python3
"""Classifies the bundled digits with the dlc Python package, as an ONNX Runtime script
would: compile the model once with `dlc compile`, then InferenceSession + run.

usage: PYTHONPATH=build/python examples/python/classify_digits.py [--dlc build/tools/dlc] [--device auto|cuda|emu]
"""
import argparse
import os
import subprocess
import tempfile

import numpy as np

import dlc as ort  # the ONNX Runtime calling conventions

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
digits = os.path.join(root, "examples", "digits")

ap = argparse.ArgumentParser()
ap.add_argument("--dlc", default=os.path.join(root, "build", "tools", "dlc"))
ap.add_argument("--device", default="auto")
a = ap.parse_args()
with tempfile.TemporaryDirectory() as work:
    package = os.path.join(work, "digits.dlc")
    subprocess.run([a.dlc, "compile", os.path.join(digits, "digits_cnn.onnx"), "-o", package, "-q"], check=True)
    session = ort.InferenceSession(package, providers=None, device=a.device)
    print("device:", session.device)
    name = session.get_inputs()[0].name
    for f in sorted(os.listdir(digits)):
        if f.endswith(".npy"):
            logits, probs = session.run(None, {name: np.load(os.path.join(digits, f))})
            print(f"{f}: predicted {int(probs.argmax())} with p={probs.max():.3f} (label {f.split('label')[1][:-4]})")
