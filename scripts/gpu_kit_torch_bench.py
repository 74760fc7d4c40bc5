#!/usr/bin/env python3
"""Times PyTorch eager and torch.compile on the GPU kit's models (copied into the
kit as torch/torch_bench.py, beside export_models.py, which builds them). Prints
`NAME eager MS compiled MS` per model: the median of 100 iterations after 20
warm-up ones, batch and inputs as exported; `-` where torch.compile fails.

usage: python3 torch_bench.py MODEL...   (needs torch with CUDA)
"""
import statistics
import sys
import time

import torch

from export_models import build


def median_ms(f, warmup=20, iters=100):
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    for name in sys.argv[1:]:
        try:
            model, inputs = build(name)
        except SystemExit:
            continue
        model = model.eval().cuda()
        inputs = [t.cuda() for t in inputs]
        with torch.no_grad():
            eager = median_ms(lambda: model(*inputs))
            try:
                compiled_model = torch.compile(model)
                compiled = f"{median_ms(lambda: compiled_model(*inputs)):.4f}"
            except Exception as e:  # torch.compile needs a working Triton
                print(f"{name}: torch.compile failed: {e}", file=sys.stderr)
                compiled = "-"
        print(f"{name} eager {eager:.4f} compiled {compiled}", flush=True)


if __name__ == "__main__":
    main()
