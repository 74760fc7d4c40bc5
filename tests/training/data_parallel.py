#!/usr/bin/env python3
"""Data-parallel training on emu ranks (MPI over loopback):

- N ranks of batch B (`mpirun -np N` and `dlc train --nproc N`, N = 2 and 4) end 20
  steps with the parameters and optimizer state of one process trained with batch
  N*B on the same samples (<= 1e-5 relative to each tensor's largest value, or 1e-7
  absolute for a tensor of rounding noise), in data order and shuffled;
- the package's gradients go through several all-reduce buckets, and `dlc inspect`
  reports the bytes all-reduced per step (checked against the model's parameter
  count) and a modeled overlap;
- a rank killed mid-run makes the run exit non-zero with a message within the
  timeout, and nothing is written to the checkpoint path; a rank that stops (hangs)
  makes the others fail at --timeout;
- synchronized BatchNorm (--sync-batchnorm): a CNN with BatchNorm on 2 ranks ends
  20 steps with the parameters and running statistics of one process with batch 2*B;
  with per-replica statistics (the default) it does not;
- ZeRO-1 (--zero N, Adam, N = 2, 3 and 4): the same equivalence for the parameters,
  and the optimizer's moments gathered from the ranks' shards equal one process's
  (flattened in parameter order); a run resumed from a ZeRO checkpoint equals one that
  did not stop; each rank holds 1/N of the optimizer state (dlc inspect);
- a missing MPI library is an error naming it.

With --device cuda (the `gpu` label): the same equivalence on 2 GPUs through NCCL,
started by --nproc (file rendezvous) and by mpirun (NCCL's id through MPI); exits 77
(skipped) with fewer than 2 GPUs.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import parse_args, sh  # noqa: E402

B, STEPS = 4, 20
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")


def mpirun(n):
    return ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none"]


def load(path):
    with np.load(path) as z:
        return {k: z[k].astype(np.float64) for k in z.files}


def compare(got, want, what, failures, rtol=1e-5):
    if set(got) != set(want):
        failures.append(f"{what}: variables differ: {sorted(set(got) ^ set(want))}")
        return 0.0
    worst = 0.0
    for k in want:
        diff = float(np.abs(got[k] - want[k]).max())
        rel = diff / max(float(np.abs(want[k]).max()), 1e-12)
        # Relative to the tensor's largest value; a tensor that is rounding noise around
        # zero (the gradient of a bias that BatchNorm cancels) passes within 1e-7.
        if float(np.abs(want[k]).max()) > 1e-6:
            worst = max(worst, rel)
        if rel > rtol and diff > 1e-7:
            failures.append(f"{what}: '{k}' differs by {rel:.3g} (relative to its largest value)")
    return worst


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def main_cuda(a, w):
    """2 ranks on 2 GPUs (NCCL) against one GPU with the doubled batch."""
    if gpu_count() < 2:
        print("skipped: data-parallel training through NCCL needs 2 GPUs")
        sys.exit(77)
    j = lambda *p: os.path.join(w, *p)  # noqa: E731
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    for batch in (B, 2 * B):
        torch.onnx.export(mlp, torch.zeros(batch, 16), j(f"mlp{batch}.onnx"), input_names=["x"], output_names=["y"],
                          opset_version=17)
    rng = np.random.default_rng(0)
    np.savez(j("data.npz"), x=rng.standard_normal((STEPS * 2 * B, 16)).astype(np.float32),
             label=rng.integers(0, 4, STEPS * 2 * B).astype(np.int64))
    opts = ["--train", "--optimizer", "momentum", "--lr", "0.05", "-q"]
    sh([a.dlc, "compile", j(f"mlp{2 * B}.onnx"), *opts, "-o", j("ref.dlc")])
    sh([a.dlc, "compile", j(f"mlp{B}.onnx"), *opts, "--data-parallel", "--bucket-mb", "0.002", "-o", j("dp.dlc")])
    common = ["--data", j("data.npz"), "--device", "cuda", "--no-shuffle", "--timeout", "60"]
    sh([a.dlc, "train", j("ref.dlc"), *common, "--checkpoint", j("ref.npz")])
    sh([a.dlc, "train", j("dp.dlc"), "--nproc", "2", *common, "--checkpoint", j("nproc.npz")])
    failures = []
    # GPU reductions sum in another order than the one-GPU run: 1e-4.
    e1 = compare(load(j("nproc.npz")), load(j("ref.npz")), "--nproc 2 on cuda", failures, 1e-4)
    print(f"cuda, 2 ranks (NCCL, file rendezvous) vs 1 GPU with the doubled batch: {e1:.2e}")
    if shutil.which("mpirun"):
        sh(mpirun(2) + [a.dlc, "train", j("dp.dlc"), *common, "--checkpoint", j("mpi.npz")], env=MPI_ENV)
        e2 = compare(load(j("mpi.npz")), load(j("ref.npz")), "mpirun -np 2 on cuda", failures, 1e-4)
        print(f"cuda, 2 ranks (NCCL, id through MPI) vs 1 GPU with the doubled batch: {e2:.2e}")
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))
    print("data parallel on cuda: all checks passed")


def main():
    a, w = parse_args(lambda ap: ap.add_argument("--device", default="emu", choices=["emu", "cuda"]))
    if a.device == "cuda":
        return main_cuda(a, w)
    j = lambda *p: os.path.join(w, *p)  # noqa: E731
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                              torch.nn.Linear(32, 4))
    params = sum(p.numel() for p in mlp.parameters())
    rng = np.random.default_rng(0)
    samples = STEPS * B * 4
    np.savez(j("data.npz"), x=rng.standard_normal((samples, 16)).astype(np.float32),
             label=rng.integers(0, 4, samples).astype(np.int64))
    failures = []
    env = MPI_ENV

    def compile_(batch, out, *extra):
        torch.onnx.export(mlp, torch.zeros(batch, 16), j(f"mlp{batch}.onnx"), input_names=["x"], output_names=["y"],
                          opset_version=17)
        sh([a.dlc, "compile", j(f"mlp{batch}.onnx"), "--train", "--optimizer", "momentum", "--lr", "0.05",
            "--target", "emu", "-o", j(out), "-q", *extra])

    # The data-parallel package: buckets of 2 KiB, so that the 4 KiB layer is a bucket
    # of its own and the small ones share one.
    compile_(B, "dp.dlc", "--data-parallel", "--bucket-mb", str(2048 / 2**20))
    insp = json.loads(sh([a.dlc, "inspect", j("dp.dlc"), "--json"]).stdout)
    dp = insp["data_parallel"]
    print(f"inspect: {dp['buckets']} buckets, {dp['all_reduce_bytes_per_step']} bytes per step; overlap at 8 GPUs "
          f"{dp['scaling'][-1]['overlap_fraction']}")
    if dp["all_reduce_bytes_per_step"] != 4 * params:
        failures.append(f"inspect: {dp['all_reduce_bytes_per_step']} bytes all-reduced per step, the model has "
                        f"{params} FP32 parameters ({4 * params} bytes)")
    if dp["buckets"] < 3:
        failures.append(f"inspect: {dp['buckets']} buckets with a 2 KiB limit (expected at least 3)")
    for s in dp["scaling"]:
        for gpu, f in s["overlap_fraction"].items():
            if not 0 <= f <= 1:
                failures.append(f"inspect: overlap fraction {f} on {gpu} at {s['ranks']} ranks")

    for n in (2, 4):
        compile_(n * B, f"ref{n}.dlc")
        # 20 steps: one epoch in data order, or two shuffled epochs of 10 (from --seed).
        for shuffle, epochs in ((["--no-shuffle"], 1), ([], 2)):
            tag = f"{n}-{'ordered' if shuffle else 'shuffled'}"
            count = STEPS // epochs * n * B
            with np.load(j("data.npz")) as z:
                np.savez(j(f"{tag}.npz"), x=z["x"][:count], label=z["label"][:count])
            common = ["--data", j(f"{tag}.npz"), "--epochs", str(epochs), "--device", "emu", "--seed", "7", "-q",
                      *shuffle]
            sh([a.dlc, "train", j(f"ref{n}.dlc"), *common, "--checkpoint", j(f"ref{tag}.npz")])
            want = load(j(f"ref{tag}.npz"))
            t0 = time.time()
            sh(mpirun(n) + [a.dlc, "train", j("dp.dlc"), *common, "--checkpoint", j(f"mpi{tag}.npz")], env=env)
            t1 = time.time()
            sh([a.dlc, "train", j("dp.dlc"), "--nproc", str(n), *common, "--checkpoint", j(f"nproc{tag}.npz")],
               env=env)
            t2 = time.time()
            e1 = compare(load(j(f"mpi{tag}.npz")), want, f"mpirun -np {n} ({tag})", failures)
            e2 = compare(load(j(f"nproc{tag}.npz")), want, f"--nproc {n} ({tag})", failures)
            print(f"{n} ranks x batch {B} vs 1 rank x batch {n * B}, {tag}: max relative difference "
                  f"mpirun {e1:.2e} ({t1 - t0:.1f} s), --nproc {e2:.2e} ({t2 - t1:.1f} s)")

    # ZeRO-1: Adam's moments sharded over the ranks (3 ranks pad the flat vector).
    names = [n for n, _ in mlp.named_parameters()]
    adam = ["--optimizer", "adam", "--lr", "0.01", "--target", "emu", "-q"]
    for n in (2, 3, 4):
        torch.onnx.export(mlp, torch.zeros(n * B, 16), j(f"mlp{n * B}.onnx"), input_names=["x"], output_names=["y"],
                          opset_version=17)
        sh([a.dlc, "compile", j(f"mlp{n * B}.onnx"), "--train", *adam, "-o", j(f"adam{n}.dlc")])
        sh([a.dlc, "compile", j(f"mlp{B}.onnx"), "--train", *adam, "--data-parallel", "--zero", str(n),
            "-o", j(f"zero{n}.dlc")])
        share = -(-params // n)
        zi = json.loads(sh([a.dlc, "inspect", j(f"zero{n}.dlc"), "--json"]).stdout)["data_parallel"]
        if zi["zero_ranks"] != n or zi["sharded_state_bytes_per_rank"] != 2 * 4 * share:
            failures.append(f"--zero {n}: inspect says {zi['zero_ranks']} ranks, "
                            f"{zi['sharded_state_bytes_per_rank']} bytes of state per rank (expected {2 * 4 * share})")
        count = STEPS * n * B
        with np.load(j("data.npz")) as z:
            np.savez(j(f"zero{n}.npz"), x=z["x"][:count], label=z["label"][:count])
            half = count // 2
            np.savez(j(f"zero{n}-a.npz"), x=z["x"][:half], label=z["label"][:half])
            np.savez(j(f"zero{n}-b.npz"), x=z["x"][half:count], label=z["label"][half:count])
        common = ["--device", "emu", "--no-shuffle", "-q"]
        sh([a.dlc, "train", j(f"adam{n}.dlc"), "--data", j(f"zero{n}.npz"), *common, "--checkpoint",
            j(f"adam{n}.npz")])
        launches = [("mpirun", mpirun(n) + [a.dlc, "train", j(f"zero{n}.dlc")])]
        if n != 3:
            launches.append(("--nproc", [a.dlc, "train", j(f"zero{n}.dlc"), "--nproc", str(n)]))
        want = load(j(f"adam{n}.npz"))
        for how, cmd in launches:
            ck = j(f"zero{n}-{how.strip('-')}.npz")
            sh(cmd + ["--data", j(f"zero{n}.npz"), *common, "--checkpoint", ck], env=env)
            got = load(ck)
            e = compare({k: got[k] for k in want if k in got and "adam" not in k},
                        {k: v for k, v in want.items() if "adam" not in k}, f"--zero {n} ({how})", failures)
            worst = e
            for moment in ("adam_m", "adam_v"):
                flat = np.concatenate([want[f"{p}.{moment}"].ravel() for p in names])
                gathered = got.get(f"dlc.zero.params.{moment}")
                if gathered is None or gathered.shape != (n * share,):
                    failures.append(f"--zero {n} ({how}): no gathered {moment} of {n * share} values")
                    continue
                worst = max(worst, compare({moment: gathered[:params]}, {moment: flat}, f"--zero {n} ({how})",
                                           failures))
            print(f"ZeRO-1 on {n} ranks ({how}) vs 1 rank with batch {n * B}: parameters and Adam moments "
                  f"within {worst:.2e}")
        # Stopped after 10 steps and resumed from the checkpoint: as if it had not stopped.
        sh(mpirun(n) + [a.dlc, "train", j(f"zero{n}.dlc"), "--data", j(f"zero{n}-a.npz"), *common,
                        "--checkpoint", j(f"zero{n}-half.npz")], env=env)
        sh(mpirun(n) + [a.dlc, "train", j(f"zero{n}.dlc"), "--data", j(f"zero{n}-b.npz"), *common,
                        "--resume", j(f"zero{n}-half.npz"), "--checkpoint", j(f"zero{n}-resumed.npz")], env=env)
        e = compare(load(j(f"zero{n}-resumed.npz")), load(j(f"zero{n}-mpirun.npz")), f"--zero {n} resumed",
                    failures)
        print(f"ZeRO-1 on {n} ranks, stopped after 10 steps and resumed: within {e:.2e} of 20 steps at once")
    p = subprocess.run([a.dlc, "train", j("zero2.dlc"), "--data", j("zero2.npz"), "--device", "emu"],
                       capture_output=True, text=True)
    if p.returncode == 0 or "run it on 2 ranks, not 1" not in p.stderr:
        failures.append(f"a --zero 2 package on one rank: exit {p.returncode}: {p.stderr[-500:]}")

    # One rank's batch alone is not the global batch: the comparison can fail.
    sh([a.dlc, "train", j("dp.dlc"), "--data", j("2-ordered.npz"), "--device", "emu", "-q", "--no-shuffle",
        "--checkpoint", j("alone.npz")])
    alone = compare(load(j("alone.npz")), load(j("ref2-ordered.npz")), "(expected to differ)", [])
    if alone < 1e-3:
        failures.append(f"one rank of batch {B} ends within {alone:.2g} of batch {2 * B}: the check cannot fail")

    # Synchronized BatchNorm: the global batch's statistics on every replica.
    torch.manual_seed(1)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3))
    state = {k: v.clone() for k, v in cnn.state_dict().items()}
    for batch in (B, 2 * B):
        # Exporting in training mode runs the model, which moves BatchNorm's running
        # statistics: both files start from the same ones.
        cnn.load_state_dict(state)
        torch.onnx.export(cnn, torch.zeros(batch, 1, 6, 6), j(f"cnn{batch}.onnx"), input_names=["x"],
                          output_names=["y"], opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
    np.savez(j("images.npz"), x=rng.standard_normal((STEPS * 2 * B, 1, 6, 6)).astype(np.float32),
             label=rng.integers(0, 3, STEPS * 2 * B).astype(np.int64))
    train_cnn = ["--optimizer", "momentum", "--lr", "0.05", "--target", "emu", "-q"]
    sh([a.dlc, "compile", j(f"cnn{2 * B}.onnx"), "--train", *train_cnn, "-o", j("cnn-ref.dlc")])
    sh([a.dlc, "compile", j(f"cnn{B}.onnx"), "--train", *train_cnn, "--data-parallel", "--sync-batchnorm", "-o",
        j("cnn-sync.dlc")])
    sh([a.dlc, "compile", j(f"cnn{B}.onnx"), "--train", *train_cnn, "--data-parallel", "-o", j("cnn-local.dlc")])
    common = ["--data", j("images.npz"), "--device", "emu", "--no-shuffle", "-q"]
    sh([a.dlc, "train", j("cnn-ref.dlc"), *common, "--checkpoint", j("cnn-ref.npz")])
    sh(mpirun(2) + [a.dlc, "train", j("cnn-sync.dlc"), *common, "--checkpoint", j("cnn-sync.npz")], env=env)
    sh(mpirun(2) + [a.dlc, "train", j("cnn-local.dlc"), *common, "--checkpoint", j("cnn-local.npz")], env=env)
    want = load(j("cnn-ref.npz"))
    e = compare(load(j("cnn-sync.npz")), want, "--sync-batchnorm on 2 ranks", failures)
    local = compare(load(j("cnn-local.npz")), want, "(per-replica statistics, expected to differ)", [])
    print(f"BatchNorm CNN, 2 ranks x batch {B} vs 1 rank x batch {2 * B}: synchronized {e:.2e}, "
          f"per replica {local:.2e}")
    if local < 1e-4:
        failures.append(f"per-replica BatchNorm ends within {local:.2g} of the global batch's: the check cannot fail")

    # A killed rank: the run fails within the timeout, and writes no checkpoint.
    with np.load(j("data.npz")) as z:
        big = np.repeat(z["x"], 200, axis=0), np.repeat(z["label"], 200)
    np.savez(j("big.npz"), x=big[0], label=big[1])
    for how, sig, launcher in (("killed", signal.SIGKILL, "--nproc"), ("stopped", signal.SIGSTOP, "mpirun")):
        ck, log = j(f"{how}.npz"), j(f"{how}.jsonl")
        cmd = [a.dlc, "train", j("dp.dlc"), "--data", j("big.npz"), "--device", "emu", "--timeout", "5",
               "--checkpoint", ck, "--log", log]
        cmd = cmd + ["--nproc", "2"] if launcher == "--nproc" else mpirun(2) + cmd
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        victim = None
        deadline = time.time() + 60
        while time.time() < deadline and victim is None:
            time.sleep(0.2)
            if os.path.exists(log) and sum(1 for _ in open(log)) >= 3:
                for pid in os.listdir("/proc"):
                    try:
                        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                    except (OSError, ValueError):
                        continue
                    if b"OMPI_COMM_WORLD_RANK=1" in environ and ck.encode() in cmdline:
                        victim = int(pid)
        if victim is None:
            os.killpg(p.pid, signal.SIGKILL)
            failures.append(f"{how} rank: no rank 1 found while training ({p.communicate()[1][-2000:]})")
            continue
        os.kill(victim, sig)
        t0 = time.time()
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            failures.append(f"{how} rank: the run did not end within 60 s")
            continue
        took = time.time() - t0
        said = [line for line in err.splitlines() if "rank" in line and ("exited" in line or "error" in line)]
        print(f"{how} rank 1 ({launcher}): exit {p.returncode} after {took:.1f} s; "
              f"{said[0].strip() if said else 'no message'}")
        if p.returncode == 0 or took > 5 + 15:
            failures.append(f"{how} rank: exit {p.returncode} after {took:.1f} s (timeout 5 s)\n{err[-2000:]}")
        if how == "stopped" and "did one of them die" not in err:
            failures.append(f"stopped rank: no timeout message from the waiting rank:\n{err[-2000:]}")
        if how == "killed" and not said:
            failures.append("killed rank: no message")
        if os.path.exists(ck):
            failures.append(f"{how} rank: the failed run wrote the checkpoint {ck}")

    # A missing MPI library is an error that names it.
    p = subprocess.run(mpirun(2) + [a.dlc, "train", j("dp.dlc"), "--data", j("data.npz"), "--device", "emu"],
                       env=dict(env, DLC_MPI_LIBRARY="/nonexistent/libmpi.so.40"), capture_output=True, text=True,
                       timeout=120)
    if p.returncode == 0 or "/nonexistent/libmpi.so.40" not in p.stderr:
        failures.append(f"missing MPI library: exit {p.returncode}\n{p.stderr[-2000:]}")
    # A package compiled without --data-parallel cannot run on several ranks.
    p = subprocess.run(mpirun(2) + [a.dlc, "train", j("ref2.dlc"), "--data", j("data.npz"), "--device", "emu"],
                       env=env, capture_output=True, text=True, timeout=120)
    if p.returncode == 0 or "--data-parallel" not in p.stderr:
        failures.append(f"package without --data-parallel on 2 ranks: exit {p.returncode}\n{p.stderr[-2000:]}")

    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))
    print("data parallel: all checks passed")


if __name__ == "__main__":
    main()
