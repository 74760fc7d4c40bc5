#include "NodeImporter.h"

#include "dlc/ir/Interpreter.h"

namespace dlc::frontend {

using namespace ir;

Value *Scope::lookup(const std::string &name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    return it->second;
  return parent_ ? parent_->lookup(name) : nullptr;
}

void Scope::replaceValue(Value *from, Value *to) {
  for (auto &[name, v] : values_)
    if (v == from)
      v = to;
  if (parent_)
    parent_->replaceValue(from, to);
}

bool Scope::isPoisoned(const std::string &name) const {
  return poisoned_.count(name) || (parent_ && parent_->isPoisoned(name));
}

NodeImporter::NodeImporter(Importer &imp, Scope &scope, const onnx::NodeProto &node, int64_t opset)
    : imp_(imp), scope_(scope), node_(node), opset_(opset) {}

Graph &NodeImporter::graph() {
  return imp_.graph();
}

Value *NodeImporter::input(size_t i) const {
  if (i >= numInputs() || node_.input(i).empty())
    return nullptr;
  return scope_.lookup(node_.input(i));
}

const Tensor *NodeImporter::constInput(size_t i) {
  Value *v = input(i);
  if (!v)
    return nullptr;
  if (v->isInput()) {
    auto it = imp_.options().specializable.find(v->name());
    if (it == imp_.options().specializable.end() || it->second.type() != v->type())
      return nullptr;
    std::string name = v->name();
    Graph &g = graph();
    Value *c = g.addConstant(g.uniqueName(name + ".specialized"), it->second);
    g.replaceAllUsesWith(v, c);
    scope_.replaceValue(v, c);
    g.eraseInput(v);
    g.renameValue(c, name);
    imp_.specialized().push_back(name);
    v = c;
  }
  return v->isConstant() ? &v->data() : nullptr;
}

std::string NodeImporter::bindHint(size_t i) const {
  const Value *v = input(i);
  if (!v || !v->isInput())
    return "";
  return " (it is the graph input '" + v->name() +
         "': bind it to a value at compile time with --bind " + v->name() + "=VALUES or --bind " +
         v->name() + "=FILE.npy)";
}

llvm::Expected<std::vector<int64_t>> NodeImporter::constInts(size_t i, const char *what) {
  const Tensor *t = constInput(i);
  if (!t)
    return errorf("{0} (input {1}, '{2}') must be a compile-time constant: dlc compiles static "
                  "shapes, and this value cannot be computed from the model's constants{3}",
                  what, i, node_.input(i), bindHint(i));
  if (!isInt(t->dtype()))
    return errorf("{0} (input {1}) must be an integer tensor, got {2}", what, i, t->type().str());
  return t->toVector<int64_t>();
}

llvm::Expected<std::vector<float>> NodeImporter::constFloats(size_t i, const char *what) {
  const Tensor *t = constInput(i);
  if (!t)
    return errorf("{0} (input {1}) must be a compile-time constant{2}", what, i, bindHint(i));
  return t->toVector<float>();
}

const onnx::AttributeProto *NodeImporter::attr(const std::string &name) const {
  for (const auto &a : node_.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

const onnx::AttributeProto *NodeImporter::typedAttr(const std::string &name, int type) const {
  const auto *a = attr(name);
  if (a && a->type() != onnx::AttributeProto::UNDEFINED && a->type() != type) {
    if (attrError_.empty())
      attrError_ = "attribute '" + name + "' must be " +
                   onnx::AttributeProto::AttributeType_Name(
                       static_cast<onnx::AttributeProto::AttributeType>(type)) +
                   ", got " + onnx::AttributeProto::AttributeType_Name(a->type());
    return nullptr;
  }
  return a;
}

int64_t NodeImporter::attrInt(const std::string &name, int64_t dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::INT);
  return a ? a->i() : dflt;
}
float NodeImporter::attrFloat(const std::string &name, float dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::FLOAT);
  return a ? a->f() : dflt;
}
std::string NodeImporter::attrString(const std::string &name, const std::string &dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::STRING);
  return a ? a->s() : dflt;
}
std::vector<int64_t> NodeImporter::attrInts(const std::string &name,
                                            std::vector<int64_t> dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::INTS);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : dflt;
}
std::vector<float> NodeImporter::attrFloats(const std::string &name,
                                            std::vector<float> dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::FLOATS);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : dflt;
}
std::vector<std::string> NodeImporter::attrStrings(const std::string &name) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::STRINGS);
  return a ? std::vector<std::string>(a->strings().begin(), a->strings().end())
           : std::vector<std::string>{};
}
llvm::Expected<Tensor> NodeImporter::attrTensor(const std::string &name) const {
  const auto *a = attr(name);
  if (!a || !a->has_t())
    return errorf("missing tensor attribute '{0}'", name);
  return tensorFromOnnx(a->t(), &imp_.externalData());
}

llvm::Expected<AttrMap> NodeImporter::copyAttrs(OpKind k,
                                                const std::vector<std::string> &ignored) const {
  AttrMap m;
  const OpDef &d = opDef(k);
  for (const auto &a : node_.attribute()) {
    if (std::find(ignored.begin(), ignored.end(), a.name()) != ignored.end())
      continue;
    const AttrSpec *spec = d.findAttr(a.name());
    if (!spec)
      return errorf("attribute '{0}' is not supported", a.name());
    auto mismatch = [&]() {
      return errorf("attribute '{0}' has ONNX type {1}, expected {2}", a.name(),
                    onnx::AttributeProto::AttributeType_Name(a.type()), attrKindName(spec->kind));
    };
    switch (a.type()) {
    case onnx::AttributeProto::INT:
      if (spec->kind == AttrKind::Float)
        m[a.name()] = Attribute(static_cast<float>(a.i()));
      else if (spec->kind == AttrKind::Int)
        m[a.name()] = Attribute(a.i());
      else
        return mismatch();
      break;
    case onnx::AttributeProto::FLOAT:
      if (spec->kind != AttrKind::Float)
        return mismatch();
      m[a.name()] = Attribute(a.f());
      break;
    case onnx::AttributeProto::STRING:
      if (spec->kind != AttrKind::String)
        return mismatch();
      m[a.name()] = Attribute(a.s());
      break;
    case onnx::AttributeProto::INTS:
      if (spec->kind != AttrKind::Ints)
        return mismatch();
      m[a.name()] = Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
      break;
    case onnx::AttributeProto::FLOATS:
      if (spec->kind != AttrKind::Floats)
        return mismatch();
      m[a.name()] = Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
      break;
    case onnx::AttributeProto::STRINGS:
      if (spec->kind != AttrKind::Strings)
        return mismatch();
      m[a.name()] = Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end()));
      break;
    case onnx::AttributeProto::TENSOR: {
      if (spec->kind != AttrKind::Tensor)
        return mismatch();
      auto t = tensorFromOnnx(a.t(), &imp_.externalData());
      if (!t)
        return t.takeError();
      m[a.name()] = Attribute(std::move(*t));
      break;
    }
    default:
      return errorf("attribute '{0}' of type {1} is not supported", a.name(),
                    onnx::AttributeProto::AttributeType_Name(a.type()));
    }
  }
  return m;
}

llvm::Expected<std::vector<Value *>> NodeImporter::opMulti(OpKind k, std::vector<Value *> operands,
                                                           AttrMap attrs, unsigned numResults) {
  auto n = graph().createInferred(k, operands, std::move(attrs), numResults, node_.name());
  if (!n)
    return n.takeError();
  Node *node = *n;
  std::vector<Value *> results;
  bool allConst =
      std::all_of(operands.begin(), operands.end(), [](Value *v) { return !v || v->isConstant(); });
  bool small = true;
  for (unsigned i = 0; i < node->numResults(); ++i)
    small &= node->result(i)->type().numElements() <= imp_.options().eagerFoldLimit;
  // (A DequantizeLinear stays a node: the fold-qdq pass reads quantized convolutions
  // and products from it; constant folding folds the others later.)
  if (allConst && small && k != OpKind::DequantizeLinear) {
    std::vector<const Tensor *> ins;
    for (Value *v : operands)
      ins.push_back(v ? &v->data() : nullptr);
    auto folded = evaluateNode(*node, ins);
    if (folded) {
      std::vector<std::string> names;
      for (unsigned i = 0; i < node->numResults(); ++i)
        names.push_back(node->result(i)->name());
      graph().eraseNode(node);
      for (unsigned i = 0; i < folded->size(); ++i)
        results.push_back(constant(std::move((*folded)[i]), names[i]));
      return results;
    }
    llvm::consumeError(folded.takeError()); // keep the node: the error shows at run time
  }
  for (unsigned i = 0; i < node->numResults(); ++i) {
    created_.insert(node->result(i));
    results.push_back(node->result(i));
  }
  return results;
}

llvm::Expected<Value *> NodeImporter::op(OpKind k, std::vector<Value *> operands, AttrMap attrs) {
  auto r = opMulti(k, std::move(operands), std::move(attrs), 1);
  if (!r)
    return r.takeError();
  return (*r)[0];
}

Value *NodeImporter::constant(Tensor t, const std::string &hint) {
  Value *v = graph().addConstant(graph().uniqueName(hint.empty() ? node_.name() + "_const" : hint),
                                 std::move(t));
  created_.insert(v);
  return v;
}

Value *NodeImporter::scalar(DType dt, double v) {
  return constant(Tensor::fromVector<double>(TensorType(dt, {}), {v}));
}

Value *NodeImporter::ints(const std::vector<int64_t> &v) {
  return constant(Tensor::fromVector<int64_t>(TensorType(DType::I64, {int64_t(v.size())}), v));
}

void NodeImporter::setOutput(size_t i, Value *v) {
  if (!wantsOutput(i))
    return;
  const std::string &name = node_.output(i);
  scope_.bind(name, v);
  // Values this node created take the ONNX output name, so IR reads like the model.
  if (created_.count(v) && v->name() != name && !graph().findValue(name))
    graph().renameValue(v, name);
}

} // namespace dlc::frontend
