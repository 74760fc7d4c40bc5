"""The Python package `dlc` (python/): ONNX Runtime's calling conventions over compiled
packages, numpy in and out for every dtype, shape ranges, errors, and threads.

Packages are compiled once per run with the dlc binary ($DLC_BIN) for emu; the module
is imported from $PYTHONPATH (build/python).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
from loop_models import save_power_loop  # noqa: E402
DLC = os.environ.get("DLC_BIN", os.path.join(ROOT, "build", "tools", "dlc"))
DIGITS = os.path.join(ROOT, "examples", "digits")


def compile_model(src, out, *extra):
    subprocess.run([DLC, "compile", src, "--target", "emu", "-o", out, "-q", *extra], check=True)
    return out


@pytest.fixture(scope="session")
def work():
    with tempfile.TemporaryDirectory(prefix="dlc-python-") as d:
        yield d


@pytest.fixture(scope="session")
def digits(work):
    return compile_model(os.path.join(DIGITS, "digits_cnn.onnx"), os.path.join(work, "digits.dlc"))


# One graph per dtype family: y = x + x (f32, f16, bf16, f64, i64, i32, i8, u8) and
# b = Not(b) (bool), so every dtype goes in and comes back through numpy.
DTYPES_IR = """graph @dtypes(%f32: f32[2,3], %f16: f16[2,3], %bf16: bf16[2,3], %f64: f64[2,3], %i64: i64[2,3],
                   %i32: i32[2,3], %i8: i8[2,3], %u8: u8[2,3], %b: bool[2,3])
    -> ("f32o": f32[2,3], "f16o": f16[2,3], "bf16o": bf16[2,3], "f64o": f64[2,3], "i64o": i64[2,3],
        "i32o": i32[2,3], "i8o": i8[2,3], "u8o": u8[2,3], "bo": bool[2,3]) {
  %f32o = Add(%f32, %f32) : f32[2,3]
  %f16o = Add(%f16, %f16) : f16[2,3]
  %bf16o = Add(%bf16, %bf16) : bf16[2,3]
  %f64o = Add(%f64, %f64) : f64[2,3]
  %i64o = Add(%i64, %i64) : i64[2,3]
  %i32o = Add(%i32, %i32) : i32[2,3]
  %i8o = Add(%i8, %i8) : i8[2,3]
  %u8o = Add(%u8, %u8) : u8[2,3]
  %bo = Not(%b) : bool[2,3]
  return %f32o, %f16o, %bf16o, %f64o, %i64o, %i32o, %i8o, %u8o, %bo
}
"""


@pytest.fixture(scope="session")
def dtypes(work):
    ir = os.path.join(work, "dtypes.ir")
    with open(ir, "w") as f:
        f.write(DTYPES_IR)
    return compile_model(ir, os.path.join(work, "dtypes.dlc"))


@pytest.fixture(scope="session")
def ranged(work):
    """softmax(relu(x)) with x f32[N,4], compiled for N in 1..4."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=1)], "ranged",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = os.path.join(work, "ranged.onnx")
    onnx.save(model, path)
    return compile_model(path, os.path.join(work, "ranged.dlc"), "--input-shape", "x=1..4,4")


@pytest.fixture(scope="session")
def bounded_loop(work):
    """acc = x ** n by a Loop whose trip count n is an input, compiled with --loop-bound 4."""
    path = save_power_loop(os.path.join(work, "power.onnx"))
    return compile_model(path, os.path.join(work, "power.dlc"), "--loop-bound", "4")


def digit_images():
    return {name: np.load(os.path.join(DIGITS, name)) for name in sorted(os.listdir(DIGITS))
            if name.endswith(".npy")}


# --- the API surface ---------------------------------------------------------------

def test_inputs_outputs_and_device(digits):
    s = dlc.InferenceSession(digits, device="emu")
    (inp,), outs = s.get_inputs(), s.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("image", "tensor(float)", [1, 1, 8, 8])
    assert [(o.name, o.type, o.shape) for o in outs] == [("logits", "tensor(float)", [1, 10]),
                                                         ("probs", "tensor(float)", [1, 10])]
    assert s.device.startswith("emu")
    assert s.get_providers() == ["DlcEmu"]
    assert dlc.runtime_api_version >= 4


def test_run_matches_dlc_run(digits, work):
    s = dlc.InferenceSession(digits, device="emu")
    for name, image in digit_images().items():
        outdir = os.path.join(work, "cli-" + name)
        subprocess.run([DLC, "run", digits, "-q", "--device", "emu", "--output-dir", outdir,
                        "image=" + os.path.join(DIGITS, name)], check=True)
        logits, probs = s.run(None, {"image": image})
        for got, out in ((logits, "logits"), (probs, "probs")):
            want = np.load(os.path.join(outdir, out + ".npy"))
            assert got.dtype == np.float32 and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        label = int(name.split("label")[1].split(".")[0])
        assert int(logits.argmax()) == label, name
        named = s.run(["probs", "logits"], {"image": image})
        np.testing.assert_array_equal(named[0], probs)
        np.testing.assert_array_equal(named[1], logits)


def test_bytes_and_pathlike(digits):
    import pathlib
    image = next(iter(digit_images().values()))
    a, = dlc.InferenceSession(pathlib.Path(digits), device="emu").run(["logits"], {"image": image})
    with open(digits, "rb") as f:
        b, = dlc.InferenceSession(f.read(), device="emu").run(["logits"], {"image": image})
    np.testing.assert_array_equal(a, b)


def test_inspect_and_bench(digits, ranged):
    s = dlc.InferenceSession(digits, device="emu")
    info = s.inspect()
    assert info["model"] and info["unique_kernels"] >= 1 and info["arena_bytes"] > 0
    assert set(info["modeled_latency_us"]) == {"A100", "H100"}
    with open(digits, "rb") as f:
        assert dlc.InferenceSession(f.read(), device="emu").inspect()["unique_kernels"] == info["unique_kernels"]
    b = s.bench(iterations=5, warmup=1)
    assert b["iterations"] == 5 and b["batch"] == 1 and b["device"].startswith("emu")
    for phase in ("h2d_ms", "compute_ms", "d2h_ms", "total_ms"):
        st = b[phase]
        assert 0 <= st["min"] <= st["median"] <= st["p90"] <= st["p99"] <= st["max"], (phase, st)
    assert b["inferences_per_s"] > 0 and b["samples_per_s"] == pytest.approx(b["inferences_per_s"])
    r = dlc.InferenceSession(ranged, device="emu")
    assert r.inspect()["shape_ranges"]["schedules"] == 4
    assert r.bench(iterations=2, warmup=0, shapes={"x": [3, 4]})["batch"] == 3
    with pytest.raises(ValueError, match="outside the range"):
        r.bench(iterations=1, shapes={"x": [9, 4]})
    with pytest.raises(ValueError, match="shapes names no input: y"):
        r.bench(iterations=1, shapes={"y": [2, 4]})


def test_providers_are_accepted_with_a_note(digits):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dlc.InferenceSession(digits, providers=["CUDAExecutionProvider", "CPUExecutionProvider"], device="emu")
    assert any("providers= is ignored" in str(w.message) for w in caught)


def test_non_contiguous_inputs_are_copied(digits):
    s = dlc.InferenceSession(digits, device="emu")
    image = next(iter(digit_images().values()))
    wide = np.zeros((1, 1, 8, 16), np.float32)
    wide[..., ::2] = image
    view = wide[..., ::2]
    assert not view.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(s.run(None, {"image": view})[0], s.run(None, {"image": image})[0])


def test_big_endian_inputs_are_swapped(digits):
    s = dlc.InferenceSession(digits, device="emu")
    image = next(iter(digit_images().values()))
    swapped = image.astype(">f4")
    assert swapped.dtype.byteorder == ">"
    np.testing.assert_array_equal(s.run(None, {"image": swapped})[0], s.run(None, {"image": image})[0])


def test_a_huge_broadcast_view_is_refused_before_it_is_copied(digits):
    s = dlc.InferenceSession(digits, device="emu")
    # 4 bytes of data viewed as 1.6e9 elements: copying it first would take 6.4 GB.
    view = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(40000, 1, 200, 200),
                                           strides=(0, 0, 0, 0))
    with pytest.raises(ValueError, match=r"input 'image' has shape \[40000,1,200,200\], the model expects"):
        s.run(None, {"image": view})
    image = next(iter(digit_images().values()))
    small = np.lib.stride_tricks.as_strided(image[..., :1, :1], shape=image.shape, strides=(0, 0, 0, 0))
    np.testing.assert_array_equal(s.run(None, {"image": small})[0],
                                  s.run(None, {"image": np.full(image.shape, image.flat[0], np.float32)})[0])


def test_a_served_package_may_change_under_its_session(digits, tmp_path):
    # The session reads the package into memory: truncating the file (once SIGBUS) or
    # copying another package over it (once read live) changes nothing in the session.
    served = tmp_path / "served.dlc"
    shutil.copy(digits, served)
    s = dlc.InferenceSession(str(served), device="emu")
    image = next(iter(digit_images().values()))
    before = s.run(None, {"image": image})
    with open(served, "r+b") as f:
        f.truncate(0)
    for x, y in zip(before, s.run(None, {"image": image})):
        np.testing.assert_array_equal(x, y)
    with open(served, "wb") as f:
        f.write(open(digits, "rb").read()[::-1])
    for x, y in zip(before, s.run(None, {"image": image})):
        np.testing.assert_array_equal(x, y)


# --- numpy round trips for every dtype ------------------------------------------------

def test_every_dtype_round_trips(dtypes):
    s = dlc.InferenceSession(dtypes, device="emu")
    rng = np.random.RandomState(0)
    small = rng.randint(-8, 8, size=(2, 3))
    bf16_bits = (small.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # exact in bf16
    feed = {"f32": rng.randn(2, 3).astype(np.float32), "f16": rng.randn(2, 3).astype(np.float16),
            "bf16": bf16_bits, "f64": rng.randn(2, 3), "i64": small.astype(np.int64), "i32": small.astype(np.int32),
            "i8": small.astype(np.int8), "u8": np.abs(small).astype(np.uint8), "b": small > 0}
    types = {i.name: i.type for i in s.get_inputs()}
    assert types["bf16"] == "tensor(bfloat16)" and types["b"] == "tensor(bool)" and types["f64"] == "tensor(double)"
    outs = dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))
    for name in ("f32", "f16", "f64", "i64", "i32", "i8", "u8"):
        got = outs[name + "o"]
        assert got.dtype == feed[name].dtype, name
        np.testing.assert_array_equal(got, feed[name] + feed[name], err_msg=name)
    want_bf16 = ((2 * small).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert outs["bf16o"].dtype == np.uint16
    np.testing.assert_array_equal(outs["bf16o"], want_bf16)
    assert outs["bo"].dtype == np.bool_
    np.testing.assert_array_equal(outs["bo"], ~feed["b"])


# --- shape ranges and run-time loops --------------------------------------------------

def test_a_shape_range_package_takes_any_shape_in_its_range(ranged):
    s = dlc.InferenceSession(ranged, device="emu")
    (inp,) = s.get_inputs()
    assert inp.shape == ["1..4", 4] and inp.min_shape == [1, 4] and inp.max_shape == [4, 4]
    for n in (1, 3, 4, 2):
        x = np.random.RandomState(n).randn(n, 4).astype(np.float32)
        y, = s.run(None, {"x": x})
        r = np.maximum(x, 0)
        want = np.exp(r - r.max(1, keepdims=True))
        np.testing.assert_allclose(y, want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"input 'x' dimension 0 is 5, outside the range 1\.\.4"):
        s.run(None, {"x": np.zeros((5, 4), np.float32)})


def test_a_loop_past_its_bound_raises_data_error(bounded_loop):
    s = dlc.InferenceSession(bounded_loop, device="emu")
    x = np.array([1.5, -2.0, 0.5], np.float32)
    for n in (0, 2, 4):
        np.testing.assert_array_equal(s.run(None, {"x": x, "n": np.array(n, np.int64)})[0], x ** n)
    with pytest.raises(dlc.DataError, match="node 'power': the loop needs more than 4 iterations"):
        s.run(None, {"x": x, "n": np.array(5, np.int64)})
    assert issubclass(dlc.DataError, dlc.Error) and issubclass(dlc.Error, RuntimeError)
    # The session is still usable after a data error.
    np.testing.assert_array_equal(s.run(None, {"x": x, "n": np.array(1, np.int64)})[0], x)


# --- errors ---------------------------------------------------------------------------

def test_bad_calls_raise_value_error_naming_the_input(digits):
    s = dlc.InferenceSession(digits, device="emu")
    image = next(iter(digit_images().values()))
    with pytest.raises(ValueError, match="no input named 'img'"):
        s.run(None, {"img": image})
    with pytest.raises(ValueError, match="input 'image' is missing"):
        s.run(None, {})
    with pytest.raises(ValueError, match="input 'image' has dtype float64, the model expects float32"):
        s.run(None, {"image": image.astype(np.float64)})
    with pytest.raises(ValueError, match=r"input 'image' has shape \[1,1,8,9\]"):
        s.run(None, {"image": np.zeros((1, 1, 8, 9), np.float32)})
    with pytest.raises(ValueError, match="input 'image' must be a numpy array, got list"):
        s.run(None, {"image": image.tolist()})
    with pytest.raises(ValueError, match=r"no output named 'prob' \(outputs: logits, probs\)"):
        s.run(["prob"], {"image": image})
    with pytest.raises(ValueError, match="must be a list of names"):
        s.run("logits", {"image": image})
    with pytest.raises(ValueError, match="input_feed must be a dict"):
        s.run(None, [image])
    # After every refused call the session still runs.
    assert s.run(["logits"], {"image": image})[0].shape == (1, 10)


def test_bad_packages_and_options(digits, work, tmp_path):
    with pytest.raises(dlc.Error, match="cannot"):
        dlc.InferenceSession(str(tmp_path / "missing.dlc"))
    with open(digits, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(dlc.Error, match="checksum|corrupt|invalid"):
        dlc.InferenceSession(bytes(data))
    with pytest.raises(dlc.Error):
        dlc.InferenceSession(b"not a package")
    with pytest.raises(ValueError, match="compile_options apply to an ONNX model"):
        dlc.InferenceSession(digits, compile_options={"target": "emu"})
    with pytest.raises(ValueError, match="device must be"):
        dlc.InferenceSession(digits, device="tpu")
    with pytest.raises(ValueError, match="threads must be"):
        dlc.InferenceSession(digits, device="emu", threads=-1)


# --- compiling from Python -------------------------------------------------------------

def test_compile_matches_the_cli(digits, work):
    out = dlc.compile(os.path.join(DIGITS, "digits_cnn.onnx"), os.path.join(work, "py-digits.dlc"), target="emu")
    assert out == os.path.join(work, "py-digits.dlc")
    image = next(iter(digit_images().values()))
    a = dlc.InferenceSession(out, device="emu").run(None, {"image": image})
    b = dlc.InferenceSession(digits, device="emu").run(None, {"image": image})
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    # An onnx.ModelProto, with options: a shape range.
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    out = dlc.compile(model, os.path.join(work, "relu.dlc"), target=["emu"], input_shapes={"x": ["1..8", 3]},
                      opt_level=1)
    s = dlc.InferenceSession(out, device="emu")
    assert s.get_inputs()[0].shape == ["1..8", 3]
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0))


def test_compile_errors(work):
    bad = helper.make_model(helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob")], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 13)])
    out = os.path.join(work, "bad.dlc")
    with pytest.raises(dlc.CompileError, match="node 'frob' \\(Frobnicate, opset 13\\): unsupported op"):
        dlc.compile(bad, out, target="emu")
    assert not os.path.exists(out)
    assert issubclass(dlc.CompileError, dlc.Error)
    with pytest.raises(dlc.CompileError, match="cannot|No such file"):
        dlc.compile(os.path.join(work, "missing.onnx"), out, target="emu")
    with pytest.raises(ValueError, match="give output="):
        dlc.compile(bad)
    with pytest.raises(ValueError, match="layout must be"):
        dlc.compile(bad, out, layout="nwhc")
    with pytest.raises(ValueError, match="exclude each other"):
        dlc.compile(bad, out, fp16=True, bf16=True)
    with pytest.raises(ValueError, match="opt_level"):
        dlc.compile(bad, out, opt_level=7)


def test_an_onnx_model_is_compiled_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path))
    onnx_path = os.path.join(DIGITS, "digits_cnn.onnx")
    s = dlc.InferenceSession(onnx_path, device="emu", compile_options={"target": "emu"})
    packages = os.listdir(tmp_path / "packages")
    assert len(packages) == 1 and packages[0].endswith(".dlc")
    stamp = os.path.getmtime(tmp_path / "packages" / packages[0])
    image = next(iter(digit_images().values()))
    first = s.run(None, {"image": image})
    again = dlc.InferenceSession(onnx_path, device="emu", compile_options={"target": "emu"})
    assert os.path.getmtime(tmp_path / "packages" / packages[0]) == stamp  # not compiled again
    for x, y in zip(first, again.run(None, {"image": image})):
        np.testing.assert_array_equal(x, y)
    dlc.InferenceSession(onnx.load(onnx_path), device="emu", compile_options={"target": "emu", "opt_level": 1})
    assert len(os.listdir(tmp_path / "packages")) == 2  # other options: another package


def test_a_session_keeps_its_caches_in_cache_dir(tmp_path, monkeypatch):
    # cache_dir= takes the place of $DLC_CACHE_DIR for this session: the ONNX model's
    # package (packages/) and its kernels are kept there, and nothing in the other.
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "env"))
    mine = tmp_path / "mine"
    onnx_path = os.path.join(DIGITS, "digits_cnn.onnx")
    s = dlc.InferenceSession(onnx_path, device="emu", compile_options={"target": "emu"}, cache_dir=mine)
    packages = os.listdir(mine / "packages")
    assert len(packages) == 1 and packages[0].endswith(".dlc")
    assert len(os.listdir(mine)) > 1  # the kernel cache beside packages/
    assert not (tmp_path / "env").exists()
    image = next(iter(digit_images().values()))
    assert s.run(None, {"image": image})[0].shape == (1, 10)
    t = dlc.InferenceSession(mine / "packages" / packages[0], device="emu", cache_dir=str(mine))
    assert t.run(None, {"image": image})[0].shape == (1, 10)


def test_the_cache_key_covers_external_data(tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    # W is set aside while the ONNX library upgrades opset 13 (over 4 KB); b is read in.
    w = np.arange(2048, dtype=np.float32).reshape(2, 1024) / 1024
    b = np.arange(1024, dtype=np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
                              "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = str(folder / "ext.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    x = np.array([[1, 2]], np.float32)
    opts = {"target": "emu", "tf32": False}
    first = dlc.InferenceSession(path, device="emu", compile_options=opts).run(None, {"x": x})[0]
    np.testing.assert_allclose(first, x @ w + b, rtol=1e-6)
    with open(folder / "weights.bin", "wb") as f:  # new weights, same model file
        f.write((w * 10).tobytes() + (b * 10).tobytes())
    second = dlc.InferenceSession(path, device="emu", compile_options=opts).run(None, {"x": x})[0]
    np.testing.assert_allclose(second, x @ (w * 10) + b * 10, rtol=1e-6)
    assert len(os.listdir(tmp_path / "cache" / "packages")) == 2


def test_the_cache_key_never_blocks_or_leaves_the_folder(tmp_path, monkeypatch):
    # The cache key reads external data only as the importer would: a FIFO is not read
    # (it once blocked forever), a path out of the folder is not read either; the
    # compiler then names the problem.
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "cache"))
    for location, needle in [("pipe.bin", "is not a regular file"), ("../outside.bin", "contains '..'")]:
        folder = tmp_path / ("m-" + location.replace("/", "_").replace(".", "_"))
        folder.mkdir()
        if location == "pipe.bin":
            os.mkfifo(folder / location)
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                                  [helper.make_tensor("w", TensorProto.FLOAT, [4], np.zeros(4, np.float32).tobytes(),
                                                      raw=True)])
        w = graph.initializer[0]
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in [("location", location), ("offset", "0"), ("length", "16")]:
            e = w.external_data.add()
            e.key, e.value = k, v
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        path = str(folder / "m.onnx")
        onnx.save(model, path)
        with pytest.raises(dlc.CompileError, match=re.escape(needle)):
            dlc.InferenceSession(path, device="emu", compile_options={"target": "emu"})


# --- training ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def linear(work):
    """pred = x W + b (W f32[3,2], b f32[2]), trained with MSE and SGD at lr 0.1."""
    rng = np.random.RandomState(3)
    w0, b0 = rng.randn(3, 2).astype(np.float32), np.zeros(2, np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["pred"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("pred", TensorProto.FLOAT, [4, 2])],
        [numpy_helper.from_array(w0, "W"), numpy_helper.from_array(b0, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    out = dlc.compile(model, os.path.join(work, "linear-train.dlc"), target="emu", train=True, loss="mse",
                      optimizer="sgd", lr=0.1)
    return out, w0, b0


def test_training_session_steps_like_sgd(linear, work):
    path, w0, b0 = linear
    t = dlc.TrainingSession(path, device="emu")
    assert [i.name for i in t.get_inputs()] == ["x", "label"]
    assert t.get_outputs()[0].shape == []  # the loss, then the model's output
    params = t.parameters()
    assert sorted(params) == ["W", "b"]
    np.testing.assert_array_equal(params["W"], w0)
    rng = np.random.RandomState(4)
    w_true = rng.randn(3, 2).astype(np.float32)
    x = rng.randn(4, 3).astype(np.float32)
    label = x @ w_true + 0.5
    # One step against numpy: loss = mean((xW + b - label)^2), then W -= 0.1 dW.
    pred = x @ w0 + b0
    want_loss = np.mean((pred - label) ** 2)
    g = 2 * (pred - label) / pred.size
    assert t.evaluate({"x": x, "label": label}) == pytest.approx(want_loss, rel=1e-5)
    np.testing.assert_array_equal(t.parameters()["W"], w0)  # evaluate changes nothing
    loss = t.step({"x": x, "label": label})
    assert loss == pytest.approx(want_loss, rel=1e-5)
    np.testing.assert_allclose(t.outputs()["pred"], pred, rtol=1e-5, atol=1e-6)
    p1 = t.parameters()
    np.testing.assert_allclose(p1["W"], w0 - 0.1 * x.T @ g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p1["b"], b0 - 0.1 * g.sum(0), rtol=1e-5, atol=1e-6)
    losses = [t.step({"x": x, "label": label}) for _ in range(60)]
    assert losses[-1] < 0.05 * losses[0] and all(b <= a for a, b in zip(losses, losses[1:])), losses[::10]
    # Checkpoints, reset, set_parameters, export.
    ckpt = os.path.join(work, "linear.npz")
    t.save_checkpoint(ckpt)
    trained = t.parameters()
    t.reset()
    np.testing.assert_array_equal(t.parameters()["W"], w0)
    t.load_checkpoint(ckpt)
    np.testing.assert_array_equal(t.parameters()["W"], trained["W"])
    t.set_parameters({"W": w_true, "b": np.full(2, 0.5, np.float32)})
    assert t.evaluate({"x": x, "label": label}) == pytest.approx(0.0, abs=1e-10)
    exported = onnx.load(t.export_onnx(os.path.join(work, "linear-trained.onnx")))
    inits = {i.name: numpy_helper.to_array(i) for i in exported.graph.initializer}
    np.testing.assert_array_equal(inits["W"], w_true)


def test_training_session_errors(linear, digits):
    path, _, _ = linear
    t = dlc.TrainingSession(path, device="emu")
    with pytest.raises(ValueError, match=r"variable 'W' has shape \[2,3\], the model expects \[3,2\]"):
        t.set_parameters({"W": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match="no variable named 'V'"):
        t.set_parameters({"V": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="input 'label' is missing"):
        t.step({"x": np.zeros((4, 3), np.float32)})
    with pytest.raises(dlc.Error):
        t.load_checkpoint("/nonexistent/ckpt.npz")
    with pytest.raises(ValueError, match="not a training package"):
        dlc.TrainingSession(digits, device="emu")
    with pytest.raises(ValueError, match="go with train=True"):
        dlc.compile(os.path.join(DIGITS, "digits_cnn.onnx"), "/tmp/never.dlc", lr=0.1)
    with pytest.raises(ValueError, match="fused_attention_dropout go with train=True"):
        dlc.compile(os.path.join(DIGITS, "digits_cnn.onnx"), "/tmp/never.dlc", fused_attention_dropout=True)


def test_fused_attention_dropout_is_an_option(work):
    # Attention (Q, K and V trainable [1, 2, 16, 16]) with training-mode Dropout on its
    # probabilities, loss sum(O): FP16 training keeps it op by op unless asked; with
    # fused_attention_dropout=True the package runs FlashAttention's backward kernels,
    # and a step runs on emu with finite results.
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, (1, 2, 16, 16)).astype(np.float32), n) for n in "qkv"]
    consts = {"scale": np.array(0.25, np.float32), "ratio": np.array(0.2, np.float32), "training": np.array(True)}
    nodes = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(a, n)) for n, a in consts.items()]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("Dropout", ["p", "ratio", "training"], ["pd"], seed=5),
             helper.make_node("MatMul", ["pd", "v"], ["o"]),
             helper.make_node("Mul", ["o", "x"], ["w"]),
             helper.make_node("ReduceSum", ["w"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 16, 16])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    pkgs = {}
    for fused in (False, True):
        pkgs[fused] = dlc.compile(model, os.path.join(work, "attn_dropout_%d.dlc" % fused), target="emu",
                                  fp16=True, train=True, loss="none", fused_attention_dropout=fused)
    with open(pkgs[False], "rb") as f:
        assert b"attention_grad_mma" not in f.read()
    with open(pkgs[True], "rb") as f:
        assert b"attention_grad_mma" in f.read()
    t = dlc.TrainingSession(pkgs[True], device="emu")
    loss = t.step({"x": np.ones((1, 2, 16, 16), np.float32)})
    assert np.isfinite(loss).all()


def test_tactics_can_be_forced_and_listed(work):
    # The digits CNN in FP16: its convolutions with whole 16-byte channel chunks carry
    # cuDNN beside our kernels. On emu, "dlc" runs ours and "vendor" cuDNN's schedule
    # (its convolution computed on the host, then our epilogue kernel): the same
    # predictions, within FP16 rounding.
    pkg = dlc.compile(os.path.join(DIGITS, "digits_cnn.onnx"), os.path.join(work, "digits_fp16.dlc"),
                      target="emu", fp16=True)
    images = digit_images()
    outs = {}
    for mode in ("dlc", "vendor"):
        s = dlc.InferenceSession(pkg, device="emu", tactics=mode)
        layers = s.tactics()
        assert layers, "the FP16 digits CNN has a layer with cuDNN as a candidate"
        for layer in layers:
            assert layer["how"] == "forced"
            kinds = [c["kind"] for c in layer["candidates"]]
            assert kinds == ["dlc", "cudnn"]
            assert kinds[layer["chosen"]] == ("dlc" if mode == "dlc" else "cudnn")
            assert all(c["microseconds"] is None for c in layer["candidates"])  # emu times nothing
        outs[mode] = np.concatenate([s.run(None, {s.get_inputs()[0].name: x})[0].astype(np.float32)
                                     for x in images.values()])
    assert np.abs(outs["dlc"] - outs["vendor"]).max() <= 0.02 * np.abs(outs["dlc"]).max()
    assert (outs["dlc"].argmax(1) == outs["vendor"].argmax(1)).all()
    assert dlc.InferenceSession(pkg, device="emu").tactics()[0]["how"] == "default"
    with pytest.raises(ValueError, match="tactics must be"):
        dlc.InferenceSession(pkg, device="emu", tactics="fastest")


def test_a_training_session_from_two_threads(linear):
    """Steps on one thread while another reads the parameters: calls are serialized,
    and neither waits forever (the session's lock is only taken without the GIL)."""
    path, _, _ = linear
    t = dlc.TrainingSession(path, device="emu", threads=1)
    x, label = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    t.step({"x": x, "label": label})  # (outputs exist before the reader's first call)
    errors = []

    def stepper():
        try:
            for _ in range(40):
                t.step({"x": x, "label": label})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    def reader():
        try:
            for _ in range(40):
                assert sorted(t.parameters()) == ["W", "b"]
                t.outputs()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=stepper, daemon=True), threading.Thread(target=reader, daemon=True)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a thread is stuck"
    assert not errors, errors


# --- threads ----------------------------------------------------------------------------

def test_one_session_from_several_threads(digits):
    s = dlc.InferenceSession(digits, device="emu", threads=1)
    images = list(digit_images().values())
    want = [s.run(["logits"], {"image": im})[0] for im in images]
    errors = []

    def worker(k):
        try:
            for i in range(12):
                j = (k + i) % len(images)
                got, = s.run(["logits"], {"image": images[j]})
                if not np.array_equal(got, want[j]):
                    errors.append("thread %d run %d: wrong result" % (k, i))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("thread %d: %r" % (k, e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_the_example_script_classifies_the_digits():
    r = subprocess.run([os.environ.get("DLC_PYTHON", "/usr/bin/python3"),
                        os.path.join(ROOT, "examples", "python", "classify_digits.py"), "--device", "emu"],
                       capture_output=True, text=True, check=True)
    lines = [l for l in r.stdout.splitlines() if "predicted" in l]
    assert len(lines) == 3, r.stdout
    for line in lines:
        predicted, label = line.split("predicted ")[1].split(" with ")[0], line.split("(label ")[1]
        assert predicted == label.rstrip(")"), line


def test_the_training_example_learns_the_digits():
    r = subprocess.run([os.environ.get("DLC_PYTHON", "/usr/bin/python3"),
                        os.path.join(ROOT, "examples", "python", "train_digits.py"), "--epochs", "1", "--device", "emu"],
                       capture_output=True, text=True, check=True)
    acc = [l for l in r.stdout.splitlines() if l.startswith("test accuracy:")]
    assert acc and float(acc[0].split()[2]) > 0.9, r.stdout


def _tf32(a):
    """float32 values rounded to TF32 as tensor cores take them (10-bit mantissa, to
    nearest with ties away from zero: cvt.rna.tf32.f32)."""
    b = a.astype(np.float32).view(np.uint32)
    return ((b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def test_tf32_is_the_default_and_follows_the_providers(tmp_path, monkeypatch):
    # y = x @ W with x = ones: each output sums a column of W, whose values need all 23
    # mantissa bits; in TF32 the sum is of the rounded values.
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((64, 8)) * (1 + 2.0 ** -12)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = str(tmp_path / "mm.onnx")
    onnx.save_model(model, path)
    x = np.ones((1, 64), np.float32)
    strict = w.astype(np.float64).sum(0)
    rounded = _tf32(w).astype(np.float64).sum(0)
    assert np.abs(strict - rounded).max() > 1e-3  # the two references differ (FP32 sums: < 1e-4)

    def run(path_or_pkg, **kw):
        return dlc.InferenceSession(path_or_pkg, device="emu", **kw).run(None, {"x": x})[0][0]

    for tf32, want in ((None, rounded), (True, rounded), (False, strict)):
        pkg = dlc.compile(path, str(tmp_path / f"mm_{tf32}.dlc"), target="emu", tf32=tf32)
        np.testing.assert_allclose(run(pkg), want, rtol=1e-5, atol=1e-4, err_msg=f"tf32={tf32}")
    with pytest.raises(ValueError, match="tf32 must be"):
        dlc.compile(path, str(tmp_path / "bad.dlc"), target="emu", tf32="yes")
    # ONNX Runtime's numerics for the providers asked for: only its CUDA provider uses TF32.
    opts = {"target": "emu"}
    with pytest.warns(UserWarning):
        cpu = run(path, providers=["CPUExecutionProvider"], compile_options=opts)
    with pytest.warns(UserWarning):
        cuda = run(path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"], compile_options=opts)
    with pytest.warns(UserWarning):
        cuda_strict = run(path, providers=[("CUDAExecutionProvider", {"use_tf32": 0})], compile_options=opts)
    with pytest.warns(UserWarning):  # the first provider wins, as in ONNX Runtime
        cpu_first = run(path, providers=["CPUExecutionProvider", "CUDAExecutionProvider"], compile_options=opts)
    np.testing.assert_allclose(cpu_first, strict, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(cpu, strict, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(cuda, rounded, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(cuda_strict, strict, rtol=1e-5, atol=1e-4)
