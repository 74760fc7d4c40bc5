#!/usr/bin/python3
"""Data-parallel training of the train-digits CNN (examples/train-digits) by bucket size.

For each bucket size the script gives:
- the buckets and the gradient bytes all-reduced per step (dlc inspect);
- the modeled all-reduce time and the fraction of it overlapped at 2, 4 and 8 H100s
  (dlc inspect's cost model: a model, not a measurement);
- measured on emu ranks over loopback (Open MPI) with `dlc train --nproc N`: samples/s,
  and the fraction of rank 0's all-reduce time that its steps did not wait for.

The emu figures are CPU figures. On a 2-core machine the ranks and their reducing
threads share the cores, so they show that the schedule overlaps, not how fast a GPU
would be.

usage: scripts/bench_data_parallel.py [--dlc build/tools/dlc] [--ranks 1,2] [--epochs 2]
                                      [--buckets 25,0.004] [--work DIR]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", default=os.path.join(root, "build", "tools", "dlc"))
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--epochs", default="2")
    ap.add_argument("--buckets", default="25,0.004", help="bucket sizes in MiB")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="dlc-bench-dp-")
    os.makedirs(work, exist_ok=True)
    run(["/usr/bin/python3", os.path.join(root, "examples", "train-digits", "prepare.py"), "--out", work])
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    model = os.path.join(work, "digits_untrained.onnx")
    print(f"train-digits CNN, Adam, batch 32 per rank, {a.epochs} epochs on {os.cpu_count()} cores\n")
    print("| bucket MiB | buckets | bytes/step | modeled H100 overlap at 2 / 4 / 8 GPUs "
          "| ranks | samples/s (emu) | all-reduce overlapped (emu, measured) |")
    print("|---|---|---|---|---|---|---|")
    for mib in a.buckets.split(","):
        pkg = os.path.join(work, f"dp-{mib}.dlc")
        run([a.dlc, "compile", model, "--train", "--optimizer", "adam", "--lr", "0.003", "--target", "emu",
             "--data-parallel", "--bucket-mb", mib, "-o", pkg, "-q"])
        # The model prices the compiled code: the same training step for the GPU targets.
        gpu_pkg = os.path.join(work, f"dp-{mib}-gpu.dlc")
        run([a.dlc, "compile", model, "--train", "--optimizer", "adam", "--lr", "0.003", "--target",
             "sm_80,sm_90", "--data-parallel", "--bucket-mb", mib, "-o", gpu_pkg, "-q"])
        dp = json.loads(run([a.dlc, "inspect", gpu_pkg, "--json"]).stdout)["data_parallel"]
        modeled = " / ".join(f"{100 * s['overlap_fraction']['H100']:.0f}%" for s in dp["scaling"])
        for n in a.ranks.split(","):
            cmd = [a.dlc, "train", pkg, "--data", os.path.join(work, "train.npz"), "--epochs", a.epochs,
                   "--device", "emu", "--no-shuffle"]
            if n != "1":
                cmd += ["--nproc", n]
            p = run(cmd, env=env)
            rates = re.findall(r"([0-9.]+) samples/s", p.stdout)
            m = re.search(r"\((\d+)% overlapped", p.stderr)
            print(f"| {mib} | {dp['buckets']} | {dp['all_reduce_bytes_per_step']} | {modeled} | {n} | "
                  f"{rates[-1] if rates else '?'} | {m.group(1) + '%' if m else '-'} |")


if __name__ == "__main__":
    main()
