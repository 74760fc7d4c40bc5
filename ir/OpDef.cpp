#include "dlc/ir/OpDef.h"

#include "dlc/ir/Graph.h"

#include <unordered_map>

namespace dlc::ir {

static constexpr std::string_view kOpNames[] = {
#define OP(NAME, FAMILY) #NAME,
#include "dlc/ir/Ops.def"
};

std::string_view opName(OpKind k) {
  return kOpNames[static_cast<size_t>(k)];
}

std::optional<OpKind> opKindFromName(std::string_view name) {
  static const auto *map = [] {
    auto *m = new std::unordered_map<std::string_view, OpKind>();
    for (size_t i = 0; i < kNumOps; ++i)
      (*m)[kOpNames[i]] = static_cast<OpKind>(i);
    return m;
  }();
  auto it = map->find(name);
  if (it == map->end())
    return std::nullopt;
  return it->second;
}

OperandAccess OperandAccess::identity(unsigned operand, int64_t rank) {
  OperandAccess a{operand, {}};
  for (int64_t d = 0; d < rank; ++d)
    a.dims.push_back({d});
  return a;
}

bool IndexMap::isPermutation() const {
  if (kind != Kind::Affine)
    return false;
  std::vector<bool> seen(access.dims.size(), false);
  for (const DimAccess &d : access.dims) {
    if (d.dim < 0 || d.dim >= static_cast<int64_t>(seen.size()) || seen[d.dim] || d.start != 0 ||
        d.step != 1 || d.modulus != 0)
      return false;
    seen[d.dim] = true;
  }
  return true;
}

std::string_view gemmEpilogueOpName(GemmEpilogueOp op) {
  switch (op) {
  case GemmEpilogueOp::None:
    return "none";
  case GemmEpilogueOp::Add:
    return "add";
  case GemmEpilogueOp::Relu:
    return "relu";
  case GemmEpilogueOp::GeluTanh:
    return "gelu_tanh";
  }
  return "?";
}

std::optional<GemmEpilogueOp> gemmEpilogueOpFromName(std::string_view name) {
  for (GemmEpilogueOp op :
       {GemmEpilogueOp::None, GemmEpilogueOp::Add, GemmEpilogueOp::Relu, GemmEpilogueOp::GeluTanh})
    if (gemmEpilogueOpName(op) == name)
      return op;
  return std::nullopt;
}

std::string_view fusionRoleName(Fusibility::Role r) {
  switch (r) {
  case Fusibility::Role::Unset:
    return "unset";
  case Fusibility::Role::Opaque:
    return "opaque";
  case Fusibility::Role::Metadata:
    return "metadata";
  case Fusibility::Role::Elementwise:
    return "elementwise";
  case Fusibility::Role::Injective:
    return "injective";
  case Fusibility::Role::Anchor:
    return "anchor";
  }
  return "?";
}

std::string describeFusibility(const Fusibility &f) {
  std::string s(fusionRoleName(f.role));
  if (f.role != Fusibility::Role::Anchor)
    return s;
  std::string caps;
  for (auto [on, what] : {std::pair{f.prologue, "prologue"},
                          {f.epilogue, f.libraryEpilogue ? "library-epilogue" : "epilogue"}})
    if (on)
      caps += (caps.empty() ? "" : ",") + std::string(what);
  return s + "(" + caps + ")";
}

bool Fusibility::readsAtOwnIndex(const Node &n, unsigned k) const {
  const Value *v = n.operand(k);
  if (role == Role::Metadata)
    return k == 0;
  return role == Role::Elementwise && v && !(operandAccess && operandAccess(n, k)) &&
         v->shape() == n.result()->shape();
}

Fusibility fusibility(const Node &n) {
  const OpDef &d = n.def();
  if (d.fusibility.opaqueWhen && d.fusibility.opaqueWhen(n))
    return Fusibility::opaque();
  Fusibility f = d.fusibility.refine ? d.fusibility.refine(n) : d.fusibility;
  for (unsigned i = 1; i < n.numResults() && f.role != Fusibility::Role::Opaque; ++i)
    if (n.result(i)->hasUses() || n.graph()->isOutput(n.result(i)))
      f = Fusibility::opaque();
  return f;
}

std::string_view fp16PolicyName(Fp16Policy p) {
  switch (p) {
  case Fp16Policy::Unset:
    return "unset";
  case Fp16Policy::Allow:
    return "allow";
  case Fp16Policy::Follow:
    return "follow";
  case Fp16Policy::Convert:
    return "convert";
  case Fp16Policy::Deny:
    return "deny";
  }
  return "?";
}

std::string_view layoutRuleName(LayoutRule::Kind k) {
  switch (k) {
  case LayoutRule::Unset:
    return "unset";
  case LayoutRule::Agnostic:
    return "agnostic";
  case LayoutRule::ChannelAxis:
    return "channel-axis";
  case LayoutRule::AxisAttrs:
    return "axis-attrs";
  case LayoutRule::Fixed:
    return "fixed";
  }
  return "?";
}

const AttrSpec *OpDef::findAttr(std::string_view n) const {
  for (const AttrSpec &a : attrs)
    if (a.name == n)
      return &a;
  return nullptr;
}

OpBuilder OpTable::def(OpKind k) {
  OpDef &d = (*this)[k];
  d.kind = k;
  d.name = opName(k);
  return OpBuilder(d);
}

const OpDef &opDef(OpKind k) {
  static const OpTable *table = [] {
    auto *t = new OpTable();
#define FAMILY(F) define##F##Ops(*t);
#define OP(N, F)
#include "dlc/ir/Ops.def"
    return t;
  }();
  return (*table)[k];
}

} // namespace dlc::ir
