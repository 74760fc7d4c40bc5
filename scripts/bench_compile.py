#!/usr/bin/env python3
"""The benchmark behind scripts/bench-compile.sh (see there)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

GPU_TARGETS = "sm_80,sm_86,sm_89,sm_90,compute_80"


def compile_model(dlc, model, out, cache, targets=None, extra=()):
    cmd = [dlc, "compile", model, "-o", out, "--cache-dir", cache] + list(extra)
    if targets:
        cmd += ["--target", targets]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("dlc compile failed:\n" + p.stderr)
    phases = {}
    for line in p.stderr.splitlines():
        m = re.match(r"dlc: (import|parse) .*, ([0-9.]+) s$", line)
        if m:
            phases["import"] = float(m.group(2))
        m = re.match(r"dlc: passes .*, ([0-9.]+) s$", line)
        if m:
            phases["passes"] = float(m.group(1))
        m = re.match(r"dlc: (nvrtc|ptxas sm_\d+|emu): (\d+) jobs?(?: \((\d+) cached\))?, ([0-9.]+) s$", line)
        if m:
            phases[m.group(1)] = float(m.group(4))
    return wall, phases


def inspect(dlc, pkg):
    return json.loads(subprocess.run([dlc, "inspect", pkg, "--json"], capture_output=True, text=True,
                                     check=True).stdout)


def low_fill(insp, gpu="H100"):
    """Steps that carry > 1% of the FLOPs with SM fill < 0.5 on `gpu`."""
    steps = [s for s in insp["steps"] if s["runs_on"][gpu]]
    total = sum(s["flops"] for s in steps) or 1
    return [(s["node"], s.get("kernel", s["kind"]), s["blocks"], s["sm_fill"][gpu], s["flops"] / total)
            for s in steps if s["flops"] / total > 0.01 and s["sm_fill"][gpu] < 0.5]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--export", required=True)
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,transformer,gpt,lstm,gru")
    ap.add_argument("--opset", default="17")
    ap.add_argument("--json")
    a = ap.parse_args()
    names = a.models.split(",")
    missing = [m for m in names if not os.path.exists(os.path.join(a.models_dir, f"{m}_op{a.opset}", "model.onnx"))]
    if missing:
        subprocess.run([sys.executable, a.export, "--out", a.models_dir, "--models", ",".join(missing),
                        "--opsets", a.opset], check=True, capture_output=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in names:
            model = os.path.join(a.models_dir, f"{m}_op{a.opset}", "model.onnx")
            pkg = os.path.join(tmp, m + ".dlc")
            gpu_wall, gpu_phases = compile_model(a.dlc, model, pkg, os.path.join(tmp, m + ".gpu-cache"), GPU_TARGETS)
            cache = os.path.join(tmp, m + ".cache")
            all_wall, all_phases = compile_model(a.dlc, model, pkg, cache)
            warm_wall, _ = compile_model(a.dlc, model, pkg, cache)
            insp = inspect(a.dlc, pkg)
            rows.append({"model": m, "gpu_cold_s": gpu_wall, "gpu_phases": gpu_phases, "all_cold_s": all_wall,
                         "all_phases": all_phases, "warm_s": warm_wall, "unique_kernels": insp["unique_kernels"],
                         "launches": insp["launches"], "library_calls": insp["library_calls"],
                         "package_bytes": insp["package_bytes"], "arena_bytes": insp["arena_bytes"],
                         "modeled_us": insp["modeled_latency_us"], "roofline_us": insp["roofline_us"],
                         "modeled_dram_bytes": insp["modeled_dram_bytes"], "low_fill": low_fill(insp)})
            print(f"{m}: done", file=sys.stderr)
    print("| model | unique kernels / launches (H100) | GEMM calls | package MB | cold, GPU targets (s) | "
          "cold, + emu (s) | warm (s) | modeled H100 us | roofline H100 us |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['unique_kernels']} / {r['launches']} | {r['library_calls']} | "
              f"{r['package_bytes'] / 1e6:.1f} | {r['gpu_cold_s']:.2f} | {r['all_cold_s']:.2f} | {r['warm_s']:.2f} | "
              f"{r['modeled_us']['H100']:.1f} | {r['roofline_us']['H100']:.1f} |")
    print()
    print("Cold compile by phase (seconds; job times summed per phase, the jobs run on every core):")
    print()
    keys = ["import", "passes", "nvrtc", "ptxas sm_80", "ptxas sm_86", "ptxas sm_89", "ptxas sm_90", "emu"]
    print("| model | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for r in rows:
        ph = dict(r["gpu_phases"])
        ph["emu"] = r["all_phases"].get("emu", 0.0)
        print(f"| {r['model']} | " + " | ".join(f"{ph.get(k, 0.0):.2f}" for k in keys) + " |")
    print()
    print("Kernels with > 1% of the FLOPs and SM fill < 0.5 on H100 (model):")
    any_low = False
    for r in rows:
        for node, kernel, blocks, fill, share in r["low_fill"]:
            any_low = True
            print(f"- {r['model']}: {node} ({kernel}): {blocks} blocks, fill {fill:.2f}, {100 * share:.1f}% of FLOPs")
    if not any_low:
        print("- none")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
