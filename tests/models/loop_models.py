"""Small ONNX models with loops, shared by tests/models/control_flow.py and
tests/python/test_api.py."""
import onnx
from onnx import TensorProto, helper


def save_power_loop(path):
    """acc = x ** n (x f32[3]) by a Loop named 'power' whose trip count n is an input:
    its iterations are decided at run time."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc", "x"], ["acc_out"]), helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "one"], ["acc"], body=body, name="power")], "power",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3])],
        [helper.make_tensor("one", TensorProto.FLOAT, [3], [1, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
