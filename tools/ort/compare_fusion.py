#!/usr/bin/python3
"""Fusion figures for dlc next to ONNX Runtime's optimized graphs.

For each model: exports it with tests/models/export_models.py (PyTorch, random
weights), saves ONNX Runtime's optimized graph at level 'all' and 'extended'
(onnxruntime-node, CPU) and counts its nodes, compiles it with dlc at -O0 and -O2
and reads `dlc inspect --json`: kernel launches, library (GEMM) calls, modeled DRAM
bytes, the lower bound, and the roofline model. Prints a Markdown table.

usage: tools/ort/compare_fusion.py [--dlc build/tools/dlc] [--models resnet18,...]
                                   [--opset 17] [--work /tmp/dlc-fusion]
Needs: /usr/bin/python3 with python3-torch/torchvision/onnx, node + npm (the script
runs `npm install` in tools/ort with ONNXRUNTIME_NODE_INSTALL=skip if needed).
"""
import argparse
import json
import os
import subprocess
import sys

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def sh(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def ensure_ort():
    if not os.path.isdir(os.path.join(HERE, "node_modules", "onnxruntime-node")):
        env = dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip")
        sh(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, env=env)


def ort_nodes(model, level, work):
    out = os.path.join(work, f"ort_{level}.onnx")
    sh(["node", os.path.join(HERE, "ort.js"), "optimize", model, level, out])
    return len(onnx.load(out, load_external_data=False).graph.node)


def dlc_figures(dlc, model, level, work):
    pkg = os.path.join(work, f"O{level}.dlc")
    sh([dlc, "compile", model, f"-O{level}", "--target", "emu", "-o", pkg, "-q"])
    return json.loads(sh([dlc, "inspect", pkg, "--json"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlc", default=os.path.join(ROOT, "build", "tools", "dlc"))
    ap.add_argument("--models", default="resnet18,mobilenet_v2,transformer,gpt")
    ap.add_argument("--opset", default="17")
    ap.add_argument("--work", default="/tmp/dlc-fusion")
    a = ap.parse_args()
    ensure_ort()
    models_dir = os.path.join(a.work, "models")
    sh(["/usr/bin/python3", os.path.join(ROOT, "tests", "models", "export_models.py"), "--out", models_dir,
        "--models", a.models, "--opsets", a.opset])
    rows = []
    for m in a.models.split(","):
        case = os.path.join(models_dir, f"{m}_op{a.opset}")
        model = os.path.join(case, "model.onnx")
        work = os.path.join(a.work, m)
        os.makedirs(work, exist_ok=True)
        o0, o2 = dlc_figures(a.dlc, model, 0, work), dlc_figures(a.dlc, model, 2, work)
        convs = sum(1 for n in onnx.load(model).graph.node if n.op_type in ("Conv", "Gemm", "MatMul"))
        rows.append({
            "model": m, "onnx_nodes": len(onnx.load(model).graph.node), "conv_gemm": convs,
            "ort_all": ort_nodes(model, "all", work), "ort_extended": ort_nodes(model, "extended", work),
            "k0": o0["launches"], "g0": o0["library_calls"], "k2": o2["launches"], "g2": o2["library_calls"],
            "mb0": o0["modeled_dram_bytes"] / 1e6, "mb2": o2["modeled_dram_bytes"] / 1e6,
            "lb": o2["lower_bound_bytes"] / 1e6, "a100": o2["modeled_latency_us"]["A100"], "h100": o2["modeled_latency_us"]["H100"],
        })
    print("| model | ONNX nodes | Conv+GEMM | ORT 'all' nodes | ORT 'extended' nodes | dlc -O0 kernels + GEMMs "
          "| dlc -O2 kernels + GEMMs | modeled MB -O0 | modeled MB -O2 | lower bound MB | -O2 / bound "
          "| modeled latency A100 / H100 (us, a model) |")
    print("|---" * 12 + "|")
    for r in rows:
        print(f"| {r['model']} | {r['onnx_nodes']} | {r['conv_gemm']} | {r['ort_all']} | {r['ort_extended']} "
              f"| {r['k0']} + {r['g0']} | {r['k2']} + {r['g2']} | {r['mb0']:.2f} | {r['mb2']:.2f} | {r['lb']:.2f} "
              f"| {r['mb2'] / r['lb']:.2f}x | {r['a100']:.1f} / {r['h100']:.1f} |")


if __name__ == "__main__":
    main()
