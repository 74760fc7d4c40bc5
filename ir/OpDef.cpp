#include "dlc/ir/OpDef.h"

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

std::string_view fusionKindName(FusionKind k) {
  switch (k) {
  case FusionKind::Unset:
    return "unset";
  case FusionKind::ElemWise:
    return "elemwise";
  case FusionKind::Broadcast:
    return "broadcast";
  case FusionKind::Injective:
    return "injective";
  case FusionKind::CommReduce:
    return "comm-reduce";
  case FusionKind::OutEWiseFusable:
    return "out-ewise-fusable";
  case FusionKind::Opaque:
    return "opaque";
  }
  return "?";
}

std::string_view fp16PolicyName(Fp16Policy p) {
  switch (p) {
  case Fp16Policy::Unset:
    return "unset";
  case Fp16Policy::Allow:
    return "allow";
  case Fp16Policy::Follow:
    return "follow";
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
