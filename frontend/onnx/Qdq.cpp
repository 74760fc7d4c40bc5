//===- Qdq.cpp - Writing explicitly quantized (QDQ) ONNX models ------------===//
//
// The form written is the one ONNX Runtime's quantizer writes (and ONNX Runtime
// reads):
//   x -> QuantizeLinear(x_scale, 0: int8) -> DequantizeLinear -> Conv/MatMul/Gemm
//   W (int8 initializer) -> DequantizeLinear(W_scale[C], axis) -> the same layer
//   B (int32 initializer, scale x_scale * W_scale, no zero point) -> DequantizeLinear
// Activations are symmetric INT8 per tensor (zero point 0, TensorRT's only form),
// weights symmetric INT8 in [-127, 127] per output channel. With fp8, both are float8
// e4m3fn (the threshold at 448), biases stay FP32, and the model moves to opset 19. Data-movement
// ops between a quantized tensor and quantized layers (MaxPool, Reshape, ..., and Concat, whose
// inputs all take its output's scale) get the same scale on both sides where all
// they feed is quantized layers, so that the compiler moves INT8 through them
// (fold-qdq).
//===----------------------------------------------------------------------===//
#include "dlc/frontend/Qdq.h"

#include "ModelChecks.h"
#include "OnnxUtil.h"
#include "dlc/ir/Graph.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>

namespace dlc::frontend {

namespace {

bool defaultDomain(const onnx::NodeProto &n) {
  return n.domain().empty() || n.domain() == "ai.onnx";
}

/// Ops that only move or select values: a scale on their input holds for their output.
bool movesData(const onnx::NodeProto &n) {
  static const std::set<std::string> ops = {"MaxPool", "Reshape",   "Flatten", "Transpose",
                                            "Squeeze", "Unsqueeze", "Identity"};
  if (!defaultDomain(n) || !ops.count(n.op_type()) || n.input_size() < 1)
    return false;
  // MaxPool's optional Indices output is not data.
  return n.output_size() == 1 || (n.output_size() == 2 && n.output(1).empty());
}

/// A Concat: its inputs, quantized at its output's scale, concatenate as INT8 (a
/// quantization of the whole is the concatenation of the quantized parts).
bool concatenates(const onnx::NodeProto &n) {
  return defaultDomain(n) && n.op_type() == "Concat" && n.input_size() >= 1 && n.output_size() == 1;
}

/// The data inputs of a node the scale of its output carries to: a movement op's
/// first input, every input of a Concat; none for other nodes.
std::vector<int> sharedInputs(const onnx::NodeProto &n) {
  if (concatenates(n)) {
    std::vector<int> all(static_cast<size_t>(n.input_size()));
    for (int k = 0; k < n.input_size(); ++k)
      all[static_cast<size_t>(k)] = k;
    return all;
  }
  return movesData(n) ? std::vector<int>{0} : std::vector<int>{};
}

/// Each node's name for the report and --exclude: its own where that is unique, else
/// "<Op>_<index>".
std::vector<std::string> nodeNames(const onnx::GraphProto &g) {
  std::map<std::string, int> count;
  for (const auto &n : g.node())
    count[n.name()]++;
  std::set<std::string> taken;
  for (const auto &[name, k] : count)
    if (!name.empty() && k == 1)
      taken.insert(name);
  std::vector<std::string> names;
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto &n = g.node(i);
    if (!n.name().empty() && count[n.name()] == 1) {
      names.push_back(n.name());
      continue;
    }
    std::string name = n.op_type() + "_" + std::to_string(i);
    for (int k = 1; !taken.insert(name).second; ++k)
      name = n.op_type() + "_" + std::to_string(i) + "_" + std::to_string(k);
    names.push_back(name);
  }
  return names;
}

int64_t defaultOpset(const onnx::ModelProto &m) {
  for (const auto &o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      return o.version();
  return 0;
}

const onnx::AttributeProto *attr(const onnx::NodeProto &n, const char *name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

std::set<std::string> namesReadBySubgraphs(const onnx::GraphProto &g);

/// FP32 constants computed by nodes become initializers where only layers read them as
/// weights or biases (Conv, MatMul, Gemm inputs 1 and 2): a Constant's `value`, and an
/// Identity of an initializer (PyTorch's exporter shares equal weights that way), so
/// that those layers find them as initializers. Anything else (a graph output, another
/// reader, another type) stays as it is: no copy of a weight nobody quantizes.
void materializeConstants(onnx::GraphProto &g) {
  std::unordered_map<std::string, int> init;
  for (int i = 0; i < g.initializer_size(); ++i)
    init[g.initializer(i).name()] = i;
  std::set<std::string> inputs, outputs;
  for (const auto &v : g.input())
    inputs.insert(v.name());
  for (const auto &v : g.output())
    outputs.insert(v.name());
  std::set<std::string> subgraphReads = namesReadBySubgraphs(g);
  std::unordered_map<std::string, bool> weightOnly; // read only as a layer's weight or bias
  for (const auto &n : g.node())
    for (int k = 0; k < n.input_size(); ++k) {
      const bool layer =
          defaultDomain(n) && k >= 1 && k <= 2 &&
          (n.op_type() == "Conv" || n.op_type() == "MatMul" || n.op_type() == "Gemm");
      auto [it, fresh] = weightOnly.emplace(n.input(k), layer);
      if (!fresh)
        it->second = it->second && layer;
    }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (onnx::NodeProto &n : *g.mutable_node()) {
    auto reader = weightOnly.find(n.output_size() == 1 ? n.output(0) : "");
    if (!defaultDomain(n) || n.output_size() != 1 || init.count(n.output(0)) ||
        outputs.count(n.output(0)) || subgraphReads.count(n.output(0)) ||
        reader == weightOnly.end() || !reader->second) {
      *kept.Add() = std::move(n);
      continue;
    }
    const onnx::TensorProto *value = nullptr;
    if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value")
      value = &n.attribute(0).t();
    else if (n.op_type() == "Identity" && n.input_size() == 1 && init.count(n.input(0)) &&
             !inputs.count(n.input(0)))
      value = &g.initializer(init.at(n.input(0)));
    if (!value || value->data_type() != onnx::TensorProto::FLOAT) {
      *kept.Add() = std::move(n);
      continue;
    }
    onnx::TensorProto t = *value;
    t.set_name(n.output(0));
    init[n.output(0)] = g.initializer_size();
    *g.add_initializer() = std::move(t);
  }
  g.mutable_node()->Swap(&kept);
}

llvm::Expected<onnx::ModelProto> parse(llvm::StringRef bytes) {
  onnx::ModelProto m;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !m.has_graph())
    return ir::makeError("not a valid ONNX model (ModelProto)");
  bool changed = false;
  if (std::string cycle = sortNodes(*m.mutable_graph(), changed); !cycle.empty())
    return ir::makeError(cycle);
  materializeConstants(*m.mutable_graph());
  return m;
}

llvm::Expected<std::string> serialize(const onnx::ModelProto &m) {
  std::string out;
  if (!m.SerializeToString(&out))
    return ir::makeError("cannot serialize the model (over 2 GiB?)");
  return out;
}

/// The main graph's structure: initializers, constants and producers by name.
struct GraphIndex {
  std::unordered_map<std::string, const onnx::TensorProto *> initializers;
  std::set<std::string> constants; // initializers and Constant outputs
  std::unordered_map<std::string, int> producer;
  std::set<std::string> inputs;
  explicit GraphIndex(const onnx::GraphProto &g) {
    for (const auto &t : g.initializer()) {
      initializers[t.name()] = &t;
      constants.insert(t.name());
    }
    for (const auto &i : g.input())
      if (!initializers.count(i.name()))
        inputs.insert(i.name());
    // (Nodes are in dependency order: a node of constants only, as a Transpose of a
    // weight, computes a constant.)
    for (int i = 0; i < g.node_size(); ++i) {
      const onnx::NodeProto &n = g.node(i);
      bool constant = n.op_type() == "Constant" && defaultDomain(n);
      if (!constant && n.input_size() > 0) {
        constant = true;
        for (const std::string &in : n.input())
          constant &= in.empty() || constants.count(in) > 0;
        for (const auto &a : n.attribute()) // (a subgraph may read anything)
          constant &=
              a.type() != onnx::AttributeProto::GRAPH && a.type() != onnx::AttributeProto::GRAPHS;
      }
      for (const std::string &o : n.output()) {
        if (o.empty())
          continue;
        producer[o] = i;
        if (constant)
          constants.insert(o);
      }
    }
  }
  const onnx::TensorProto *floatInitializer(const std::string &name) const {
    auto it = initializers.find(name);
    return it != initializers.end() && it->second->data_type() == onnx::TensorProto::FLOAT
               ? it->second
               : nullptr;
  }
};

/// Why a Conv, MatMul or Gemm cannot be quantized (empty: it can), filling `l`.
std::string describeLayer(const onnx::NodeProto &n, const GraphIndex &gi, QuantLayer &l) {
  auto activation = [&](int i) {
    return i < n.input_size() && !n.input(i).empty() && !gi.constants.count(n.input(i));
  };
  auto weight = [&](int i, size_t minRank, size_t maxRank) -> const onnx::TensorProto * {
    if (i >= n.input_size())
      return nullptr;
    const onnx::TensorProto *t = gi.floatInitializer(n.input(i));
    return t && static_cast<size_t>(t->dims_size()) >= minRank &&
                   static_cast<size_t>(t->dims_size()) <= maxRank
               ? t
               : nullptr;
  };
  auto bias = [&](int i, int64_t channels) {
    const onnx::TensorProto *b = i < n.input_size() ? gi.floatInitializer(n.input(i)) : nullptr;
    if (b && b->dims_size() == 1 && b->dims(0) == channels)
      l.bias = n.input(i);
  };
  if (n.op_type() == "Conv") {
    const onnx::TensorProto *w = weight(1, 3, 5);
    if (!activation(0) || !w)
      return "its input is a constant or its weight is not an FP32 initializer";
    l.activations = {n.input(0)};
    l.weight = n.input(1);
    l.weightAxis = 0;
    bias(2, w->dims(0));
    return "";
  }
  if (n.op_type() == "Gemm") {
    const onnx::AttributeProto *ta = attr(n, "transA"), *tb = attr(n, "transB"),
                               *alpha = attr(n, "alpha"), *beta = attr(n, "beta");
    if ((ta && ta->i()) || (alpha && alpha->f() != 1.0f) || (beta && beta->f() != 1.0f))
      return "transA, alpha or beta is not the default";
    const onnx::TensorProto *w = weight(1, 2, 2);
    if (!activation(0) || !w)
      return "its input is a constant or its weight is not an FP32 initializer";
    l.activations = {n.input(0)};
    l.weight = n.input(1);
    l.weightAxis = tb && tb->i() ? 0 : 1;
    bias(2, w->dims(l.weightAxis));
    return "";
  }
  // MatMul: by a constant [K, N] weight (per column), or of two activations.
  if (!activation(0))
    return "its first input is a constant";
  l.activations = {n.input(0)};
  if (activation(1)) {
    l.activations.push_back(n.input(1));
    return "";
  }
  if (!weight(1, 2, 2))
    return "its weight is not a rank-2 FP32 initializer (computed from one, or batched)";
  l.weight = n.input(1);
  l.weightAxis = 1;
  return "";
}

/// Quantizes v with `scale` (ONNX QuantizeLinear: round half to even, saturate) to
/// INT8's bits, or float8 e4m3fn's with `fp8`.
char quantize8(float v, float scale, bool fp8) {
  if (fp8)
    return static_cast<char>(floatToF8(v / scale, false));
  float r = std::nearbyint(v / scale);
  return static_cast<char>(static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f)));
}

/// threshold / 127 (FP8: / 448, e4m3's largest value), or 1 where that is not a
/// positive normal number (an all-zero tensor, an underflow).
float scaleFor(float threshold, bool fp8) {
  const float s = threshold / (fp8 ? 448.0f : 127.0f);
  return std::isfinite(s) && s >= std::numeric_limits<float>::min() ? s : 1.0f;
}

constexpr int32_t kFloat8E4M3FN = 17; // (newer than onnx 1.12's enum)

/// A 1-D int64 initializer `name` of `values` in graph `g`.
std::string int64Initializer(onnx::GraphProto &g, const std::string &name,
                             const std::vector<int64_t> &values) {
  onnx::TensorProto &t = *g.add_initializer();
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  t.set_raw_data(std::string(reinterpret_cast<const char *>(values.data()), values.size() * 8));
  return name;
}

/// Rewrites the nodes of `g` (and of its subgraphs) from opset `from` (11 or later) to
/// opset 19's forms, where the default domain changed an op incompatibly in between:
///  - attributes that became inputs move to initializers: Dropout's ratio (12);
///    ReduceSum's, Squeeze's and Unsqueeze's axes and Split's split (13); the other
///    Reduce* ops' axes (18);
///  - Split with neither sizes nor num_outputs gets num_outputs (18 requires one);
///  - Softmax, LogSoftmax and Hardmax before 13 work on the input flattened to 2-D at
///    `axis` (default 1): Flatten, the op on the last axis, and a Reshape back to the
///    input's shape (unless the axis is -1 already);
///  - RoiAlign before 16 has no coordinate_transformation_mode: "output_half_pixel",
///    what it did (16's default is "half_pixel").
/// Everything else the default domain changed between 11 and 19 is compatible.
void upgradeToOpset19(onnx::GraphProto &g, int64_t from,
                      const std::function<std::string(const std::string &)> &fresh) {
  static const std::set<std::string> reduce18 = {"ReduceL1",  "ReduceL2",        "ReduceLogSum",
                                                 "ReduceMax", "ReduceLogSumExp", "ReduceMean",
                                                 "ReduceMin", "ReduceProd",      "ReduceSumSquare"};
  static const std::set<std::string> axes13 = {"ReduceSum", "Squeeze", "Unsqueeze"};
  static const std::set<std::string> flattening = {"Softmax", "LogSoftmax", "Hardmax"};
  auto takeAttr = [](onnx::NodeProto &n, const char *name) -> std::optional<onnx::AttributeProto> {
    auto *attrs = n.mutable_attribute();
    auto it = std::find_if(attrs->begin(), attrs->end(),
                           [&](const onnx::AttributeProto &a) { return a.name() == name; });
    if (it == attrs->end())
      return std::nullopt;
    onnx::AttributeProto a = *it;
    attrs->erase(it);
    return a;
  };
  auto intAttr = [](onnx::NodeProto &n, const char *name, int64_t v) {
    onnx::AttributeProto &a = *n.add_attribute();
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(v);
  };
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (onnx::NodeProto &n : *g.mutable_node()) {
    for (onnx::AttributeProto &a : *n.mutable_attribute()) {
      if (a.has_g())
        upgradeToOpset19(*a.mutable_g(), from, fresh);
      for (onnx::GraphProto &sub : *a.mutable_graphs())
        upgradeToOpset19(sub, from, fresh);
    }
    const std::string &op = n.op_type();
    if (!defaultDomain(n)) {
      *nodes.Add() = std::move(n);
      continue;
    }
    const char *moved = (reduce18.count(op) && from < 18) || (axes13.count(op) && from < 13)
                            ? "axes"
                        : op == "Split" && from < 13 ? "split"
                                                     : nullptr;
    if (moved) {
      if (auto a = takeAttr(n, moved)) {
        std::vector<int64_t> values(a->ints().begin(), a->ints().end());
        if (op == "Split" && n.input_size() > 1) // (no input 1 before 13)
          n.mutable_input()->DeleteSubrange(1, n.input_size() - 1);
        n.add_input(int64Initializer(g, fresh(n.name() + "_" + moved), values));
      }
    }
    if (op == "Split" && from < 18 && (n.input_size() < 2 || n.input(1).empty())) {
      takeAttr(n, "num_outputs");
      intAttr(n, "num_outputs", n.output_size());
    }
    if (op == "Dropout" && from < 12)
      if (auto a = takeAttr(n, "ratio")) {
        onnx::TensorProto &t = *g.add_initializer();
        t.set_name(fresh(n.name() + "_ratio"));
        t.set_data_type(onnx::TensorProto::FLOAT);
        const float r = a->f();
        t.set_raw_data(std::string(reinterpret_cast<const char *>(&r), 4));
        n.add_input(t.name());
      }
    if (op == "RoiAlign" && from < 16 &&
        std::none_of(n.attribute().begin(), n.attribute().end(), [](const onnx::AttributeProto &a) {
          return a.name() == "coordinate_transformation_mode";
        })) {
      onnx::AttributeProto &a = *n.add_attribute();
      a.set_name("coordinate_transformation_mode");
      a.set_type(onnx::AttributeProto::STRING);
      a.set_s("output_half_pixel");
    }
    const onnx::AttributeProto *axisAttr = attr(n, "axis");
    // (Axis -1 flattens to [.., last]: already opset 13's form.)
    if (flattening.count(op) && from < 13 && !(axisAttr && axisAttr->i() == -1)) {
      auto a = takeAttr(n, "axis");
      const int64_t axis = a ? a->i() : 1;
      const std::string x = n.input(0), y = n.output(0), base = n.name().empty() ? op : n.name();
      onnx::NodeProto flatten, shape, reshape;
      flatten.set_op_type("Flatten");
      flatten.set_name(fresh(base + "_flatten"));
      flatten.add_input(x);
      flatten.add_output(fresh(base + "_flat"));
      intAttr(flatten, "axis", axis);
      shape.set_op_type("Shape");
      shape.set_name(fresh(base + "_shape"));
      shape.add_input(x);
      shape.add_output(fresh(base + "_shape_out"));
      n.set_input(0, flatten.output(0));
      n.set_output(0, fresh(base + "_flat_out"));
      intAttr(n, "axis", -1);
      reshape.set_op_type("Reshape");
      reshape.set_name(fresh(base + "_reshape"));
      reshape.add_input(n.output(0));
      reshape.add_input(shape.output(0));
      reshape.add_output(y);
      intAttr(reshape, "allowzero", 1); // (a 0 in x's shape is a 0, not "copy")
      *nodes.Add() = std::move(flatten);
      *nodes.Add() = std::move(shape);
      *nodes.Add() = std::move(n);
      *nodes.Add() = std::move(reshape);
      continue;
    }
    *nodes.Add() = std::move(n);
  }
  g.mutable_node()->Swap(&nodes);
}

class Writer {
public:
  Writer(onnx::ModelProto &m, const std::string &modelDir)
      : m_(m), g_(*m.mutable_graph()), ext_(modelDir) {
    addNames(g_);
  }

  /// The names a graph and its subgraphs use, taken (new names are fresh everywhere).
  void addNames(const onnx::GraphProto &g) {
    for (const auto &t : g.initializer())
      names_.insert(t.name());
    for (const auto &i : g.input())
      names_.insert(i.name());
    for (const auto &v : g.value_info())
      names_.insert(v.name());
    for (const auto &v : g.output())
      names_.insert(v.name());
    for (const auto &n : g.node()) {
      names_.insert(n.name());
      names_.insert(n.output().begin(), n.output().end());
      for (const auto &a : n.attribute()) {
        if (a.has_g())
          addNames(a.g());
        for (const auto &sub : a.graphs())
          addNames(sub);
      }
    }
  }

  std::string fresh(const std::string &base) {
    std::string name = base;
    for (int k = 1; !names_.insert(name).second; ++k)
      name = base + "_" + std::to_string(k);
    return name;
  }

  onnx::TensorProto &initializer(const std::string &name, int32_t type,
                                 const std::vector<int64_t> &dims) {
    onnx::TensorProto &t = *g_.add_initializer();
    t.set_name(name);
    t.set_data_type(type);
    for (int64_t d : dims)
      t.add_dims(d);
    return t;
  }

  /// Scale (float) and zero point (`zpType`, zeros; 0: none) initializers of `count`
  /// values (a scalar when `perAxis` is false).
  std::pair<std::string, std::string>
  params(const std::string &base, const std::vector<float> &scales, int32_t zpType, bool perAxis) {
    std::vector<int64_t> dims;
    if (perAxis)
      dims = {static_cast<int64_t>(scales.size())};
    std::string s = fresh(base + "_scale");
    onnx::TensorProto &st = initializer(s, onnx::TensorProto::FLOAT, dims);
    st.set_raw_data(
        std::string(reinterpret_cast<const char *>(scales.data()), scales.size() * sizeof(float)));
    if (!zpType)
      return {s, ""};
    assert(zpType == onnx::TensorProto::INT8 || zpType == onnx::TensorProto::UINT8 ||
           zpType == kFloat8E4M3FN);
    std::string z = fresh(base + "_zero_point");
    initializer(z, zpType, dims).set_raw_data(std::string(scales.size(), '\0'));
    return {s, z};
  }

  onnx::NodeProto makeNode(const std::string &op, const std::vector<std::string> &inputs,
                           const std::string &output, int axis = -1) {
    onnx::NodeProto n;
    n.set_op_type(op);
    n.set_name(fresh(output + "_" + op));
    for (const std::string &i : inputs)
      n.add_input(i);
    n.add_output(output);
    if (axis >= 0) {
      onnx::AttributeProto &a = *n.add_attribute();
      a.set_name("axis");
      a.set_type(onnx::AttributeProto::INT);
      a.set_i(axis);
    }
    return n;
  }

  /// The weight's values, loaded (inline or external).
  llvm::Expected<ir::Tensor> load(const std::string &name) {
    for (const auto &t : g_.initializer())
      if (t.name() == name)
        return tensorFromOnnx(t, &ext_);
    return ir::errorf("no initializer '{0}'", name);
  }

  onnx::ModelProto &m_;
  onnx::GraphProto &g_;
  ExternalDataLoader ext_;
  std::set<std::string> names_;
};

/// An error naming a weight with a NaN or an infinity (it has no scale).
llvm::Error allFinite(const ir::Tensor &t, const std::string &name) {
  const float *p = t.data<float>();
  for (int64_t i = 0, n = t.numElements(); i < n; ++i)
    if (!std::isfinite(p[i]))
      return ir::errorf("initializer '{0}' holds a NaN or an infinity (element {1}): it cannot "
                        "be quantized",
                        name, i);
  return llvm::Error::success();
}

/// The names of the graph the subgraphs of its nodes (If, Loop, Scan bodies) read, at
/// any depth: a tensor read there is read by more than its explicit consumers.
std::set<std::string> namesReadBySubgraphs(const onnx::GraphProto &g) {
  std::unordered_set<std::string> free;
  for (const auto &n : g.node())
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        freeNames(a.g(), free);
      for (const auto &h : a.graphs())
        freeNames(h, free);
    }
  return std::set<std::string>(free.begin(), free.end());
}

/// Per-channel (along `axis`) or per-tensor maxima of |w|.
std::vector<float> absMax(const ir::Tensor &w, int axis, bool perChannel) {
  const ir::Shape &s = w.shape();
  int64_t channels = perChannel ? s[axis] : 1, inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  std::vector<float> m(channels, 0.0f);
  const float *p = w.data<float>();
  for (int64_t i = 0, n = w.numElements(); i < n; ++i) {
    int64_t c = perChannel ? (i / inner) % channels : 0;
    m[c] = std::max(m[c], std::fabs(p[i]));
  }
  return m;
}

} // namespace

llvm::Expected<QuantPlan> planQuantization(llvm::StringRef modelBytes, const std::string &) {
  auto model = parse(modelBytes);
  if (!model)
    return model.takeError();
  const onnx::GraphProto &g = model->graph();
  for (const auto &t : g.initializer())
    if (t.data_type() == onnx::TensorProto::FLOAT16 || t.data_type() == onnx::TensorProto::BFLOAT16)
      return ir::errorf("initializer '{0}' is {1}: dlc quantize takes an FP32 model", t.name(),
                        onnxTypeName(t.data_type()));
  static const std::set<std::string> quantizedOps = {
      "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
      "QLinearMatMul",  "ConvInteger",      "MatMulInteger",         "MatMulNBits"};
  for (const auto &n : g.node())
    if (quantizedOps.count(n.op_type()))
      return ir::errorf("the model is already quantized (it has a {0} node, '{1}')", n.op_type(),
                        n.name());
  QuantPlan plan;
  plan.opset = defaultOpset(*model);
  plan.outputs = static_cast<size_t>(g.output_size());
  GraphIndex gi(g);
  std::vector<std::string> names = nodeNames(g);
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto &n = g.node(i);
    if (!defaultDomain(n) ||
        (n.op_type() != "Conv" && n.op_type() != "MatMul" && n.op_type() != "Gemm"))
      continue;
    QuantLayer l;
    l.name = names[i];
    l.op = n.op_type();
    std::string why = describeLayer(n, gi, l);
    if (!why.empty()) {
      plan.skipped.push_back({l.name, l.op, why});
      continue;
    }
    // Each activation, and the inputs of the data movement and concatenation leading
    // to it, share one scale: the outermost Concat's output's (its range covers its
    // inputs'), else that of the first tensor of the chain.
    for (const std::string &a : l.activations) {
      std::vector<std::string> group = {a};
      std::string root;
      for (size_t i = 0; i < group.size() && group.size() < 4096; ++i) {
        auto p = gi.producer.find(group[i]);
        if (p == gi.producer.end())
          continue;
        const onnx::NodeProto &n = g.node(p->second);
        if (concatenates(n) && root.empty())
          root = group[i];
        for (int k : sharedInputs(n)) {
          const std::string &in = n.input(k);
          if (!in.empty() && !gi.constants.count(in) && !std::count(group.begin(), group.end(), in))
            group.push_back(in);
        }
      }
      if (root.empty())
        root = group.back();
      for (const std::string &t : group)
        plan.scaleOf.emplace(t, root);
    }
    plan.layers.push_back(std::move(l));
  }
  std::set<std::string> roots;
  for (const auto &[t, root] : plan.scaleOf)
    if (roots.insert(root).second)
      plan.calibrated.push_back(root);
  return plan;
}

llvm::Expected<std::string> addFloatOutputs(llvm::StringRef modelBytes,
                                            const std::vector<std::string> &names) {
  auto model = parse(modelBytes);
  if (!model)
    return model.takeError();
  onnx::GraphProto &g = *model->mutable_graph();
  std::set<std::string> outputs;
  for (const auto &o : g.output())
    outputs.insert(o.name());
  for (const std::string &n : names) {
    if (!outputs.insert(n).second)
      continue;
    onnx::ValueInfoProto &v = *g.add_output();
    v.set_name(n);
    v.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  return serialize(*model);
}

llvm::Expected<std::string> writeQdqModel(llvm::StringRef modelBytes, const std::string &modelDir,
                                          const QuantPlan &plan, const QdqOptions &options,
                                          QdqSummary *summary) {
  auto model = parse(modelBytes);
  if (!model)
    return model.takeError();
  int64_t opset = defaultOpset(*model);
  if (opset < 10)
    return ir::errorf("the model is opset {0}: QuantizeLinear needs opset 10 or later", opset);
  if (options.perChannel && !options.fp8 && opset < 13)
    return ir::errorf("the model is opset {0}: weights per channel need opset 13 or later "
                      "(re-export the model at a later opset, or quantize weights per tensor)",
                      opset);
  if (options.fp8 && opset < 11)
    return ir::errorf("the model is opset {0}: FP8 is written at opset 19, from opset 11 or later "
                      "(re-export the model at a later opset)",
                      opset);
  const int32_t qtype = options.fp8 ? kFloat8E4M3FN : onnx::TensorProto::INT8;
  QdqSummary local;
  QdqSummary &sum = summary ? *summary : local;
  Writer w(*model, modelDir);
  onnx::GraphProto &g = w.g_;
  GraphIndex gi(g);
  std::vector<onnx::NodeProto> front;                        // weights' DequantizeLinear
  std::map<std::string, std::vector<onnx::NodeProto>> after; // a tensor's Q and DQ
  std::map<std::string, std::string> dequantized;            // activation -> its DQ output
  std::map<std::string, float> activationScale;
  // Redirected inputs: (node index, input index) -> the name it reads now.
  std::map<std::pair<int, int>, std::string> redirect;

  auto quantizeActivation = [&](const std::string &x) -> std::string {
    if (auto it = dequantized.find(x); it != dequantized.end())
      return it->second;
    auto root = plan.scaleOf.find(x);
    float threshold = 0;
    if (root != plan.scaleOf.end())
      if (auto t = options.thresholds.find(root->second); t != options.thresholds.end())
        threshold = t->second;
    float scale = scaleFor(threshold, options.fp8);
    activationScale[x] = scale;
    auto [s, z] = w.params(x, {scale}, qtype, false);
    std::string q = w.fresh(x + "_quantized"), dq = w.fresh(x + "_dequantized");
    auto &nodes = after[x];
    nodes.push_back(w.makeNode("QuantizeLinear", {x, s, z}, q));
    nodes.push_back(w.makeNode("DequantizeLinear", {q, s, z}, dq));
    sum.quantizeNodes++;
    sum.dequantizeNodes++;
    return dequantized[x] = dq;
  };

  std::map<std::string, int> nodeOf;
  std::vector<std::string> names = nodeNames(g);
  for (int i = 0; i < g.node_size(); ++i)
    nodeOf[names[i]] = i;
  // The quantized layers by node, and every tensor's readers.
  std::map<int, const QuantLayer *> selected;
  for (const QuantLayer &l : plan.layers)
    if (options.layers.count(l.name)) {
      auto ni = nodeOf.find(l.name);
      if (ni == nodeOf.end() || g.node(ni->second).op_type() != l.op)
        return ir::errorf("layer '{0}' is not in the model", l.name);
      selected[ni->second] = &l;
    }
  std::map<std::string, std::vector<std::pair<int, int>>> readers;
  for (int i = 0; i < g.node_size(); ++i)
    for (int k = 0; k < g.node(i).input_size(); ++k)
      readers[g.node(i).input(k)].push_back({i, k});
  std::set<std::string> outer = namesReadBySubgraphs(g);
  for (const auto &o : g.output())
    outer.insert(o.name()); // (as good as read by someone else)
  // Whether a tensor reaches nothing but quantized layers (directly, or through data
  // movement): only then may a movement op's input be quantized in its place.
  std::map<std::string, bool> onlyQuantized;
  // Whether every data input of `m` (sharedInputs) takes the scale of `root`: only then
  // does `m` move INT8 (a Concat with an input at another scale stays float).
  auto sharesScale = [&](const onnx::NodeProto &m, const std::string &root) {
    const std::vector<int> shared = sharedInputs(m);
    return !shared.empty() && std::all_of(shared.begin(), shared.end(), [&](int k) {
      auto r = plan.scaleOf.find(m.input(k));
      return r != plan.scaleOf.end() && r->second == root;
    });
  };
  std::function<bool(const std::string &, int)> reachesOnlyLayers = [&](const std::string &t,
                                                                        int depth) {
    if (auto it = onlyQuantized.find(t); it != onlyQuantized.end())
      return it->second;
    bool ok = !outer.count(t) && depth < g.node_size();
    for (auto [ni, k] : readers[t]) {
      if (!ok)
        break;
      auto sl = selected.find(ni);
      if (sl != selected.end() &&
          std::count(sl->second->activations.begin(), sl->second->activations.end(), t))
        continue;
      // (A Concat whose inputs do not share t's scale stays float: its inputs are not
      // quantized for it.)
      const onnx::NodeProto &r = g.node(ni);
      const std::vector<int> shared = sharedInputs(r);
      auto root = plan.scaleOf.find(t);
      ok = std::count(shared.begin(), shared.end(), k) &&
           (!concatenates(r) || (root != plan.scaleOf.end() && sharesScale(r, root->second))) &&
           reachesOnlyLayers(r.output(0), depth + 1);
    }
    return onlyQuantized[t] = ok;
  };
  std::set<std::string> replacedWeights;
  for (const auto &[index, lp] : selected) {
    const QuantLayer &l = *lp;
    const onnx::NodeProto &n = g.node(index);
    for (int i = 0; i < n.input_size(); ++i) {
      if (!std::count(l.activations.begin(), l.activations.end(), n.input(i)))
        continue;
      redirect[{index, i}] = quantizeActivation(n.input(i));
      // The data movement and concatenation leading to it move INT8 at the same scale,
      // where all they feed is quantized layers (a float reader would see clipped
      // values) and every input of each shares the scale.
      const std::string &root = plan.scaleOf.at(n.input(i));
      std::vector<std::string> todo = {n.input(i)};
      std::set<int> seen;
      while (!todo.empty()) {
        std::string t = todo.back();
        todo.pop_back();
        auto p = gi.producer.find(t);
        if (p == gi.producer.end() || !seen.insert(p->second).second || !reachesOnlyLayers(t, 0))
          continue;
        const onnx::NodeProto &m = g.node(p->second);
        if (!sharesScale(m, root))
          continue;
        for (int k : sharedInputs(m)) {
          redirect[{p->second, k}] = quantizeActivation(m.input(k));
          todo.push_back(m.input(k));
        }
      }
    }
    float xScale = activationScale[l.activations[0]];
    sum.inputScale[l.name] = xScale;
    if (l.weight.empty())
      continue;
    auto weight = w.load(l.weight);
    if (!weight)
      return weight.takeError();
    if (weight->dtype() != ir::DType::F32)
      return ir::errorf("weight '{0}' of layer '{1}' is not FP32", l.weight, l.name);
    if (auto e = allFinite(*weight, l.weight))
      return e;
    std::vector<float> scales = absMax(*weight, l.weightAxis, options.perChannel);
    for (float &s : scales)
      s = scaleFor(s, options.fp8);
    const ir::Shape &ws = weight->shape();
    int64_t inner = 1;
    for (size_t d = l.weightAxis + 1; d < ws.size(); ++d)
      inner *= ws[d];
    std::string qname = w.fresh(l.weight + "_quantized");
    std::vector<int64_t> dims(ws.begin(), ws.end());
    std::string raw(weight->numElements(), '\0');
    const float *p = weight->data<float>();
    for (int64_t i = 0, e = weight->numElements(); i < e; ++i)
      raw[i] = quantize8(p[i], scales[options.perChannel ? (i / inner) % ws[l.weightAxis] : 0],
                         options.fp8);
    w.initializer(qname, qtype, dims).set_raw_data(std::move(raw));
    auto [s, z] = w.params(l.weight, scales, qtype, options.perChannel);
    std::string dq = w.fresh(l.weight + "_dequantized");
    front.push_back(
        w.makeNode("DequantizeLinear", {qname, s, z}, dq, options.perChannel ? l.weightAxis : -1));
    sum.dequantizeNodes++;
    redirect[{index, 1}] = dq;
    replacedWeights.insert(l.weight);
    if (l.bias.empty() || options.fp8) // (FP8 layers add their bias in float)
      continue;
    auto bias = w.load(l.bias);
    if (!bias)
      return bias.takeError();
    if (auto e = allFinite(*bias, l.bias))
      return e;
    std::vector<float> bscales(scales.size());
    for (size_t c = 0; c < scales.size(); ++c)
      if (!((bscales[c] = xScale * scales[c]) >= std::numeric_limits<float>::min()))
        return ir::errorf("the bias scale of layer '{0}' (input scale times weight scale) "
                          "underflows FP32: leave it in float (--exclude {0})",
                          l.name);
    std::vector<int32_t> q(bias->numElements());
    for (size_t c = 0; c < q.size(); ++c) {
      double v =
          std::nearbyint(double(bias->data<float>()[c]) / bscales[options.perChannel ? c : 0]);
      double lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
      sum.saturatedBias += v < lo || v > hi;
      q[c] = static_cast<int32_t>(std::clamp(v, lo, hi));
    }
    std::string bq = w.fresh(l.bias + "_quantized");
    w.initializer(bq, onnx::TensorProto::INT32, {static_cast<int64_t>(q.size())})
        .set_raw_data(std::string(reinterpret_cast<const char *>(q.data()), q.size() * 4));
    // (No zero point: an int32 one must be 0, and ONNX lets it be omitted.)
    std::string bs = w.params(l.bias, bscales, 0, options.perChannel).first;
    std::string bdq = w.fresh(l.bias + "_dequantized");
    front.push_back(w.makeNode("DequantizeLinear", {bq, bs}, bdq, options.perChannel ? 0 : -1));
    sum.dequantizeNodes++;
    redirect[{index, 2}] = bdq;
    replacedWeights.insert(l.bias);
  }

  // The new node list, in dependency order: the weights' DequantizeLinear, the graph
  // inputs' QDQ, then each node followed by the QDQ of its outputs.
  std::vector<onnx::NodeProto> nodes = std::move(front);
  for (const auto &in : g.input())
    if (auto it = after.find(in.name()); it != after.end())
      nodes.insert(nodes.end(), it->second.begin(), it->second.end());
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto n = g.node(i);
    for (int k = 0; k < n.input_size(); ++k)
      if (auto it = redirect.find({i, k}); it != redirect.end())
        n.set_input(k, it->second);
    nodes.push_back(std::move(n));
    for (const std::string &o : g.node(i).output())
      if (auto it = after.find(o); !o.empty() && it != after.end())
        nodes.insert(nodes.end(), it->second.begin(), it->second.end());
  }
  g.clear_node();
  std::set<std::string> used;
  for (onnx::NodeProto &n : nodes) {
    used.insert(n.input().begin(), n.input().end());
    *g.add_node() = std::move(n);
  }
  for (const auto &o : g.output())
    used.insert(o.name());
  for (const std::string &name : namesReadBySubgraphs(g))
    used.insert(name);
  // Float weights nothing reads any more are dropped.
  auto *inits = g.mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(),
                              [&](const onnx::TensorProto &t) {
                                return replacedWeights.count(t.name()) && !used.count(t.name());
                              }),
               inits->end());
  auto *inputs = g.mutable_input();
  inputs->erase(std::remove_if(inputs->begin(), inputs->end(),
                               [&](const onnx::ValueInfoProto &v) {
                                 return replacedWeights.count(v.name()) && !used.count(v.name());
                               }),
                inputs->end());
  if (options.fp8 && opset < 19) {
    upgradeToOpset19(g, opset, [&](const std::string &base) { return w.fresh(base); });
    for (auto &o : *model->mutable_opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx")
        o.set_version(19);
  }
  if (options.fp8 && model->ir_version() < 9)
    model->set_ir_version(9); // (float8 types)
  if (!options.provenance.empty()) {
    onnx::StringStringEntryProto &p = *model->add_metadata_props();
    p.set_key("dlc.quantize");
    p.set_value(options.provenance);
  }
  return serialize(*model);
}

} // namespace dlc::frontend
