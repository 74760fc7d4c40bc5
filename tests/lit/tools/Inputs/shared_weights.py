"""Two convolutions whose weights and biases are shared as PyTorch exports them: the
second conv's weight is an Identity of the first's, its bias a Constant node."""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

r = np.random.RandomState(0)
w = numpy_helper.from_array(r.randn(4, 4, 3, 3).astype(np.float32) * 0.2, "w")
b = numpy_helper.from_array(r.randn(4).astype(np.float32) * 0.1, "b")
nodes = [
    helper.make_node("Conv", ["x", "w", "b"], ["c1_out"], name="c1", pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c1_out"], ["r"], name="relu"),
    helper.make_node("Identity", ["w"], ["w2"], name="share"),
    helper.make_node("Constant", [], ["b2"], name="bias2",
                     value=numpy_helper.from_array(r.randn(4).astype(np.float32) * 0.1, "b2")),
    helper.make_node("Conv", ["r", "w2", "b2"], ["y"], name="c2", pads=[1, 1, 1, 1]),
]
g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], [w, b])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
