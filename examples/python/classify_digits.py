#!/usr/bin/python3
"""Classifies the bundled digits with the dlc Python package, as an ONNX Runtime script
would: compile the model (dlc.compile), then InferenceSession + run.

usage: PYTHONPATH=build/python examples/python/classify_digits.py [--device auto|cuda|emu]
"""
import argparse
import os
import tempfile

import numpy as np

import dlc

here = os.path.dirname(os.path.abspath(__file__))
digits = os.path.join(os.path.dirname(here), "digits")

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="auto")
a = ap.parse_args()
with tempfile.TemporaryDirectory() as work:
    # GPU cubins and PTX for every architecture, plus emu: the package runs anywhere.
    package = dlc.compile(os.path.join(digits, "digits_cnn.onnx"), os.path.join(work, "digits.dlc"))
    session = dlc.InferenceSession(package, device=a.device)
    print("device:", session.device)
    name = session.get_inputs()[0].name
    for f in sorted(os.listdir(digits)):
        if f.endswith(".npy"):
            logits, probs = session.run(None, {name: np.load(os.path.join(digits, f))})
            print(f"{f}: predicted {int(probs.argmax())} with p={probs.max():.3f} (label {f.split('label')[1][:-4]})")
