#!/usr/bin/env python3
"""conv_fprop_mma on a GPU against emu: every tile and feature, the same inputs.

  gpu_conv_check.py OUTDIR [--dlc PATH] [--run PATH]   (here: models, packages, emu outputs)
  OUTDIR/run.sh OUTDIR/dlc-run                         (on the GPU machine)

Each case is compiled for sm_90 and emu with the tile pinned (--conv-tile); emu's
outputs on seeded random inputs are the reference the GPU's must match (dlc-run
--expect, FP16 tolerances). This checks that the GPU executes ldmatrix, mma.sync and
cp.async as emu models them, on the kernels dlc emits.
"""
import os
import shutil
import subprocess
import sys

import numpy as np

TILES = ["128x128/64x64", "128x256/64x64", "256x128/64x64", "128x64/32x32", "64x128/32x32",
         "64x64/32x32", "64x32/32x32", "32x64/32x32", "32x32/32x32", "128x64/32x32/128B",
         "64x128/32x32/128B", "64x64/32x32/128B", "64x32/32x32/128B", "32x64/32x32/128B"]


def cases():
    import torch.nn as nn
    c = {}
    for t in TILES:
        c["tile_" + t.replace("/", "_")] = (lambda: nn.Conv2d(64, 96, 3, padding=1), (2, 64, 19, 23),
                                             ["--fp16", "--conv-tile", t])
    c["splitk_b1"] = (lambda: nn.Conv2d(256, 256, 3, padding=1), (1, 256, 14, 14), ["--fp16"])
    c["stem_rgb_7x7_s2"] = (lambda: nn.Conv2d(3, 64, 7, stride=2, padding=3), (2, 3, 64, 64), ["--fp16"])
    c["grouped_g8"] = (lambda: nn.Conv2d(128, 128, 3, padding=1, groups=8), (2, 128, 14, 14), ["--fp16"])
    c["dilated_strided"] = (lambda: nn.Conv2d(64, 64, 3, stride=2, padding=2, dilation=2), (2, 64, 30, 30),
                            ["--fp16"])
    c["bf16"] = (lambda: nn.Conv2d(64, 64, 3, padding=1), (2, 64, 17, 17), ["--bf16"])
    c["tf32"] = (lambda: nn.Conv2d(64, 64, 3, padding=1), (2, 64, 17, 17), ["--tf32"])
    return c


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    dlc = sys.argv[sys.argv.index("--dlc") + 1] if "--dlc" in sys.argv else "build/tools/dlc"
    run = sys.argv[sys.argv.index("--run") + 1] if "--run" in sys.argv else "build/tools/dlc-exe-stub"
    import torch
    os.makedirs(out, exist_ok=True)
    names = []
    for name, (make, shape, flags) in cases().items():
        torch.manual_seed(0)
        m = torch.nn.Sequential(make(), torch.nn.ReLU()).eval()
        onnx_path = os.path.join(out, name + ".onnx")
        torch.onnx.export(m, (torch.randn(*shape),), onnx_path, input_names=["x"], output_names=["y"],
                          opset_version=17)
        pkg = os.path.join(out, name + ".dlc")
        subprocess.run([dlc, "compile", onnx_path, "--target", "sm_90,emu", *flags, "-o", pkg, "--quiet"],
                       check=True)
        os.remove(onnx_path)
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        np.save(os.path.join(out, name + ".x.npy"), x)
        subprocess.run([run, pkg, "--device", "emu", "--input", "x=" + os.path.join(out, name + ".x.npy"),
                        "--output-dir", os.path.join(out, name + ".emu"), "--quiet"], check=True)
        names.append(name)
    with open(os.path.join(out, "run.sh"), "w") as f:
        f.write("#!/usr/bin/env bash\n# Runs every case on the GPU against emu's outputs; one line each.\n")
        f.write('d="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; run="$1"; fails=0\n')
        f.write('for n in ' + " ".join(names) + '; do\n')
        f.write('  if "$run" "$d/$n.dlc" --allow-host-code --device cuda --input "x=$d/$n.x.npy" '
                '--expect "$d/$n.emu" --rtol 2e-2 --atol 2e-2 --output-dir "/tmp/gcc_$n" >"/tmp/gcc_$n.log" 2>&1; '
                'then echo "pass $n $(grep -o "max rel error.*" "/tmp/gcc_$n.log" | tail -1)"; '
                'else echo "FAIL $n"; tail -3 "/tmp/gcc_$n.log"; fails=1; fi\ndone\nexit $fails\n')
    os.chmod(os.path.join(out, "run.sh"), 0o755)
    shutil.copy(run, os.path.join(out, "dlc-run"))  # the folder is all the GPU needs
    return 0


if __name__ == "__main__":
    sys.exit(main())
