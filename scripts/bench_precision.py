#!/usr/bin/python3
"""FP32 against TF32, FP16 and BF16 on the model suite (issue: mixed precision).

For each model it compiles an FP32, an FP16 and a BF16 package for emu (and the
GPU targets, so `dlc inspect` can model H100 latency and the tensor-core FLOP
fraction), runs every package on the same N random inputs through the C API
(libdlcrt, emu backend), and prints per precision:
  - max relative error against FP32 (max |a - b| / max |b| per output, worst input);
  - (tf32: FP32 with --tf32, convolutions and GEMMs on tensor cores in TF32);
  - top-1 agreement with FP32 over the N inputs (classifiers: outputs with a class axis);
  - tensor_core_flop_fraction and modeled H100 latency from `dlc inspect --json`.

usage: bench_precision.py --dlc build/tools/dlc --lib build/runtime/libdlcrt.so
                          --models-dir DIR [--models a,b] [--inputs 32] [--json OUT]
Models come from tests/models/export_models.py (the op17 cases).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import onnx

DTYPES = {0: np.float32, 1: np.float16, 3: np.float64, 4: np.int64, 5: np.int32, 12: np.bool_}
CLASSIFIERS = {"resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "digits"}


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_long)), ("bytes", ctypes.c_size_t)]


class Options(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("emu_threads", ctypes.c_int), ("cuda_device", ctypes.c_int),
                ("check", ctypes.c_int), ("no_cuda_graphs", ctypes.c_int)]


class Runner:
    """One package on the emu backend through the C API."""

    def __init__(self, lib, path):
        self.lib = lib
        self.model = ctypes.c_void_p()
        self._ok(lib.dlc_model_load_file(path.encode(), ctypes.byref(self.model)))
        opts = Options(2, 0, 0, 0, 0)
        self.session = ctypes.c_void_p()
        self._ok(lib.dlc_session_create(self.model, ctypes.byref(opts), ctypes.byref(self.session)))
        self.inputs = self._infos(lib.dlc_model_num_inputs, lib.dlc_model_input_info)
        self.outputs = self._infos(lib.dlc_model_num_outputs, lib.dlc_model_output_info)

    def _ok(self, status):
        if status != 0:
            raise RuntimeError(self.lib.dlc_last_error().decode())

    def _infos(self, count_fn, info_fn):
        n = ctypes.c_int()
        self._ok(count_fn(self.model, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            t = TensorInfo()
            self._ok(info_fn(self.model, i, ctypes.byref(t)))
            out.append((t.name.decode(), t.dtype, tuple(t.shape[k] for k in range(t.rank))))
        return out

    def run(self, feed):
        for name, dtype, shape in self.inputs:
            a = np.ascontiguousarray(feed[name].astype(DTYPES[dtype]).reshape(shape))
            self._ok(self.lib.dlc_session_set_input(self.session, name.encode(), a.ctypes.data, a.nbytes))
        self._ok(self.lib.dlc_session_run(self.session))
        res = {}
        for name, dtype, shape in self.outputs:
            a = np.empty(shape, DTYPES[dtype])
            self._ok(self.lib.dlc_session_get_output(self.session, name.encode(), a.ctypes.data, a.nbytes))
            res[name] = a.astype(np.float64)
        return res

    def close(self):
        self.lib.dlc_session_free(self.session)
        self.lib.dlc_model_free(self.model)


def random_feed(model_path, rng):
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    feed = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value or 1 for d in t.shape.dim]
        if t.elem_type in (6, 7):  # int32/int64 tokens: small ids, valid for every vocabulary here
            feed[i.name] = rng.integers(0, 50, size=shape).astype(np.int64)
        else:
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,transformer,gpt,lstm,digits")
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--work", default="/tmp/dlc-bench-precision")
    ap.add_argument("--json")
    ap.add_argument("--nchw", action="store_true",
                    help="also FP16 with --layout nchw (FP16/BF16 conv nets are NHWC by default)")
    a = ap.parse_args()
    lib = ctypes.CDLL(a.lib)
    lib.dlc_last_error.restype = ctypes.c_char_p
    os.makedirs(a.work, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        model = os.path.join(a.models_dir, f"{name}_op17", "model.onnx")
        rng = np.random.default_rng(0)
        feeds = [random_feed(model, rng) for _ in range(a.inputs)]
        results, inspect = {}, {}
        configs = [("fp32", ["--no-tf32"]), ("tf32", ["--tf32"]), ("fp16", ["--fp16"]), ("bf16", ["--bf16"])]
        if a.nchw:
            configs.append(("fp16-nchw", ["--fp16", "--layout", "nchw"]))
        for prec, flags in configs:
            pkg = os.path.join(a.work, f"{name}_{prec}.dlc")
            subprocess.run([a.dlc, "compile", model, "-o", pkg, "-q"] + flags, check=True)
            inspect[prec] = json.loads(subprocess.run([a.dlc, "inspect", pkg, "--json"], check=True,
                                                      stdout=subprocess.PIPE, text=True).stdout)
            r = Runner(lib, pkg)
            results[prec] = [r.run(f) for f in feeds]
            r.close()
        for prec, _ in configs:
            err, agree = 0.0, 0
            for ref, got in zip(results["fp32"], results[prec]):
                for k in ref:
                    scale = np.max(np.abs(ref[k])) or 1.0
                    err = max(err, float(np.max(np.abs(got[k] - ref[k])) / scale))
                first = next(iter(ref))
                agree += int(np.argmax(ref[first]) == np.argmax(got[first]))
            rows.append({"model": name, "precision": prec, "max_rel_error": err,
                         "top1_agreement": f"{agree}/{len(feeds)}" if name in CLASSIFIERS else "-",
                         "tensor_core_flop_fraction": round(inspect[prec]["tensor_core_flop_fraction"], 3),
                         "h100_latency_us": round(inspect[prec]["modeled_latency_us"]["H100"], 1)})
            row = rows[-1]
            print(f"{name:14s} {prec}: max rel error {err:9.3g}  top-1 {row['top1_agreement']:>6s}  "
                  f"tensor-core FLOP fraction {row['tensor_core_flop_fraction']}  "
                  f"modeled H100 {row['h100_latency_us']} us", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
