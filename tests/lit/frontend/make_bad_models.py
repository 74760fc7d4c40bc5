#!/usr/bin/env python3
"""Writes malformed and unsupported ONNX models into a directory (argv[1]).

Each file exercises one class of bad input the importer must reject with one
clear error and a non-zero exit: broken bytes, broken graphs, unsupported
constructs and unsafe external-data paths.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(name, model, check=False):
    if check:
        onnx.checker.check_model(model)
    with open(os.path.join(out, name), "wb") as f:
        f.write(model.SerializeToString())


def model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=ops, producer_name="dlc-tests")


f32 = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

good = model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], [f32("x", [2, 3])],
             [f32("y", [2, 3])])
save("good.onnx", good, check=True)
data = good.SerializeToString()
with open(os.path.join(out, "truncated.onnx"), "wb") as f:
    f.write(data[: len(data) // 2])
with open(os.path.join(out, "not_protobuf.onnx"), "wb") as f:
    f.write(b"this is a text file, not an ONNX model\n" * 4)
open(os.path.join(out, "empty.onnx"), "wb").close()

save("cyclic.onnx", model([helper.make_node("Relu", ["z"], ["y"], name="a"),
                           helper.make_node("Relu", ["y"], ["z"], name="b")],
                          [f32("x", [2])], [f32("y", [2])]))
save("missing_initializer.onnx",
     model([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], [f32("x", [2])],
           [f32("y", [2])]))
save("unknown_ops.onnx",
     model([helper.make_node("Frobnicate", ["x"], ["t"], name="frob1"),
            helper.make_node("Relu", ["t"], ["u"], name="ok"),
            helper.make_node("Defrobnicate", ["u"], ["y"], name="frob2")],
           [f32("x", [2])], [f32("y", [2])]))
save("custom_domain.onnx",
     model([helper.make_node("Frob", ["x"], ["y"], name="frob", domain="com.example")],
           [f32("x", [2])], [f32("y", [2])], domains=["com.example"]))
# A while loop (no trip count): dlc unrolls loops at compile time, so without --loop-bound it is refused.
save("loop.onnx", model([helper.make_node("Loop", ["", "c", "v"], ["y"], name="loop0",
                                          body=helper.make_graph(
                                              [helper.make_node("Identity", ["ci"], ["co"]),
                                               helper.make_node("Identity", ["vi"], ["vo"])], "b",
                                              [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                               helper.make_tensor_value_info("ci", TensorProto.BOOL, []),
                                               f32("vi", [2])],
                                              [helper.make_tensor_value_info("co", TensorProto.BOOL, []),
                                               f32("vo", [2])]))],
                        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), f32("v", [2])],
                        [f32("y", [2])]))
save("string_input.onnx",
     model([helper.make_node("Identity", ["s"], ["y"], name="id")],
           [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
           [helper.make_tensor_value_info("y", TensorProto.STRING, [2])]))
save("dynamic_reshape.onnx",
     model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_dyn")],
           [f32("x", [2, 3]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
           [f32("y", [3, 2])]))
save("huge_dims.onnx", model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                             [f32("x", [2**40, 2**40])], [f32("y", [2**40, 2**40])]))
save("opset24.onnx", model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2])],
                           [f32("y", [2])], opset=24))
ir12 = model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2])], [f32("y", [2])], opset=23)
ir12.ir_version = 12
save("ir12.onnx", ir12)
# An input nothing reads, of a type dlc does not support, is left out (a note says so).
save("unused_string_input.onnx",
     model([helper.make_node("Relu", ["x"], ["y"], name="r")],
           [f32("x", [2]), helper.make_tensor_value_info("s", TensorProto.STRING, [2])], [f32("y", [2])]))
# Nodes out of order are sorted (a note says so).
save("unsorted.onnx", model([helper.make_node("Relu", ["t"], ["y"], name="second"),
                             helper.make_node("Neg", ["x"], ["t"], name="first")],
                            [f32("x", [2])], [f32("y", [2])]))


# Types of IR 9-11 that are out of scope: float8 (17) and int4 (22) inputs, a float4
# (23) initializer.
f8 = model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", 17, [2])],
           [f32("y", [2])], opset=19)
f8.ir_version = 9
save("float8_input.onnx", f8)
i4 = model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", 22, [2])],
           [f32("y", [2])], opset=21)
i4.ir_version = 10
save("int4_input.onnx", i4)
f4_init = onnx.TensorProto()
f4_init.name, f4_init.data_type = "w", 23
f4_init.dims.extend([2])
f4_init.raw_data = b"\x12"
f4 = model([helper.make_node("Add", ["x", "w"], ["y"])], [f32("x", [2])], [f32("y", [2])], [f4_init],
           opset=23)
f4.ir_version = 11
save("float4_initializer.onnx", f4)

# Models the ONNX library (IR 8, opset 17) does not know get dlc's own checks.
def model18(nodes, inputs, outputs, inits=()):
    m = model(nodes, inputs, outputs, inits, opset=18)
    m.ir_version = 9
    return m


save("ssa18.onnx", model18([helper.make_node("Relu", ["x"], ["y"], name="r1"),
                            helper.make_node("Neg", ["x"], ["y"], name="r2")], [f32("x", [2])], [f32("y", [2])]))
bad_attr = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
bad_attr.attribute[0].type = onnx.AttributeProto.FLOAT
save("attr_type18.onnx", model18([bad_attr], [f32("x", [2, 2])], [f32("y", [2, 2])]))
no_type = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
no_type.attribute[0].type = onnx.AttributeProto.UNDEFINED
save("attr_notype18.onnx", model18([no_type], [f32("x", [2, 2])], [f32("y", [2, 2])]))
save("cyclic18.onnx", model18([helper.make_node("Relu", ["z"], ["y"], name="a"),
                               helper.make_node("Relu", ["y"], ["z"], name="b")], [f32("x", [2])], [f32("y", [2])]))
# Valid: a Loop body's inputs shadow the outer graph's names, and its initializer
# repeats an outer name (the ONNX checker allows both).
body = helper.make_graph([helper.make_node("Add", ["x", "one"], ["x_out"], name="inc"),
                          helper.make_node("Identity", ["c"], ["c_out"], name="keep")], "body",
                         [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                          helper.make_tensor_value_info("c", TensorProto.BOOL, []), f32("x", [2])],
                         [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), f32("x_out", [2])],
                         [numpy_helper.from_array(np.ones(2, np.float32), "one")])
save("shadow18.onnx", model18([helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)],
                              [helper.make_tensor_value_info("n", TensorProto.INT64, []), f32("x", [2])],
                              [f32("y", [2])], [numpy_helper.from_array(np.array(3, np.int64), "n"),
                                                numpy_helper.from_array(np.zeros(2, np.float32), "one")]))
save("missing_input18.onnx", model18([helper.make_node("Conv", ["x"], ["y"], name="conv")],
                                    [f32("x", [1, 1, 3, 3])], [f32("y", [1, 1, 3, 3])]))
absent = model([helper.make_node("Attention", ["q", "", "v"], ["y"], name="att")],
               [f32("q", [1, 1, 2, 4]), f32("v", [1, 1, 2, 4])], [f32("y", [1, 1, 2, 4])], opset=23)
absent.ir_version = 10
save("absent_input23.onnx", absent)
save("undefined18.onnx", model18([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], [f32("x", [2])],
                                 [f32("y", [2])]))


def external_model(location, length=None, dims=(4,)):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)] + ([("length", str(length))] if length is not None else [])
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], [f32("x", list(dims))],
                 [f32("y", list(dims))], inits=[t])


save("ext_traversal.onnx", external_model("../../etc/passwd"))
save("ext_absolute.onnx", external_model("/etc/passwd"))
link = os.path.join(out, "escape.bin")
if os.path.lexists(link):
    os.remove(link)
os.symlink("/etc/hostname", link)
save("ext_symlink.onnx", external_model("escape.bin"))
with open(os.path.join(out, "short.bin"), "wb") as f:
    f.write(np.zeros(2, np.float32).tobytes())
save("ext_short.onnx", external_model("short.bin"))
save("ext_missing.onnx", external_model("nowhere.bin"))
with open(os.path.join(out, "weights.bin"), "wb") as f:
    f.write(np.arange(4, dtype=np.float32).tobytes())
save("ext_ok.onnx", external_model("weights.bin"))

# More than 2 GB of external weights: a sparse file, so the test costs no disk space.
big_elems = 600_000_000  # 2.4 GB of float32
with open(os.path.join(out, "big.bin"), "wb") as f:
    f.truncate(big_elems * 4)
t = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[big_elems])
t.data_location = TensorProto.EXTERNAL
e = t.external_data.add()
e.key, e.value = "location", "big.bin"
starts = numpy_helper.from_array(np.array([0], np.int64), "starts")
ends = numpy_helper.from_array(np.array([4], np.int64), "ends")
save("ext_big.onnx",
     model([helper.make_node("Slice", ["big", "starts", "ends"], ["head"], name="head"),
            helper.make_node("Add", ["x", "head"], ["y"], name="add_head")],
           [f32("x", [4])], [f32("y", [4])], inits=[t, starts, ends]))


# Loops nested 30 deep, 4 trips each: 4^30 unrolled bodies. The budget on all unrolled
# nodes together refuses it at once (each loop alone is under --max-loop-unroll).
def nested_loop(depth):
    i64 = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, [])
    b = lambda name: helper.make_tensor_value_info(name, TensorProto.BOOL, [])
    trip = helper.make_tensor("trip", TensorProto.INT64, [], [4])
    if depth == 0:
        nodes = [helper.make_node("Identity", ["ci"], ["co"]), helper.make_node("Relu", ["vi"], ["vo"])]
    else:
        nodes = [helper.make_node("Constant", [], ["m%d" % depth], value=trip),
                 helper.make_node("Identity", ["ci%d" % depth], ["co%d" % depth]),
                 helper.make_node("Loop", ["m%d" % depth, "", "vi%d" % depth], ["vo%d" % depth], name="loop%d" % depth,
                                  body=nested_loop(depth - 1))]
        return helper.make_graph(nodes, "body%d" % depth, [i64("i%d" % depth), b("ci%d" % depth), f32("vi%d" % depth, [2])],
                                 [b("co%d" % depth), f32("vo%d" % depth, [2])])
    return helper.make_graph(nodes, "body%d" % depth, [i64("i"), b("ci"), f32("vi", [2])], [b("co"), f32("vo", [2])])


save("nested_loops.onnx", model([helper.make_node("Loop", ["m", "", "x"], ["y"], name="outer", body=nested_loop(29))],
                                [f32("x", [2])], [f32("y", [2])],
                                [helper.make_tensor("m", TensorProto.INT64, [], [4])]))

# Shape arithmetic past int64: each is an error naming the node, never a wrapped size.
i64c = lambda name, vals: numpy_helper.from_array(np.array(vals, np.int64), name)
save("tile_huge.onnx", model([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")], [f32("x", [2])],
                             [f32("y", ["a"])], [i64c("r", [1 << 62])]))
save("expand_huge.onnx", model([helper.make_node("Expand", ["x", "s"], ["y"], name="expand")], [f32("x", [1, 1])],
                               [f32("y", ["a", "b"])], [i64c("s", [1 << 40, 1 << 40])]))
save("constantofshape_huge.onnx",
     model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [f32("x", [1])], [f32("y", ["a", "b", "c"])],
           [i64c("s", [1 << 31, 1 << 31, 1 << 31])]))
save("reshape_huge.onnx", model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], [f32("x", [4])],
                                [f32("y", ["a", "b", "c", "d"])], [i64c("s", [1 << 40, 4, 1, -1])]))
# The known entries' product overflows int64 (found by fuzz_onnx).
save("reshape_overflow.onnx", model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], [f32("x", [4])],
                                    [f32("y", ["a", "b", "c"])], [i64c("s", [1 << 40, 1 << 40, -1])]))
save("resize_huge.onnx",
     model([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="resize", mode="nearest")], [f32("x", [1, 1, 2, 2])],
           [f32("y", ["a", "b", "c", "d"])], [numpy_helper.from_array(np.array([1, 1, 1e30, 1e30], np.float32), "sc")]))

# Valid, but its arena (two 275 GB tensors) is more than any GPU's memory: compile warns.
save("huge_arena.onnx", model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [f32("x", [1 << 36])],
                              [f32("y", [1 << 36])]))


# The budget counts the If branches a loop body imports: Loop(256) -> If -> Loop(256) ->
# If with a 10,000-node branch would import 655 million nodes if only each body's own
# nodes were charged.
def if_around(body_nodes, tag):
    branch = helper.make_graph(body_nodes, "branch" + tag, [], [f32("o" + tag, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["vi" + tag], ["p" + tag])], "other" + tag, [],
                              [f32("p" + tag, [2])])
    return helper.make_node("If", ["c"], ["vo" + tag], name="if" + tag, then_branch=branch, else_branch=other)


def loop_of(trips, node, tag):
    i64 = helper.make_tensor_value_info("i" + tag, TensorProto.INT64, [])
    body = helper.make_graph([helper.make_node("Identity", ["ci" + tag], ["co" + tag]), node], "body" + tag,
                             [i64, helper.make_tensor_value_info("ci" + tag, TensorProto.BOOL, []), f32("vi" + tag, [2])],
                             [helper.make_tensor_value_info("co" + tag, TensorProto.BOOL, []), f32("vo" + tag, [2])])
    return body


big = [helper.make_node("Relu", ["vib"], ["r0"])] + [helper.make_node("Relu", ["r%d" % k], ["r%d" % (k + 1)])
                                                      for k in range(9998)] + [helper.make_node("Relu", ["r9998"], ["ob"])]
inner_body = loop_of(256, if_around(big, "b"), "b")
inner_loop = helper.make_node("Loop", ["m", "", "via"], ["o_a"], name="inner", body=inner_body)
outer_if = helper.make_node("If", ["c"], ["voa"], name="ifa",
                            then_branch=helper.make_graph([inner_loop], "then_a", [], [f32("o_a", [2])]),
                            else_branch=helper.make_graph([helper.make_node("Identity", ["via"], ["pa"])], "else_a", [],
                                                          [f32("pa", [2])]))
save("loop_if_loop.onnx", model([helper.make_node("Loop", ["m", "", "x"], ["y"], name="outer",
                                                  body=loop_of(256, outer_if, "a"))],
                                [helper.make_tensor_value_info("c", TensorProto.BOOL, []), f32("x", [2])],
                                [f32("y", [2])], [helper.make_tensor("m", TensorProto.INT64, [], [256])]))

# Quantization dlc refuses: blocked scales of the wrong shape (opset 21), INT4 weights
# with too few bytes, a 16-bit type.
u8 = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.UINT8, shape)
save("blocked_quantize.onnx",
     model([helper.make_node("QuantizeLinear", ["x", "s"], ["y"], name="q_blocked", block_size=2)],
           [f32("x", [2, 4]), f32("s", [2, 3])], [u8("y", [2, 4])], opset=21))
int4 = TensorProto()
int4.name, int4.data_type, int4.raw_data = "w", 22, bytes([0x21, 0x43])  # 4 values, not 6
int4.dims.extend([2, 3])
save("int4_short.onnx",
     model([helper.make_node("DequantizeLinear", ["w", "s"], ["y"], name="dq4")],
           [], [f32("y", [2, 3])], inits=[int4, helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])],
           opset=21))
z4 = TensorProto()
z4.name, z4.data_type, z4.raw_data = "z", 22, bytes([0])
save("quantize_int4.onnx",
     model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q4")],
           [f32("x", [2])], [f32("y", [2])],
           inits=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5]), z4], opset=21))
save("qlinear_concat_inputs.onnx",
     model([helper.make_node("QLinearConcat", ["s", "z", "x", "s"], ["y"], name="qcat", axis=0,
                             domain="com.microsoft")],
           [u8("x", [2])], [u8("y", [2])],
           inits=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5]),
                  helper.make_tensor("z", TensorProto.UINT8, [], [0])], opset=17, domains=["com.microsoft"]))
save("quantize_int16.onnx",
     model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q16")],
           [f32("x", [4])], [helper.make_tensor_value_info("y", TensorProto.INT16, [4])],
           inits=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5]),
                  helper.make_tensor("z", TensorProto.INT16, [], [0])], opset=21))
# Float8: a zero point other than 0, saturate=0, a float8 graph output.
def f8_const(name, byte, shape=()):
    t = onnx.TensorProto()
    t.name, t.data_type = name, 17
    t.dims.extend(shape)
    t.raw_data = bytes([byte])
    return t


f8_inits = lambda zp: [helper.make_tensor("s", TensorProto.FLOAT, [], [0.5]), f8_const("z", zp)]
save("float8_zero_point.onnx",
     model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q8"),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="d8")],
           [f32("x", [4])], [f32("y", [4])], inits=f8_inits(0x38), opset=19))
save("float8_no_saturation.onnx",
     model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q8", saturate=0),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="d8")],
           [f32("x", [4])], [f32("y", [4])], inits=f8_inits(0), opset=19))
save("float8_output.onnx",
     model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q8")],
           [f32("x", [4])], [helper.make_tensor_value_info("y", 17, [4])], inits=f8_inits(0), opset=19))
# MatMulNBits with a block size whose sizes would wrap, and an empty B.
save("nbits_huge_block.onnx",
     model([helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], name="nbits", domain="com.microsoft",
                             K=4, N=1, bits=8, block_size=2 ** 61)],
           [f32("a", [1, 4])], [f32("y", [1, 1])],
           inits=[helper.make_tensor("b", TensorProto.UINT8, [1, 1, 0], []),
                  helper.make_tensor("s", TensorProto.FLOAT, [1], [1.0])], domains=["com.microsoft"]))
