#include "dlc/ir/Attribute.h"

#include <cstring>

namespace dlc::ir {

std::string_view attrKindName(AttrKind k) {
  switch (k) {
  case AttrKind::Int:
    return "int";
  case AttrKind::Float:
    return "float";
  case AttrKind::String:
    return "string";
  case AttrKind::Ints:
    return "ints";
  case AttrKind::Floats:
    return "floats";
  case AttrKind::Strings:
    return "strings";
  case AttrKind::Tensor:
    return "tensor";
  }
  return "?";
}

static bool sameFloatBits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

bool Attribute::operator==(const Attribute &o) const {
  if (kind() != o.kind())
    return false;
  switch (kind()) {
  case AttrKind::Float:
    return sameFloatBits(f(), o.f());
  case AttrKind::Floats: {
    if (floats().size() != o.floats().size())
      return false;
    for (size_t k = 0; k < floats().size(); ++k)
      if (!sameFloatBits(floats()[k], o.floats()[k]))
        return false;
    return true;
  }
  case AttrKind::Tensor:
    return tensor().bitwiseEqual(o.tensor());
  case AttrKind::Int:
    return i() == o.i();
  case AttrKind::String:
    return s() == o.s();
  case AttrKind::Ints:
    return ints() == o.ints();
  case AttrKind::Strings:
    return strings() == o.strings();
  }
  return false;
}

} // namespace dlc::ir
