#!/usr/bin/python3
"""Snapshots of what dlc computes, for refactors that must not change behaviour.

  output_snapshot.py take --dlc DLC --models-dir DIR --out SNAP [--jobs N]
  output_snapshot.py compare SNAP_BEFORE SNAP_AFTER

`take` compiles every model of the model suite (tests/models/export_models.py's
layout: CASE/model.onnx and CASE/test_data_set_0/input_K.pb) in several
configurations and writes the outputs of `dlc run --device emu` on the case's
inputs; it also trains the train-digits example for a few steps with several
optimizers and precisions and keeps the checkpoints. `compare` checks that two
snapshots hold the same files with the same bytes (`cmp`), and prints, for each
that differs, the largest difference.

Configurations: the default (every target, -O2), and on the emu target -O1, -O3,
--fp16, --bf16 and --layout nhwc.
"""
import argparse
import filecmp
import glob
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CONFIGS = {
    "default": [],
    "O1": ["--target", "emu", "-O1"],
    "O3": ["--target", "emu", "-O3"],
    "fp16": ["--target", "emu", "--fp16"],
    "bf16": ["--target", "emu", "--bf16"],
    "nhwc": ["--target", "emu", "--layout", "nhwc"],
}
TRAINING = {
    "sgd": ["--optimizer", "sgd", "--lr", "0.05"],
    "adam": ["--optimizer", "adam", "--lr", "0.003"],
    "adamw-bf16": ["--optimizer", "adamw", "--weight-decay", "0.01", "--bf16"],
    "momentum-fp16": ["--optimizer", "momentum", "--fp16"],
}


def sh(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.strip()}")
    return p.stdout


def case_inputs(case, work):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    specs = []
    for k, name in enumerate(i.name for i in m.graph.input if i.name not in inits):
        t = onnx.TensorProto()
        with open(os.path.join(case, "test_data_set_0", f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        npy = os.path.join(work, f"in{k}.npy")
        np.save(npy, numpy_helper.to_array(t))
        specs.append(f"{name}={npy}")
    return specs


def take_model(dlc, case, config, out, work):
    name = os.path.basename(case)
    w = os.path.join(work, name, config)
    os.makedirs(w, exist_ok=True)
    specs = case_inputs(case, w)
    pkg = os.path.join(w, "model.dlc")
    sh([dlc, "compile", os.path.join(case, "model.onnx"), "-o", pkg, "-q"] + CONFIGS[config])
    dest = os.path.join(out, "models", name, config)
    os.makedirs(dest, exist_ok=True)
    sh([dlc, "run", pkg, "-q", "--device", "emu", "--output-dir", dest] + specs)
    return f"{name} {config}"


def take_training(dlc, out, work):
    w = os.path.join(work, "train-digits")
    os.makedirs(w, exist_ok=True)
    sh([sys.executable, os.path.join(ROOT, "examples", "train-digits", "prepare.py"), "--out", w])
    # A few batches of the training set: enough for every kernel, quick on emu.
    data = np.load(os.path.join(w, "train.npz"))
    small = os.path.join(w, "small.npz")
    np.savez(small, **{k: v[:96] for k, v in data.items()})
    done = []
    for name, flags in TRAINING.items():
        pkg = os.path.join(w, name + ".dlc")
        sh([dlc, "compile", os.path.join(w, "digits_untrained.onnx"), "--train", "--target", "emu", "-o", pkg,
            "-q"] + flags)
        dest = os.path.join(out, "training", name)
        os.makedirs(dest, exist_ok=True)
        sh([dlc, "train", pkg, "--data", small, "--epochs", "2", "--batch", "32", "--no-shuffle", "--device", "emu",
            "--checkpoint", os.path.join(dest, "checkpoint.npz"), "-q"])
        done.append(f"train-digits {name}")
    return done


def take(a):
    out = os.path.abspath(a.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    work = os.path.join(out + ".work")
    shutil.rmtree(work, ignore_errors=True)
    cases = sorted(glob.glob(os.path.join(a.models_dir, "*_op*")))
    if not cases:
        sys.exit(f"no model cases under {a.models_dir}")
    jobs = [(c, cfg) for c in cases for cfg in CONFIGS]
    failures = []
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(take_model, a.dlc, c, cfg, out, work) for c, cfg in jobs]
        for f in futures:
            try:
                print("snapshot:", f.result(), flush=True)
            except RuntimeError as e:
                failures.append(str(e))
    try:
        for line in take_training(a.dlc, out, work):
            print("snapshot:", line, flush=True)
    except RuntimeError as e:
        failures.append(str(e))
    shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit("\n".join(failures))


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def describe(a, b):
    try:
        if a.endswith(".npy"):
            x, y = np.load(a), np.load(b)
        else:
            x, y = (np.concatenate([np.ravel(v) for v in np.load(p).values()]) for p in (a, b))
        if x.shape != y.shape:
            return f"shapes {x.shape} vs {y.shape}"
        d = np.abs(x.astype(np.float64) - y.astype(np.float64))
        return f"max |difference| {np.nanmax(d) if d.size else 0:.3g}"
    except Exception as e:  # the files are not arrays of the same kind
        return str(e)


def compare(a):
    before, after = files(a.before), files(a.after)
    missing = sorted(set(before) ^ set(after))
    differ = [f for f in sorted(set(before) & set(after))
              if not filecmp.cmp(os.path.join(a.before, f), os.path.join(a.after, f), shallow=False)]
    for f in missing:
        print(f"only in {'the first' if f in before else 'the second'}: {f}")
    for f in differ:
        print(f"differs: {f}: {describe(os.path.join(a.before, f), os.path.join(a.after, f))}")
    same = len(set(before) & set(after)) - len(differ)
    print(f"{same} files identical, {len(differ)} differ, {len(missing)} in one snapshot only")
    if differ or missing or not before:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("take")
    t.add_argument("--dlc", required=True)
    t.add_argument("--models-dir", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--jobs", type=int, default=2)
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    a = ap.parse_args()
    take(a) if a.cmd == "take" else compare(a)


if __name__ == "__main__":
    main()
