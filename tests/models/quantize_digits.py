#!/usr/bin/env python3
"""`dlc quantize` on the bundled digits CNN, checked by ONNX Runtime.

The split is the one the model was trained with (examples/digits/make_digits_cnn.py):
256 of its training digits calibrate, the 297 held-out digits measure.
  1. dlc quantize (default method, entropy; per-channel weights) writes a QDQ model.
     The file is checked with onnx.checker and by its structure: QuantizeLinear and
     DequantizeLinear around every Conv and Gemm, INT8 weights, INT32 biases.
  2. ONNX Runtime runs FP32 and the QDQ file on the held-out digits: the QDQ file's
     accuracy is within 1 point of FP32's (ORT's arithmetic, not dlc's).
  3. dlc compiles and runs the QDQ file (the batch as one run): its predictions agree
     with ORT's on >= 99% of the digits, its logits within 0.05 of ORT's; the
     accuracy dlc quantize reported is the one its written file gives.
  4. The compiled QDQ file computes >= 90% of its FLOPs in integers (dlc inspect; on
     INT8 tensor cores or conv_direct's int32 arithmetic, as the cost model prices
     them: these 8x8 layers mostly stay off tensor cores).
  5. minmax and percentile calibration also keep the accuracy within 1 point.
  6. --target-accuracy: calibration clipped at the 90th percentile costs agreement
     with FP32 below 99%; a target of 99% top-1 agreement leaves layers in FP32 (not
     all of them) until ORT, running the written file, agrees with FP32 on >= 99%.
  7. --fp8: float8 e4m3fn weights and activations at opset 19 (from the model's 17),
     FP32 biases; ORT's accuracy of the file within 1 point of FP32 (ORT 1.30's CPU
     provider runs float8 QDQ at graph optimization 'basic': its default fuses a QDQ
     Conv into QLinearConv, which has no float8 kernel), dlc agrees with ORT on >= 99%
     of the predictions, and runs >= 90% of the FLOPs on float8 tensor cores (the
     convolutions: fold-qdq's float8 Conv).

usage: quantize_digits.py --dlc build/tools/dlc --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_models import ORT, ensure_ort, sh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "examples", "digits", "digits_cnn.onnx")


def digits():
    np.random.seed(0)  # as make_digits_cnn.py
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    order = np.random.permutation(len(x))
    return x[order[:256]], x[order[1500:]], y[order[1500:]]


def batched(path, out):
    """The model with a symbolic batch, so that one run takes every digit."""
    m = onnx.load(path)
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(m, out)
    return out


def ort_logits(model, x, work, level=None):
    out = os.path.join(work, "ort-" + os.path.basename(model))
    np.save(os.path.join(work, "x.npy"), x)
    env = dict(os.environ, ORT_OPT_LEVEL=level) if level else None
    subprocess.run(["node", os.path.join(ORT, "ort.js"), "run", model, out, "image=" + os.path.join(work, "x.npy")],
                   check=True, env=env)
    return np.load(os.path.join(out, "logits.npy"))


def quantize(dlc, work, out, *extra):
    p = subprocess.run([dlc, "quantize", MODEL, "--calibrate", os.path.join(work, "calib.npz"), "--eval-data",
                        os.path.join(work, "held.npz"), "-o", out, "--json", "-q", "--device", "emu", *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"dlc quantize {' '.join(extra)} failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    ensure_ort()
    calib, x, y = digits()
    np.savez(os.path.join(a.work, "calib.npz"), image=calib)
    np.savez(os.path.join(a.work, "held.npz"), image=x, labels=y)
    failures = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)

    fp32 = ort_logits(batched(MODEL, os.path.join(a.work, "fp32.onnx")), x, a.work)
    fp32_acc = float(np.mean(fp32.argmax(1) == y))
    print(f"FP32 accuracy (ONNX Runtime) {fp32_acc:.4f} on {len(y)} held-out digits")

    # 1. The default quantization, and the file's structure.
    qpath = os.path.join(a.work, "int8.onnx")
    rep = quantize(a.dlc, a.work, qpath)
    m = onnx.load(qpath)
    onnx.checker.check_model(m)
    ops = [n.op_type for n in m.graph.node]
    inits = {t.name: t for t in m.graph.initializer}
    dq_inputs = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "DequantizeLinear"}
    layers = [n for n in m.graph.node if n.op_type in ("Conv", "Gemm")]
    check(len(layers) == 3 and all(i in dq_inputs for n in layers for i in n.input),
          "every input of the 3 layers is a DequantizeLinear output")
    kinds = sorted(inits[dq_inputs[n.input[k]]].data_type for n in layers for k in (1, 2)
                   if dq_inputs[n.input[k]] in inits)
    check(kinds == [onnx.TensorProto.INT8] * 3 + [onnx.TensorProto.INT32] * 3,
          "weights are INT8 initializers, biases INT32")
    check(ops.count("QuantizeLinear") >= 3, f"QuantizeLinear on the activations ({ops.count('QuantizeLinear')})")
    check(rep["int8_layers"] == 3 and all(l["precision"] == "int8" for l in rep["layers"]),
          "the report lists 3 INT8 layers")

    # 2. ONNX Runtime's accuracy of the written file.
    qb = batched(qpath, os.path.join(a.work, "int8-batched.onnx"))
    ort_q = ort_logits(qb, x, a.work)
    ort_acc = float(np.mean(ort_q.argmax(1) == y))
    check(fp32_acc - ort_acc <= 0.01,
          f"ORT: QDQ accuracy {ort_acc:.4f} within 1 point of FP32 {fp32_acc:.4f}")

    # 3. dlc runs the written file as ORT does.
    pkg = os.path.join(a.work, "int8.dlc")
    sh([a.dlc, "compile", qb, "--target", "emu", "--no-tf32", "--input-shape", f"image={len(y)},1,8,8", "-o", pkg,
        "-q"])
    np.save(os.path.join(a.work, "x.npy"), x)
    sh([a.dlc, "run", pkg, "--device", "emu", "--quiet", "--output-dir", os.path.join(a.work, "dlc"),
        "image=" + os.path.join(a.work, "x.npy")])
    dlc_q = np.load(os.path.join(a.work, "dlc", "logits.npy"))
    agree = float(np.mean(dlc_q.argmax(1) == ort_q.argmax(1)))
    diff = float(np.max(np.abs(dlc_q - ort_q)))
    check(agree >= 0.99, f"dlc and ORT agree on {agree:.4f} of the predictions (>= 0.99)")
    check(diff <= 0.05, f"dlc and ORT logits within {diff:.2e} (<= 0.05)")
    dlc_acc = float(np.mean(dlc_q.argmax(1) == y))
    check(abs(rep["accuracy"] - dlc_acc) < 1e-9 and abs(rep["fp32_accuracy"] - fp32_acc) < 1e-9,
          f"the reported accuracy {rep['accuracy']:.4f} (FP32 {rep['fp32_accuracy']:.4f}) is what the files give")

    # 4. Integer work in the compiled file.
    p = subprocess.run([a.dlc, "inspect", pkg, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ins = json.loads(p.stdout)
    frac = ins["integer_flops"] / ins["flops"]
    check(frac >= 0.9, f"integer arithmetic is {frac:.3f} of the FLOPs (>= 0.9)")
    # (Which integer kernels: the cost model's choice. The digits' 8x8 layers stay on
    # conv_direct's int32 arithmetic, priced faster than tensor-core tiles far wider
    # than they are; the suite CNNs' layers go to INT8 tensor cores.)
    print(f"int8_tensor_core_flop_fraction {ins['int8_tensor_core_flop_fraction']:.3f} (the model's choice)")

    # 5. The other methods.
    for method in ("minmax", "percentile"):
        path = os.path.join(a.work, method + ".onnx")
        r = quantize(a.dlc, a.work, path, "--method", method, "--no-sensitivity")
        acc = float(np.mean(ort_logits(batched(path, path + ".b.onnx"), x, a.work).argmax(1) == y))
        check(fp32_acc - acc <= 0.01 and r["method"] == method,
              f"{method}: ORT accuracy {acc:.4f} within 1 point of FP32")

    # 6. A target met by leaving layers in FP32 (measured without labels: agreement).
    np.savez(os.path.join(a.work, "held.npz"), image=x)
    path = os.path.join(a.work, "target.onnx")
    clipped = quantize(a.dlc, a.work, os.path.join(a.work, "clipped.onnx"), "--method", "percentile",
                       "--percentile", "90", "--no-sensitivity")
    r = quantize(a.dlc, a.work, path, "--method", "percentile", "--percentile", "90", "--target-accuracy", "0.99")
    ort_t = ort_logits(batched(path, path + ".b.onnx"), x, a.work)
    agree = float(np.mean(ort_t.argmax(1) == fp32.argmax(1)))
    kept = [l["name"] for l in r["layers"] if l["precision"] == "fp32"]
    check(clipped["top1_agreement"] < 0.99 and r["target_met"] and 0 < len(kept) < 3 and agree >= 0.99,
          f"--target-accuracy 0.99: clipped calibration agrees on {clipped['top1_agreement']:.3f}; "
          f"with {kept} in FP32 ORT agrees with FP32 on {agree:.4f}")
    t = onnx.load(path)
    dq_out = {n.output[0] for n in t.graph.node if n.op_type == "DequantizeLinear"}
    float_layers = [n.name for n in t.graph.node if n.op_type in ("Conv", "Gemm") and n.input[1] not in dq_out]
    check(sorted(float_layers) == sorted(kept),
          f"exactly the layers the report leaves in FP32 have float weights ({float_layers})")

    # 7. FP8 (e4m3fn).
    np.savez(os.path.join(a.work, "held.npz"), image=x, labels=y)
    path = os.path.join(a.work, "fp8.onnx")
    r = quantize(a.dlc, a.work, path, "--fp8")
    f = onnx.load(path)
    inits = {t.name: t for t in f.graph.initializer}
    dq = [n for n in f.graph.node if n.op_type == "DequantizeLinear"]
    kinds = sorted(inits[n.input[0]].data_type for n in dq if n.input[0] in inits)
    check(f.opset_import[0].version == 19 and kinds == [17] * 3 and r["format"] == "fp8" and r["method"] == "minmax"
          and all(l["precision"] == "fp8" for l in r["layers"]),
          f"--fp8: opset {f.opset_import[0].version}, float8 weights {kinds}, the report's format {r['format']}")
    fb = batched(path, path + ".b.onnx")
    ort_f = ort_logits(fb, x, a.work, level="basic")
    acc = float(np.mean(ort_f.argmax(1) == y))
    check(fp32_acc - acc <= 0.01, f"--fp8: ORT accuracy {acc:.4f} within 1 point of FP32 {fp32_acc:.4f}")
    pkg = os.path.join(a.work, "fp8.dlc")
    sh([a.dlc, "compile", fb, "--target", "emu", "--no-tf32", "--input-shape", f"image={len(y)},1,8,8", "-o", pkg,
        "-q"])
    sh([a.dlc, "run", pkg, "--device", "emu", "--quiet", "--output-dir", os.path.join(a.work, "dlc-fp8"),
        "image=" + os.path.join(a.work, "x.npy")])
    dlc_f = np.load(os.path.join(a.work, "dlc-fp8", "logits.npy"))
    agree = float(np.mean(dlc_f.argmax(1) == ort_f.argmax(1)))
    check(agree >= 0.99 and abs(r["accuracy"] - float(np.mean(dlc_f.argmax(1) == y))) < 1e-9,
          f"--fp8: dlc and ORT agree on {agree:.4f} of the predictions (>= 0.99), logits within "
          f"{float(np.max(np.abs(dlc_f - ort_f))):.2e}; the reported accuracy is the file's")
    p = subprocess.run([a.dlc, "inspect", pkg, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    frac = json.loads(p.stdout)["fp8_tensor_core_flop_fraction"]
    check(frac >= 0.9, f"--fp8: float8 tensor cores run {frac:.3f} of the FLOPs (>= 0.9; the Gemm stays FP32)")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
