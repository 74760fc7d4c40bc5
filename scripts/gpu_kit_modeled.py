#!/usr/bin/env python3
"""The GPU kit's modeled times: `dlc inspect --json` of a package -> modeled.tsv.

One line per step that runs on each GPU profile (A100, H100, H200), in the order the
runtime runs them: GPU, step index, kind, modeled microseconds, limiting bound, node;
then per GPU a "total" line with the package's modeled latency and its FLOPs.
The kit's run.sh joins it with `dlc-run --bench --profile` on the GPU at hand.
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: gpu_kit_modeled.py INSPECT.json OUT.tsv")
    with open(sys.argv[1]) as f:
        r = json.load(f)
    lines = []
    for gpu in r["gpu_profiles"]:
        k = 0
        flops = 0.0  # the plan on this GPU (tiles and splits differ per architecture)
        for s in r["steps"]:
            if not s["runs_on"].get(gpu):
                continue
            us = s["modeled_us"][gpu]
            flops += s["flops"]
            lines.append("\t".join([gpu, str(k), s["kind"], "%.2f" % us,
                                    s["bounds_us"][gpu]["limit"], s["node"] or "-"]))
            k += 1
        # The package's modeled latency: the steps and the per-run overhead.
        lines.append("\t".join([gpu, "total", "-", "%.2f" % r["modeled_latency_us"][gpu], "-", "-",
                                 "%.6g" % flops]))
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
