#!/usr/bin/env python3
"""Bad input to training: each case must end with a non-zero exit (not a signal),
exactly one "dlc: error:" line naming the problem, and nothing written where the
command would have written (the package, the checkpoint)."""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

warnings.filterwarnings("ignore")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    w = os.path.abspath(a.work)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    j = lambda *p: os.path.join(w, *p)  # noqa: E731

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    torch.onnx.export(mlp, torch.zeros(2, 4), j("mlp.onnx"), input_names=["x"], output_names=["y"], opset_version=17)
    relu = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(relu, j("no_params.onnx"))
    subprocess.run([a.dlc, "compile", j("mlp.onnx"), "--train", "--target", "emu", "-o", j("mlp.dlc"), "-q"],
                   check=True)
    subprocess.run([a.dlc, "compile", j("no_params.onnx"), "--target", "emu", "-o", j("relu.dlc"), "-q"], check=True)
    subprocess.run([a.dlc, "compile", j("no_params.onnx"), "--target", "sm_90", "-o", j("relu90.dlc"), "-q"],
                   check=True)
    np.savez(j("good.npz"), x=np.ones((4, 4), np.float32), label=np.array([0, 1, 2, 0], np.int64))
    np.savez(j("float_label.npz"), x=np.ones((4, 4), np.float32), label=np.zeros(4, np.float32))
    np.savez(j("label_shape.npz"), x=np.ones((4, 4), np.float32), label=np.zeros((4, 2), np.int64))
    np.savez(j("no_x.npz"), label=np.zeros(4, np.int64))
    np.savez(j("counts.npz"), x=np.ones((4, 4), np.float32), label=np.zeros(3, np.int64))
    np.savez(j("bad_ckpt.npz"), **{"0.weight": np.zeros((8, 4), np.float32)})
    np.savez(j("wrong_ckpt.npz"), **{k: np.zeros((1,), np.float32) for k in ["0.weight", "0.bias", "2.weight", "2.bias"]})
    open(j("truncated.npz"), "wb").write(open(j("good.npz"), "rb").read()[:100])
    np.savez(j("out_of_range.npz"), x=np.ones((2, 4), np.float32), label=np.array([0, 7], np.int64))
    nan_x = np.ones((4, 4), np.float32)
    nan_x[2, 1] = np.nan
    np.savez(j("nan.npz"), x=nan_x, label=np.array([0, 1, 2, 0], np.int64))

    # Hostile files: FIFOs where files belong (an open() once blocked forever), and an
    # .npz whose member claims 4 GB from 20 compressed bytes (once inflated first).
    for f in ["fifo.onnx", "fifo.dlc", "fifo.npz", "fifo.npy", "ext/weights.bin"]:
        os.makedirs(os.path.dirname(j(f)), exist_ok=True)
        os.mkfifo(j(f))
    ext = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4], np.zeros(4, np.float32).tobytes(), raw=True)]),
        opset_imports=[helper.make_opsetid("", 17)])
    w_init = ext.graph.initializer[0]
    w_init.ClearField("raw_data")
    w_init.data_location = TensorProto.EXTERNAL
    for k, v in [("location", "weights.bin"), ("offset", "0"), ("length", "16")]:
        e = w_init.external_data.add()
        e.key, e.value = k, v
    onnx.save(ext, j("ext", "fifo_weights.onnx"))
    np.savez_compressed(j("bomb.npz"), x=np.zeros((4, 4), np.float32), label=np.zeros(4, np.int64))
    bomb = bytearray(open(j("bomb.npz"), "rb").read())
    for sig, field in [(b"PK\x03\x04", 22), (b"PK\x01\x02", 24)]:  # uncompressed size: local and central
        at = bomb.find(sig)
        bomb[at + field:at + field + 4] = (0xF0000000).to_bytes(4, "little")
    open(j("bomb.npz"), "wb").write(bomb)
    np.save(j("x23.npy"), np.ones((2, 3), np.float32))

    digests = {f: hashlib.sha256(open(j(f), "rb").read()).hexdigest()
               for f in ["mlp.dlc", "good.npz", "bad_ckpt.npz", "mlp.onnx"]}

    out = j("out")
    compile_ = lambda m, *f: [a.dlc, "compile", j(m), "--train", "--target", "emu", "-o", os.path.join(out, "p.dlc"), *f]  # noqa: E731
    train = lambda d, *f: [a.dlc, "train", j("mlp.dlc"), "--data", j(d), "--device", "emu",  # noqa: E731
                           "--checkpoint", os.path.join(out, "ck.npz"), *f]
    cases = [
        ("--freeze matching nothing", compile_("mlp.onnx", "--freeze", "^nothing"), "matches no trainable"),
        ("a model with no trainable parameters", compile_("no_params.onnx"), "no trainable parameters"),
        ("non-scalar --loss none", compile_("mlp.onnx", "--loss", "none"), "scalar loss"),
        ("unknown optimizer", compile_("mlp.onnx", "--optimizer", "rmsprop"), "rmsprop"),
        ("learning rate out of range", compile_("mlp.onnx", "--lr", "-1"), "--lr"),
        ("label name taken", compile_("mlp.onnx", "--label", "x"), "already taken"),
        ("training option without --train", [a.dlc, "compile", j("mlp.onnx"), "--lr", "0.1", "--target", "emu",
                                             "-o", os.path.join(out, "p.dlc")], "goes with --train"),
        ("--loss-scale without --fp16", compile_("mlp.onnx", "--bf16", "--loss-scale", "1024"),
         "--loss-scale goes with --fp16"),
        ("a loss scale below one", compile_("mlp.onnx", "--fp16", "--loss-scale", "0.5"),
         "--loss-scale must be a number in [1, 3e38]"),
        ("a label of the wrong dtype", train("float_label.npz"), "'label' is f32"),
        ("a label of the wrong shape", train("label_shape.npz"), "'label' has shape [4,2]"),
        ("an .npz missing an input", train("no_x.npz"), "no array 'x'"),
        ("arrays of different lengths", train("counts.npz"), "different numbers of samples"),
        ("a truncated .npz", train("truncated.npz"), "truncated.npz"),
        ("a batch that is not the compiled one", train("good.npz", "--batch", "3"), "does not match"),
        ("a checkpoint missing a variable", train("good.npz", "--resume", j("bad_ckpt.npz")), "no value for"),
        ("a checkpoint of the wrong shape", train("good.npz", "--resume", j("wrong_ckpt.npz")), "is f32[8,4]"),
        ("a class index out of range", train("out_of_range.npz"), "out of range"),
        ("not a training package", [a.dlc, "train", j("relu.dlc"), "--data", j("good.npz")],
         "not a training package"),
        ("--bucket-mb without --data-parallel", compile_("mlp.onnx", "--bucket-mb", "4"),
         "--bucket-mb goes with --data-parallel"),
        ("--sync-batchnorm without --data-parallel", compile_("mlp.onnx", "--sync-batchnorm"),
         "--sync-batchnorm goes with --data-parallel"),
        ("a bucket of zero MiB", compile_("mlp.onnx", "--data-parallel", "--bucket-mb", "0"), "--bucket-mb must be"),
        ("--zero without --data-parallel", compile_("mlp.onnx", "--zero", "2"), "--zero goes with --data-parallel"),
        ("--zero 1", compile_("mlp.onnx", "--data-parallel", "--zero", "1"), "--zero must be a number of ranks"),
        ("--zero with --fp16 loss scaling", compile_("mlp.onnx", "--data-parallel", "--zero", "2", "--fp16"),
         "--zero with --fp16's loss scaling is not supported"),
        ("--nproc 0", train("good.npz", "--nproc", "0"), "--nproc must be"),
        ("a negative --timeout", train("good.npz", "--timeout", "-1"), "--timeout must be"),
        ("ranks of a package without --data-parallel", train("good.npz"), "--data-parallel"),
        ("a bad DLC_WORLD_SIZE", train("good.npz"), "DLC_WORLD_SIZE"),
        ("a NaN in the training data", train("nan.npz"), "array 'x' holds a NaN or an infinity (sample 2)"),
        ("--log naming the package", train("good.npz", "--log", j("mlp.dlc")), "is the package itself"),
        ("--checkpoint naming the data", [a.dlc, "train", j("mlp.dlc"), "--data", j("good.npz"), "--device", "emu",
                                          "--checkpoint", j("good.npz")], "is the training data itself"),
        ("export -o naming the checkpoint", [a.dlc, "export", j("mlp.dlc"), "--checkpoint", j("bad_ckpt.npz"),
                                             "-o", j("bad_ckpt.npz")], "is the checkpoint itself"),
        ("compile -o naming the model", [a.dlc, "compile", j("mlp.onnx"), "--target", "emu", "-o", j("mlp.onnx")],
         "is the model itself"),
        ("inspect -o naming the package", [a.dlc, "inspect", j("mlp.dlc"), "--json", "-o", j("mlp.dlc")],
         "is the package itself"),
        ("a FIFO as the model", [a.dlc, "compile", j("fifo.onnx"), "--target", "emu", "-o", os.path.join(out, "p.dlc")],
         "is not a regular file"),
        ("a FIFO as the package", [a.dlc, "run", j("fifo.dlc"), "--device", "emu"], "is not a regular file"),
        ("a FIFO as the training data", train("fifo.npz"), "is not a regular file"),
        ("a FIFO as an input", [a.dlc, "run", j("relu.dlc"), "--device", "emu", "--output-dir", out,
                                "x=" + j("fifo.npy")], "is not a regular file"),
        ("a FIFO as external data", [a.dlc, "compile", j("ext", "fifo_weights.onnx"), "--target", "emu", "-o",
                                     os.path.join(out, "p.dlc")], "weights.bin"),
        ("an .npz member claiming 4 GB", train("bomb.npz"), "more than deflate can produce"),
        ("a GPU-only package on emu", [a.dlc, "run", j("relu90.dlc"), "--device", "emu", "--output-dir", out,
                                       "x=" + j("x23.npy")], "has no emu module"),
    ]
    # Cases that need an environment of their own (the rank of a launcher).
    envs = {"ranks of a package without --data-parallel": {"DLC_RANK": "0", "DLC_WORLD_SIZE": "2"},
            "a bad DLC_WORLD_SIZE": {"DLC_RANK": "0", "DLC_WORLD_SIZE": "two"}}
    failures = 0
    for what, cmd, expect in cases:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, **envs.get(what, {})))
        except subprocess.TimeoutExpired:
            print(f"FAIL {what:40} hung for 120 s")
            failures += 1
            continue
        lines = [l for l in p.stderr.splitlines() if l.startswith("dlc: error:")]
        others = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("dlc: ")]
        problems = []
        if p.returncode <= 0 or p.returncode >= 128:
            problems.append(f"exit code {p.returncode}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} error lines: {p.stderr.strip()[:300]}")
        elif expect not in lines[0]:
            problems.append(f"message lacks '{expect}': {lines[0]}")
        if others:
            problems.append(f"other output on stderr: {others[:2]}")
        if os.listdir(out):
            problems.append(f"left behind: {os.listdir(out)}")
        print(f"{'ok  ' if not problems else 'FAIL'} {what:40} {lines[0] if lines else ''}"[:200])
        for pr in problems:
            print("       " + pr)
        failures += bool(problems)
    # dlc run writes its outputs only when all of them are written: with the second
    # output's path taken by a directory, the first is not left behind either.
    two = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(two, j("two.onnx"))
    subprocess.run([a.dlc, "compile", j("two.onnx"), "--target", "emu", "-o", j("two.dlc"), "-q"], check=True)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "b.npy"))
    p = subprocess.run([a.dlc, "run", j("two.dlc"), "--device", "emu", "--output-dir", out, "-q",
                        "x=" + j("x23.npy")], capture_output=True, text=True, timeout=120)
    left = sorted(os.listdir(out))
    ok = p.returncode not in (0,) and p.returncode < 128 and left == ["b.npy"]
    print(f"{'ok  ' if ok else 'FAIL'} {'an output that cannot be written':40} exit {p.returncode}, left {left}")
    failures += not ok
    # The files the refused commands named are intact, byte for byte.
    for f, digest in digests.items():
        if hashlib.sha256(open(j(f), "rb").read()).hexdigest() != digest:
            print(f"FAIL {f} was clobbered")
            failures += 1
    print(f"{len(cases) + 1 - failures}/{len(cases) + 1} bad inputs gave one clean error")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
