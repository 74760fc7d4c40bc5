//===- Npy.cpp - Reading and writing NumPy .npy files -----------------------===//
//
// Format 1.0/2.0/3.0: magic "\x93NUMPY", version, header length, a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, then the
// raw little-endian data. Every field is validated; sizes are overflow-checked.
//===----------------------------------------------------------------------===//
#include "dlc/runtime/Runtime.h"
#include "dlc/support/Files.h"

#include <cstring>
#include <fstream>
#include <sstream>

namespace dlc::rt {

namespace {

struct DescrMap {
  const char *descr;
  pkg::DType dt;
};
const DescrMap kDescrs[] = {
    {"<f4", pkg::DType::F32},  {"<f2", pkg::DType::F16}, {"<f8", pkg::DType::F64},
    {"<i8", pkg::DType::I64},  {"<i4", pkg::DType::I32}, {"<i2", pkg::DType::I16},
    {"|i1", pkg::DType::I8},   {"|u1", pkg::DType::U8},  {"<u2", pkg::DType::U16},
    {"<u4", pkg::DType::U32},  {"<u8", pkg::DType::U64}, {"|b1", pkg::DType::Bool},
    {"<V2", pkg::DType::BF16},
};

Status bad(const std::string &name, const std::string &why) {
  return Status(StatusCode::InvalidArgument, name + ": invalid .npy file: " + why);
}

/// Value of a key in the header dict (text up to the next top-level ',' or '}').
bool field(const std::string &h, const std::string &key, std::string &out) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos)
    return false;
  size_t colon = h.find(':', k);
  if (colon == std::string::npos)
    return false;
  size_t i = colon + 1;
  while (i < h.size() && h[i] == ' ')
    ++i;
  int depth = 0;
  size_t start = i;
  for (; i < h.size(); ++i) {
    char c = h[i];
    if (c == '(')
      ++depth;
    else if (c == ')')
      --depth;
    else if ((c == ',' || c == '}') && depth == 0)
      break;
  }
  if (depth != 0)
    return false;
  out = h.substr(start, i - start);
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  return true;
}

} // namespace

Result<HostTensor> parseNpy(const uint8_t *data, size_t n, const std::string &name) {
  if (n < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0)
    return bad(name, "missing the \\x93NUMPY magic");
  int major = data[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = data[8] | (data[9] << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12)
      return bad(name, "truncated header");
    hlen = data[8] | (data[9] << 8) | (size_t(data[10]) << 16) | (size_t(data[11]) << 24);
    hstart = 12;
  } else {
    return bad(name, "unsupported format version " + std::to_string(major));
  }
  if (hlen > n - hstart)
    return bad(name, "header runs past the end of the file");
  std::string h(reinterpret_cast<const char *>(data + hstart), hlen);
  std::string descr, fortran, shape;
  if (!field(h, "descr", descr) || !field(h, "fortran_order", fortran) || !field(h, "shape", shape))
    return bad(name, "header lacks descr, fortran_order or shape");
  if (fortran != "False")
    return bad(name, "Fortran-ordered arrays are not supported");
  if (descr.size() < 3 || (descr.front() != '\'' && descr.front() != '"'))
    return bad(name, "descr is not a string");
  descr = descr.substr(1, descr.size() - 2);
  if (descr == "<b1" || descr == "b1")
    descr = "|b1";
  if (descr == "<i1")
    descr = "|i1";
  if (descr == "<u1")
    descr = "|u1";
  HostTensor t;
  bool found = false;
  for (const DescrMap &d : kDescrs)
    if (descr == d.descr) {
      t.dtype = d.dt;
      found = true;
    }
  if (!found)
    return bad(name, "unsupported dtype '" + descr +
                         "' (big-endian, strings and objects are not supported)");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')')
    return bad(name, "shape is not a tuple");
  std::string dims = shape.substr(1, shape.size() - 2);
  uint64_t count = 1;
  std::stringstream ss(dims);
  for (std::string d; std::getline(ss, d, ',');) {
    size_t a = d.find_first_not_of(' '), b = d.find_last_not_of(' ');
    if (a == std::string::npos)
      continue;
    d = d.substr(a, b - a + 1);
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(d.c_str(), &end, 10);
    if (errno || *end || v < 0)
      return bad(name, "invalid dimension '" + d + "'");
    if (v && count > (uint64_t{1} << 40) / static_cast<uint64_t>(v))
      return bad(name, "too many elements");
    count *= static_cast<uint64_t>(v);
    t.shape.push_back(v);
  }
  size_t bytes = count * pkg::dtypeSize(t.dtype), dataStart = hstart + hlen;
  if (n - dataStart != bytes)
    return bad(name, "the data has " + std::to_string(n - dataStart) +
                         " bytes, shape and dtype need " + std::to_string(bytes));
  t.data.assign(data + dataStart, data + n);
  return t;
}

Result<HostTensor> readNpy(const std::string &path) {
  auto bytes = readRegularFile(path);
  if (!bytes.ok())
    return bytes.status();
  return parseNpy(bytes->data(), bytes->size(), path);
}

std::string encodeNpy(const HostTensor &t) {
  const char *descr = nullptr;
  for (const DescrMap &d : kDescrs)
    if (d.dt == t.dtype)
      descr = d.descr;
  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i)
    shape +=
        std::to_string(t.shape[i]) + (t.shape.size() == 1 || i + 1 < t.shape.size() ? "," : "");
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  uint16_t hl = static_cast<uint16_t>(header.size());
  out += static_cast<char>(hl & 0xFF);
  out += static_cast<char>(hl >> 8);
  out += header;
  out.append(reinterpret_cast<const char *>(t.data.data()), t.data.size());
  return out;
}

Status writeNpy(const std::string &path, const HostTensor &t) {
  std::string bytes = encodeNpy(t);
  return writeFileAtomically(path, bytes.data(), bytes.size());
}

} // namespace dlc::rt
