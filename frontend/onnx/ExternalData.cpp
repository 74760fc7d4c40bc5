//===- ExternalData.cpp - Safe loading of external tensor data -------------===//
//
// ONNX external data names a file relative to the model. The path is resolved
// inside the model's directory only: absolute paths, ".." components and
// symlinks whose target lies outside the directory are rejected (the class of
// CVE-2022-25882 and CVE-2024-27318). Files are memory-mapped, so models whose
// weights exceed 2 GB load without copying.
//===----------------------------------------------------------------------===//
#include "OnnxUtil.h"
#include "dlc/ir/Graph.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlc::frontend {

struct ExternalDataLoader::Mapping {
  void *base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED && size)
      munmap(base, size);
  }
};

static std::string realPath(const std::string &p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

llvm::Expected<std::shared_ptr<ExternalDataLoader::Mapping>>
ExternalDataLoader::map(const std::string &location) {
  if (location.empty())
    return ir::makeError("external data location is empty");
  if (location[0] == '/' || location[0] == '\\')
    return ir::errorf("external data location '{0}' is an absolute path; only paths inside the "
                      "model directory are allowed",
                      location);
  if (location.find('\0') != std::string::npos)
    return ir::errorf("external data location contains a NUL byte");
  llvm::StringRef rest(location);
  while (!rest.empty()) {
    auto [component, tail] = rest.split('/');
    auto [c2, t2] = component.split('\\');
    if (component == ".." || c2 == ".." || component.contains("\\.."))
      return ir::errorf("external data location '{0}' contains '..'; only paths inside the model "
                        "directory are allowed",
                        location);
    (void)t2;
    rest = tail;
  }
  auto it = files_.find(location);
  if (it != files_.end())
    return it->second;

  std::string dir = realPath(modelDir_.empty() ? "." : modelDir_);
  std::string full = (modelDir_.empty() ? std::string(".") : modelDir_) + "/" + location;
  std::string resolved = realPath(full);
  if (resolved.empty())
    return ir::errorf("external data file '{0}' not found next to the model", location);
  if (dir.empty() || resolved.compare(0, dir.size() + 1, dir + "/") != 0)
    return ir::errorf("external data location '{0}' resolves to '{1}', outside the model "
                      "directory (symlink escape)",
                      location, resolved);
  // O_NONBLOCK: a FIFO is refused below instead of blocking open() forever.
  int fd = ::open(resolved.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return ir::errorf("cannot open external data file '{0}': {1}", location, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return ir::errorf("external data location '{0}' is not a regular file", location);
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size) {
    m->base = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->base == MAP_FAILED) {
      ::close(fd);
      return ir::errorf("cannot map external data file '{0}': {1}", location, std::strerror(errno));
    }
  }
  ::close(fd);
  files_[location] = m;
  return m;
}

llvm::Error ExternalDataLoader::check(const onnx::TensorProto &t) {
  for (const auto &kv : t.external_data())
    if (kv.key() == "location") {
      auto m = map(kv.value());
      if (!m)
        return ir::errorf("tensor '{0}': {1}", t.name(), llvm::toString(m.takeError()));
      return llvm::Error::success();
    }
  return ir::errorf("tensor '{0}' is stored externally but has no location", t.name());
}

llvm::Expected<ir::Tensor> ExternalDataLoader::load(const onnx::TensorProto &t,
                                                    const ir::TensorType &type) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &kv : t.external_data()) {
    auto parseNum = [&](int64_t &dst) -> llvm::Error {
      char *end = nullptr;
      errno = 0;
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (errno || !end || *end || v < 0)
        return ir::errorf("tensor '{0}': invalid external data {1} '{2}'", t.name(), kv.key(),
                          kv.value());
      dst = v;
      return llvm::Error::success();
    };
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset") {
      if (auto e = parseNum(offset))
        return e;
    } else if (kv.key() == "length") {
      if (auto e = parseNum(length))
        return e;
    }
  }
  if (location.empty())
    return ir::errorf("tensor '{0}' is stored externally but has no location", t.name());
  auto m = map(location);
  if (!m)
    return ir::errorf("tensor '{0}': {1}", t.name(), llvm::toString(m.takeError()));
  uint64_t need = type.byteSize();
  if (length >= 0 && static_cast<uint64_t>(length) != need)
    return ir::errorf("tensor '{0}' of type {1} needs {2} bytes, external data length is {3}",
                      t.name(), type.str(), need, length);
  if (static_cast<uint64_t>(offset) > (*m)->size || need > (*m)->size - offset)
    return ir::errorf("tensor '{0}': external data [{1}, {1}+{2}) lies outside '{3}' ({4} bytes)",
                      t.name(), offset, need, location, (*m)->size);
  if (need == 0)
    return ir::Tensor(type);
  const char *p = static_cast<const char *>((*m)->base) + offset;
  if (reinterpret_cast<uintptr_t>(p) % ir::dtypeSize(type.dtype) != 0) {
    ir::Tensor copy(type); // unaligned: copy so typed access stays well-defined
    std::memcpy(copy.mutableRaw(), p, need);
    return copy;
  }
  return ir::Tensor(type, std::shared_ptr<const void>(*m, (*m)->base), p);
}

} // namespace dlc::frontend
