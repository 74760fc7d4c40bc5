#!/usr/bin/python3
"""A package must not run host code from an untrusted source.

Compiles a model for emu, then swaps the package's emu module (a shared object) for
one whose constructor would create a marker file, and re-signs the checksums, as
anyone can. Running that package with `dlc run`, `dlc bench`, the executable stub as
a package runner, and Python's InferenceSession (path and bytes) must fail with the
host-code error and leave no marker: nothing of it ran. `dlc inspect` reads it.
With --allow-host-code the constructor does run (the consent is the only gate), and
a package this user compiled runs without it. A package compiled with another key
(DLC_HOST_KEY_FILE) is refused too.

usage: host_code.py --dlc build/tools/dlc --stub build/tools/dlc-exe-stub --work DIR
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np

MODEL = """graph @g(%x: f32[2,4]) -> ("y": f32[2,4]) {
  %e = Exp(%x) : f32[2,4]
  %y = Relu(%e) : f32[2,4]
  return %y
}
"""

EVIL = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
  const char *p = getenv("DLC_TEST_MARKER");
  if (p) close(open(p, O_CREAT | O_WRONLY, 0644));
}
"""


def resign(b):
    """Recomputes the package's two CRC-32 checksums (package/Package.cpp's header)."""
    body = zlib.crc32(bytes(b[64:])) & 0xFFFFFFFF
    b[48:52] = struct.pack("<I", body)
    b[52:56] = struct.pack("<I", zlib.crc32(bytes(b[:52])) & 0xFFFFFFFF)


def elf_size(b, off):
    """The size of the 64-bit ELF at `off`: its section header table ends it."""
    shoff, = struct.unpack_from("<Q", b, off + 0x28)
    shentsize, shnum = struct.unpack_from("<HH", b, off + 0x3A)
    return shoff + shentsize * shnum


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--stub", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    w = a.work
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    marker = os.path.join(w, "ran")
    env = dict(os.environ, DLC_TEST_MARKER=marker)
    problems = []

    def run(cmd, **kw):
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)

    with open(os.path.join(w, "m.ir"), "w") as f:
        f.write(MODEL)
    good = os.path.join(w, "good.dlc")
    p = run([a.dlc, "compile", os.path.join(w, "m.ir"), "--target", "emu", "-o", good, "--quiet"])
    if p.returncode:
        sys.exit(f"compile failed: {p.stderr}")
    np.save(os.path.join(w, "x.npy"), np.ones((2, 4), np.float32))
    xin = ["--input", "x=" + os.path.join(w, "x.npy")]

    # This user's package runs on emu without asking.
    p = run([a.dlc, "run", good, *xin, "--device", "emu", "--output-dir", os.path.join(w, "out"), "--quiet"])
    if p.returncode:
        problems.append(f"this user's own package does not run: {p.stderr}")

    # The evil shared object, swapped in over the emu module.
    src, so = os.path.join(w, "evil.c"), os.path.join(w, "evil.so")
    with open(src, "w") as f:
        f.write(EVIL)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, src], check=True)
    evil = open(so, "rb").read()
    b = bytearray(open(good, "rb").read())
    off = b.find(b"\x7fELF")
    if off < 0:
        sys.exit("no emu module (ELF) in the package")
    size = elf_size(b, off)
    if len(evil) > size:
        sys.exit(f"the evil object ({len(evil)} bytes) does not fit the module ({size} bytes)")
    b[off:off + size] = evil + bytes(size - len(evil))
    resign(b)
    bad = os.path.join(w, "swapped.dlc")
    open(bad, "wb").write(b)

    def refused(what, p):
        if p.returncode == 0:
            problems.append(f"{what}: ran the swapped package")
        elif "carries host code" not in p.stderr:
            problems.append(f"{what}: not the host-code error: {p.stderr.strip()}")
        if os.path.exists(marker):
            problems.append(f"{what}: the swapped module's code ran")
            os.remove(marker)

    refused("dlc run", run([a.dlc, "run", bad, *xin, "--device", "emu", "--output-dir", os.path.join(w, "o2")]))
    refused("dlc bench", run([a.dlc, "bench", bad, "--device", "emu", "--iterations", "1", "--warmup", "0"]))
    refused("the package runner", run([a.stub, bad, *xin, "--device", "emu", "--output-dir", os.path.join(w, "o3")]))
    for form in ("path", "bytes"):
        code = ("import sys, dlc\n"
                f"arg = open(sys.argv[1], 'rb').read() if '{form}' == 'bytes' else sys.argv[1]\n"
                "dlc.InferenceSession(arg, device='emu')\n")
        refused(f"Python InferenceSession({form})", run([sys.executable, "-c", code, bad]))
    p = run([a.dlc, "inspect", bad])
    if p.returncode or os.path.exists(marker):
        problems.append(f"dlc inspect failed or ran the module: {p.stderr}")

    # Consent is the only gate: with it, the module's constructor runs.
    p = run([a.dlc, "run", bad, *xin, "--device", "emu", "--allow-host-code", "--output-dir", os.path.join(w, "o4")])
    if not os.path.exists(marker):
        problems.append("--allow-host-code: the swapped module was not loaded (the test shows nothing)")
    else:
        os.remove(marker)

    # A package another user (another key) compiled is host code from elsewhere.
    key = os.path.join(w, "other.key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(key, 0o600)
    other = os.path.join(w, "other.dlc")
    env2 = dict(env, DLC_HOST_KEY_FILE=key)
    subprocess.run([a.dlc, "compile", os.path.join(w, "m.ir"), "--target", "emu", "-o", other, "--quiet"],
                   check=True, env=env2)
    refused("another user's package", run([a.dlc, "run", other, *xin, "--device", "emu", "--output-dir",
                                           os.path.join(w, "o5")]))
    p = run([a.dlc, "run", other, *xin, "--device", "emu", "--allow-host-code", "--output-dir", os.path.join(w, "o6")])
    if p.returncode:
        problems.append(f"another user's package with --allow-host-code: {p.stderr}")

    for pr in problems:
        print("FAIL:", pr, file=sys.stderr)
    print("host_code:", "pass" if not problems else f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
