#!/usr/bin/python3
"""Deployment test: installs dlc into a fresh prefix and, with the *installed* dlc,
builds `--emit exe`, `--emit lib` and `--emit cuda` for the bundled digits CNN and a
transformer encoder; runs the executable and a C program linked with the library, and
compares every output with `dlc run` on the same package. Builds examples/embed against
the installed CMake package and compares it too. Checks that libdlcrt depends on no
LLVM, ONNX, protobuf or fmt, and that a failed --emit leaves no output behind.

usage: test_deploy.py --build BUILD_DIR --source SOURCE_DIR --models MODELS_DIR --work WORK_DIR
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

CTYPES = {"f32": ("float", np.float32), "f64": ("double", np.float64), "i64": ("int64_t", np.int64),
          "i32": ("int32_t", np.int32), "i8": ("int8_t", np.int8), "u8": ("uint8_t", np.uint8),
          "bool": ("uint8_t", np.uint8)}

failures = []


def run(cmd, env=None, cwd=None, expect_ok=True):
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if expect_ok and p.returncode != 0:
        sys.exit("FAILED (exit %d): %s\n%s\n%s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p


def check(cond, what):
    print(("  ok    " if cond else "  FAIL  ") + what)
    if not cond:
        failures.append(what)


def info(exe):
    """Inputs and outputs from `EXE --info`: [(kind, name, dtype, shape)]."""
    out = run([exe, "--info"]).stdout
    ts = []
    for m in re.finditer(r"^\s+(input|output)\s+(\S+): (\w+)\[([\d,]*)\]$", out, re.M):
        shape = [int(d) for d in m.group(4).split(",") if d]
        ts.append((m.group(1), m.group(2), m.group(3), shape))
    return ts


def c_ident(s):
    r = re.sub(r"[^A-Za-z0-9]", "_", s)
    return "t_" + r if not r or r[0].isdigit() else r


def lib_driver(name, tensors, in_files, out_dir):
    """A C99 program that runs NAME_run on raw input files and writes raw outputs, and
    checks the library's misuse errors."""
    lines = ['#include "%s.h"' % name, "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>", "",
             "static void *slurp(const char *p, size_t n) {",
             "  void *b = malloc(n); FILE *f = fopen(p, \"rb\");",
             "  if (!f || fread(b, 1, n, f) != n) { fprintf(stderr, \"cannot read %s\\n\", p); exit(3); }",
             "  fclose(f); return b; }",
             "static void spill(const char *p, const void *b, size_t n) {",
             "  FILE *f = fopen(p, \"wb\"); if (!f || fwrite(b, 1, n, f) != n) exit(4); fclose(f); }", "",
             "int main(void) {",
             "  %s *bad = %s_create(\"tpu\");" % (name, name),
             "  if (bad || !strstr(%s_last_error(), \"tpu\")) { fprintf(stderr, \"bad device accepted\\n\"); return 5; }" % name,
             "  %s *m = %s_create(\"emu\");" % (name, name),
             "  if (!m) { fprintf(stderr, \"create: %%s\\n\", %s_last_error()); return 1; }" % name]
    args = []
    for kind, tname, dtype, shape in tensors:
        ctype = CTYPES[dtype][0]
        n = int(np.prod(shape)) if shape else 1
        var = "v_" + c_ident(tname)
        size = "sizeof(%s) * %d" % (ctype, n)
        if kind == "input":
            lines.append('  %s *%s = (%s *)slurp("%s", %s);' % (ctype, var, ctype, in_files[tname], size))
        else:
            lines.append("  %s *%s = (%s *)calloc(%d, sizeof(%s));" % (ctype, var, ctype, n, ctype))
        args.append(var)
    lines.append("  if (%s_run(NULL, %s) == 0) { fprintf(stderr, \"null handle accepted\\n\"); return 6; }"
                 % (name, ", ".join(args)))
    lines.append("  if (%s_run(m, %s) != 0) { fprintf(stderr, \"run: %%s\\n\", %s_last_error()); return 2; }"
                 % (name, ", ".join(args), name))
    for kind, tname, dtype, shape in tensors:
        if kind == "output":
            n = int(np.prod(shape)) if shape else 1
            lines.append('  spill("%s/%s.bin", v_%s, sizeof(%s) * %d);'
                         % (out_dir, c_ident(tname), c_ident(tname), CTYPES[dtype][0], n))
    lines += ['  printf("%%s\\n", %s_device(m));' % name, "  %s_free(m);" % name, "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def deploy_model(dlc, tag, onnx_path, inputs, work, cc):
    print("== %s" % tag)
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    in_specs = []
    in_files = {}
    for name, arr in inputs.items():
        npy = os.path.join(d, "in_%s.npy" % c_ident(name))
        np.save(npy, arr)
        raw = os.path.join(d, "in_%s.bin" % c_ident(name))
        arr.tofile(raw)
        in_files[name] = raw
        in_specs += ["--input", "%s=%s" % (name, npy)]

    pkg = os.path.join(d, "model.dlc")
    run([dlc, "compile", onnx_path, "-o", pkg, "-q"])
    run([dlc, "run", pkg] + in_specs + ["--output-dir", os.path.join(d, "run"), "-q", "--device", "emu"])

    # --emit exe
    exe = os.path.join(d, tag)
    run([dlc, "compile", onnx_path, "--emit", "exe", "-o", exe, "-q"])
    tensors = info(exe)
    outputs = [t for t in tensors if t[0] == "output"]
    check(len(outputs) > 0, "%s: the executable lists its inputs and outputs" % tag)
    run([exe] + in_specs + ["--output-dir", os.path.join(d, "exe"), "-q", "--device", "emu"])
    for _, oname, _, _ in outputs:
        ref = np.load(os.path.join(d, "run", oname + ".npy"))
        got = np.load(os.path.join(d, "exe", oname + ".npy"))
        check(same(ref, got), "%s: --emit exe output '%s' equals dlc run (%s%s)" % (tag, oname, ref.dtype, list(ref.shape)))
    b = run([exe, "--bench", "--iterations", "3", "--warmup", "1", "--device", "emu"])
    check("median" in b.stdout and "not GPU timings" in b.stdout, "%s: --bench reports latency and labels emu" % tag)
    ldd = run(["ldd", exe]).stdout
    check(not re.search(r"libstdc\+\+|dlcrt|LLVM|onnx|protobuf|fmt", ldd),
          "%s: the executable needs only the C library (%s)" % (tag, ", ".join(re.findall(r"^\s*(\S+)", ldd, re.M))))

    # --emit lib, used from C
    libdir = os.path.join(d, "lib")
    name = c_ident(tag)
    run([dlc, "compile", onnx_path, "--emit", "lib", "-o", os.path.join(libdir, "lib%s.so" % name), "-q"])
    check(os.path.exists(os.path.join(libdir, name + ".h")), "%s: --emit lib writes %s.h" % (tag, name))
    out_dir = os.path.join(d, "libout")
    os.makedirs(out_dir, exist_ok=True)
    src = os.path.join(d, "driver.c")
    with open(src, "w") as f:
        f.write(lib_driver(name, tensors, in_files, out_dir))
    drv = os.path.join(d, "driver")
    run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", libdir, src, "-L", libdir, "-l" + name,
         "-Wl,-rpath," + libdir, "-o", drv])
    run([drv])
    for _, oname, dtype, shape in outputs:
        ref = np.load(os.path.join(d, "run", oname + ".npy"))
        got = np.fromfile(os.path.join(out_dir, c_ident(oname) + ".bin"), dtype=CTYPES[dtype][1]).reshape(shape)
        check(same(ref, got), "%s: --emit lib output '%s' equals dlc run" % (tag, oname))
    exported = run(["nm", "-D", "--defined-only", os.path.join(libdir, "lib%s.so" % name)]).stdout
    syms = sorted(re.findall(r" T (\S+)", exported))
    check(all(s.startswith(name + "_") for s in syms) and len(syms) == 5,
          "%s: the library exports only its entry points (%s)" % (tag, ", ".join(syms)))

    # --emit cuda
    cu = os.path.join(d, "cuda")
    run([dlc, "compile", onnx_path, "--emit", "cuda", "-o", cu, "-q"])
    files = sorted(os.listdir(cu))
    headers = [f for f in files if f.startswith("dlc_") or f == "Philox.h"]
    check(files == sorted(["README.txt", "kernels.cu", "schedule.txt"] + headers) and "dlc_kernels.cuh" in headers
          and "Philox.h" in headers and "dlc_emu_prelude.h" not in headers, "%s: --emit cuda files %s" % (tag, files))
    insp = json.loads(run([dlc, "inspect", pkg, "--json"]).stdout)
    sched = open(os.path.join(cu, "schedule.txt")).read()
    kernels = open(os.path.join(cu, "kernels.cu")).read()
    launches = len(re.findall(r"^\s+\d+\s+launch ", sched, re.M))
    gemms = len(re.findall(r"^\s+\d+\s+gemm ", sched, re.M))
    # --emit cuda compiles for compute_90: its schedule is the package's H100 (sm_90) plan;
    # kernels that only other architectures' plans launch are not in it.
    check(launches == insp["launches_by_gpu"]["H100"] and gemms == insp["library_calls"],
          "%s: schedule.txt has the package's %d launches and %d GEMMs (H100 plan)" % (tag, launches, gemms))
    instantiated = re.findall(r'^template __global__ void ([\w:]+)<', kernels, re.M)
    on_h100 = [k["template"] for k in insp["kernels"] if k["launches"]["H100"] or not k["launches"]["A100"]]
    check(sorted(instantiated) == sorted(on_h100),
          "%s: kernels.cu instantiates all %d kernels of the H100 plan" % (tag, len(on_h100)))
    # The directory stands alone: nvcc compiles it as the README says.
    nvcc = "/usr/local/cuda/bin/nvcc"
    if os.path.exists(nvcc):
        r = subprocess.run([nvcc, "-std=c++17", "-arch=sm_80", "-cubin", "-I.", "kernels.cu", "-o", "k.cubin"], cwd=cu,
                           capture_output=True, text=True)
        check(r.returncode == 0 and os.path.getsize(os.path.join(cu, "k.cubin")) > 0,
              "%s: nvcc compiles the --emit cuda directory%s" % (tag, "" if r.returncode == 0 else ": " + r.stderr[-500:]))
    return pkg, d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prefix = os.path.join(work, "prefix")
    run(["cmake", "--install", a.build, "--prefix", prefix])
    dlc = os.path.join(prefix, "bin", "dlc")
    cc = shutil.which("cc") or shutil.which("gcc")

    print("== installed runtime")
    libdir = os.path.join(prefix, "lib")
    so = os.path.realpath(os.path.join(libdir, "libdlcrt.so"))
    ldd = run(["ldd", so]).stdout
    deps = re.findall(r"^\s*(\S+)", ldd, re.M)
    check(not re.search(r"LLVM|onnx|protobuf|fmt|boost|blas", ldd, re.I),
          "libdlcrt.so (%d bytes) depends only on %s" % (os.path.getsize(so), ", ".join(deps)))
    print("  libdlcrt.a: %d bytes" % os.path.getsize(os.path.join(libdir, "libdlcrt.a")))

    digits = os.path.join(a.source, "examples", "digits")
    x = np.load(os.path.join(digits, "digit_0_label2.npy"))
    pkg, _ = deploy_model(dlc, "digits", os.path.join(digits, "digits_cnn.onnx"), {"image": x}, work, cc)

    tdir = os.path.join(a.models, "transformer_op17")
    tmodel = onnx.load(os.path.join(tdir, "model.onnx"))
    inits = {i.name for i in tmodel.graph.initializer}
    names = [i.name for i in tmodel.graph.input if i.name not in inits]
    tin = {}
    for i, n in enumerate(names):
        t = onnx.TensorProto()
        with open(os.path.join(tdir, "test_data_set_0", "input_%d.pb" % i), "rb") as f:
            t.ParseFromString(f.read())
        tin[n] = numpy_helper.to_array(t)
    deploy_model(dlc, "transformer", os.path.join(tdir, "model.onnx"), tin, work, cc)

    print("== examples/embed against the installed package")
    eb = os.path.join(work, "embed-build")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    run(["cmake", "-S", os.path.join(a.source, "examples", "embed"), "-B", eb, "-DCMAKE_PREFIX_PATH=" + prefix] + gen)
    run(["cmake", "--build", eb])
    npy = os.path.join(work, "digits", "in_image.npy")
    out = run([os.path.join(eb, "embed"), pkg, npy, "--sessions", "3"]).stdout
    for oname in ("logits", "probs"):
        m = re.search(r"^%s:(.*)$" % oname, out, re.M)
        ref = np.load(os.path.join(work, "digits", "run", oname + ".npy")).ravel()
        got = np.array([float(v) for v in m.group(1).split()], dtype=np.float32) if m else None
        check(got is not None and np.array_equal(ref, got), "embed: output '%s' equals dlc run (3 sessions agree)" % oname)

    print("== failures leave nothing behind")
    env = dict(os.environ, DLC_EXE_STUB=os.path.join(work, "no-such-stub"))
    target = os.path.join(work, "never")
    p = run([dlc, "compile", os.path.join(digits, "digits_cnn.onnx"), "--emit", "exe", "-o", target, "-q"], env=env,
            expect_ok=False)
    check(p.returncode != 0 and "no-such-stub" in p.stderr and not os.path.exists(target),
          "--emit exe with a missing stub: one error, no output")
    p = run([os.path.join(work, "digits", "digits"), "--input", "image=" + os.path.join(work, "missing.npy")],
            expect_ok=False)
    check(p.returncode != 0 and "missing.npy" in p.stderr, "the executable reports a missing input file")
    p = run([os.path.join(prefix, "libexec", "dlc", "dlc-exe-stub")], expect_ok=False)
    check(p.returncode != 0 and "no package" in p.stderr, "the bare stub says it has no package")

    if failures:
        sys.exit("%d check(s) failed" % len(failures))
    print("all deployment checks passed")


if __name__ == "__main__":
    main()
