//===- Importer.cpp - ONNX model import ------------------------------------===//
//
// load -> onnx::checker -> version conversion (<= 16 to 17) -> ONNX shape
// inference -> ir::Graph through the handler table. Every failure is a value
// whose message names the model file, node, op type and opset.
//===----------------------------------------------------------------------===//
#include "ModelChecks.h"
#include "NodeImporter.h"
#include "OnnxLibrary.h"
#include "dlc/support/Files.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <google/protobuf/io/coded_stream.h>
#include <onnx/defs/schema.h>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace dlc::frontend {

using namespace ir;

//===----------------------------------------------------------------------===//
// Handler table
//===----------------------------------------------------------------------===//

static const std::vector<HandlerEntry> &handlerTable() {
  static const std::vector<HandlerEntry> table = [] {
    std::vector<HandlerEntry> t;
    registerElementwiseHandlers(t);
    registerNnHandlers(t);
    registerShapeHandlers(t);
    registerReduceHandlers(t);
    registerControlHandlers(t);
    registerContribHandlers(t);
    registerAttentionHandlers(t);
    registerQuantHandlers(t);
    registerQLinearHandlers(t);
    return t;
  }();
  return table;
}

const HandlerEntry *findHandler(const std::string &domain, const std::string &opType,
                                int64_t opset) {
  std::string d = canonicalDomain(domain);
  for (const HandlerEntry &e : handlerTable())
    if (opType == e.opType && d == e.domain && opset >= e.sinceOpset && opset <= e.untilOpset)
      return &e;
  return nullptr;
}

/// The inputs node `n` must have: how many (the entry's count, else the ONNX library's
/// schema's at the newest opset it knows, else none), and for each of them whether it
/// may be given as "" (an optional input before a required one).
struct RequiredInputs {
  int count = 0;
  std::vector<bool> mayBeAbsent;
};
RequiredInputs requiredInputs(const HandlerEntry &e, const onnx::NodeProto &n, int64_t opset) {
  RequiredInputs r;
  if (e.minInputs >= 0) {
    r.count = e.minInputs;
    r.mayBeAbsent.assign(r.count, false);
    return r;
  }
  if (!canonicalDomain(n.domain()).empty())
    return r;
  const onnx::OpSchema *schema = onnx::OpSchemaRegistry::Schema(
      n.op_type(), static_cast<int>(std::min<int64_t>(opset, kLibraryMaxOpset)), "");
  if (!schema)
    return r;
  r.count = schema->min_input();
  for (int i = 0; i < r.count; ++i)
    r.mayBeAbsent.push_back(i < static_cast<int>(schema->inputs().size()) &&
                            schema->inputs()[i].GetOption() == onnx::OpSchema::Optional);
  return r;
}

std::vector<std::string> supportedOnnxOps(const std::string &domain) {
  std::vector<std::string> ops;
  for (const HandlerEntry &e : handlerTable())
    if (domain == e.domain)
      ops.push_back(e.opType);
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

bool hasHandler(const std::string &domain, const std::string &opType) {
  std::string d = canonicalDomain(domain);
  for (const HandlerEntry &e : handlerTable())
    if (opType == e.opType && d == e.domain)
      return true;
  return false;
}

bool knownDomain(const std::string &domain) {
  std::string d = canonicalDomain(domain);
  for (const HandlerEntry &e : handlerTable())
    if (d == e.domain)
      return true;
  return false;
}

/// Ops whose old versions the version converter does not turn into an equivalent
/// model of the opset the handlers take, with the reason.
const char *olderOpsetGap(const std::string &op, int64_t opset) {
  static const struct {
    const char *op;
    int64_t since;
    const char *why;
  } gaps[] = {{"Scan", 9,
               "Scan before opset 9 (a batch axis and sequence_lens) is not supported; opset 9 and "
               "later are, unrolled at compile time"}};
  for (const auto &g : gaps)
    if (op == g.op && opset >= 0 && opset < g.since)
      return g.why;
  return nullptr;
}

const char *outOfScopeReason(const std::string &op) {
  static const std::pair<const char *, const char *> reasons[] = {
      {"DFT", "DFT/STFT are not supported"},
      {"STFT", "DFT/STFT are not supported"},
      {"MelWeightMatrix", "signal-processing ops are not supported"},
      {"BlackmanWindow", "window functions are not supported"},
      {"HammingWindow", "window functions are not supported"},
      {"HannWindow", "window functions are not supported"},
      {"RandomNormal", "random generators are not supported"},
      {"RandomUniform", "random generators are not supported"},
      {"RandomNormalLike", "random generators are not supported"},
      {"RandomUniformLike", "random generators are not supported"},
      {"Bernoulli", "random generators are not supported"},
      {"Multinomial", "random generators are not supported"},
      {"StringNormalizer", "string tensors are not supported"},
      {"TfIdfVectorizer", "string tensors are not supported"},
      {"RegexFullMatch", "string tensors are not supported"},
      {"SequenceEmpty", "sequence types are not supported"},
      {"SequenceConstruct", "sequence types are not supported"},
      {"SequenceInsert", "sequence types are not supported"},
      {"SequenceAt", "sequence types are not supported"},
      {"SequenceErase", "sequence types are not supported"},
      {"SequenceLength", "sequence types are not supported"},
      {"SequenceMap", "sequence types are not supported"},
      {"SplitToSequence", "sequence types are not supported"},
      {"ConcatFromSequence", "sequence types are not supported"},
      {"Optional", "optional types are not supported"},
      {"OptionalGetElement", "optional types are not supported"},
      {"OptionalHasElement", "optional types are not supported"},
      {"NonMaxSuppression", "NonMaxSuppression has a data-dependent output shape"},
      {"Unique", "Unique has a data-dependent output shape"},
      {"Adagrad", "training ops from ai.onnx.preview.training are not supported"},
      {"Adam", "training ops from ai.onnx.preview.training are not supported"},
      {"Momentum", "training ops from ai.onnx.preview.training are not supported"},
      {"Gradient", "training ops from ai.onnx.preview.training are not supported"},
  };
  for (const auto &[name, why] : reasons)
    if (op == name)
      return why;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Importer
//===----------------------------------------------------------------------===//

int64_t Importer::opsetFor(const std::string &domain) const {
  auto it = opsets_.find(canonicalDomain(domain));
  return it == opsets_.end() ? -1 : it->second;
}

std::string describeOnnxNode(const onnx::NodeProto &n, int64_t opset) {
  std::string s = "node ";
  s += n.name().empty() ? "(unnamed)" : "'" + n.name() + "'";
  s += " (" + n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    s += ", domain " + n.domain();
  s += ", opset " + std::to_string(opset) + ")";
  return s;
}

llvm::Error Importer::importInitializers(onnx::GraphProto &g, Scope &scope) {
  for (auto &init : *g.mutable_initializer()) {
    if (opts_.bindings.count(init.name()) || opts_.bindingText.count(init.name()))
      continue;
    const bool fourBit = init.data_type() == 21 || init.data_type() == 22; // UINT4, INT4
    auto t = takeTensorFromOnnx(init, &ext_);
    if (!t)
      return t.takeError();
    bool variable = opts_.initializersAsVariables && isFloat(t->dtype());
    ir::Value *v = variable ? g_.addParameter(init.name(), std::move(*t), false)
                            : g_.addConstant(init.name(), std::move(*t));
    if (fourBit)
      fourBit_.insert(v);
    scope.bind(init.name(), v);
  }
  if (g.sparse_initializer_size())
    return makeError("sparse initializers are not supported");
  return llvm::Error::success();
}

llvm::Error Importer::importInitializers(const onnx::GraphProto &g, Scope &scope) {
  onnx::GraphProto copy;
  *copy.mutable_initializer() = g.initializer();
  *copy.mutable_sparse_initializer() = g.sparse_initializer();
  return importInitializers(copy, scope);
}

void Importer::importNodes(const onnx::GraphProto &g, Scope &scope) {
  for (const onnx::NodeProto &n : g.node()) {
    int64_t opset = opsetFor(n.domain());
    auto poisonOutputs = [&] {
      for (const auto &o : n.output())
        if (!o.empty())
          scope.poison(o);
    };
    auto fail = [&](const std::string &msg, ErrorKind kind = ErrorKind::ShapeOrType) {
      errors_.push_back(describeOnnxNode(n, opset) + ": " + msg);
      errorKinds_.push_back(kind);
      poisonOutputs();
    };
    bool skip = false;
    for (const auto &in : n.input()) {
      if (in.empty())
        continue;
      if (scope.isPoisoned(in)) {
        skip = true; // an earlier failure already reported the cause
        break;
      }
      if (!scope.lookup(in)) {
        fail("input '" + in +
                 "' is not defined before this node (the graph is not "
                 "topologically sorted, has a cycle, or misses an initializer)",
             ErrorKind::Structure);
        skip = true;
        break;
      }
    }
    if (skip) {
      poisonOutputs();
      continue;
    }
    if (!knownDomain(n.domain())) {
      fail("unsupported op domain '" + n.domain() + "'", ErrorKind::Unsupported);
      continue;
    }
    const HandlerEntry *h = findHandler(n.domain(), n.op_type(), opset);
    if (!h) {
      const char *why = outOfScopeReason(n.op_type());
      fail(why ? std::string("unsupported op: ") + why
               : "unsupported op (no importer for " + n.op_type() + " at this opset)",
           ErrorKind::Unsupported);
      continue;
    }
    RequiredInputs required = requiredInputs(*h, n, opset);
    if (n.input_size() < required.count) {
      fail("needs at least " + std::to_string(required.count) + " inputs, has " +
               std::to_string(n.input_size()),
           ErrorKind::Structure);
      continue;
    }
    std::string absent;
    for (int i = 0; i < required.count && absent.empty(); ++i)
      if (n.input(i).empty() && !required.mayBeAbsent[i])
        absent = "input " + std::to_string(i) + " is required but absent";
    if (!absent.empty()) {
      fail(absent, ErrorKind::Structure);
      continue;
    }
    NodeImporter ni(*this, scope, n, opset);
    llvm::Error e = h->fn(ni);
    if (!ni.attrError().empty()) {
      llvm::consumeError(std::move(e));
      fail(ni.attrError(), ErrorKind::Structure);
      continue;
    }
    if (e) {
      std::string msg = llvm::toString(std::move(e));
      fail(msg, msg.rfind("unsupported", 0) == 0 ? ErrorKind::Unsupported : ErrorKind::ShapeOrType);
      continue;
    }
    for (int i = 0; i < n.output_size(); ++i)
      if (!n.output(i).empty() && !scope.lookup(n.output(i)))
        fail("internal error: output " + std::to_string(i) + " was not produced",
             ErrorKind::Structure);
  }
}

//===----------------------------------------------------------------------===//
// Model-level steps
//===----------------------------------------------------------------------===//

namespace {

llvm::Expected<TensorType> valueType(const onnx::ValueInfoProto &vi, const ImportOptions &opts,
                                     std::vector<std::string> &notes) {
  const std::string &name = vi.name();
  if (!vi.type().has_tensor_type())
    return errorf("input '{0}' is not a tensor: unsupported type (sequence, map and optional "
                  "types are not supported)",
                  name);
  const auto &tt = vi.type().tensor_type();
  auto dt = dtypeFromOnnx(tt.elem_type());
  if (!dt)
    return errorf("input '{0}' has unsupported element type {1}", name,
                  onnxTypeName(tt.elem_type()));
  if (isFloat8(*dt))
    return errorf("input '{0}' is {1}: float8 graph inputs are not supported (float8 values "
                  "inside the graph are: QuantizeLinear, DequantizeLinear, Cast, constants)",
                  name, onnxTypeName(tt.elem_type()));
  auto override = opts.inputShapes.find(name);
  if (override != opts.inputShapes.end()) {
    if (tt.has_shape() && tt.shape().dim_size() != static_cast<int>(override->second.size()))
      return errorf("--input-shape for '{0}' has rank {1}, the model declares rank {2}", name,
                    override->second.size(), tt.shape().dim_size());
    return TensorType(*dt, override->second);
  }
  if (!tt.has_shape())
    return errorf("input '{0}' has no shape; give one with --input-shape {0}=d0,d1,...", name);
  Shape s;
  for (const auto &d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0)
        return errorf("input '{0}' has negative dimension {1}", name, d.dim_value());
      s.push_back(d.dim_value());
    } else {
      s.push_back(opts.defaultDimValue);
      notes.push_back("input '" + name + "' dimension " + std::to_string(s.size() - 1) +
                      (d.has_dim_param() ? " ('" + d.dim_param() + "')" : std::string()) +
                      " is not static; using " + std::to_string(opts.defaultDimValue) +
                      " (override with --input-shape " + name +
                      "=..., where a dimension may be a range MIN..MAX)");
    }
  }
  TensorType t(*dt, s);
  if (!t.checkedNumElements() || *t.checkedNumElements() > (int64_t{1} << 40))
    return errorf("input '{0}' has too many elements: {1}", name, t.str());
  return t;
}

/// The constant an input is bound to (ImportOptions::bindings / bindingText),
/// checked against the input's declaration.
llvm::Expected<Tensor> boundValue(const onnx::ValueInfoProto &vi, const ImportOptions &opts) {
  const std::string &name = vi.name();
  if (!vi.type().has_tensor_type())
    return errorf("cannot bind '{0}': it is not a tensor input", name);
  const auto &tt = vi.type().tensor_type();
  auto dt = dtypeFromOnnx(tt.elem_type());
  if (!dt)
    return errorf("cannot bind '{0}': unsupported element type {1}", name,
                  onnxTypeName(tt.elem_type()));
  std::vector<int64_t> declared; // -1: symbolic
  bool ranked = tt.has_shape();
  for (const auto &d : tt.shape().dim())
    declared.push_back(d.has_dim_value() ? d.dim_value() : -1);
  std::string decl = std::string(dtypeName(*dt)) + "[";
  for (size_t i = 0; i < declared.size(); ++i)
    decl += (i ? "," : "") + (declared[i] < 0 ? std::string("?") : std::to_string(declared[i]));
  decl += ranked ? "]" : "...]";
  if (auto it = opts.bindings.find(name); it != opts.bindings.end()) {
    const Tensor &t = it->second;
    bool fits = t.dtype() == *dt && (!ranked || t.rank() == static_cast<int64_t>(declared.size()));
    for (size_t i = 0; fits && ranked && i < declared.size(); ++i)
      fits = declared[i] < 0 || declared[i] == t.shape()[i];
    if (!fits)
      return errorf("cannot bind '{0}': the value is {1}, the input is declared {2}", name,
                    t.type().str(), decl);
    return t;
  }
  // Text: comma-separated values of the declared dtype.
  const std::string &text = opts.bindingText.at(name);
  std::vector<std::string> items;
  for (llvm::StringRef rest = llvm::StringRef(text).trim(); !rest.empty();) {
    auto [item, tail] = rest.split(',');
    items.push_back(item.trim().str());
    rest = tail.trim();
  }
  if (items.empty())
    return errorf("cannot bind '{0}': no values given", name);
  int64_t n = static_cast<int64_t>(items.size());
  Shape shape;
  bool staticDecl =
      ranked && std::none_of(declared.begin(), declared.end(), [](int64_t d) { return d < 0; });
  if (staticDecl) {
    shape = declared;
    if (TensorType(*dt, shape).numElements() != n)
      return errorf("cannot bind '{0}': {1} values given, the input is declared {2}", name, n,
                    decl);
  } else if (ranked && declared.size() == 1) {
    shape = {n};
  } else if (ranked && declared.empty()) {
    if (n != 1)
      return errorf("cannot bind '{0}': {1} values given for a scalar input", name, n);
  } else {
    return errorf("cannot bind '{0}' to {1} values: the input is declared {2}; give a .npy file "
                  "with its shape",
                  name, n, decl);
  }
  std::vector<double> values;
  for (const std::string &item : items) {
    llvm::StringRef v(item);
    if (*dt == DType::Bool && (v == "true" || v == "false")) {
      values.push_back(v == "true");
      continue;
    }
    bool integral =
        *dt != DType::F32 && *dt != DType::F64 && *dt != DType::F16 && *dt != DType::BF16;
    int64_t iv;
    char *end = nullptr;
    double d = std::strtod(item.c_str(), &end);
    if (integral ? v.getAsInteger(10, iv) : (end == item.c_str() || *end != '\0'))
      return errorf("cannot bind '{0}': '{1}' is not a {2} value", name, item, dtypeName(*dt));
    values.push_back(integral ? static_cast<double>(iv) : d);
  }
  return Tensor::fromVector<double>(TensorType(*dt, shape), values);
}

/// Checks a declared ONNX output type against the imported value's type (static dims only).
llvm::Error checkOutputType(const onnx::ValueInfoProto &vi, const Value *v) {
  if (!vi.type().has_tensor_type())
    return llvm::Error::success();
  const auto &tt = vi.type().tensor_type();
  if (tt.elem_type() != 0) {
    auto dt = dtypeFromOnnx(tt.elem_type());
    if (!dt || *dt != v->dtype())
      return errorf("output '{0}' is declared {1} but computes {2}", vi.name(),
                    onnxTypeName(tt.elem_type()), dtypeName(v->dtype()));
  }
  if (tt.has_shape()) {
    if (tt.shape().dim_size() != v->rank())
      return errorf("output '{0}' is declared with rank {1} but computes {2}", vi.name(),
                    tt.shape().dim_size(), v->type().str());
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto &d = tt.shape().dim(i);
      if (d.has_dim_value() && d.dim_value() != v->shape()[i])
        return errorf("output '{0}' dimension {1} is declared {2} but computes {3}", vi.name(), i,
                      d.dim_value(), v->shape()[i]);
    }
  }
  return llvm::Error::success();
}

void collectExternalTensors(const onnx::GraphProto &g,
                            std::vector<const onnx::TensorProto *> &out) {
  auto visit = [&](const onnx::TensorProto &t) {
    if (t.data_location() == onnx::TensorProto::EXTERNAL)
      out.push_back(&t);
  };
  for (const auto &t : g.initializer())
    visit(t);
  for (const auto &n : g.node())
    for (const auto &a : n.attribute()) {
      if (a.has_t())
        visit(a.t());
      for (const auto &t : a.tensors())
        visit(t);
      if (a.has_g())
        collectExternalTensors(a.g(), out);
      for (const auto &sg : a.graphs())
        collectExternalTensors(sg, out);
    }
}

std::string joinErrors(const std::string &file, const std::vector<std::string> &errs) {
  std::string msg;
  for (size_t i = 0; i < errs.size(); ++i)
    msg += (i ? "\n" : "") + file + ": " + errs[i];
  if (errs.size() > 1)
    msg += "\n" + file + ": " + std::to_string(errs.size()) + " nodes could not be imported";
  return msg;
}

} // namespace

llvm::Expected<ImportResult> importOnnxBytes(llvm::StringRef bytes, const std::string &file,
                                             const std::string &modelDir,
                                             const ImportOptions &opts) {
  onnx::ModelProto model;
  {
    google::protobuf::io::CodedInputStream in(
        reinterpret_cast<const uint8_t *>(bytes.data()),
        static_cast<int>(std::min<size_t>(bytes.size(), INT32_MAX)));
    in.SetTotalBytesLimit(INT32_MAX);
    if (bytes.empty() || !model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
      return errorf("{0}: not a valid ONNX model (the protobuf could not be parsed; is the file "
                    "truncated or not an .onnx file?)",
                    file);
  }
  if (!model.has_graph())
    return errorf("{0}: not a valid ONNX model (no graph)", file);

  ImportResult result;
  std::unordered_map<std::string, int64_t> opsets;
  for (const auto &o : model.opset_import())
    opsets[canonicalDomain(o.domain())] = o.version();
  if (!opsets.count(""))
    return errorf("{0}: unsupported: the model imports no version of the default ONNX domain "
                  "(only {1})",
                  file, model.opset_import_size() ? model.opset_import(0).domain() : "nothing");
  result.originalOpset = opsets[""];
  if (model.ir_version() < 3 || model.ir_version() > kMaxIrVersion)
    return errorf("{0}: IR version {1} is not supported (dlc imports IR versions 3 to {2})", file,
                  model.ir_version(), kMaxIrVersion);
  if (result.originalOpset < 1 || result.originalOpset > kMaxOpset)
    return errorf("{0}: opset {1} is not supported (dlc imports opsets 7 to {2})", file,
                  result.originalOpset, kMaxOpset);
  // The Debian ONNX library (IR 8, opset 17) checks, infers and converts the models
  // it knows; newer ones get dlc's own checks (ownModelProblem), and their handlers
  // take the opset as it is.
  const bool useLibrary = result.originalOpset <= kLibraryMaxOpset &&
                          model.ir_version() <= static_cast<int64_t>(onnx::IR_VERSION) &&
                          libraryKnowsOps(model.graph(), static_cast<int>(result.originalOpset));

  // Unsupported ops first, all at once: that is what a user needs to know before
  // anything about shapes or types.
  {
    std::vector<std::string> unsupported;
    for (const auto &n : model.graph().node()) {
      auto it = opsets.find(canonicalDomain(n.domain()));
      int64_t opset = it != opsets.end() ? it->second : -1;
      std::string where = describeOnnxNode(n, opset);
      if (!knownDomain(n.domain()))
        unsupported.push_back(where + ": unsupported op domain '" + n.domain() + "'");
      else if (const char *why = olderOpsetGap(n.op_type(), opset))
        unsupported.push_back(where + ": unsupported op: " + why);
      else if (!hasHandler(n.domain(), n.op_type())) { // opset gaps surface while importing
        const char *why = outOfScopeReason(n.op_type());
        unsupported.push_back(where + ": unsupported op" +
                              (why ? std::string(": ") + why : std::string()));
      }
    }
    if (!unsupported.empty())
      return makeError(joinErrors(file, unsupported));
  }
  // External data is validated by dlc's own rules before anything else opens a file.
  ExternalDataLoader ext(modelDir);
  {
    std::vector<const onnx::TensorProto *> external;
    collectExternalTensors(model.graph(), external);
    for (const onnx::TensorProto *t : external)
      if (auto e = ext.check(*t))
        return errorf("{0}: {1}", file, llvm::toString(std::move(e)));
  }
  // Nodes out of order are sorted, as ONNX Runtime does; a real cycle is an error.
  bool sorted = false;
  if (std::string p = sortNodes(*model.mutable_graph(), sorted); !p.empty())
    return errorf("{0}: {1}", file, p);
  if (sorted)
    result.notes.push_back("the graph's nodes are not in topological order; dlc sorted them, as "
                           "ONNX Runtime does");
  if (std::string p = structuralProblem(model.graph(), {}); !p.empty())
    return errorf("{0}: {1}", file, p);
  if (!useLibrary)
    if (std::string p = ownModelProblem(model); !p.empty())
      return errorf("{0}: invalid ONNX model: {1}", file, p);
  OnnxLibraryResult lib;
  lib.opset = opsets[""];
  if (useLibrary) {
    WeightStash stash;
    if (auto e = stash.stash(*model.mutable_graph(), ext))
      return errorf("{0}: {1}", file, llvm::toString(std::move(e)));
    onnx::ModelProto stripped;
    if (!stash.empty())
      stripped = model; // small: the weights are set aside
    if (auto e = runOnnxLibrarySandboxed(model, modelDir, opts, result.originalOpset, lib))
      return errorf("{0}: {1}", file, llvm::toString(std::move(e)));
    if (lib.error.empty() && !stash.empty() && !stash.restore(*model.mutable_graph())) {
      // The converter rewrote a large initializer: run the library on the whole model.
      if (!stash.restore(*stripped.mutable_graph()))
        return errorf(
            "{0}: internal error: cannot restore the weights set aside for the ONNX library", file);
      model = std::move(stripped);
      lib = OnnxLibraryResult{};
      lib.opset = opsets[""];
      if (auto e = runOnnxLibrarySandboxed(model, modelDir, opts, result.originalOpset, lib))
        return errorf("{0}: {1}", file, llvm::toString(std::move(e)));
    }
  }
  if (!lib.error.empty())
    return errorf("{0}: invalid ONNX model: {1}", file, lib.error);
  result.notes.insert(result.notes.end(), lib.notes.begin(), lib.notes.end());
  opsets[""] = lib.opset;
  if (opsets[""] < 7)
    return errorf("{0}: opset {1} is not supported (dlc imports opsets 7 to {2}) and could not be "
                  "converted: {3}",
                  file, opsets[""], kMaxOpset,
                  result.notes.empty() ? std::string() : result.notes.back());
  result.opset = opsets[""];

  const onnx::GraphProto &gp = model.graph();
  auto g = std::make_unique<Graph>(gp.name().empty() ? "main" : gp.name());
  Importer imp(*g, opts, ext, opsets);
  Scope scope;

  std::unordered_set<std::string> initNames;
  for (const auto &i : gp.initializer())
    initNames.insert(i.name());
  auto isBound = [&](const std::string &name) {
    return opts.bindings.count(name) || opts.bindingText.count(name);
  };
  // Names the graph reads: an input that no node (or subgraph) reads and no output
  // returns may have a type dlc does not support; such an input is left out.
  std::unordered_set<std::string> read;
  for (const auto &o : gp.output())
    read.insert(o.name());
  {
    onnx::GraphProto uses;
    *uses.mutable_node() = gp.node();
    std::unordered_set<std::string> free;
    freeNames(uses, free);
    read.insert(free.begin(), free.end());
  }
  std::vector<std::string> overridable;
  for (const auto &in : gp.input()) {
    if (initNames.count(in.name()) && !isBound(in.name())) {
      // An initializer listed as an input: before IR 4 every initializer is; from IR 4
      // ONNX Runtime lets a feed override it. dlc compiles it as a constant, as
      // TensorRT does (its value folds, converts and fuses like any weight).
      if (model.ir_version() >= 4)
        overridable.push_back(in.name());
      continue;
    }
    if (isBound(in.name())) {
      auto value = boundValue(in, opts);
      if (!value)
        return errorf("{0}: {1}", file, llvm::toString(value.takeError()));
      scope.bind(in.name(), g->addConstant(in.name(), *value));
      g->addBoundInput(in.name(), *value);
      continue;
    }
    std::vector<std::string> typeNotes;
    auto t = valueType(in, opts, typeNotes);
    if (!t && !read.count(in.name())) {
      std::string why = llvm::toString(t.takeError()), self = "input '" + in.name() + "' ";
      if (llvm::StringRef(why).startswith(self))
        why = why.substr(self.size());
      result.notes.push_back(self + "is not used by the model and is left out (it " + why + ")");
      continue;
    }
    if (!t)
      return errorf("{0}: {1}", file, llvm::toString(t.takeError()));
    result.notes.insert(result.notes.end(), typeNotes.begin(), typeNotes.end());
    scope.bind(in.name(), g->addInput(in.name(), *t));
  }
  if (!overridable.empty()) {
    std::string names;
    for (size_t i = 0; i < overridable.size() && i < 4; ++i)
      names += (i ? ", '" : "'") + overridable[i] + "'";
    if (overridable.size() > 4)
      names += " and " + std::to_string(overridable.size() - 4) + " more";
    result.notes.push_back(
        std::to_string(overridable.size()) + " initializer(s) are also listed as graph inputs (" +
        names + "); dlc compiles them as constants (ONNX Runtime would let a feed override them)");
  }
  std::vector<std::string> boundNames;
  for (const auto &[name, t] : opts.bindings)
    boundNames.push_back(name);
  for (const auto &[name, t] : opts.bindingText)
    boundNames.push_back(name);
  for (const std::string &name : boundNames)
    if (!scope.lookup(name))
      return errorf("{0}: cannot bind '{1}': the model has no input of that name", file, name);
  if (auto e = imp.importInitializers(*model.mutable_graph(), scope))
    return errorf("{0}: {1}", file, llvm::toString(std::move(e)));

  imp.importNodes(gp, scope);
  if (!imp.errors().empty())
    return makeError(joinErrors(file, imp.errors()));

  for (const auto &out : gp.output()) {
    Value *v = scope.lookup(out.name());
    if (!v)
      return errorf("{0}: graph output '{1}' is not produced by any node", file, out.name());
    if (auto e = checkOutputType(out, v))
      return errorf("{0}: {1}", file, llvm::toString(std::move(e)));
    if (isFloat8(v->dtype()))
      return errorf("{0}: output '{1}' is {2}: float8 graph outputs are not supported (float8 "
                    "values inside the graph are; dequantize the output)",
                    file, out.name(), dtypeName(v->dtype()));
    g->addOutput(out.name(), v);
  }
  for (const auto &[name, v] : imp.guards())
    g->addOutput(name, v);
  if (g->outputs().empty())
    return errorf("{0}: the graph has no outputs", file);
  g->removeUnusedConstants();
  if (auto e = verifyGraph(*g))
    return errorf("{0}: internal error: the imported graph does not verify: {1}", file,
                  llvm::toString(std::move(e)));
  result.specializedInputs = imp.specialized();
  result.warnings = imp.warnings();
  result.graph = std::move(g);
  return result;
}

llvm::Expected<ImportResult> importOnnxFile(const std::string &path, const ImportOptions &opts) {
  auto buf = readRegularFile(path);
  if (!buf.ok())
    return makeError(buf.status().message());
  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  return importOnnxBytes(llvm::StringRef(reinterpret_cast<const char *>(buf->data()), buf->size()),
                         path, std::string(dir), opts);
}

int64_t Importer::bodyCost(const onnx::GraphProto &g) {
  auto [it, fresh] = bodyCosts_.emplace(&g, 0);
  if (!fresh)
    return it->second;
  int64_t cost = g.node_size() + g.initializer_size();
  for (const auto &n : g.node()) {
    if (n.op_type() == "Loop" || n.op_type() == "Scan")
      continue; // unrolled, they charge their own iterations
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        cost += bodyCost(a.g());
      for (const auto &sg : a.graphs())
        cost += bodyCost(sg);
    }
  }
  return bodyCosts_[&g] = std::max<int64_t>(cost, 1);
}

llvm::Error Importer::chargeUnrolled(const onnx::GraphProto &body) {
  unrolledNodes_ += bodyCost(body);
  if (unrolledNodes_ <= opts_.maxUnrolledNodes)
    return llvm::Error::success();
  return errorf("unrolling the model's Loops and Scans would import more than {0} nodes "
                "(nested loops multiply their trip counts); raise the budget with "
                "--max-unrolled-nodes",
                opts_.maxUnrolledNodes);
}

llvm::Expected<std::vector<std::string>> onnxInputNames(const std::string &path) {
  auto buf = readRegularFile(path);
  if (!buf.ok())
    return makeError(buf.status().message());
  onnx::ModelProto model;
  if (buf->size() > INT32_MAX || !model.ParseFromArray(buf->data(), static_cast<int>(buf->size())))
    return errorf("{0}: not a valid ONNX model", path);
  std::unordered_set<std::string> inits;
  for (const auto &i : model.graph().initializer())
    inits.insert(i.name());
  std::vector<std::string> names;
  for (const auto &in : model.graph().input())
    if (!inits.count(in.name()))
      names.push_back(in.name());
  return names;
}

llvm::Expected<std::vector<std::string>> onnxExternalDataFiles(llvm::StringRef modelBytes) {
  onnx::ModelProto model;
  if (modelBytes.size() > INT32_MAX ||
      !model.ParseFromArray(modelBytes.data(), static_cast<int>(modelBytes.size())))
    return makeError("not a valid ONNX model");
  std::vector<const onnx::TensorProto *> external;
  collectExternalTensors(model.graph(), external);
  std::vector<std::string> files;
  std::unordered_set<std::string> seen;
  for (const onnx::TensorProto *t : external)
    for (const auto &kv : t->external_data())
      if (kv.key() == "location" && seen.insert(kv.value()).second)
        files.push_back(kv.value());
  return files;
}

} // namespace dlc::frontend
