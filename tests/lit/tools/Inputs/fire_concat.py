"""A SqueezeNet fire module: two convolutions (with Relu) concatenated, then a third
convolution reading the Concat."""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

r = np.random.RandomState(0)
inits = [numpy_helper.from_array(r.randn(*s).astype(np.float32) * 0.3, n)
         for n, s in [("w1", (4, 4, 1, 1)), ("w2", (4, 4, 3, 3)), ("w3", (4, 8, 1, 1))]]
nodes = [
    helper.make_node("Conv", ["x", "w1"], ["e1"], name="expand1x1"),
    helper.make_node("Relu", ["e1"], ["r1"], name="relu1"),
    helper.make_node("Conv", ["x", "w2"], ["e3"], name="expand3x3", pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["e3"], ["r3"], name="relu3"),
    helper.make_node("Concat", ["r1", "r3"], ["cat"], name="cat", axis=1),
    helper.make_node("Conv", ["cat", "w3"], ["y"], name="squeeze"),
]
g = helper.make_graph(nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], inits)
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
