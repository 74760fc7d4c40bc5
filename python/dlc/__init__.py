"""dlc from Python: run compiled .dlc packages with ONNX Runtime's calling conventions.

    import dlc
    sess = dlc.InferenceSession("digits.dlc")            # GPU if present, else emu
    name = sess.get_inputs()[0].name
    probs, = sess.run(None, {name: image})               # numpy in, numpy out

A script written for onnxruntime runs with `import dlc as ort` on a compiled package:
`providers=` and `sess_options=` are accepted and ignored (dlc picks the device: the
GPU when a driver and device are there, else the emu backend; `device=` forces one).

Inputs are numpy arrays of the input's dtype (bfloat16 inputs and outputs as uint16
bit patterns); non-contiguous arrays are copied. A wrong name, dtype or shape, or a
missing input, raises ValueError naming the input. A package compiled with
`--input-shape` ranges takes any shape inside them; `get_inputs()` shows a ranged
dimension as the string "MIN..MAX", as ONNX Runtime shows a symbolic one.

dlc.compile() calls the compiler in this process (the library `dlc compile` calls),
and an InferenceSession given an .onnx model compiles it first (cached by content
and options under ~/.cache/dlc).

A session may be used from several threads at once: each call runs on its own arena
(sessions are pooled; the weights are loaded once), with the GIL released.
"""
import os
import stat
import warnings

import hashlib
import json

from . import _dlc as _dlc_module
from ._dlc import CompileError, DataError, Error, package_format_version, runtime_api_version
from ._dlc import Session as _Session
from ._dlc import TrainingSession as _TrainingSession
from ._dlc import compile as _compile

__all__ = ["compile", "InferenceSession", "TrainingSession", "NodeArg", "Error", "CompileError", "DataError",
           "runtime_api_version"]

_ONNX_TYPES = {"f32": "float", "f16": "float16", "bf16": "bfloat16", "f64": "double", "i64": "int64",
               "i32": "int32", "i16": "int16", "i8": "int8", "u8": "uint8", "u16": "uint16", "u32": "uint32",
               "u64": "uint64", "bool": "bool"}


class NodeArg:
    """An input or output: `name`, `shape` (ints; "MIN..MAX" along a shape range) and
    `type` ("tensor(float)", as ONNX Runtime names it)."""

    def __init__(self, info, ranged):
        self.name = info["name"]
        self.type = "tensor(%s)" % _ONNX_TYPES[info["dtype"]]
        self.dtype = info["numpy_dtype"]
        lo, hi = info["min_shape"], info["max_shape"]
        self.shape = [d if not ranged or a == b else "%d..%d" % (a, b) for d, a, b in zip(info["shape"], lo, hi)]
        self.min_shape, self.max_shape = list(lo), list(hi)
        self.opt_shape = list(info["shape"])  # the shape the package is tuned for

    def __repr__(self):
        return "NodeArg(name=%r, type=%r, shape=%r)" % (self.name, self.type, self.shape)


def _model_bytes(model):
    """A model given as bytes or an onnx.ModelProto (anything with SerializeToString)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    return None


def _train_options(train, loss, label, optimizer, lr, momentum, weight_decay, fused_attention_dropout=False):
    given = {"loss": loss, "label": label, "optimizer": optimizer, "lr": lr, "momentum": momentum,
             "weight_decay": weight_decay, "fused_attention_dropout": True if fused_attention_dropout else None}
    given = {k: v for k, v in given.items() if v is not None}
    if not train:
        if given:
            raise ValueError("%s go with train=True" % ", ".join(given))
        return None
    return given


def compile(model, output=None, *, target=None, fp16=False, bf16=False, layout="auto", input_shapes=None,
            opt_level=2, cache_dir=None, verbose=False, train=False, loss=None, label=None, optimizer=None, lr=None,
            momentum=None, weight_decay=None, tf32=None, deterministic=False, fused_attention_dropout=False):
    """Compiles an ONNX model (a path, its bytes or an onnx.ModelProto) into a .dlc
    package and returns the package's path (default: the model's path with .dlc).

    target: "sm_80,sm_90,emu" or a list (default: every GPU architecture, plus emu when
    a host compiler is present); fp16/bf16: mixed precision; layout: "auto", "nchw" or
    "nhwc"; input_shapes: {name: [dims]} where a dimension may be a range "1..32" (one
    package for every shape in it); opt_level: 0-3; cache_dir: the kernel cache
    (default ~/.cache/dlc); verbose: dlc's progress on stderr. train=True compiles the
    training step (for TrainingSession) with loss ("cross-entropy", "mse", "none"),
    label (the label input's name), optimizer ("sgd", "momentum", "adam", "adamw"), lr,
    momentum and weight_decay (dlc compile --train's options and defaults). tf32: FP32
    convolutions and GEMMs on tensor cores in TF32 (None: on, except with train=True;
    False: strict FP32, dlc compile --no-tf32). deterministic: the same bits on every run
    (floating-point scatter-adds, training's MaxPool and Gather gradients, as fixed-point
    sums; dlc compile --deterministic). fused_attention_dropout (with train=True): FP16/BF16
    attention with Dropout on its probabilities trains fused too (dlc compile
    --fused-attention-dropout: no Sq x Sk tensors kept, slower). Errors raise
    dlc.CompileError with dlc's message; bad options raise ValueError."""
    training = _train_options(train, loss, label, optimizer, lr, momentum, weight_decay,
                              fused_attention_dropout)
    if fp16 and bf16:
        raise ValueError("fp16 and bf16 exclude each other")
    if tf32 not in (None, True, False):
        raise ValueError("tf32 must be None, True or False, got %r" % (tf32,))
    if layout not in ("auto", "nchw", "nhwc"):
        raise ValueError("layout must be 'auto', 'nchw' or 'nhwc', got %r" % (layout,))
    if not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise ValueError("opt_level must be 0 to 3, got %r" % (opt_level,))
    shapes = {}
    for name, dims in (input_shapes or {}).items():
        if isinstance(dims, str):
            raise ValueError("input_shapes[%r] must be a list of dimensions (ints, or 'MIN..MAX' strings)" % name)
        shapes[name] = [str(d) for d in dims]
    targets = [] if not target else (target.split(",") if isinstance(target, str) else list(target))
    data = _model_bytes(model)
    if data is None:
        path = os.fspath(model)
        if output is None:
            output = os.path.splitext(path)[0] + ".dlc"
    elif output is None:
        raise ValueError("compile(): give output= when the model is bytes or an onnx.ModelProto")
    else:
        path = "<bytes>"
    _compile(path, os.fspath(output), data, targets, bool(fp16), bool(bf16), layout, shapes, opt_level,
             os.fspath(cache_dir) if cache_dir else "", bool(verbose), training,
             None if tf32 is None else bool(tf32), bool(deterministic))
    return os.fspath(output)


def _hash_external_file(h, folder, location):
    """Adds an external-data file's bytes to `h`, under the importer's rules: a relative
    path inside `folder` (no "..", no link out of it) to a regular file, opened without
    blocking. Anything else is left to the compiler, which names the problem."""
    parts = location.replace("\\", "/").split("/")
    if not location or "\0" in location or os.path.isabs(location) or ".." in parts:
        return
    path = os.path.join(folder, location)
    root = os.path.realpath(folder)
    if os.path.commonpath([os.path.realpath(path), root]) != root:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def _cached_package(model_path_or_bytes, options, cache_dir=None):
    """The package compiled from an ONNX model with `options`, compiled on first use and
    kept in the packages/ folder of dlc's cache (cache_dir, else $DLC_CACHE_DIR,
    $XDG_CACHE_HOME/dlc or ~/.cache/dlc; its kernel cache too), named by a hash of the model's bytes, the options and the build of
    dlc."""
    data = _model_bytes(model_path_or_bytes)
    if data is None:
        with open(os.fspath(model_path_or_bytes), "rb") as f:
            data = f.read()
    # The build of dlc is part of the key: another compiler may make another package.
    ext = os.stat(_dlc_module.__file__)
    stamp = "%d:%d:%d:%d" % (runtime_api_version, package_format_version, ext.st_size, ext.st_mtime_ns)
    h = hashlib.sha256(data + repr(sorted(options.items())).encode() + stamp.encode())
    # So are the external-data files the model names (beside a model file; in the
    # current folder for bytes): changed weights make another package.
    from_path = not isinstance(model_path_or_bytes, (bytes, bytearray, memoryview)) and not hasattr(
        model_path_or_bytes, "SerializeToString")
    folder = os.path.dirname(os.path.abspath(os.fspath(model_path_or_bytes))) if from_path else os.getcwd()
    for location in _dlc_module.external_data_files(data):
        h.update(b"\0external:" + location.encode() + b"\0")
        _hash_external_file(h, folder, location)
    key = h.hexdigest()
    # The kernel cache's root (codegen/Toolchain.cpp), packages in packages/.
    root = os.fspath(cache_dir) if cache_dir else (
        os.environ.get("DLC_CACHE_DIR") or
        (os.path.join(os.environ["XDG_CACHE_HOME"], "dlc") if os.environ.get("XDG_CACHE_HOME") else
         os.path.join(os.path.expanduser("~"), ".cache", "dlc")))
    out = os.path.join(root, "packages", key[:32] + ".dlc")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if cache_dir and "cache_dir" not in options:
            options = dict(options, cache_dir=cache_dir)
        if not from_path:
            compile(data, out, **options)
        else:  # from its own path, so that external data beside it is found
            compile(model_path_or_bytes, out, **options)
    return out


class _Package:
    """What both session kinds share: the native session over a package given as a path
    or as bytes, and its inputs and outputs as NodeArgs."""

    def _open(self, native, path_or_bytes, device, threads, allow_host_code, tactics=None, cache_dir=None):
        if tactics not in (None, "auto", "dlc", "vendor"):
            raise ValueError("tactics must be 'auto', 'dlc', 'vendor' or None, got %r" % (tactics,))
        # dlc's cache root, as $DLC_CACHE_DIR: the tactics cache is its tactics/ folder.
        tactics_dir = os.path.join(os.fspath(cache_dir), "tactics") if cache_dir else ""
        source = bytes(path_or_bytes) if isinstance(path_or_bytes, (bytes, bytearray, memoryview)) \
            else os.fspath(path_or_bytes)
        self._s = native(source, device, threads, allow_host_code, tactics or "", tactics_dir)
        self._inputs = [NodeArg(i, i["min_shape"] != i["max_shape"]) for i in self._s.inputs()]
        self._outputs = [NodeArg(o, False) for o in self._s.outputs()]

    @property
    def device(self):
        """The backend this session runs on: "cuda (NVIDIA H100 ..., sm_90)" or "emu (...)"."""
        return self._s.device

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)


def _providers_use_tf32(providers, provider_options):
    """Whether ONNX Runtime would run FP32 convolutions and GEMMs in TF32 with these
    providers: its first CPU, CUDA or TensorRT provider decides (ONNX Runtime gives the
    earlier ones priority); CUDA and TensorRT use TF32 unless their `use_tf32` option is
    0, the CPU provider never does. None: no preference (dlc's default, TF32)."""
    if not providers:
        return True
    for i, p in enumerate(providers):
        name, opts = (p[0], p[1] if len(p) > 1 else {}) if isinstance(p, (tuple, list)) else (p, {})
        if provider_options and i < len(provider_options) and provider_options[i]:
            opts = dict(opts or {}, **provider_options[i])
        if name == "CPUExecutionProvider":
            return False
        if name in ("CUDAExecutionProvider", "TensorrtExecutionProvider"):
            return str((opts or {}).get("use_tf32", "1")) not in ("0", "False", "false")
    return False


class InferenceSession(_Package):
    """A compiled package (a path to a .dlc file, or its bytes), ready to run; or an
    ONNX model (a path ending in .onnx, or an onnx.ModelProto), compiled first with
    `compile_options` (dlc.compile's keywords; cached).

    device: "auto" (default), "cuda", "cuda:N" or "emu"; threads: emu worker threads
    (0: one per core). allow_host_code: on emu, run the package's host code even though
    another user or machine compiled it (it runs as you: only for packages you trust).
    tactics: "auto", "dlc" or "vendor" forces which implementation runs the layers that
    have alternatives (README: Tactics; default: $DLC_TACTICS, else auto). cache_dir:
    dlc's cache (default: $DLC_CACHE_DIR, $XDG_CACHE_HOME/dlc or ~/.cache/dlc): the
    tactics cache is its tactics/ folder; an ONNX model's package and kernels are kept
    there too.
    providers, provider_options and sess_options are accepted for ONNX Runtime
    compatibility; dlc picks the device. An ONNX model is compiled with ONNX Runtime's
    numerics for the providers asked for: TF32 when the first CPU/CUDA/TensorRT provider
    is CUDA or TensorRT (unless its `use_tf32` option is 0) or no providers are given,
    strict FP32 otherwise (its CPU provider has no TF32); compile_options={"tf32": ...}
    decides when given."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, *, device="auto",
                 threads=0, compile_options=None, allow_host_code=False, tactics=None, cache_dir=None):
        if providers:
            warnings.warn("dlc: providers= is ignored for the device (they set TF32 as in ONNX Runtime); dlc runs on the GPU "
                          "when one is present, else on its emu "
                          "backend (choose with device='cuda' or device='emu')", stacklevel=2)
        if hasattr(path_or_bytes, "SerializeToString") or (
                not isinstance(path_or_bytes, (bytes, bytearray, memoryview))
                and os.fspath(path_or_bytes).endswith(".onnx")):
            options = dict(compile_options or {})
            if "tf32" not in options and not _providers_use_tf32(providers, provider_options):
                options["tf32"] = False
            path_or_bytes = _cached_package(path_or_bytes, options, cache_dir)
        elif compile_options:
            raise ValueError("compile_options apply to an ONNX model, not to a compiled package")
        self._open(_Session, path_or_bytes, device, threads, allow_host_code, tactics, cache_dir)

    def tactics(self):
        """Each layer with alternatives: its candidates (kind 'dlc' or 'cudnn', description,
        measured microseconds or None, why it cannot run here), the index of the one that
        runs, and how it was chosen ('timed', 'cache', 'package' (dlc tune --embed),
        'forced' or 'default')."""
        return self._s.tactics()

    def get_providers(self):
        return ["DlcCuda" if self._s.device.startswith("cuda") else "DlcEmu"]

    def inspect(self):
        """`dlc inspect --json` of the package, as a dict: kernels, launches, resources
        per architecture, the memory plan, modeled traffic and latency (a model, not a
        measurement)."""
        return json.loads(self._s.inspect_json())

    def bench(self, iterations=100, warmup=10, input_feed=None, shapes=None, seed=0):
        """Times `iterations` runs after `warmup`, as `dlc bench` does: uploading the
        inputs (h2d), running (compute) and downloading the outputs (d2h), each in
        milliseconds (min, median, p90, p99, max), and the throughput from the compute
        median. Inputs: `input_feed`, else random (floats uniform in [-1, 1), others
        zero) at each input's shape, or at shapes[name] for a shape-range package. On
        emu the times are CPU times of the emulated kernels, not GPU times."""
        import numpy as np
        shapes = dict(shapes or {})
        if input_feed is None:
            rng = np.random.RandomState(seed)
            input_feed = {}
            for i in self._inputs:
                shape = shapes.pop(i.name, None) or i.opt_shape
                if np.issubdtype(i.dtype, np.floating):
                    input_feed[i.name] = rng.uniform(-1, 1, size=shape).astype(i.dtype)
                else:
                    input_feed[i.name] = np.zeros(shape, i.dtype)
            if shapes:
                raise ValueError("shapes names no input: %s" % ", ".join(sorted(shapes)))
        times = self._s.bench(input_feed, warmup, iterations)
        first = next(iter(input_feed.values()), None) if self._inputs else None
        batch = int(first.shape[0]) if first is not None and first.ndim else 1
        med = times["compute_ms"]["median"]
        return dict(times, device=self.device, iterations=iterations, warmup=warmup, batch=batch,
                    inferences_per_s=1000.0 / med if med > 0 else float("inf"),
                    samples_per_s=1000.0 * batch / med if med > 0 else float("inf"))

    def run(self, output_names, input_feed, run_options=None):
        """Runs the package on `input_feed` ({name: numpy array}, every input) and
        returns the outputs named in `output_names` (None: all), as a list of numpy
        arrays in that order."""
        del run_options  # ONNX Runtime compatibility
        if not isinstance(input_feed, dict):
            raise ValueError("input_feed must be a dict of input name to numpy array, got %s"
                             % type(input_feed).__name__)
        if output_names is not None:
            if isinstance(output_names, str):
                raise ValueError("output_names must be a list of names (or None), got the string %r" % output_names)
            output_names = list(output_names)
        return self._s.run(input_feed, output_names)


class TrainingSession(_Package):
    """A training package (dlc compile --train, or dlc.compile(..., train=True)): each
    step() runs the forward pass, the loss, the backward pass and the optimizer update
    on the session's own variables (parameters, optimizer state, BatchNorm statistics),
    which start at the package's values.

    The feed holds the model's inputs and the label (default name "label"). Calls are
    serialized (one step at a time)."""

    def __init__(self, path_or_bytes, *, device="auto", threads=0, allow_host_code=False, tactics=None,
                 cache_dir=None):
        self._open(_TrainingSession, path_or_bytes, device, threads, allow_host_code, tactics, cache_dir)

    def tactics(self):
        """As InferenceSession.tactics."""
        return self._s.tactics()

    def get_outputs(self):
        """The loss first, then the model's outputs."""
        return list(self._outputs)

    def step(self, feed):
        """One training step; returns the loss (before this step's update)."""
        return self._s.step(feed, False)

    def evaluate(self, feed):
        """The loss of the current parameters with the model in inference mode; no update."""
        return self._s.step(feed, True)

    def outputs(self):
        """{name: array} of the last step or evaluation: the loss and the model's outputs."""
        return self._s.last_outputs()

    def parameters(self):
        """{name: array}: the trainable parameters (copies)."""
        return self._s.variables(True)

    def variables(self):
        """{name: array}: every variable (parameters, optimizer state, running statistics)."""
        return self._s.variables(False)

    def set_parameters(self, values):
        """Sets variables by name (each checked for name, dtype and shape before any is set)."""
        self._s.set_variables(dict(values))

    def reset(self):
        """Every variable back to the package's initial value."""
        self._s.reset()

    def save_checkpoint(self, path):
        """Every variable to an .npz file (written atomically)."""
        self._s.save_checkpoint(os.fspath(path))

    def load_checkpoint(self, path):
        """Every variable from an .npz file (all or nothing)."""
        self._s.load_checkpoint(os.fspath(path))

    def export_onnx(self, path):
        """The ONNX model the package was compiled from, with the current variables'
        values (dlc export)."""
        self._s.export_onnx(os.fspath(path))
        return os.fspath(path)
