#!/usr/bin/python3
"""The cost of a call from Python: InferenceSession.run against the C API
(dlc_session_set_input + dlc_session_run + dlc_session_get_output) on a tiny model
(Relu over f32[4]), in microseconds per call, on the emu backend (one thread).

usage: PYTHONPATH=build/python scripts/bench_python_overhead.py [--build build] [--calls N]
"""
import argparse
import os
import subprocess
import tempfile
import time

import numpy as np

import dlc

C_BENCH = r"""
#include <dlc/runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(int argc, char **argv) {
  dlc_model *m; dlc_session *s; dlc_session_options o;
  float x[4] = {1, -2, 3, -4}, y[4];
  long calls = atol(argv[2]);
  memset(&o, 0, sizeof o); o.device = DLC_DEVICE_EMU; o.emu_threads = 1;
  if (dlc_model_load_file(argv[1], &m) || dlc_session_create(m, &o, &s)) { fprintf(stderr, "%s\n", dlc_last_error()); return 1; }
  struct timespec a, b;
  for (int pass = 0; pass < 2; ++pass) {  /* the first pass warms up */
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < calls; ++i)
      if (dlc_session_set_input(s, "x", x, sizeof x) || dlc_session_run(s) || dlc_session_get_output(s, "y", y, sizeof y)) {
        fprintf(stderr, "%s\n", dlc_last_error()); return 1; }
    clock_gettime(CLOCK_MONOTONIC, &b);
  }
  printf("%.3f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / calls);
  dlc_session_free(s); dlc_model_free(m);
  return 0;
}
"""


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        ir = os.path.join(work, "tiny.ir")
        with open(ir, "w") as f:
            f.write('graph @tiny(%x: f32[4]) -> ("y": f32[4]) {\n  %y = Relu(%x) : f32[4]\n  return %y\n}\n')
        pkg = os.path.join(work, "tiny.dlc")
        subprocess.run([os.path.join(a.build, "tools", "dlc"), "compile", ir, "--target", "emu", "-o", pkg, "-q"],
                       check=True)
        exe = os.path.join(work, "cbench")
        with open(exe + ".c", "w") as f:
            f.write(C_BENCH)
        rt = os.path.join(a.build, "runtime")
        subprocess.run(["cc", "-O2", exe + ".c", "-o", exe, "-I", os.path.join(root, "include"), "-L", rt, "-ldlcrt",
                        "-Wl,-rpath," + rt], check=True)
        c_us = float(subprocess.run([exe, pkg, str(a.calls)], capture_output=True, text=True, check=True).stdout)
        sess = dlc.InferenceSession(pkg, device="emu", threads=1)
        feed = {"x": np.array([1, -2, 3, -4], np.float32)}
        for _ in range(a.calls // 10):
            sess.run(None, feed)
        t0 = time.perf_counter()
        for _ in range(a.calls):
            sess.run(None, feed)
        py_us = (time.perf_counter() - t0) * 1e6 / a.calls
    print(f"tiny model (Relu, f32[4]) on emu, {a.calls} calls, one thread:")
    print(f"  C API (set_input + run + get_output): {c_us:8.2f} us/call")
    print(f"  InferenceSession.run:                 {py_us:8.2f} us/call  (+{py_us - c_us:.2f} us from Python)")


if __name__ == "__main__":
    main()
