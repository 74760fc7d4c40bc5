//===- ControlHandlers.cpp - Constant, If and Einsum -----------------------===//
#include "Common.h"

#include <map>
#include <set>

namespace dlc::frontend {
namespace {

using namespace ir;

llvm::Error importConstant(NodeImporter &ni) {
  Tensor t;
  if (ni.hasAttr("value")) {
    DLC_TRY(v, ni.attrTensor("value"));
    t = v;
  } else if (ni.hasAttr("value_float")) {
    t = Tensor::fromVector<float>(TensorType(DType::F32, {}), {ni.attrFloat("value_float", 0)});
  } else if (ni.hasAttr("value_floats")) {
    auto v = ni.attrFloats("value_floats");
    t = Tensor::fromVector(TensorType(DType::F32, {int64_t(v.size())}), v);
  } else if (ni.hasAttr("value_int")) {
    t = Tensor::fromVector<int64_t>(TensorType(DType::I64, {}), {ni.attrInt("value_int", 0)});
  } else if (ni.hasAttr("value_ints")) {
    auto v = ni.attrInts("value_ints");
    t = Tensor::fromVector(TensorType(DType::I64, {int64_t(v.size())}), v);
  } else if (ni.hasAttr("value_string") || ni.hasAttr("value_strings")) {
    return ni.unsupported("string constants");
  } else if (ni.hasAttr("sparse_value")) {
    return ni.unsupported("sparse constants");
  } else {
    return ni.error("Constant has no value attribute");
  }
  ni.setOutput(0, ni.constant(std::move(t), ni.proto().output(0)));
  return llvm::Error::success();
}

/// Imports one branch of an If into the graph; returns its outputs.
llvm::Expected<std::vector<Value *>> importBranch(NodeImporter &ni, const char *which) {
  const auto *branch = ni.attr(std::string(which) + "_branch");
  if (!branch || !branch->has_g())
    return ni.error(std::string("missing ") + which + " branch graph");
  const onnx::GraphProto &g = branch->g();
  Importer &imp = ni.importer();
  Scope inner(&ni.scope());
  size_t errorsBefore = imp.errors().size();
  if (auto e = imp.importInitializers(g, inner))
    return e;
  imp.importNodes(g, inner);
  if (imp.errors().size() != errorsBefore)
    return ni.error(std::string("the ") + which + " branch could not be imported (see above)");
  if (g.output_size() != static_cast<int>(ni.numOutputs()))
    return ni.error(std::string("the ") + which + " branch has " + std::to_string(g.output_size()) +
                    " outputs, If has " + std::to_string(ni.numOutputs()));
  std::vector<Value *> outs;
  for (int i = 0; i < g.output_size(); ++i) {
    Value *v = inner.lookup(g.output(i).name());
    if (!v)
      return ni.error("branch output '" + g.output(i).name() + "' is not defined");
    outs.push_back(v);
  }
  return outs;
}

/// If. With a condition known at compile time (a constant, or an input bound with
/// --bind), the taken branch is inlined. With a run-time condition, both branches are
/// inlined and each output is Where(cond, then, else): the branches must agree on
/// each output's type (static shapes). The code generator runs the steps that feed
/// only one side of such a Where when the condition selects it (Lowering::predicates).
llvm::Error importIf(NodeImporter &ni) {
  if (const Tensor *cond = ni.constInput(0)) {
    if (cond->numElements() != 1)
      return ni.error("the condition must have one element");
    bool taken = cond->getDouble(0) != 0;
    DLC_TRY(outs, importBranch(ni, taken ? "then" : "else"));
    for (size_t i = 0; i < outs.size(); ++i)
      ni.setOutput(i, outs[i]);
    return llvm::Error::success();
  }
  Value *cond = ni.input(0);
  if (!cond || cond->dtype() != DType::Bool || cond->type().numElements() != 1)
    return ni.error("the condition must be one bool element");
  DLC_TRY(thenOuts, importBranch(ni, "then"));
  DLC_TRY(elseOuts, importBranch(ni, "else"));
  if (cond->rank() != 0) {
    DLC_TRY(scalar, ni.op(OpKind::Reshape, {cond}, {{"shape", Attribute(std::vector<int64_t>{})}}));
    cond = scalar;
  }
  for (size_t i = 0; i < thenOuts.size(); ++i) {
    if (thenOuts[i]->type() != elseOuts[i]->type())
      return ni.unsupported("If with a run-time condition whose branches give output " + std::to_string(i) +
                            " different types (" + thenOuts[i]->type().str() + " and " +
                            elseOuts[i]->type().str() + "); dlc compiles static shapes" + ni.bindHint(0));
    DLC_TRY(out, ni.op(OpKind::Where, {cond, thenOuts[i], elseOuts[i]}));
    ni.setOutput(i, out);
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Einsum: operands are contracted pairwise with Transpose/Reshape/MatMul, after
// summing labels that only one operand has. Repeated labels inside one operand
// (diagonals) are not supported.
//===----------------------------------------------------------------------===//

struct Term {
  Value *v;
  std::string labels; // one char per dim
};

llvm::Expected<Value *> transposeTo(NodeImporter &ni, Term &t, const std::string &order) {
  if (order == t.labels)
    return t.v;
  Shape perm;
  for (char c : order)
    perm.push_back(static_cast<int64_t>(t.labels.find(c)));
  auto r = ni.op(OpKind::Transpose, {t.v}, {{"perm", Attribute(perm)}});
  if (r) {
    t.v = *r;
    t.labels = order;
  }
  return r;
}

/// Sums out the labels of t that are not in `keep`.
llvm::Error sumOut(NodeImporter &ni, Term &t, const std::set<char> &keep) {
  std::vector<int64_t> axes;
  std::string rest;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (keep.count(t.labels[i]))
      rest += t.labels[i];
    else
      axes.push_back(static_cast<int64_t>(i));
  }
  if (axes.empty())
    return llvm::Error::success();
  DLC_TRY(r, ni.op(OpKind::ReduceSum, {t.v}, {{"axes", Attribute(axes)}, {"keepdims", Attribute(int64_t{0})}}));
  t.v = r;
  t.labels = rest;
  return llvm::Error::success();
}

llvm::Expected<Term> contract(NodeImporter &ni, Term a, Term b, const std::set<char> &keep) {
  std::string batch, contractL, aOnly, bOnly;
  for (char c : a.labels) {
    bool inB = b.labels.find(c) != std::string::npos;
    if (inB && keep.count(c))
      batch += c;
    else if (inB)
      contractL += c;
    else
      aOnly += c;
  }
  for (char c : b.labels)
    if (a.labels.find(c) == std::string::npos)
      bOnly += c;
  auto dim = [](const Term &t, char c) { return t.v->shape()[t.labels.find(c)]; };
  int64_t B = 1, M = 1, K = 1, N = 1;
  Shape outShape;
  for (char c : batch) {
    if (dim(a, c) != dim(b, c))
      return ni.error(std::string("dimension '") + c + "' differs between operands");
    B *= dim(a, c);
    outShape.push_back(dim(a, c));
  }
  for (char c : aOnly) {
    M *= dim(a, c);
    outShape.push_back(dim(a, c));
  }
  for (char c : contractL) {
    if (dim(a, c) != dim(b, c))
      return ni.error(std::string("dimension '") + c + "' differs between operands");
    K *= dim(a, c);
  }
  for (char c : bOnly) {
    N *= dim(b, c);
    outShape.push_back(dim(b, c));
  }
  DLC_TRY(ta, transposeTo(ni, a, batch + aOnly + contractL));
  DLC_TRY(tb, transposeTo(ni, b, batch + contractL + bOnly));
  (void)ta;
  (void)tb;
  DLC_TRY(ra, ni.op(OpKind::Reshape, {a.v}, {{"shape", Attribute(Shape{B, M, K})}}));
  DLC_TRY(rb, ni.op(OpKind::Reshape, {b.v}, {{"shape", Attribute(Shape{B, K, N})}}));
  DLC_TRY(mm, ni.op(OpKind::MatMul, {ra, rb}));
  DLC_TRY(out, ni.op(OpKind::Reshape, {mm}, {{"shape", Attribute(outShape)}}));
  return Term{out, batch + aOnly + bOnly};
}

llvm::Error importEinsum(NodeImporter &ni) {
  std::string eq;
  for (char c : ni.attrString("equation", ""))
    if (c != ' ')
      eq += c;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> specs;
  for (size_t pos = 0;;) {
    size_t comma = lhs.find(',', pos);
    specs.push_back(lhs.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  auto ins = allInputs(ni);
  if (specs.size() != ins.size())
    return ni.error("the equation has " + std::to_string(specs.size()) + " operands, the node has " +
                    std::to_string(ins.size()));
  // Expand "..." into fresh upper-case labels, right-aligned across operands.
  int64_t ellRank = 0;
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].find("...") != std::string::npos)
      ellRank = std::max<int64_t>(ellRank, ins[i]->rank() - (int64_t(specs[i].size()) - 3));
  auto ellLabels = [&](int64_t n) {
    std::string s;
    for (int64_t k = ellRank - n; k < ellRank; ++k)
      s += static_cast<char>('A' + k);
    return s;
  };
  std::vector<Term> terms;
  std::map<char, int> count;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string s = specs[i];
    size_t e = s.find("...");
    if (e != std::string::npos)
      s = s.substr(0, e) + ellLabels(ins[i]->rank() - (int64_t(s.size()) - 3)) + s.substr(e + 3);
    if (static_cast<int64_t>(s.size()) != ins[i]->rank())
      return ni.error("operand " + std::to_string(i) + " has rank " + std::to_string(ins[i]->rank()) +
                      " but the equation gives it " + std::to_string(s.size()) + " labels");
    std::set<char> seen;
    for (char c : s) {
      if (!seen.insert(c).second)
        return ni.unsupported("Einsum with a repeated label in one operand (diagonal)");
      ++count[c];
    }
    terms.push_back({ins[i], s});
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    size_t e = out.find("...");
    if (e != std::string::npos)
      out = out.substr(0, e) + ellLabels(ellRank) + out.substr(e + 3);
  } else { // implicit output: ellipsis dims, then labels seen once, alphabetically
    out = ellLabels(ellRank);
    for (auto [c, n] : count)
      if (n == 1 && !(c >= 'A' && c < 'A' + ellRank))
        out += c;
  }
  std::set<char> outSet(out.begin(), out.end());
  auto keepFor = [&](size_t from) { // labels needed by the output or terms[from..]
    std::set<char> keep = outSet;
    for (size_t j = from; j < terms.size(); ++j)
      keep.insert(terms[j].labels.begin(), terms[j].labels.end());
    return keep;
  };
  Term acc = terms[0];
  {
    std::set<char> keep = keepFor(1);
    if (auto e = sumOut(ni, acc, keep))
      return e;
  }
  for (size_t i = 1; i < terms.size(); ++i) {
    std::set<char> keepB = keepFor(i + 1);
    keepB.insert(acc.labels.begin(), acc.labels.end());
    if (auto e = sumOut(ni, terms[i], keepB))
      return e;
    DLC_TRY(c, contract(ni, acc, terms[i], keepFor(i + 1)));
    acc = c;
  }
  if (auto e = sumOut(ni, acc, outSet))
    return e;
  DLC_TRY(r, transposeTo(ni, acc, out));
  if (r == ins[0]) { // a no-op equation still gets its own value
    DLC_TRY(c, ni.op(OpKind::Identity, {r}));
    ni.setOutput(0, c);
    return llvm::Error::success();
  }
  ni.setOutput(0, r);
  return llvm::Error::success();
}

} // namespace

void registerControlHandlers(std::vector<HandlerEntry> &t) {
  t.push_back({"Constant", 1, kMaxOpset, importConstant});
  t.push_back({"If", 1, kMaxOpset, importIf});
  t.push_back({"Einsum", 12, kMaxOpset, importEinsum});
}

} // namespace dlc::frontend
