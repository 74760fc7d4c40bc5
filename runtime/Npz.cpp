//===- Npz.cpp - NumPy .npz archives ---------------------------------------===//
//
// The zip subset numpy writes: local file headers, the central directory and its
// end record (zip64 extra fields for members over 4 GiB are not supported and are
// reported as such). Members are located through the central directory, as zip
// readers do, and every offset and size is checked against the file. The runtime
// depends on no compression library: deflated members need the caller's inflater.
//===----------------------------------------------------------------------===//
#include "dlc/runtime/Runtime.h"
#include "dlc/support/Files.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace dlc::rt {

namespace {

uint32_t le32(const uint8_t *p) {
  return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
}
uint16_t le16(const uint8_t *p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
void put16(std::string &s, uint32_t v) {
  s += static_cast<char>(v & 0xFF), s += static_cast<char>((v >> 8) & 0xFF);
}
void put32(std::string &s, uint32_t v) {
  put16(s, v & 0xFFFF), put16(s, v >> 16);
}

} // namespace

Result<NpzArrays> readNpz(const std::string &path, const Inflater &inflate) {
  auto bad = [&](const std::string &why) {
    return Status(StatusCode::InvalidArgument, "'" + path + "': " + why);
  };
  auto file = readRegularFile(path);
  if (!file.ok())
    return file.status();
  std::vector<uint8_t> &d = *file;
  size_t n = d.size();
  // The end of central directory record: 22 bytes plus a comment of up to 64 KiB.
  size_t eocd = std::string::npos;
  for (size_t i = n >= 22 ? n - 22 : 0, stop = n >= 22 + 65535 ? n - 22 - 65535 : 0; n >= 22; --i) {
    if (le32(&d[i]) == 0x06054b50) {
      eocd = i;
      break;
    }
    if (i == stop)
      break;
  }
  if (eocd == std::string::npos)
    return bad("not an .npz file (no zip end-of-directory record)");
  uint32_t count = le16(&d[eocd + 10]), dirSize = le32(&d[eocd + 12]),
           dirOffset = le32(&d[eocd + 16]);
  if (dirOffset == 0xFFFFFFFF || count == 0xFFFF)
    return bad("zip64 archives are not supported");
  if (dirOffset > eocd || dirSize > eocd - dirOffset)
    return bad("the zip directory lies outside the file");
  NpzArrays out;
  size_t at = dirOffset;
  for (uint32_t k = 0; k < count; ++k) {
    if (at + 46 > eocd || le32(&d[at]) != 0x02014b50)
      return bad("malformed zip directory entry " + std::to_string(k));
    uint16_t method = le16(&d[at + 10]), nameLen = le16(&d[at + 28]), extraLen = le16(&d[at + 30]),
             commentLen = le16(&d[at + 32]);
    uint32_t crc = le32(&d[at + 16]), csize = le32(&d[at + 20]), usize = le32(&d[at + 24]),
             local = le32(&d[at + 42]);
    if (at + 46 + nameLen > eocd)
      return bad("malformed zip directory entry " + std::to_string(k));
    std::string name(reinterpret_cast<const char *>(&d[at + 46]), nameLen);
    at += 46 + nameLen + extraLen + commentLen;
    if (csize == 0xFFFFFFFF || usize == 0xFFFFFFFF || local == 0xFFFFFFFF)
      return bad("member '" + name + "' needs zip64, which is not supported");
    if (local + 30 > n || le32(&d[local]) != 0x04034b50)
      return bad("member '" + name + "' has no valid local header");
    size_t data = local + 30 + le16(&d[local + 26]) + le16(&d[local + 28]);
    if (data > n || csize > n - data)
      return bad("member '" + name + "' reaches past the end of the file");
    std::vector<uint8_t> bytes;
    if (method == 0) {
      if (csize != usize)
        return bad("member '" + name + "' has inconsistent sizes");
      bytes.assign(d.begin() + data, d.begin() + data + csize);
    } else if (method == 8) {
      if (!inflate)
        return bad("member '" + name + "' is compressed (numpy.savez_compressed); use numpy.savez");
      // Deflate makes at most 1032 bytes of each compressed byte: a larger recorded size
      // is a lie, refused before any memory is taken for it.
      if (usize > uint64_t{1032} * csize + 1024)
        return bad("member '" + name + "' claims " + std::to_string(usize) + " bytes from " +
                   std::to_string(csize) + " compressed ones, more than deflate can produce");
      bytes.resize(usize);
      if (!inflate(&d[data], csize, bytes.data(), usize))
        return bad("member '" + name + "' does not inflate to its recorded size");
    } else {
      return bad("member '" + name + "' uses zip compression method " + std::to_string(method) +
                 " (only stored and deflate are supported)");
    }
    if (pkg::crc32(bytes.data(), bytes.size()) != crc)
      return bad("member '" + name + "' fails its CRC check");
    if (name.size() < 5 || name.compare(name.size() - 4, 4, ".npy") != 0)
      return bad("member '" + name + "' is not an .npy array");
    std::string key = name.substr(0, name.size() - 4);
    auto t = parseNpy(bytes.data(), bytes.size(), path + ":" + name);
    if (!t)
      return t.takeStatus();
    if (!out.emplace(key, std::move(*t)).second)
      return bad("array '" + key + "' appears twice");
  }
  return out;
}

Status writeNpz(const std::string &path, const NpzArrays &arrays) {
  std::string file, dir;
  uint32_t count = 0;
  for (const auto &[name, t] : arrays) {
    std::string member = name + ".npy", bytes = encodeNpy(t);
    if (bytes.size() >= 0xFFFFFFFFull)
      return Status(StatusCode::InvalidArgument,
                    "array '" + name + "' is too large for an .npz without zip64");
    uint32_t crc = pkg::crc32(bytes.data(), bytes.size());
    uint32_t offset = static_cast<uint32_t>(file.size()),
             size = static_cast<uint32_t>(bytes.size());
    auto common = [&](std::string &s) { // version needed .. name length (shared by both headers)
      put16(s, 20), put16(s, 0), put16(s, 0), put16(s, 0),
          put16(s, 0x21); // no flags, stored, 1980-01-01
      put32(s, crc), put32(s, size), put32(s, size), put16(s, static_cast<uint32_t>(member.size()));
    };
    put32(file, 0x04034b50);
    common(file);
    put16(file, 0);
    file += member;
    file += bytes;
    put32(dir, 0x02014b50);
    put16(dir, 20);
    common(dir);
    put16(dir, 0), put16(dir, 0), put16(dir, 0), put16(dir, 0), put32(dir, 0), put32(dir, offset);
    dir += member;
    ++count;
  }
  uint32_t dirOffset = static_cast<uint32_t>(file.size());
  file += dir;
  put32(file, 0x06054b50);
  put16(file, 0), put16(file, 0), put16(file, count), put16(file, count);
  put32(file, static_cast<uint32_t>(dir.size())), put32(file, dirOffset), put16(file, 0);

  return writeFileAtomically(path, file.data(), file.size());
}

Result<size_t> checkSamples(const NpzArrays &arrays, const pkg::Package &m,
                            const std::string &path) {
  size_t samples = 0;
  std::string have;
  for (const auto &[name, a] : arrays)
    have += (have.empty() ? "" : ", ") + name;
  bool first = true;
  for (const pkg::TensorInfo *in : *m.inputs()) {
    std::string name = in->name()->str();
    auto it = arrays.find(name);
    if (it == arrays.end())
      return Status(StatusCode::InvalidArgument, "'" + path + "' has no array '" + name +
                                                     "' for the model's input (arrays: " + have +
                                                     ")");
    const rt::HostTensor &a = it->second;
    std::vector<int64_t> want = in->shape()
                                    ? std::vector<int64_t>(in->shape()->begin(), in->shape()->end())
                                    : std::vector<int64_t>{};
    if (a.dtype != in->dtype())
      return Status(StatusCode::InvalidArgument, "'" + path + "': array '" + name + "' is " +
                                                     pkg::dtypeName(a.dtype) + ", the input is " +
                                                     pkg::dtypeName(in->dtype()));
    if (want.empty() || a.shape.size() != want.size() ||
        !std::equal(want.begin() + 1, want.end(), a.shape.begin() + 1))
      return Status(StatusCode::InvalidArgument, "'" + path + "': array '" + name + "' has shape " +
                                                     shapeString(a.shape) + "; the input is " +
                                                     shapeString(want) +
                                                     " (samples along the first dimension)");
    size_t n = static_cast<size_t>(a.shape[0]);
    if (!first && n != samples)
      return Status(StatusCode::InvalidArgument,
                    "'" + path + "': the arrays hold different numbers of samples (" +
                        std::to_string(samples) + " and " + std::to_string(n) + " in '" + name +
                        "')");
    samples = n;
    first = false;
    if (int64_t bad = a.firstNonFinite(); bad >= 0) {
      int64_t perSample = n ? a.numElements() / static_cast<int64_t>(n) : 1;
      return Status(StatusCode::InvalidArgument,
                    "'" + path + "': array '" + name + "' holds a NaN or an infinity (sample " +
                        std::to_string(perSample ? bad / perSample : 0) + ")");
    }
  }
  return samples;
}

} // namespace dlc::rt
