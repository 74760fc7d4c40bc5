#!/usr/bin/env python3
"""Gradient checks: dlc's autodiff against torch.autograd, op by op.

Every case builds the same small computation twice, as dlc textual IR (the
differentiated tensors are `param`s) and in PyTorch (tensors with
requires_grad). The loss is the sum over cases of sum(f(params) * R) with a fixed
random R per case, so each op's vector-Jacobian product is checked against an
arbitrary cotangent, not only ones. The cases share one graph and one package.

  dlc opt cases.ir --passes autodiff        the backward graph
  dlc interpret ... --output-dir            the reference interpreter's gradients
  dlc compile --target emu; dlc run         the same gradients through the kernels
Each parameter's gradient must match torch within --rtol, relative to the largest
magnitude of torch's gradient.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)  # the reference in double precision


class Var:
    def __init__(self, name, t):
        self.name, self.t = name, t


def ir_type(t):
    dt = {torch.float64: "f32", torch.float32: "f32", torch.int64: "i64", torch.bool: "bool"}[t.dtype]
    return f"{dt}[{','.join(str(d) for d in t.shape)}]"


def dense(t):
    a = t.detach().numpy()
    a = a.astype({np.dtype("float64"): np.float32, np.dtype("int64"): np.int64, np.dtype("bool"): np.bool_}[a.dtype])
    if a.size == 0:
        return "dense<[]>"
    return "dense<0x" + a.tobytes().hex().upper() + ">"


def attr_text(v):
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(attr_text(x) for x in v) + "]"
    return str(v)


class Builder:
    """Emits IR lines and evaluates the same op in torch."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.lines, self.params, self.n = [], [], 0

    def fresh(self, hint):
        self.n += 1
        return f"{hint}{self.n}"

    def _round(self, a):
        # Data is stored as f32 in the IR: round the torch copy the same way.
        return torch.tensor(np.asarray(a, dtype=np.float32).astype(np.float64))

    def param(self, shape, lo=-1.0, hi=1.0, name=None):
        t = self._round(self.rng.uniform(lo, hi, size=shape)).requires_grad_(True)
        v = Var(name or self.fresh("p"), t)
        self.lines.append(f"  %{v.name} = param {ir_type(t)} {dense(t)}")
        self.params.append(v)
        return v

    def const(self, a, name=None):
        t = torch.tensor(a) if not isinstance(a, torch.Tensor) else a
        if t.dtype in (torch.float32, torch.float64):
            t = self._round(t.numpy())
        v = Var(name or self.fresh("c"), t)
        self.lines.append(f"  %{v.name} = const {ir_type(t)} {dense(t)}")
        return v

    def rand(self, shape, lo=-1.0, hi=1.0):
        return self.const(self.rng.uniform(lo, hi, size=shape))

    def op(self, name, args, torch_fn, nres=1, **attrs):
        res = torch_fn(*[a.t if a is not None else None for a in args])
        res = list(res) if nres > 1 else [res]
        outs = [Var(self.fresh("v"), r) for r in res]
        a = ", ".join(("%" + x.name) if x is not None else "" for x in args)
        at = (" {" + ", ".join(f"{k} = {attr_text(v)}" for k, v in sorted(attrs.items())) + "}") if attrs else ""
        types = ", ".join(ir_type(o.t) for o in outs)
        self.lines.append(f"  {', '.join('%' + o.name for o in outs)} = {name}({a}){at} : {types}")
        return outs if nres > 1 else outs[0]


def cases(b):
    """(case name, result Var) pairs. Each op is applied to parameters so that
    every differentiable operand is checked."""
    out = []
    seen = [0]

    def case(name, v):
        for p in b.params[seen[0]:]:
            p.case = name
        seen[0] = len(b.params)
        out.append((name, v))

    # Element-wise, with broadcasting on the binary ops.
    for op, fn in [("Add", torch.add), ("Sub", torch.sub), ("Mul", torch.mul)]:
        case(op, b.op(op, [b.param([3, 4]), b.param([4])], fn))
    case("Div", b.op("Div", [b.param([3, 4]), b.param([3, 1], 0.5, 2.0)], torch.div))
    case("Pow", b.op("Pow", [b.param([3, 4], 0.5, 2.0), b.param([4], 0.5, 2.0)], torch.pow))
    case("Max", b.op("Max", [b.param([3, 4]), b.param([3, 4])], torch.maximum))
    case("Min", b.op("Min", [b.param([3, 4]), b.param([4])], torch.minimum))
    unary = [("Neg", torch.neg, -1, 1), ("Exp", torch.exp, -1, 1), ("Log", torch.log, 0.5, 2),
             ("Sqrt", torch.sqrt, 0.5, 2), ("Reciprocal", torch.reciprocal, 0.5, 2), ("Tanh", torch.tanh, -2, 2),
             ("Sigmoid", torch.sigmoid, -3, 3), ("Relu", torch.relu, -1, 1), ("Abs", torch.abs, -1, 1),
             ("Erf", torch.erf, -2, 2), ("Softplus", F.softplus, -3, 3), ("HardSwish", F.hardswish, -5, 5)]
    for op, fn, lo, hi in unary:
        case(op, b.op(op, [b.param([2, 5], lo, hi)], fn))
    case("LeakyRelu", b.op("LeakyRelu", [b.param([2, 5])], lambda x: F.leaky_relu(x, 0.1), alpha=0.1))
    case("Elu", b.op("Elu", [b.param([2, 5])], lambda x: F.elu(x, 0.7), alpha=0.7))
    case("Gelu", b.op("Gelu", [b.param([2, 5], -3, 3)], F.gelu))
    case("Gelu-tanh", b.op("Gelu", [b.param([2, 5], -3, 3)], lambda x: F.gelu(x, approximate="tanh"),
                           approximate="tanh"))
    case("HardSigmoid", b.op("HardSigmoid", [b.param([2, 5], -4, 4)],
                             lambda x: torch.clamp(0.2 * x + 0.5, 0, 1)))
    case("PRelu", b.op("PRelu", [b.param([2, 3, 4]), b.param([3, 1], 0.1, 0.5)],
                       lambda x, s: torch.where(x > 0, x, x * s)))
    lo, hi = b.const(np.float32(-0.5)), b.const(np.float32(0.4))
    case("Clip", b.op("Clip", [b.param([2, 5]), lo, hi], lambda x, l, h: torch.clamp(x, l.item(), h.item())))
    cond = b.const(np.array([[True, False, True, True], [False, False, True, False]]))
    case("Where", b.op("Where", [cond, b.param([2, 4]), b.param([4])], torch.where))

    # Linear algebra: plain, batched with a broadcast weight, vector operands.
    case("MatMul", b.op("MatMul", [b.param([3, 4]), b.param([4, 5])], torch.matmul))
    case("MatMul-batched", b.op("MatMul", [b.param([2, 3, 4]), b.param([4, 5])], torch.matmul))
    case("MatMul-vec-mat", b.op("MatMul", [b.param([4]), b.param([2, 4, 3])], torch.matmul))
    case("Gemm", b.op("Gemm", [b.param([4, 3]), b.param([5, 4]), b.param([5])],
                      lambda a, w, c: 0.5 * a.t() @ w.t() + 2.0 * c, alpha=0.5, beta=2.0, transA=1, transB=1))
    case("MatMul-mat-vec", b.op("MatMul", [b.param([3, 4]), b.param([4])], torch.matmul))

    # Movement.
    case("Reshape", b.op("Reshape", [b.param([2, 6])], lambda x: x.reshape(3, 4), shape=[3, 4]))
    case("Flatten", b.op("Flatten", [b.param([2, 3, 2])], lambda x: x.reshape(2, 6), axis=1))
    case("Squeeze", b.op("Squeeze", [b.param([2, 1, 3])], lambda x: x.squeeze(1), axes=[1]))
    case("Unsqueeze", b.op("Unsqueeze", [b.param([2, 3])], lambda x: x.unsqueeze(0), axes=[0]))
    case("Transpose", b.op("Transpose", [b.param([2, 3, 4])], lambda x: x.permute(2, 0, 1), perm=[2, 0, 1]))
    case("Concat", b.op("Concat", [b.param([2, 3]), b.param([2, 2])], lambda x, y: torch.cat([x, y], 1), axis=1))
    s1, s2 = b.op("Split", [b.param([5, 2])], lambda x: torch.split(x, [2, 3], 0), nres=2, axis=0, split=[2, 3])
    case("Split", b.op("Mul", [s1, s1], torch.mul))
    case("Split-second", s2)
    case("Slice", b.op("Slice", [b.param([4, 5])], lambda x: x[1:3, 0:4], axes=[0, 1], starts=[1, 0], ends=[3, 4]))
    case("Pad", b.op("Pad", [b.param([2, 3])], lambda x: F.pad(x, (1, 2, 0, 1)), pads=[0, 1, 1, 2]))
    case("Expand", b.op("Expand", [b.param([3, 1])], lambda x: x.expand(2, 3, 4), shape=[2, 3, 4]))
    idx = b.const(np.array([[1, 0, 3], [3, 3, 2]], dtype=np.int64))
    case("Gather", b.op("Gather", [b.param([4, 5]), idx], lambda w, i: w[i], axis=0))
    idx1 = b.const(np.array([-1, 0, -1], dtype=np.int64))
    case("Gather-axis1-negative", b.op("Gather", [b.param([2, 4, 3]), idx1], lambda w, i: w[:, i % 4], axis=1))

    # Reductions and softmax.
    case("ReduceSum", b.op("ReduceSum", [b.param([2, 3, 4])], lambda x: x.sum((0, 2), keepdim=True), axes=[0, 2]))
    case("ReduceMean", b.op("ReduceMean", [b.param([2, 3, 4])], lambda x: x.mean(1), axes=[1], keepdims=0))
    case("Softmax", b.op("Softmax", [b.param([3, 5], -2, 2)], lambda x: torch.softmax(x, 1), axis=1))
    case("LogSoftmax", b.op("LogSoftmax", [b.param([2, 3, 4], -2, 2)], lambda x: torch.log_softmax(x, 1), axis=1))

    # Losses.
    tgt = b.const(np.array([[2, 0], [1, 2], [0, 0]], dtype=np.int64))
    case("NLL-mean", b.op("NegativeLogLikelihoodLoss", [b.param([3, 4, 2]), tgt],
                          lambda x, t: F.nll_loss(x, t), reduction="mean"))
    wts = b.const(np.array([0.5, 1.0, 2.0, 1.5]))
    case("NLL-weight-ignore", b.op("NegativeLogLikelihoodLoss", [b.param([3, 4, 2]), tgt, wts],
                                   lambda x, t, w: F.nll_loss(x, t, w, ignore_index=0), reduction="mean",
                                   ignore_index=0))
    case("NLL-none", b.op("NegativeLogLikelihoodLoss", [b.param([3, 4, 2]), tgt],
                          lambda x, t: F.nll_loss(x, t, reduction="none"), reduction="none"))

    # Convolution and pooling.
    case("Conv", b.op("Conv", [b.param([2, 3, 7, 6]), b.param([4, 3, 3, 3]), b.param([4])],
                      lambda x, w, bb: F.conv2d(x, w, bb, stride=2, padding=1), strides=[2, 2], pads=[1, 1, 1, 1]))
    case("Conv-grouped-dilated", b.op("Conv", [b.param([2, 4, 8, 8]), b.param([6, 2, 3, 2])],
                                      lambda x, w: F.conv2d(x, w, None, padding=(2, 1), dilation=(2, 1), groups=2),
                                      group=2, dilations=[2, 1], pads=[2, 1, 2, 1]))
    case("Conv-depthwise", b.op("Conv", [b.param([1, 3, 6, 6]), b.param([3, 1, 3, 3])],
                                lambda x, w: F.conv2d(x, w, None, stride=1, padding=1, groups=3),
                                group=3, pads=[1, 1, 1, 1]))
    case("Conv1d", b.op("Conv", [b.param([2, 3, 9]), b.param([2, 3, 4])],
                        lambda x, w: F.conv1d(x, w, None, stride=2), strides=[2]))
    case("MaxPool-overlap", b.op("MaxPool", [b.param([2, 3, 7, 7])],
                                 lambda x: F.max_pool2d(x, 3, 2, 1), kernel_shape=[3, 3], strides=[2, 2],
                                 pads=[1, 1, 1, 1]))
    case("AveragePool", b.op("AveragePool", [b.param([2, 2, 6, 6])], lambda x: F.avg_pool2d(x, 2, 2),
                             kernel_shape=[2, 2], strides=[2, 2]))
    case("AveragePool-pad", b.op("AveragePool", [b.param([1, 2, 5, 5])],
                                 lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                                 kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    case("GlobalAveragePool", b.op("GlobalAveragePool", [b.param([2, 3, 4, 5])],
                                   lambda x: x.mean((2, 3), keepdim=True)))

    # Normalization.
    bn_mean, bn_var = b.const(np.array([0.1, -0.2, 0.3])), b.const(np.array([0.5, 1.5, 1.0]))
    case("BatchNorm-train", b.op("BatchNormalization", [b.param([4, 3, 2, 2]), b.param([3], 0.5, 1.5),
                                                        b.param([3]), bn_mean, bn_var],
                                 lambda x, s, bb, m, v: F.batch_norm(x, None, None, s, bb, True, 0.1, 1e-5),
                                 training_mode=1, epsilon=1e-5))
    case("BatchNorm-eval", b.op("BatchNormalization", [b.param([2, 3, 2, 2]), b.param([3], 0.5, 1.5),
                                                       b.param([3]), bn_mean, bn_var],
                                lambda x, s, bb, m, v: F.batch_norm(x, m, v, s, bb, False, 0.1, 1e-5), epsilon=1e-5))
    case("LayerNorm", b.op("LayerNormalization", [b.param([2, 3, 4]), b.param([4], 0.5, 1.5), b.param([4])],
                           lambda x, s, bb: F.layer_norm(x, [4], s, bb, 1e-5), axis=-1, epsilon=1e-5))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--no-emu", action="store_true", help="only the reference interpreter")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    b = Builder(seed=7)
    results = cases(b)
    # loss = sum_i sum(f_i * R_i)
    terms = []
    for _, v in results:
        r = b.rand(list(v.t.shape))
        m = b.op("Mul", [v, r], torch.mul)
        s = b.op("ReduceSum", [m], lambda x: x.sum(), keepdims=0)
        terms.append(s)
    total = terms[0]
    for t in terms[1:]:
        total = b.op("Add", [total, t], torch.add)
    loss_t = total.t
    loss_t.backward()

    ir = [f'graph @gradcheck() -> ("loss": f32[]) {{'] + b.lines + [f"  return %{total.name}", "}"]
    src = os.path.join(args.work, "cases.ir")
    with open(src, "w") as f:
        f.write("\n".join(ir) + "\n")
    grad_ir = os.path.join(args.work, "grad.ir")

    def run(cmd):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")

    run([args.dlc, "opt", src, "--passes", "autodiff", "--verify-each", "-o", grad_ir])
    backends = [("interp", None)] + ([] if args.no_emu else [("emu", None)])
    failures = 0
    checked = 0
    for backend, _ in backends:
        out = os.path.join(args.work, f"out-{backend}")
        if backend == "interp":
            run([args.dlc, "interpret", grad_ir, "--output-dir", out])
        else:
            pkg = os.path.join(args.work, "grad.dlc")
            run([args.dlc, "compile", grad_ir, "--target", "emu", "-o", pkg])
            run([args.dlc, "run", pkg, "--device", "emu", "--output-dir", out, "-q"])
        got_loss = np.load(os.path.join(out, "loss.npy"))
        if abs(float(got_loss) - loss_t.item()) > args.rtol * max(1.0, abs(loss_t.item())):
            print(f"[{backend}] loss: dlc {float(got_loss)} torch {loss_t.item()}")
            failures += 1
        for p in b.params:
            ref = p.t.grad.numpy()
            got = np.load(os.path.join(out, f"grad.{p.name}.npy")).astype(np.float64)
            scale = max(np.abs(ref).max(), 1e-6)
            err = np.abs(got - ref).max() / scale if got.shape == ref.shape else float("inf")
            checked += 1
            if not err <= args.rtol:
                failures += 1
                print(f"[{backend}] {p.case}: grad of %{p.name} {list(ref.shape)}: max rel error {err:.3g}")
    print(f"gradcheck: {checked - failures}/{checked} parameter gradients within {args.rtol} "
          f"({len(results)} cases, backends: {', '.join(x for x, _ in backends)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
