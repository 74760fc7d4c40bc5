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

A session may be used from several threads at once: each call runs on its own arena
(sessions are pooled; the weights are loaded once), with the GIL released.
"""
import os
import warnings

from ._dlc import DataError, Error, runtime_api_version
from ._dlc import Session as _Session

__all__ = ["InferenceSession", "NodeArg", "Error", "DataError", "runtime_api_version"]

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

    def __repr__(self):
        return "NodeArg(name=%r, type=%r, shape=%r)" % (self.name, self.type, self.shape)


class InferenceSession:
    """A compiled package (a path to a .dlc file, or its bytes), ready to run.

    device: "auto" (default), "cuda", "cuda:N" or "emu"; threads: emu worker threads
    (0: one per core). providers, provider_options and sess_options are accepted for
    ONNX Runtime compatibility and ignored."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, *, device="auto",
                 threads=0):
        if providers:
            warnings.warn("dlc: providers= is ignored; dlc runs on the GPU when one is present, else on its emu "
                          "backend (choose with device='cuda' or device='emu')", stacklevel=2)
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            self._s = _Session(bytes(path_or_bytes), device, threads)
            self._path = None
        else:
            path = os.fspath(path_or_bytes)
            if path.endswith(".onnx"):
                raise ValueError("%s: an ONNX model; compile it first (dlc compile %s -o model.dlc) and load the "
                                 ".dlc package" % (path, path))
            self._s = _Session(path, device, threads)
            self._path = path
        inputs = self._s.inputs()
        ranged = [i["min_shape"] != i["max_shape"] for i in inputs]
        self._inputs = [NodeArg(i, r) for i, r in zip(inputs, ranged)]
        self._outputs = [NodeArg(o, False) for o in self._s.outputs()]

    @property
    def device(self):
        """The backend this session runs on: "cuda (NVIDIA H100 ..., sm_90)" or "emu (...)"."""
        return self._s.device

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_providers(self):
        return ["DlcCuda" if self._s.device.startswith("cuda") else "DlcEmu"]

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
