#!/usr/bin/python3
"""Feeds every file of the bad-input corpus to dlc and checks that each is a clean
error: a non-zero exit (not a signal), exactly one line on stderr starting with
"dlc: error:" that names the problem, and no output file or directory left behind.

usage: run_bad_inputs.py --dlc build/tools/dlc --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

GOOD_IR = """graph @good(%x: f32[2,4]) -> ("y": f32[2,4]) {
  %y = Relu(%x) : f32[2,4]
  return %y
}
"""

# (file, what to run: compile | run-package | inspect | run-input, expected words in the message)
CASES = [
    ("truncated.onnx", "compile", "not a valid ONNX model"),
    ("not_protobuf.onnx", "compile", "not a valid ONNX model"),
    ("empty.onnx", "compile", "empty"),
    ("cyclic.onnx", "compile", "cycle"),
    ("missing_initializer.onnx", "compile", "'w'"),
    ("custom_domain.onnx", "compile", "domain"),
    ("loop.onnx", "compile", "Loop"),
    ("string_input.onnx", "compile", "string"),
    ("huge_dims.onnx", "compile", "too many elements"),
    ("opset24.onnx", "compile", "opset"),
    ("ir12.onnx", "compile", "IR version 12"),
    ("ssa18.onnx", "compile", "already defined"),
    ("attr_type18.onnx", "compile", "'axis'"),
    ("attr_notype18.onnx", "compile", "no type"),
    ("cyclic18.onnx", "compile", "cycle"),
    ("undefined18.onnx", "compile", "'w'"),
    ("missing_input18.onnx", "compile", "needs at least 2 inputs"),
    ("absent_input23.onnx", "compile", "input 1 is required"),
    ("ext_traversal.onnx", "compile", "contains '..'"),
    ("ext_absolute.onnx", "compile", "absolute"),
    ("ext_symlink.onnx", "compile", "outside the model directory"),
    ("ext_short.onnx", "compile", "short.bin"),
    ("ext_missing.onnx", "compile", "nowhere.bin"),
    ("dtype_mismatch.onnx", "compile", "mixed"),
    ("shape_mismatch.onnx", "compile", "mm"),
    ("negative_dim.onnx", "compile", "-3"),
    ("initializer_size.onnx", "compile", "'w'"),
    ("undefined_output.onnx", "compile", "nowhere"),
    ("dtype_mismatch18.onnx", "compile", "mixed"),
    ("shape_mismatch18.onnx", "compile", "mm"),
    ("negative_dim18.onnx", "compile", "-3"),
    ("initializer_size18.onnx", "compile", "'w'"),
    ("undefined_output18.onnx", "compile", "nowhere"),
    ("syntax_error.ir", "compile", "syntax_error.ir:2"),
    ("undefined_value.ir", "compile", "%z"),
    ("wrong_result_type.ir", "compile", "f32[3]"),
    ("nonexistent.onnx", "compile", "nonexistent.onnx"),
    ("truncated.dlc", "run-package", "truncated.dlc: invalid or corrupted .dlc package"),
    ("header_only.dlc", "run-package", "invalid or corrupted .dlc package"),
    ("empty.dlc", "run-package", "too small"),
    ("not_a_package.dlc", "run-package", "wrong magic"),
    ("flipped_byte.dlc", "run-package", "checksum"),
    ("wrong_magic.dlc", "run-package", "invalid or corrupted .dlc package"),
    ("appended_garbage.dlc", "run-package", "extra bytes after the package"),
    ("truncated.dlc", "inspect", "invalid or corrupted .dlc package"),
    ("flipped_byte.dlc", "inspect", "checksum"),
    ("npy_bad_magic.npy", "run-input", "npy_bad_magic.npy"),
    ("npy_truncated_header.npy", "run-input", "npy_truncated_header.npy"),
    ("npy_complex.npy", "run-input", "<c8"),
    ("npy_wrong_shape.npy", "run-input", "shape"),
    ("npy_wrong_dtype.npy", "run-input", "dtype"),
    ("npy_short_data.npy", "run-input", "npy_short_data.npy"),
    ("npy_fortran.npy", "run-input", "Fortran"),
    ("npy_big_endian.npy", "run-input", ">f4"),
    ("npy_huge_shape.npy", "run-input", "npy_huge_shape.npy"),
    ("npy_garbage_header.npy", "run-input", "npy_garbage_header.npy"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    corpus = os.path.join(work, "corpus")
    os.makedirs(corpus)
    good_ir = os.path.join(work, "good.ir")
    open(good_ir, "w").write(GOOD_IR)
    good_pkg = os.path.join(work, "good.dlc")
    subprocess.run([a.dlc, "compile", good_ir, "--target", "emu", "-o", good_pkg, "-q"], check=True)
    subprocess.run([sys.executable, os.path.join(HERE, "make_bad_inputs.py"), corpus, good_pkg], check=True,
                   stdout=subprocess.DEVNULL)
    failures = 0
    for i, (name, how, expect) in enumerate(CASES):
        path = os.path.join(corpus, name)
        out_dir = os.path.join(work, f"out{i}")
        os.makedirs(out_dir)
        target = os.path.join(out_dir, "result.dlc")
        results = os.path.join(out_dir, "results")
        cmd = {"compile": [a.dlc, "compile", path, "--target", "emu", "-o", target],
               "run-package": [a.dlc, "run", path, "--input", "x=" + path, "--output-dir", results],
               "inspect": [a.dlc, "inspect", path],
               "run-input": [a.dlc, "run", good_pkg, "--input", "x=" + path, "--output-dir", results]}[how]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("dlc: running on")
                 and not l.startswith("dlc: import") and not l.startswith("dlc: parse")]
        problems = []
        if p.returncode <= 0 or p.returncode >= 128:
            problems.append(f"exit code {p.returncode}")
        if len(lines) != 1 or not lines[0].startswith("dlc: error:"):
            problems.append(f"{len(lines)} message lines: {lines[:3]}")
        elif expect not in lines[0]:
            problems.append(f"message lacks '{expect}': {lines[0]}")
        left = os.listdir(out_dir)
        if left:
            problems.append(f"left behind: {left}")
        status = "ok  " if not problems else "FAIL"
        print(f"{status} {how:11} {name:28} {lines[0] if lines else ''}"[:200])
        for pr in problems:
            print(f"       {pr}")
        failures += bool(problems)
    if failures:
        sys.exit(f"{failures} of {len(CASES)} bad inputs were not clean errors")
    print(f"all {len(CASES)} bad inputs gave one clean error and left nothing behind")


if __name__ == "__main__":
    main()
