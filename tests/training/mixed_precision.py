#!/usr/bin/env python3
"""Mixed-precision training of the digits CNN on emu (FP32 master weights).

  - FP16 with dynamic loss scaling reaches --min-accuracy on the held-out digits,
    within one point of the same training in FP32 (same data order, seed and
    hyper-parameters);
  - an initial loss scale far too large (--loss-scale 1e12) overflows the FP16
    gradients: those steps are skipped (the log says so), the scale halves exactly
    each time, and neither the parameters nor Adam's step count move on them;
  - a scale that never comes down (3e38) skips every step: the checkpoint holds the
    untrained initializers bit for bit;
  - BF16 trains without loss scaling (no loss_scale in the log).
"""
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper

from common import ROOT, parse_args, sh


def main():
    def add(ap):
        ap.add_argument("--epochs", type=int, default=8)
        ap.add_argument("--min-accuracy", type=float, default=0.97)
    a, w = parse_args(add)
    sh([sys.executable, os.path.join(ROOT, "examples", "train-digits", "prepare.py"), "--out", w])
    model = os.path.join(w, "digits_untrained.onnx")
    train, test = os.path.join(w, "train.npz"), os.path.join(w, "test.npz")
    failures = []

    def compile_(tag, *flags):
        pkg = os.path.join(w, f"{tag}.dlc")
        sh([a.dlc, "compile", model, "--train", "--optimizer", "adam", "--lr", "0.003", "--target", "emu",
            "-o", pkg, "-q", *flags])
        return pkg

    def train_(tag, pkg, epochs, eval_data=True):
        log, ck = os.path.join(w, f"{tag}.jsonl"), os.path.join(w, f"{tag}.npz")
        p = sh([a.dlc, "train", pkg, "--data", train, *(["--eval-data", test] if eval_data else []),
                "--epochs", str(epochs), "--seed", "0", "--checkpoint", ck, "--log", log, "--device", "emu"])
        last = p.stdout.strip().splitlines()[-1]
        m = re.search(r"eval accuracy ([0-9.]+)%", last)
        steps = [json.loads(line) for line in open(log)]
        return (float(m.group(1)) / 100 if m else None), steps, dict(np.load(ck)), last

    # FP32 against FP16 with dynamic loss scaling.
    acc32, _, _, line32 = train_("fp32", compile_("fp32"), a.epochs)
    acc16, steps16, ck16, line16 = train_("fp16", compile_("fp16", "--fp16"), a.epochs)
    print("fp32:", line32)
    print("fp16:", line16)
    if acc16 is None or acc16 < a.min_accuracy:
        failures.append(f"FP16 test accuracy {acc16} < {a.min_accuracy}")
    if acc16 is None or acc32 is None or abs(acc16 - acc32) > 0.01:
        failures.append(f"FP16 accuracy {acc16} is not within one point of FP32's {acc32}")
    if not all("loss_scale" in s and "skipped" in s for s in steps16):
        failures.append("the FP16 log lacks loss_scale/skipped")
    skipped16 = sum(s["skipped"] for s in steps16)
    if ck16["optimizer.step"] != len(steps16) - skipped16:
        failures.append(f"FP16: Adam's step {ck16['optimizer.step']} != {len(steps16)} steps - {skipped16} skipped")

    # Overflow: skipped steps halve the scale and change nothing else.
    pkg = compile_("overflow", "--fp16", "--loss-scale", "1e12")
    _, steps, ck, _ = train_("overflow", pkg, 1, eval_data=False)
    skipped = [s for s in steps if s["skipped"]]
    first_ok = next((i for i, s in enumerate(steps) if not s["skipped"]), None)
    if not skipped or first_ok is None or first_ok != len(skipped):
        failures.append(f"overflow: expected a run of skipped steps then clean ones, got "
                        f"{[s['skipped'] for s in steps]}")
    for prev, cur in zip(steps, steps[1:]):
        want = prev["loss_scale"] / 2 if prev["skipped"] else prev["loss_scale"]
        if np.float32(cur["loss_scale"]) != np.float32(want):
            failures.append(f"overflow: step {cur['step']}: scale {cur['loss_scale']}, expected {want}")
            break
    if np.float32(steps[0]["loss_scale"]) != np.float32(1e12):
        failures.append(f"overflow: the first step used scale {steps[0]['loss_scale']}, not 1e12")
    if ck["optimizer.step"] != len(steps) - len(skipped) or ck["amp.good_steps"] != len(steps) - len(skipped):
        failures.append(f"overflow: step {ck['optimizer.step']}, good steps {ck['amp.good_steps']}, "
                        f"expected {len(steps) - len(skipped)}")
    print(f"overflow: {len(skipped)} of {len(steps)} steps skipped, scale "
          f"{steps[0]['loss_scale']:.3g} -> {float(ck['amp.loss_scale']):.6g}")

    # Every step overflows: nothing trains.
    pkg = compile_("never", "--fp16", "--loss-scale", "3e38")
    _, steps, ck, _ = train_("never", pkg, 1, eval_data=False)
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
    if not all(s["skipped"] for s in steps):
        failures.append("scale 3e38: some step was not skipped")
    moved = [k for k, v in init.items() if k in ck and not np.array_equal(ck[k], v) and "running" not in k]
    if moved or ck["optimizer.step"] != 0:
        failures.append(f"scale 3e38: parameters moved on skipped steps: {moved}, step {ck['optimizer.step']}")

    # BF16: no loss scaling.
    accb, stepsb, ckb, lineb = train_("bf16", compile_("bf16", "--bf16"), 2)
    print("bf16:", lineb)
    if any("loss_scale" in s for s in stepsb) or "amp.loss_scale" in ckb:
        failures.append("BF16 training has a loss scale")
    if accb is None or accb < 0.9:
        failures.append(f"BF16: test accuracy {accb} after 2 epochs < 0.9")

    for f in failures:
        print("FAIL", f)
    print(f"mixed precision: FP32 {acc32}, FP16 {acc16}, BF16 (2 epochs) {accb}; "
          f"{'ok' if not failures else f'{len(failures)} failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
