//===- Npz.h - NumPy .npz archives (training data, checkpoints) -*- C++ -*-===//
//
// An .npz is a zip of .npy files. Reading takes stored and deflated members
// (numpy.savez and numpy.savez_compressed); writing stores them uncompressed, as
// numpy.savez does. Malformed archives are errors naming the file and the member.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/runtime/Runtime.h"

#include <map>
#include <string>

namespace dlc::tool {

using NpzArrays = std::map<std::string, rt::HostTensor>;

Result<NpzArrays> readNpz(const std::string &path);
/// Writes atomically (a temporary file renamed into place): a failed write leaves
/// no partial file.
Status writeNpz(const std::string &path, const NpzArrays &arrays);

} // namespace dlc::tool
