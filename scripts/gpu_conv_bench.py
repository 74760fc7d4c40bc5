#!/usr/bin/env python3
"""Convolution benchmark: dlc's kernels against cuDNN (through PyTorch) on the same layers.

  gpu_conv_bench.py build OUTDIR [--dlc PATH]   (here: exports and compiles the layers)
  gpu_conv_bench.py torch OUTDIR                (on the GPU machine: times cuDNN)
  OUTDIR/run.sh OUTDIR/dlc-run [LOGDIR]         (on the GPU machine: everything, one table)

Each case is a chain of N identical convolutions (+ReLU) at one of ResNet-50's shapes, so
that the layout transposes at the chain's ends are a small part of the whole. run.sh
reads every kernel's device time with Nsight Compute (gpu__time_duration; no clock
control) where ncu is on PATH, and times the whole package with `dlc-run --bench` (CUDA
graphs, median). PyTorch times the same convolution, channels-last, with
cudnn.benchmark on, by CUDA events around 20 back-to-back convolutions (+ReLU; the median of
25 such after 10 warm-ups).
"""
import json
import os
import shutil
import subprocess
import sys

# name: (batch, cin, cout, hw, k, stride, chain, precision)
CASES = {
    "r50_3x3_c64_56_b32": (32, 64, 64, 56, 3, 1, 4, "fp16"),
    "r50_3x3_c128_28_b32": (32, 128, 128, 28, 3, 1, 4, "fp16"),
    "r50_3x3_c256_14_b32": (32, 256, 256, 14, 3, 1, 4, "fp16"),
    "r50_3x3_c512_7_b32": (32, 512, 512, 7, 3, 1, 2, "fp16"),
    "r50_1x1_c256_64_56_b32": (32, 256, 64, 56, 1, 1, 1, "fp16"),
    "r50_1x1_c1024_256_14_b32": (32, 1024, 256, 14, 1, 1, 1, "fp16"),
    "r50_3x3_c128_28_b1": (1, 128, 128, 28, 3, 1, 4, "fp16"),
    "r50_3x3_c256_14_b1": (1, 256, 256, 14, 3, 1, 4, "fp16"),
    "r50_3x3_c128_28_b32_tf32": (32, 128, 128, 28, 3, 1, 4, "tf32"),
}


# Tile variants (--conv-tile) compiled beside the cost model's choice for these cases.
TILES = ["128x128/64x64", "128x64/32x32", "64x128/32x32", "128x64/32x32/128B", "64x128/32x32/128B"]
TILED = ["r50_3x3_c64_56_b32", "r50_3x3_c128_28_b32"]  # (the 256-channel weights are 4.7 MB a copy)


def flops(case):
    n, ci, co, hw, k, s, chain, _ = case
    ho = (hw + 2 * (k // 2) - k) // s + 1
    return 2 * n * ho * ho * co * ci * k * k * chain


def build(out, dlc):
    import torch
    import torch.nn as nn

    class Chain(nn.Module):
        def __init__(self, ci, co, k, s, chain):
            super().__init__()
            layers = [nn.Conv2d(ci, co, k, stride=s, padding=k // 2)]
            layers += [nn.Conv2d(co, co, k, padding=k // 2) for _ in range(chain - 1)]
            self.layers = nn.ModuleList(layers)

        def forward(self, x):
            for conv in self.layers:
                x = torch.relu(conv(x))
            return x

    os.makedirs(out, exist_ok=True)
    variants = {}
    for name, case in CASES.items():
        n, ci, co, hw, k, s, chain, prec = case
        if ci != co and chain > 1:
            raise SystemExit(f"{name}: a chain needs cin == cout")
        torch.manual_seed(0)
        onnx_path = os.path.join(out, name + ".onnx")
        torch.onnx.export(Chain(ci, co, k, s, chain).eval(), (torch.randn(n, ci, hw, hw),), onnx_path,
                          input_names=["x"], output_names=["y"], opset_version=17)
        flags = ["--fp16", "--io-dtype", "fp16"] if prec == "fp16" else ["--tf32"]
        subprocess.run([dlc, "compile", onnx_path, "--target", "sm_90", *flags, "-o",
                        os.path.join(out, name + ".dlc"), "--quiet"], check=True)
        for tile in TILES if name in TILED else []:
            variant = name + "@" + tile.replace("/", "_")
            subprocess.run([dlc, "compile", onnx_path, "--target", "sm_90", *flags, "--conv-tile", tile,
                            "-o", os.path.join(out, variant + ".dlc"), "--quiet"], check=True)
            variants[variant] = case
        os.remove(onnx_path)
    here = os.path.dirname(os.path.abspath(__file__))
    for src, dst in (("gpu_conv_bench_run.sh", "run.sh"), ("gpu_conv_bench.py", "gpu_conv_bench.py")):
        with open(os.path.join(here, src)) as f, open(os.path.join(out, dst), "w") as g:
            g.write(f.read())
        os.chmod(os.path.join(out, dst), 0o755)
    # The package runner (the exe stub beside dlc), so that the folder is all the GPU needs.
    shutil.copy(os.path.join(os.path.dirname(dlc), "dlc-exe-stub"), os.path.join(out, "dlc-run"))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({k: list(v) + [flops(v)] for k, v in {**CASES, **variants}.items()}, f, indent=1)


def time_torch(out):
    import torch
    torch.backends.cudnn.benchmark = True
    cases = json.load(open(os.path.join(out, "cases.json")))
    for name, (n, ci, co, hw, k, s, chain, prec, _) in cases.items():
        if "@" in name:
            continue
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = prec == "tf32"
        dt = torch.float16 if prec == "fp16" else torch.float32
        conv = torch.nn.Conv2d(ci, co, k, stride=s, padding=k // 2).cuda().to(dt)
        conv = conv.to(memory_format=torch.channels_last)
        x = torch.randn(n, ci, hw, hw, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
        with torch.no_grad():
            for _ in range(10):
                torch.relu(conv(x))
            times = []
            reps = 20  # back to back between the events: the GPU's time, not Python's launches
            for _ in range(25):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(reps):
                    torch.relu(conv(x))
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) * 1000 / reps)
        times.sort()
        print(f"torch {name} {times[len(times) // 2]:.2f}")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("build", "torch"):
        print(__doc__)
        return 2
    if sys.argv[1] == "build":
        dlc = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--dlc" else "build/tools/dlc"
        build(sys.argv[2], dlc)
    else:
        time_torch(sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
