#include "dlc/package/Package.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace dlc::pkg {

namespace {

constexpr char kMagic[8] = {'D', 'L', 'C', 'P', 'K', 'G', '\0', '\1'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t metaOffset;
  uint64_t metaSize;
  uint64_t sectionsOffset;
  uint64_t fileSize;
  uint32_t bodyCrc;
  uint32_t headerCrc; // of bytes [0, 52)
  uint64_t pad;
};
static_assert(sizeof(Header) == kHeaderSize);

uint64_t alignUp(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

} // namespace

int archNumber(const std::string &target) {
  size_t us = target.find('_');
  return us == std::string::npos ? 0 : std::atoi(target.c_str() + us + 1);
}

const Module *pickModule(const Package &m, uint32_t chunk, int cc) {
  if (!m.modules())
    return nullptr;
  int bestCubin = -1, bestPtx = -1;
  const Module *cubin = nullptr, *ptx = nullptr;
  for (const Module *x : *m.modules()) {
    if (x->chunk() != chunk || !x->target())
      continue;
    int v = archNumber(x->target()->str());
    if (x->kind() == ModuleKind::Cubin && v / 10 == cc / 10 && v <= cc && v > bestCubin) {
      bestCubin = v;
      cubin = x;
    } else if (x->kind() == ModuleKind::Ptx && v <= cc && v > bestPtx) {
      bestPtx = v;
      ptx = x;
    }
  }
  return cubin ? cubin : ptx;
}

std::vector<int> stepArchs(const Package &m) {
  std::vector<int> archs;
  if (m.steps())
    for (const Step *st : *m.steps())
      if (st->archs())
        for (const flatbuffers::String *a : *st->archs())
          archs.push_back(archNumber(a->str()));
  std::sort(archs.begin(), archs.end());
  archs.erase(std::unique(archs.begin(), archs.end()), archs.end());
  return archs;
}

int chooseStepArch(const std::vector<int> &archs, int cc) {
  if (archs.empty())
    return 0;
  int best = archs.front();
  for (int a : archs)
    if (a <= cc)
      best = a;
  return best;
}

std::string describeBoundInput(const BoundInput &b) {
  std::string shape;
  for (size_t i = 0; b.shape() && i < b.shape()->size(); ++i)
    shape += (i ? "," : "") + std::to_string(b.shape()->Get(i));
  return std::string(dtypeName(b.dtype())) + "[" + shape + "] " + b.values()->str();
}

ShapeBounds inputShapeBounds(const Package &m, uint32_t index) {
  const TensorInfo *in = m.inputs()->Get(index);
  ShapeBounds b;
  if (in->shape())
    b.min.assign(in->shape()->begin(), in->shape()->end());
  b.max = b.min;
  if (m.shape_ranges())
    for (const ShapeRange *r : *m.shape_ranges())
      if (r->input()->str() == in->name()->str() && r->axis() < b.min.size()) {
        b.min[r->axis()] = r->min();
        b.max[r->axis()] = r->max();
      }
  return b;
}

std::string inputShapeProblem(const Package &m, uint32_t index, const std::vector<int64_t> &shape) {
  std::string name = m.inputs()->Get(index)->name()->str();
  ShapeBounds b = inputShapeBounds(m, index);
  auto dims = [](const std::vector<int64_t> &s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i)
      r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
  };
  std::string expect = "[";
  for (size_t a = 0; a < b.min.size(); ++a)
    expect += (a ? "," : "") + std::to_string(b.min[a]) +
              (b.min[a] != b.max[a] ? ".." + std::to_string(b.max[a]) : std::string());
  expect += "]";
  std::string wrongShape =
      "input '" + name + "' has shape " + dims(shape) + ", the model expects " + expect;
  if (shape.size() != b.min.size())
    return wrongShape;
  for (size_t a = 0; a < b.min.size(); ++a) {
    if (shape[a] >= b.min[a] && shape[a] <= b.max[a])
      continue;
    if (b.min[a] == b.max[a])
      return wrongShape;
    return "input '" + name + "' dimension " + std::to_string(a) + " is " +
           std::to_string(shape[a]) + ", outside the range " + std::to_string(b.min[a]) + ".." +
           std::to_string(b.max[a]) + " the package was compiled for (shape " + dims(shape) +
           ", the model expects " + expect + ")";
  }
  return "";
}

std::string unknownInputMessage(const Package &m, const std::string &name) {
  if (m.bound_inputs())
    for (const BoundInput *b : *m.bound_inputs())
      if (b->name()->str() == name)
        return "input '" + name +
               "' was bound to a constant when the package was compiled (--bind " + name + ": " +
               describeBoundInput(*b) +
               "); it is not an input of this package (recompile without --bind to set it at run "
               "time)";
  std::string known;
  if (m.inputs())
    for (const TensorInfo *in : *m.inputs())
      known += (known.empty() ? "" : ", ") + in->name()->str();
  return "the model has no input named '" + name +
         "' (inputs: " + (known.empty() ? "none" : known) + ")";
}

const char *tacticKindName(TacticKind k) {
  switch (k) {
  case TacticKind::Dlc:
    return "dlc";
  case TacticKind::Cudnn:
    return "cudnn";
  case TacticKind::CublasLt:
    return "cublaslt";
  default:
    return "";
  }
}

const TacticAlt *TacticGroup::find(TacticKind k) const {
  for (const TacticAlt &a : alts)
    if (a.kind == k)
      return &a;
  return nullptr;
}

uint8_t TacticGroup::defaultAlt() const {
  const TacticAlt *d = find(TacticKind::Dlc);
  return d ? d->alt : alts.empty() ? 0 : alts.front().alt;
}

std::vector<TacticGroup> tacticGroups(const flatbuffers::Vector<flatbuffers::Offset<Step>> *steps,
                                      int arch) {
  std::vector<TacticGroup> groups;
  std::map<uint32_t, size_t> index;
  if (!steps)
    return groups;
  for (size_t i = 0; i < steps->size(); ++i) {
    const Step *s = steps->Get(i);
    if (s->tactic() == TacticKind::None || !s->alt_group() || !stepRunsOn(*s, arch))
      continue;
    auto [it, fresh] = index.emplace(s->alt_group(), groups.size());
    if (fresh) {
      groups.emplace_back();
      groups.back().group = s->alt_group();
      groups.back().node = s->node() ? s->node()->str() : "";
    }
    TacticGroup &g = groups[it->second];
    auto a = std::find_if(g.alts.begin(), g.alts.end(),
                          [&](const TacticAlt &t) { return t.alt == s->alt(); });
    if (a == g.alts.end()) {
      TacticAlt t;
      t.alt = s->alt();
      t.kind = s->tactic();
      t.desc = s->tactic_desc() ? s->tactic_desc()->str() : "";
      t.first = i;
      g.alts.push_back(t);
      a = g.alts.end() - 1;
    }
    ++a->count;
  }
  for (TacticGroup &g : groups)
    std::sort(g.alts.begin(), g.alts.end(),
              [](const TacticAlt &a, const TacticAlt &b) { return a.alt < b.alt; });
  return groups;
}

bool stepRunsOn(const Step &s, int arch) {
  if (!s.archs() || s.archs()->size() == 0)
    return true;
  for (const flatbuffers::String *a : *s.archs())
    if (archNumber(a->str()) == arch)
      return true;
  return false;
}

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F64:
  case DType::I64:
  case DType::U64:
    return 8;
  case DType::F32:
  case DType::I32:
  case DType::U32:
    return 4;
  case DType::F16:
  case DType::BF16:
  case DType::I16:
  case DType::U16:
    return 2;
  case DType::I8:
  case DType::U8:
  case DType::Bool:
  case DType::F8E4M3:
  case DType::F8E5M2:
    return 1;
  }
  return 0;
}

uint64_t tensorBytes(const TensorInfo &t) {
  uint64_t n = dtypeSize(t.dtype());
  if (t.shape())
    for (int64_t d : *t.shape())
      n *= static_cast<uint64_t>(d);
  return n;
}

const char *dtypeName(DType t) {
  static const char *names[] = {"f32", "f16", "bf16", "f64", "i64",  "i32",    "i16",   "i8",
                                "u8",  "u16", "u32",  "u64", "bool", "f8e4m3", "f8e5m2"};
  auto i = static_cast<size_t>(t);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

Section PackageWriter::addSection(const void *data, size_t n) {
  assert(!signature_ && "the signature is the last section");
  uint64_t off = alignUp(sectionsSize_, kSectionAlign);
  pending_.push_back({data, n, off});
  sectionsSize_ = off + n;
  return Section(off, n);
}

Section PackageWriter::reserveSignature() {
  Section s = addSection(nullptr, sizeof(Digest));
  signature_ = std::make_shared<Digest>();
  pending_.back().data = signature_->data();
  return s;
}

namespace {

/// The host-code signature's MAC: header bytes [8, 48), then the file from byte 64 to
/// the signature section, given piece by piece.
template <class Pieces> Digest signatureOf(const HostKey &key, const uint8_t *header, Pieces each) {
  HmacSha256 mac(key.data(), key.size());
  mac.update(header + 8, 40);
  each([&](const uint8_t *p, size_t n) { mac.update(p, n); });
  return mac.finish();
}

} // namespace

PackageImage PackageWriter::finishImage(flatbuffers::Offset<Package> root, const HostKey *key) {
  fbb_.Finish(root, PackageIdentifier());
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kFormatVersion;
  h.metaOffset = kHeaderSize;
  h.metaSize = fbb_.GetSize();
  h.sectionsOffset = alignUp(kHeaderSize + h.metaSize, kSectionAlign);
  h.fileSize = h.sectionsOffset + alignUp(sectionsSize_, kSectionAlign);
  PackageImage img;
  img.size_ = h.fileSize;
  img.head_.assign(h.sectionsOffset, 0);
  std::memcpy(img.head_.data() + kHeaderSize, fbb_.GetBufferPointer(), h.metaSize);
  for (size_t i = 0; i < pending_.size(); ++i) {
    uint64_t end = pending_[i].offset + pending_[i].size;
    uint64_t next =
        i + 1 < pending_.size() ? pending_[i + 1].offset : alignUp(sectionsSize_, kSectionAlign);
    img.pieces_.push_back(
        {static_cast<const uint8_t *>(pending_[i].data), pending_[i].size, next - end});
  }
  static const uint8_t zeros[kSectionAlign] = {};
  if (signature_) {
    std::memcpy(img.head_.data(), &h, kHeaderSize);
    *signature_ =
        key ? signatureOf(*key, img.head_.data(),
                          [&](auto add) {
                            add(img.head_.data() + kHeaderSize, img.head_.size() - kHeaderSize);
                            for (size_t i = 0; i + 1 < img.pieces_.size(); ++i) {
                              add(img.pieces_[i].data, img.pieces_[i].size);
                              add(zeros, img.pieces_[i].padding);
                            }
                          })
            : Digest{};
    img.keepAlive(signature_);
  }
  // The body's checksum, piece by piece.
  uint32_t crc = crc32(img.head_.data() + kHeaderSize, img.head_.size() - kHeaderSize);
  for (const PackageImage::Piece &p : img.pieces_) {
    crc = crc32(p.data, p.size, crc);
    crc = crc32(zeros, p.padding, crc);
  }
  h.bodyCrc = crc;
  h.headerCrc = crc32(&h, offsetof(Header, headerCrc));
  std::memcpy(img.head_.data(), &h, kHeaderSize);
  return img;
}

void PackageImage::forEachPiece(const std::function<void(const uint8_t *, size_t)> &write) const {
  static const uint8_t zeros[kSectionAlign] = {};
  write(head_.data(), head_.size());
  for (const Piece &p : pieces_) {
    if (p.size)
      write(p.data, p.size);
    if (p.padding)
      write(zeros, p.padding);
  }
}

std::vector<uint8_t> PackageImage::bytes() const {
  std::vector<uint8_t> file;
  file.reserve(size_);
  forEachPiece([&](const uint8_t *d, size_t n) { file.insert(file.end(), d, d + n); });
  return file;
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

PackageFile::~PackageFile() = default;

Result<std::shared_ptr<PackageFile>> PackageFile::load(const std::string &path) {
  return load(path, 0, 0);
}

Result<std::shared_ptr<PackageFile>> PackageFile::load(const std::string &path, uint64_t offset,
                                                       uint64_t size) {
  // O_NONBLOCK: a FIFO or a device opens at once and is refused as not a regular file,
  // instead of blocking forever in open().
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return Status(StatusCode::IoError, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(StatusCode::IoError, "'" + path + "' is not a regular file");
  }
  uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  if (offset > fileSize || (size != 0 && size > fileSize - offset)) {
    ::close(fd);
    return Status(StatusCode::InvalidPackage, path + ": embedded package range [" +
                                                  std::to_string(offset) + ", +" +
                                                  std::to_string(size) + ") is outside the file");
  }
  // Read into memory, not mapped: a session must not see the file change under it (a
  // copy over it, a truncation that would end the process with SIGBUS).
  std::shared_ptr<PackageFile> pf(new PackageFile());
  pf->name_ = path;
  size_t n = static_cast<size_t>(size ? size : fileSize - offset);
  try {
    pf->owned_.resize(n + kSectionAlign);
  } catch (const std::bad_alloc &) {
    ::close(fd);
    return Status(StatusCode::IoError,
                  "'" + path + "': not enough memory to read " + std::to_string(n) + " bytes");
  }
  size_t pad = (kSectionAlign - reinterpret_cast<uintptr_t>(pf->owned_.data()) % kSectionAlign) %
               kSectionAlign;
  uint8_t *dst = pf->owned_.data() + pad;
  for (size_t done = 0; done < n;) {
    ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (r <= 0) {
      int err = r < 0 ? errno : EIO;
      ::close(fd);
      return Status(StatusCode::IoError,
                    "cannot read '" + path + "': " +
                        (r == 0 ? std::string("the file shrank while read") : std::strerror(err)));
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  pf->data_ = dst;
  pf->size_ = n;
  if (Status s = pf->verify())
    return s;
  return pf;
}

Result<std::shared_ptr<PackageFile>> PackageFile::fromStaticBytes(const void *data, size_t n,
                                                                  const std::string &name) {
  if (reinterpret_cast<uintptr_t>(data) % kSectionAlign != 0)
    return fromBytes(data, n, name);
  std::shared_ptr<PackageFile> pf(new PackageFile());
  pf->name_ = name;
  pf->data_ = static_cast<const uint8_t *>(data);
  pf->size_ = n;
  if (Status s = pf->verify())
    return s;
  return pf;
}

Result<std::shared_ptr<PackageFile>> PackageFile::fromBytes(const void *data, size_t n,
                                                            const std::string &name) {
  std::shared_ptr<PackageFile> pf(new PackageFile());
  pf->name_ = name;
  // Keep the copy 256-byte aligned, as a mapping would be, so sections stay aligned.
  pf->owned_.resize(n + kSectionAlign);
  size_t pad = (kSectionAlign - reinterpret_cast<uintptr_t>(pf->owned_.data()) % kSectionAlign) %
               kSectionAlign;
  if (n)
    std::memcpy(pf->owned_.data() + pad, data, n);
  pf->data_ = pf->owned_.data() + pad;
  pf->size_ = n;
  if (Status s = pf->verify())
    return s;
  return pf;
}

uint64_t PackageFile::metadataBytes() const {
  Header h;
  std::memcpy(&h, data_, kHeaderSize);
  return h.metaSize;
}

bool PackageFile::signedWith(const HostKey &key) const {
  const Section *sig = meta_ ? meta_->host_signature() : nullptr;
  if (!sig || sig->size() != sizeof(Digest))
    return false;
  Header h;
  std::memcpy(&h, data_, kHeaderSize);
  // The signature is the last section: everything before it is covered. (verify()
  // placed it inside the file; checked again here without any sum that could wrap.)
  uint64_t sectionsSize = size_ - h.sectionsOffset;
  if (sig->offset() % kSectionAlign || sig->offset() > sectionsSize ||
      sectionsSize - sig->offset() < sizeof(Digest) ||
      alignUp(sig->offset() + sizeof(Digest), kSectionAlign) != sectionsSize)
    return false;
  Digest expect;
  std::memcpy(expect.data(), data_sections_ + sig->offset(), expect.size());
  Digest got = signatureOf(key, data_, [&](auto add) {
    add(data_ + kHeaderSize, h.sectionsOffset + sig->offset() - kHeaderSize);
  });
  return digestsEqual(got, expect);
}

Status PackageFile::verify() {
  auto bad = [&](const std::string &what) {
    return Status(StatusCode::InvalidPackage,
                  name_ + ": invalid or corrupted .dlc package: " + what);
  };
  if (size_ < kHeaderSize)
    return bad("file is too small (" + std::to_string(size_) + " bytes)");
  Header h;
  std::memcpy(&h, data_, kHeaderSize);
  if (std::memcmp(h.magic, kMagic, 8) != 0)
    return bad("wrong magic bytes (not a .dlc file)");
  if (h.headerCrc != crc32(&h, offsetof(Header, headerCrc)))
    return bad("header checksum mismatch");
  if (h.pad != 0) // (outside both checksums: written as zeros)
    return bad("nonzero header padding");
  if (h.version != kFormatVersion)
    return bad("format version " + std::to_string(h.version) + ", this runtime reads version " +
               std::to_string(kFormatVersion));
  if (h.fileSize != size_)
    return bad("file is " + std::to_string(size_) + " bytes, the header says " +
               std::to_string(h.fileSize) +
               (size_ < h.fileSize ? " (truncated?)" : " (extra bytes after the package)"));
  if (h.metaOffset != kHeaderSize || h.metaSize > size_ - kHeaderSize ||
      h.sectionsOffset < kHeaderSize + h.metaSize || h.sectionsOffset > size_ ||
      h.sectionsOffset % kSectionAlign)
    return bad("inconsistent header layout");
  if (h.bodyCrc != crc32(data_ + kHeaderSize, size_ - kHeaderSize))
    return bad("checksum mismatch (the file is damaged)");

  flatbuffers::Verifier v(data_ + kHeaderSize, h.metaSize, /*max_depth=*/64,
                          /*max_tables=*/10'000'000);
  if (!VerifyPackageBuffer(v))
    return bad("metadata does not verify");
  meta_ = GetPackage(data_ + kHeaderSize);
  const Package &p = *meta_;
  uint64_t sectionsSize = size_ - h.sectionsOffset;
  // From here on, Section offsets are relative to the section area.
  data_sections_ = data_ + h.sectionsOffset;

  auto checkSection = [&](const Section *s, const std::string &what) -> Status {
    if (!s)
      return Status::ok();
    if (s->offset() % kSectionAlign || s->offset() > sectionsSize ||
        s->size() > sectionsSize - s->offset())
      return bad(what + " lies outside the file");
    return Status::ok();
  };
  if (p.format_version() != kFormatVersion)
    return bad("metadata format version mismatch");
  // Sizes a runtime can round and add without wrapping: far above any GPU's memory.
  constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 48;
  if (p.arena_bytes() > kMaxRegionBytes || p.weight_bytes() > kMaxRegionBytes)
    return bad("the arena or the weight region is larger than 2^48 bytes");
  // The weight region holds what the file's weight sections hold, aligned.
  if (p.weight_bytes() > size_ + kSectionAlign * (p.weights() ? p.weights()->size() + 1 : 1))
    return bad("the weight region is larger than the file's weights");
  // The buffer table that BufRefs index: the package's, then each shape variant's.
  const flatbuffers::Vector<flatbuffers::Offset<Buffer>> *buffers = p.buffers();
  size_t nBuffers = 0;
  auto useBuffers = [&](const flatbuffers::Vector<flatbuffers::Offset<Buffer>> *bs,
                        const std::string &where) -> Status {
    buffers = bs;
    nBuffers = bs ? bs->size() : 0;
    for (size_t i = 0; i < nBuffers; ++i) {
      const Buffer *b = buffers->Get(i);
      uint64_t limit = b->region() == Region::Arena ? p.arena_bytes() : p.weight_bytes();
      if (b->region() != Region::Arena && b->region() != Region::Weights)
        return bad(where + "buffer " + std::to_string(i) + " has an unknown region");
      if (b->offset() % 16 || b->offset() > limit || b->bytes() > limit - b->offset())
        return bad(where + "buffer " + std::to_string(i) + " lies outside its region");
    }
    return Status::ok();
  };
  DLC_RETURN_IF_ERROR(useBuffers(p.buffers(), ""));
  auto checkRef = [&](const BufRef &r, uint64_t bytes, const std::string &what) -> Status {
    if (r.buffer() >= nBuffers)
      return bad(what + " refers to buffer " + std::to_string(r.buffer()) + " of " +
                 std::to_string(nBuffers));
    const Buffer *b = buffers->Get(r.buffer());
    if (r.offset() > b->bytes() || bytes > b->bytes() - r.offset())
      return bad(what + " reaches past the end of buffer " + std::to_string(r.buffer()));
    return Status::ok();
  };
  // The verifier checks a vector's 4-byte length word, not that its 8-byte elements
  // ([long], [Reloc]) are aligned: a damaged file could place them at 4 mod 8 (an
  // empty vector has no elements to align).
  auto misaligned = [](const auto *vec) {
    return vec && vec->size() && reinterpret_cast<uintptr_t>(vec->Data()) % 8 != 0;
  };
  // A TensorInfo or a Variable: dtype, shape and a buffer that holds the tensor.
  auto checkTensor = [&](const auto *t, const std::string &label,
                         std::set<std::string> &names) -> Status {
    if (!t->name() || t->name()->size() == 0 || !names.insert(t->name()->str()).second)
      return bad(label + " has a missing or duplicate name");
    if (misaligned(t->shape()))
      return bad(label + " has a misaligned shape");
    if (static_cast<size_t>(t->dtype()) > static_cast<size_t>(DType::MAX))
      return bad(label + " has an unknown dtype");
    uint64_t n = 1;
    if (t->shape())
      for (int64_t d : *t->shape()) {
        if (d < 0 || (d && n > (uint64_t{1} << 48) / static_cast<uint64_t>(d)))
          return bad(label + " has an invalid shape");
        n *= static_cast<uint64_t>(d);
      }
    return checkRef(BufRef(t->buffer(), 0), n * dtypeSize(t->dtype()), label);
  };
  auto checkTensors = [&](const flatbuffers::Vector<flatbuffers::Offset<TensorInfo>> *ts,
                          const char *what) -> Status {
    std::set<std::string> names;
    for (size_t i = 0; ts && i < ts->size(); ++i)
      DLC_RETURN_IF_ERROR(
          checkTensor(ts->Get(i), std::string(what) + " " + std::to_string(i), names));
    return Status::ok();
  };
  DLC_RETURN_IF_ERROR(checkTensors(p.inputs(), "input"));
  DLC_RETURN_IF_ERROR(checkTensors(p.outputs(), "output"));
  DLC_RETURN_IF_ERROR(checkTensors(p.eval_outputs(), "evaluation output"));
  if (p.bound_inputs())
    for (size_t i = 0; i < p.bound_inputs()->size(); ++i) {
      const BoundInput *b = p.bound_inputs()->Get(i);
      if (!b->name() || b->name()->size() == 0 || !b->values() || misaligned(b->shape()) ||
          static_cast<size_t>(b->dtype()) > static_cast<size_t>(DType::MAX))
        return bad("bound input " + std::to_string(i) +
                   " has no name, no values or an unknown dtype");
    }
  if (p.commit_steps() > (p.steps() ? p.steps()->size() : 0))
    return bad("more commit steps than steps");
  DLC_RETURN_IF_ERROR(checkSection(p.source_model(), "the source model"));
  if (p.variables()) {
    std::set<std::string> names;
    for (size_t i = 0; i < p.variables()->size(); ++i) {
      const Variable *v = p.variables()->Get(i);
      std::string label = "variable " + std::to_string(i);
      DLC_RETURN_IF_ERROR(checkTensor(v, label, names));
      DLC_RETURN_IF_ERROR(checkSection(v->data(), label));
      if (!v->data() || v->data()->size() != buffers->Get(v->buffer())->bytes())
        return bad(label + " has no initial value of its size");
      if (buffers->Get(v->buffer())->region() != Region::Arena)
        return bad(label + " is not in the arena");
    }
  }
  if (p.weights())
    for (size_t i = 0; i < p.weights()->size(); ++i) {
      const Weight *w = p.weights()->Get(i);
      std::string label = "weight " + std::to_string(i);
      DLC_RETURN_IF_ERROR(checkSection(w->data(), label));
      if (!w->data())
        return bad(label + " has no data");
      DLC_RETURN_IF_ERROR(checkRef(BufRef(w->buffer(), 0), w->data()->size(), label));
      if (buffers->Get(w->buffer())->region() != Region::Weights)
        return bad(label + " is not in the weight region");
    }
  size_t nKernels = p.kernels() ? p.kernels()->size() : 0;
  std::set<std::string> kernelNames;
  for (size_t i = 0; i < nKernels; ++i) {
    const Kernel *k = p.kernels()->Get(i);
    if (!k->name() || k->name()->size() == 0 || !kernelNames.insert(k->name()->str()).second)
      return bad("kernel " + std::to_string(i) + " has a missing or duplicate name");
    if (!k->symbol() || k->symbol()->size() == 0)
      return bad("kernel " + std::to_string(i) + " has no symbol");
  }
  if (p.modules())
    for (size_t i = 0; i < p.modules()->size(); ++i) {
      const Module *m = p.modules()->Get(i);
      DLC_RETURN_IF_ERROR(checkSection(m->data(), "module " + std::to_string(i)));
      if (!m->target() || !m->data() ||
          static_cast<size_t>(m->kind()) > static_cast<size_t>(ModuleKind::MAX))
        return bad("module " + std::to_string(i) + " is incomplete");
    }
  DLC_RETURN_IF_ERROR(checkSection(p.cuda_source(), "the CUDA source"));
  DLC_RETURN_IF_ERROR(checkSection(p.host_signature(), "the host-code signature"));
  auto checkLaunch = [&](const Launch &l, const std::string &label) -> Status {
    if (l.kernel() >= nKernels)
      return bad(label + " launches kernel " + std::to_string(l.kernel()) + " of " +
                 std::to_string(nKernels));
    if (!l.grid() || !l.block() || !l.grid()->x() || !l.grid()->y() || !l.grid()->z() ||
        !l.block()->x() || !l.block()->y() || !l.block()->z())
      return bad(label + " has an empty grid or block");
    size_t paramBytes = l.params() ? l.params()->size() : 0;
    if (paramBytes > kMaxParamBytes)
      return bad(label + " has " + std::to_string(paramBytes) + " bytes of parameters (limit " +
                 std::to_string(kMaxParamBytes) + ")");
    if (misaligned(l.relocs()))
      return bad(label + " has misaligned relocations");
    if (l.relocs())
      for (const Reloc *r : *l.relocs()) {
        if (r->offset() % 8 || r->offset() > paramBytes || paramBytes - r->offset() < 8)
          return bad(label + " has a relocation outside its parameters");
        DLC_RETURN_IF_ERROR(checkRef(r->ref(), 0, label + " argument"));
      }
    return Status::ok();
  };
  using Steps = flatbuffers::Vector<flatbuffers::Offset<Step>>;
  using Checks = flatbuffers::Vector<flatbuffers::Offset<Check>>;
  auto checkSchedule = [&](const Steps *steps, const Checks *checks, uint32_t checkBuffer,
                           const std::string &where) -> Status {
    if (checks && checks->size()) {
      if (checkBuffer >= nBuffers || buffers->Get(checkBuffer)->region() != Region::Arena)
        return bad(where + "the check buffer is not an arena buffer");
      for (const Check *c : *checks) {
        if (c->offset() % 4 || !c->node() || !c->what())
          return bad("a check word is misaligned or unnamed");
        DLC_RETURN_IF_ERROR(checkRef(BufRef(checkBuffer, c->offset()), 4, "a check word"));
      }
    }
    if (steps)
      for (size_t i = 0; i < steps->size(); ++i) {
        const Step *s = steps->Get(i);
        std::string label = where + "step " + std::to_string(i);
        if ((s->alt_group() == 0) != (s->alt() == 0) ||
            s->alt() > (s->tactic() == TacticKind::None ? 2 : kMaxTactics) ||
            s->tactic() > TacticKind::MAX || (s->tactic() != TacticKind::None && !s->alt_group()))
          return bad(label + " has an invalid alternative (" + std::to_string(s->alt_group()) +
                     ", " + std::to_string(s->alt()) + ")");
        // A union's type without its value passes the flatbuffers verifier.
        if (!s->op())
          return bad(label + " has no operation");
        switch (s->op_type()) {
        case StepKind::Launch:
          DLC_RETURN_IF_ERROR(checkLaunch(*s->op_as_Launch(), label));
          break;
        case StepKind::Gemm: {
          const Gemm *g = s->op_as_Gemm();
          size_t es = dtypeSize(g->dtype());
          if (!es || g->m() < 1 || g->n() < 1 || g->k() < 1 || g->batch() < 1 || !g->a() ||
              !g->b() || !g->c())
            return bad(label + " is an invalid GEMM");
          // Bytes up to the highest element each operand touches, for bounds checks; the
          // operands are non-negative here, and an overflow (a damaged package) becomes a
          // size no buffer has.
          auto extent = [es](int64_t batch, int64_t stride, int64_t rows, int64_t cols,
                             int64_t ld) -> uint64_t {
            uint64_t a, b, r;
            if (__builtin_mul_overflow(uint64_t(batch - 1), uint64_t(stride), &a) ||
                __builtin_mul_overflow(uint64_t(rows - 1), uint64_t(ld), &b) ||
                __builtin_add_overflow(a, b, &r) || __builtin_add_overflow(r, uint64_t(cols), &r) ||
                __builtin_mul_overflow(r, uint64_t(es), &r))
              return UINT64_MAX;
            return r;
          };
          int64_t ar = g->trans_a() ? g->k() : g->m(), ac = g->trans_a() ? g->m() : g->k();
          int64_t br = g->trans_b() ? g->n() : g->k(), bc = g->trans_b() ? g->k() : g->n();
          if (g->lda() < ac || g->ldb() < bc || g->ldc() < g->n() || g->stride_a() < 0 ||
              g->stride_b() < 0 || g->stride_c() < 0)
            return bad(label + " has invalid leading dimensions or strides");
          DLC_RETURN_IF_ERROR(
              checkRef(*g->a(), extent(g->batch(), g->stride_a(), ar, ac, g->lda()), label + " A"));
          DLC_RETURN_IF_ERROR(
              checkRef(*g->b(), extent(g->batch(), g->stride_b(), br, bc, g->ldb()), label + " B"));
          DLC_RETURN_IF_ERROR(checkRef(
              *g->c(), extent(g->batch(), g->stride_c(), g->m(), g->n(), g->ldc()), label + " C"));
          if (g->c_in())
            DLC_RETURN_IF_ERROR(
                checkRef(*g->c_in(), extent(g->batch(), g->stride_c(), g->m(), g->n(), g->ldc()),
                         label + " C input"));
          if (g->bias())
            DLC_RETURN_IF_ERROR(checkRef(*g->bias(), g->n() * es, label + " bias"));
          if (g->activation() > GemmActivation::MAX)
            return bad(label + " has an unknown activation");
          if (g->algo_rank() >= kMaxTactics)
            return bad(label + " names cuBLASLt algorithm " + std::to_string(g->algo_rank()));
          if (g->workspace_bytes())
            DLC_RETURN_IF_ERROR(checkRef(g->workspace() ? *g->workspace() : BufRef(UINT32_MAX, 0),
                                         g->workspace_bytes(), label + " workspace"));
          if (g->fallback())
            DLC_RETURN_IF_ERROR(checkLaunch(*g->fallback(), label + " epilogue fallback"));
          break;
        }
        case StepKind::Copy: {
          const Copy *c = s->op_as_Copy();
          if (!c->src() || !c->dst())
            return bad(label + " is an invalid copy");
          DLC_RETURN_IF_ERROR(checkRef(*c->src(), c->bytes(), label + " source"));
          DLC_RETURN_IF_ERROR(checkRef(*c->dst(), c->bytes(), label + " destination"));
          break;
        }
        case StepKind::Memset: {
          const Memset *m = s->op_as_Memset();
          if (!m->dst())
            return bad(label + " is an invalid memset");
          DLC_RETURN_IF_ERROR(checkRef(*m->dst(), m->bytes(), label));
          break;
        }
        case StepKind::Collective: {
          const Collective *a = s->op_as_Collective();
          size_t es = dtypeSize(a->dtype());
          size_t n = a->sources() ? a->sources()->size() : 0;
          bool shard = a->op() == CollectiveOp::Shard,
               allReduce = a->op() == CollectiveOp::AllReduce;
          if (!a->staging() || (!n && !shard) || !es || a->op() > CollectiveOp::MAX ||
              (n && (!a->offsets() || !a->sizes() || a->offsets()->size() != n ||
                     a->sizes()->size() != n)) ||
              a->count() > (UINT64_MAX >> 16) / es ||
              (!allReduce && (!a->output() || a->ranks() < 1 || a->ranks() > 65536)))
            return bad(label + " is an invalid collective");
          if (misaligned(a->sources()) || misaligned(a->offsets()) || misaligned(a->sizes()))
            return bad(label + " has misaligned vectors");
          uint64_t bytes = a->count() * es;
          DLC_RETURN_IF_ERROR(checkRef(*a->staging(), bytes, label + " bucket"));
          for (size_t k = 0; k < n; ++k) {
            uint64_t off = a->offsets()->Get(k), size = a->sizes()->Get(k);
            if (off > bytes || size > bytes - off)
              return bad(label + " packs a gradient outside its bucket");
            DLC_RETURN_IF_ERROR(checkRef(*a->sources()->Get(k), size, label + " gradient"));
          }
          if (!allReduce) {
            // ZeRO-1's collectives are sized for the world the package was compiled
            // for, which a session checks against its own.
            if (!p.zero_ranks() || a->ranks() != p.zero_ranks())
              return bad(label + " shards over " + std::to_string(a->ranks()) +
                         " ranks in a package for " + std::to_string(p.zero_ranks()));
            if (a->op() != CollectiveOp::AllGather && a->count() % a->ranks())
              return bad(label + " does not split into equal shares");
            uint64_t out =
                a->op() == CollectiveOp::AllGather ? bytes * a->ranks() : bytes / a->ranks();
            DLC_RETURN_IF_ERROR(checkRef(*a->output(), out, label + " output"));
          }
          break;
        }
        case StepKind::CollectiveWait:
          if (!s->op_as_CollectiveWait()->staging())
            return bad(label + " is an invalid wait");
          DLC_RETURN_IF_ERROR(checkRef(*s->op_as_CollectiveWait()->staging(), 0, label));
          if (s->op_as_CollectiveWait()->output())
            DLC_RETURN_IF_ERROR(
                checkRef(*s->op_as_CollectiveWait()->output(), 0, label + " output"));
          break;
        case StepKind::CudnnConv: {
          const CudnnConv *c = s->op_as_CudnnConv();
          const size_t es = dtypeSize(c->dtype());
          const size_t nd = c->kernel() ? c->kernel()->size() : 0;
          auto dims = [&](const flatbuffers::Vector<int64_t> *v, int64_t lo) {
            if (!v || v->size() != nd || misaligned(v))
              return false;
            for (int64_t d : *v)
              if (d < lo || d > (int64_t(1) << 31))
                return false;
            return true;
          };
          if ((c->dtype() != DType::F16 && c->dtype() != DType::BF16) || !c->x() || !c->w() ||
              !c->y() || (nd != 2 && nd != 3) || c->n() < 1 || c->c() < 1 || c->k() < 1 ||
              c->groups() < 1 || c->c() % c->groups() || c->k() % c->groups() ||
              c->n() > (int64_t(1) << 31) || c->c() > (int64_t(1) << 31) ||
              c->k() > (int64_t(1) << 31) || !dims(c->spatial_in(), 1) ||
              !dims(c->spatial_out(), 1) || !dims(c->kernel(), 1) || !dims(c->stride(), 1) ||
              !dims(c->dilation(), 1) || !dims(c->pad_begin(), 0) || !dims(c->pad_end(), 0))
            return bad(label + " is an invalid cuDNN convolution");
          // Bytes of each operand, saturating at every product (an overflow is a size no
          // buffer has).
          auto bytes = [&](int64_t a, int64_t b, const flatbuffers::Vector<int64_t> *v) {
            uint64_t r = 0;
            bool over = __builtin_mul_overflow(uint64_t(a), uint64_t(b), &r) ||
                        __builtin_mul_overflow(r, uint64_t(es), &r);
            for (int64_t d : *v)
              over = over || __builtin_mul_overflow(r, uint64_t(d), &r);
            return over ? UINT64_MAX : r;
          };
          DLC_RETURN_IF_ERROR(
              checkRef(*c->x(), bytes(c->n(), c->c(), c->spatial_in()), label + " x"));
          DLC_RETURN_IF_ERROR(
              checkRef(*c->w(), bytes(c->k(), c->c() / c->groups(), c->kernel()), label + " w"));
          DLC_RETURN_IF_ERROR(
              checkRef(*c->y(), bytes(c->n(), c->k(), c->spatial_out()), label + " y"));
          if (c->workspace_bytes())
            DLC_RETURN_IF_ERROR(checkRef(c->workspace() ? *c->workspace() : BufRef(UINT32_MAX, 0),
                                         c->workspace_bytes(), label + " workspace"));
          if (c->bias())
            DLC_RETURN_IF_ERROR(checkRef(*c->bias(), uint64_t(c->k()) * es, label + " bias"));
          break;
        }
        case StepKind::CudnnSdpa: {
          const CudnnSdpa *a = s->op_as_CudnnSdpa();
          const size_t es = dtypeSize(a->dtype());
          constexpr int64_t kMost = int64_t(1) << 31;
          auto in = [&](int64_t v) { return v >= 1 && v <= kMost; };
          auto strides = [&](const flatbuffers::Vector<int64_t> *v) {
            if (!v || v->size() != 4 || misaligned(v) || v->Get(3) != 1)
              return false;
            for (int64_t x : *v)
              if (x < 0 || x > (int64_t(1) << 48))
                return false;
            return true;
          };
          // (At most 2^48 scores, head sizes up to 2^16; O is contiguous: no two outputs
          // share an element.)
          uint64_t scores = 0;
          const bool tooMany =
              !in(a->b()) || !in(a->h()) || !in(a->sq()) || !in(a->sk()) ||
              __builtin_mul_overflow(uint64_t(a->b()), uint64_t(a->h()), &scores) ||
              __builtin_mul_overflow(scores, uint64_t(a->sq()), &scores) ||
              __builtin_mul_overflow(scores, uint64_t(a->sk()), &scores) ||
              scores > (uint64_t(1) << 48);
          const auto *os = a->o_strides();
          if ((a->dtype() != DType::F16 && a->dtype() != DType::BF16) || !a->q() || !a->k() ||
              !a->v() || !a->o() || tooMany || !in(a->d()) || !in(a->dv()) || a->d() > 65536 ||
              a->dv() > 65536 || !strides(a->q_strides()) || !strides(a->k_strides()) ||
              !strides(a->v_strides()) || !strides(os) || os->Get(2) != a->dv() ||
              os->Get(1) != a->sq() * a->dv() || os->Get(0) != a->h() * a->sq() * a->dv() ||
              !std::isfinite(a->scale()))
            return bad(label + " is an invalid cuDNN attention");
          // Bytes up to one past the last element of a [b, h, rows, cols] view, saturating.
          auto extent = [&](const flatbuffers::Vector<int64_t> *st, int64_t rows, int64_t cols) {
            uint64_t r = 0, t = 0;
            bool over = false;
            const int64_t dims[4] = {a->b(), a->h(), rows, cols};
            for (int i = 0; i < 4; ++i) {
              over = over ||
                     __builtin_mul_overflow(uint64_t(dims[i] - 1), uint64_t(st->Get(i)), &t) ||
                     __builtin_add_overflow(r, t, &r);
            }
            over = over || __builtin_add_overflow(r, uint64_t(1), &r) ||
                   __builtin_mul_overflow(r, uint64_t(es), &r);
            return over ? UINT64_MAX : r;
          };
          DLC_RETURN_IF_ERROR(
              checkRef(*a->q(), extent(a->q_strides(), a->sq(), a->d()), label + " Q"));
          DLC_RETURN_IF_ERROR(
              checkRef(*a->k(), extent(a->k_strides(), a->sk(), a->d()), label + " K"));
          DLC_RETURN_IF_ERROR(
              checkRef(*a->v(), extent(a->v_strides(), a->sk(), a->dv()), label + " V"));
          DLC_RETURN_IF_ERROR(
              checkRef(*a->o(), extent(a->o_strides(), a->sq(), a->dv()), label + " O"));
          if (a->workspace_bytes())
            DLC_RETURN_IF_ERROR(checkRef(a->workspace() ? *a->workspace() : BufRef(UINT32_MAX, 0),
                                         a->workspace_bytes(), label + " workspace"));
          break;
        }
        default:
          return bad(label + " has an unknown kind");
        }
        if (s->archs())
          for (const flatbuffers::String *a : *s->archs())
            if (!a || a->size() == 0)
              return bad(label + " names an empty architecture");
      }
    if (steps)
      for (const Step *st : *steps) {
        if (st->schedules() > 3)
          return bad(where + "a step belongs to an unknown schedule");
        if (st->predicate())
          DLC_RETURN_IF_ERROR(checkRef(*st->predicate(), 1, where + "a step's condition"));
      }
    return Status::ok();
  };
  DLC_RETURN_IF_ERROR(checkSchedule(p.steps(), p.checks(), p.check_buffer(), ""));
  // Shape ranges: every variant is a complete schedule over its own buffer table.
  if (p.shape_ranges())
    for (size_t i = 0; i < p.shape_ranges()->size(); ++i) {
      const ShapeRange *r = p.shape_ranges()->Get(i);
      if (!r->input() || r->min() < 0 || r->max() < r->min() || r->opt() < r->min() ||
          r->opt() > r->max())
        return bad("shape range " + std::to_string(i) + " is invalid");
    }
  if (p.variants())
    for (size_t i = 0; i < p.variants()->size(); ++i) {
      const ShapeVariant *var = p.variants()->Get(i);
      std::string where = "shape variant " + std::to_string(i) + ": ";
      if (var->arena_bytes() > p.arena_bytes())
        return bad(where + "its arena is larger than the package's");
      DLC_RETURN_IF_ERROR(useBuffers(var->buffers(), where));
      DLC_RETURN_IF_ERROR(checkTensors(var->inputs(), (where + "input").c_str()));
      DLC_RETURN_IF_ERROR(checkTensors(var->outputs(), (where + "output").c_str()));
      if ((var->inputs() ? var->inputs()->size() : 0) != (p.inputs() ? p.inputs()->size() : 0) ||
          (var->outputs() ? var->outputs()->size() : 0) != (p.outputs() ? p.outputs()->size() : 0))
        return bad(where + "its inputs or outputs differ from the package's");
      DLC_RETURN_IF_ERROR(checkSchedule(var->steps(), var->checks(), var->check_buffer(), where));
    }
  return Status::ok();
}

} // namespace dlc::pkg
