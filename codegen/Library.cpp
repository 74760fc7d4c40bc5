//===- Library.cpp - Parameter lists, functors, launch arguments -----------===//
#include "Library.h"

#include <algorithm>
#include <map>

namespace dlc::codegen {

using namespace ir;

std::string ParamList::add(Field f) {
  std::string name = "a" + std::to_string(fields_.size());
  fields_.push_back(std::move(f));
  return "P." + name;
}

std::string ParamList::pointer(DType dt, BufferRef r, bool isConst, uint64_t bytes) {
  accesses_.push_back({r, bytes, !isConst});
  return add({Field::Pointer,
              std::string(isConst ? "const " : "") + cudaType(dt) + " *__restrict__", r, 0});
}

std::string ParamList::i64(int64_t v) {
  return add({Field::Int, "long long", {}, v});
}

std::string ParamList::divmod(int64_t d) {
  return add({Field::Div, "dlc::Divmod", {}, d});
}

std::string ParamList::declarations() const {
  std::string s;
  for (size_t i = 0; i < fields_.size(); ++i)
    s += fields_[i].type + " a" + std::to_string(i) + "; ";
  // An empty struct would have size 1, which the host-side layout does not expect.
  return s.empty() ? "long long unused; " : s;
}

void ParamList::append(ParamBlob &b) const {
  if (fields_.empty())
    b.i64(0);
  for (const Field &f : fields_) {
    switch (f.kind) {
    case Field::Pointer:
      b.pointer(f.ref);
      break;
    case Field::Int:
      b.i64(f.value);
      break;
    case Field::Div: {
      Divmod d = Divmod::make(f.value);
      b.raw(&d, sizeof d, 8);
      break;
    }
    }
  }
}

std::string Functor::text(const std::string &name) const {
  return "struct " + name + " {\n  typedef " + valueType + " Value;\n  struct Params { " +
         params.declarations() + "};\n" + methods + "};\n";
}

void LaunchArgs::pointer(size_t offset, BufferRef r, uint64_t bytes, bool write, bool accessed) {
  blob.relocs.push_back({static_cast<uint32_t>(offset), r});
  if (accessed)
    accesses_.push_back({r, bytes, write});
}

void LaunchArgs::slot(BufferRef r, uint64_t bytes, bool write) {
  blob.pointer(r);
  accesses_.push_back({r, bytes, write});
}

void LaunchArgs::functor(const Functor &f, bool accessed) {
  f.params.append(blob);
  if (accessed)
    for (const ParamList::Access &a : f.params.accesses())
      accesses_.push_back(a);
}

void LaunchArgs::finishTraffic(const Lowering &l) {
  std::map<std::pair<uint32_t, uint64_t>, std::pair<uint64_t, int>> views;
  for (const ParamList::Access &a : accesses_) {
    uint64_t bytes = a.bytes ? a.bytes : l.bufferBytes(a.ref.buffer) - a.ref.offset;
    auto &v = views[{a.ref.buffer, a.ref.offset}];
    v.first = std::max(v.first, bytes);
    v.second |= a.write ? 2 : 1;
  }
  bytesRead = bytesWritten = 0;
  for (const auto &[key, v] : views) {
    if (v.second & 1)
      bytesRead += v.first;
    if (v.second & 2)
      bytesWritten += v.first;
  }
}

uint32_t gridFor(uint64_t n, uint32_t block) {
  uint64_t blocks = (n + block - 1) / block;
  return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(blocks, 65536)));
}

llvm::Expected<Strided> stridedView(const Shape &dims, const std::vector<int64_t> &strides) {
  if (dims.size() > static_cast<size_t>(kMaxRank))
    return errorf("a view of rank {0} (code generation handles up to {1} dims)", dims.size(),
                  kMaxRank);
  Strided s{};
  s.rank = static_cast<int64_t>(dims.size());
  for (int d = 0; d < kMaxRank; ++d)
    s.ext[d] = Divmod::make(1);
  for (size_t i = 0; i < dims.size(); ++i) {
    size_t d = kMaxRank - dims.size() + i;
    s.ext[d] = Divmod::make(dims[i]);
    s.stride[d] = strides[i];
  }
  return s;
}

} // namespace dlc::codegen
