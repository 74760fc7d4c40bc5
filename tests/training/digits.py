#!/usr/bin/env python3
"""The train-digits example end to end, as the README shows it:

  prepare.py                         sklearn's digits as .npz, an untrained digits CNN
  dlc compile --train --optimizer adam
  dlc train --eval-data ...          on emu
  dlc export                         trained.onnx (BatchNorm back in inference form)

then the exported model is compiled by dlc for inference and run on the 297
held-out digits, and the same batches run in ONNX Runtime (onnxruntime-node):
dlc's test accuracy must reach --min-accuracy and both must predict the same
classes. Prints the step time on emu from the training log.
"""
import os
import re
import sys
import time

import numpy as np
import onnx

from common import ROOT, parse_args, sh

ORT = os.path.join(ROOT, "tools", "ort")


def main():
    def add(ap):
        ap.add_argument("--epochs", type=int, default=8)
        ap.add_argument("--min-accuracy", type=float, default=0.97)
    a, w = parse_args(add)
    py = sys.executable
    sh([py, os.path.join(ROOT, "examples", "train-digits", "prepare.py"), "--out", w])
    pkg, ck, trained = os.path.join(w, "train.dlc"), os.path.join(w, "ck.npz"), os.path.join(w, "trained.onnx")
    sh([a.dlc, "compile", os.path.join(w, "digits_untrained.onnx"), "--train", "--optimizer", "adam", "--lr", "0.003",
        "--target", "emu", "-o", pkg, "-q"])
    t0 = time.time()
    p = sh([a.dlc, "train", pkg, "--data", os.path.join(w, "train.npz"), "--eval-data", os.path.join(w, "test.npz"),
            "--epochs", str(a.epochs), "--seed", "0", "--checkpoint", ck, "--log", os.path.join(w, "log.jsonl"),
            "--device", "emu"])
    train_s = time.time() - t0
    print(p.stdout.strip())
    steps = sum(1 for _ in open(os.path.join(w, "log.jsonl")))
    sh([a.dlc, "export", pkg, "--checkpoint", ck, "-o", trained])
    bn = [n for n in onnx.load(trained).graph.node if n.op_type == "BatchNormalization"]
    assert bn and all(len(n.output) == 1 and all(x.i == 0 for x in n.attribute if x.name == "training_mode")
                      for n in bn), "exported BatchNorm is not in inference form"

    test = np.load(os.path.join(w, "test.npz"))
    images, labels = test["image"], test["label"]
    batch = 32
    infer = os.path.join(w, "infer.dlc")
    sh([a.dlc, "compile", trained, "--target", "emu", "-o", infer, "-q"])
    if not os.path.isdir(os.path.join(ORT, "node_modules", "onnxruntime-node")):
        sh(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=ORT,
           env=dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip"))
    dlc_pred, ort_pred = [], []
    for k in range(0, len(images), batch):
        chunk = images[k:k + batch]
        real = len(chunk)
        chunk = np.concatenate([chunk, images[:batch - real]]) if real < batch else chunk
        npy = os.path.join(w, "batch.npy")
        np.save(npy, chunk)
        for out, preds, cmd in (
                ("dlc-out", dlc_pred, [a.dlc, "run", infer, "--device", "emu", "-q", "--input", f"image={npy}",
                                       "--output-dir"]),
                ("ort-out", ort_pred, ["node", os.path.join(ORT, "ort.js"), "run", trained])):
            d = os.path.join(w, out)
            sh(cmd + [d] + ([] if out == "dlc-out" else [f"image={npy}"]))
            preds.extend(np.load(os.path.join(d, "logits.npy"))[:real].argmax(1))
    dlc_pred, ort_pred = np.array(dlc_pred), np.array(ort_pred)
    acc = float((dlc_pred == labels).mean())
    agree = int((dlc_pred == ort_pred).sum())
    print(f"digits: {steps} steps in {train_s:.1f} s on emu ({1000 * train_s / max(steps, 1):.0f} ms per step "
          f"with evaluation), exported model: dlc test accuracy {acc:.4f} ({int((dlc_pred == labels).sum())}/"
          f"{len(labels)}), ONNX Runtime agrees on {agree}/{len(labels)}")
    # dlc train evaluated on the package's inference-mode schedule (running
    # statistics), which must see what the exported model sees.
    m = re.search(r"eval accuracy [0-9.]+% \((\d+)/(\d+)\)", p.stdout.strip().splitlines()[-1])
    evaluated = int(m.group(1)) if m else -1
    print(f"digits: dlc train's last evaluation: {evaluated}/{len(labels)} correct")
    ok = acc >= a.min_accuracy and agree == len(labels) and evaluated == int((dlc_pred == labels).sum())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
