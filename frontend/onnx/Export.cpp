//===- Export.cpp - A model with new initializer values --------------------===//
//
// `dlc export`: the model a training package was compiled from, with the trained
// values of its initializers. Everything else (graph, opsets, metadata) is kept.
// A replaced initializer keeps its name, type and dims and stores its data inline
// (raw_data), also when the original lived in an external file. BatchNormalization
// exported in training form (PyTorch's TrainingMode.TRAINING: batch statistics,
// running-statistics outputs that lead nowhere) is written in inference form, so
// that the model infers with the trained running statistics.
//===----------------------------------------------------------------------===//
#include "OnnxUtil.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/Graph.h"

#include <algorithm>
#include <set>

namespace dlc::frontend {

llvm::Expected<std::string> replaceInitializers(llvm::StringRef modelBytes,
                                                const std::map<std::string, ir::Tensor> &values,
                                                std::vector<std::string> *replaced) {
  onnx::ModelProto model;
  if (!model.ParseFromArray(modelBytes.data(), static_cast<int>(modelBytes.size())))
    return ir::makeError("the embedded model is not a valid ONNX ModelProto");
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    auto it = values.find(t.name());
    if (it == values.end())
      continue;
    const ir::Tensor &v = it->second;
    ir::Shape dims(t.dims().begin(), t.dims().end());
    if (dtypeFromOnnx(t.data_type()) != v.dtype() || dims != v.shape())
      return ir::errorf("initializer '{0}' is {1} {2}, but the new value is {3}", t.name(),
                        onnxTypeName(t.data_type()), ir::shapeStr(dims), v.type().str());
    onnx::TensorProto fresh;
    fresh.set_name(t.name());
    fresh.set_data_type(t.data_type());
    *fresh.mutable_dims() = t.dims();
    if (t.has_doc_string())
      fresh.set_doc_string(t.doc_string());
    fresh.set_raw_data(std::string(static_cast<const char *>(v.raw()), v.byteSize()));
    t = std::move(fresh);
    if (replaced)
      replaced->push_back(t.name());
  }
  onnx::GraphProto &g = *model.mutable_graph();
  std::set<std::string> consumed;
  for (const onnx::NodeProto &n : g.node())
    consumed.insert(n.input().begin(), n.input().end());
  for (const onnx::ValueInfoProto &o : g.output())
    consumed.insert(o.name());
  for (onnx::NodeProto &n : *g.mutable_node()) {
    if (n.op_type() != "BatchNormalization" || !(n.domain().empty() || n.domain() == "ai.onnx"))
      continue;
    bool unused =
        std::none_of(n.output().begin() + std::min(n.output_size(), 1), n.output().end(),
                     [&](const std::string &o) { return !o.empty() && consumed.count(o); });
    for (onnx::AttributeProto &a : *n.mutable_attribute())
      if (a.name() == "training_mode" && a.i() != 0 && unused) {
        a.set_i(0);
        n.mutable_output()->DeleteSubrange(1, n.output_size() - 1);
      }
  }
  std::string out;
  if (!model.SerializeToString(&out))
    return ir::makeError("cannot serialize the model (over 2 GiB?)");
  return out;
}

} // namespace dlc::frontend
