"""Writes bind.onnx: y = If(flag, Relu(r), Neg(r)) with r = Reshape(x, shape), where
`shape` (i64[2]) and `flag` (bool scalar) are graph inputs, as exported models feed
shapes and branch conditions. dlc compiles it only with both bound (--bind)."""
import sys

import onnx
from onnx import TensorProto, helper

out = sys.argv[1]
then_g = helper.make_graph([helper.make_node("Relu", ["r"], ["t"])], "then", [],
                           [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["a", "b"])])
else_g = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [],
                           [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["a", "b"])])
graph = helper.make_graph(
    [helper.make_node("Reshape", ["x", "shape"], ["r"]),
     helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
    "bind",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
     helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
     helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, out)
