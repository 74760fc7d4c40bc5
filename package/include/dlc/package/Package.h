//===- Package.h - The .dlc file format -------------------------*- C++ -*-===//
//
// A .dlc file:
//   [0,64)     header: magic "DLCPKG\0\1", format version, metadata offset/size,
//              file size, CRC-32 of everything after the header, CRC-32 of the header
//   [64, ...)  FlatBuffer metadata (package.fbs)
//   sections   256-byte aligned (weights, cubins, PTX, emu shared object)
//
// Loading checks the header, both checksums (a flipped bit anywhere is an error),
// runs the FlatBuffers verifier, then checks every reference (sections, buffers,
// kernels, steps) against the sizes it points into.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/package_generated.h"
#include "dlc/support/HostKey.h"
#include "dlc/support/Sha256.h"
#include "dlc/support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dlc::pkg {

/// 2: GEMM epilogues (bias, activation, separate C input).
/// 3: launch parameter buffers with relocations, kernels in compilation chunks with
///    symbols, per-architecture steps, cooperative kernels.
/// 4: a memory plan (arena buffers share memory across lifetimes), GEMM workspaces and
///    epilogue fallbacks, check words for data errors, the CUDA version of the modules.
/// 7: inputs bound at compile time (bound_inputs).
/// 8: shape ranges (shape_ranges, variants).
/// 9: data-parallel steps (Collective: all-reduce, reduce-scatter, all-gather, shard;
///    CollectiveWait), bucket_bytes, zero_ranks and sharded variables.
inline constexpr uint32_t kFormatVersion = 9;
/// The largest launch parameter buffer (the classic CUDA limit on kernel parameters).
inline constexpr size_t kMaxParamBytes = 4096;
inline constexpr uint64_t kSectionAlign = 256;
inline constexpr size_t kHeaderSize = 64;

uint32_t crc32(const void *data, size_t n, uint32_t seed = 0);
size_t dtypeSize(DType t);
const char *dtypeName(DType t);
/// The bytes of a tensor of the package: its elements times its dtype's size.
uint64_t tensorBytes(const TensorInfo &t);

/// "sm_80" -> 80, "compute_90" -> 90; 0 if the name has no number.
int archNumber(const std::string &target);
/// The compute capabilities (80 for "sm_80") that the package's steps are specialized
/// for, in increasing order; empty when every step runs everywhere.
std::vector<int> stepArchs(const Package &m);
/// Of `archs`, the one to run on a device of compute capability `cc`: the newest not
/// newer than cc, else the oldest (0 when archs is empty).
int chooseStepArch(const std::vector<int> &archs, int cc);
/// The module of `chunk` a GPU of compute capability `cc` (86 for sm_86) loads: the
/// exact cubin, else a cubin of the same major version and a lower minor, else the PTX
/// of the newest virtual architecture not newer than cc (which the driver compiles);
/// null when none runs there.
const Module *pickModule(const Package &m, uint32_t chunk, int cc);
/// An input bound at compile time as "i64[2] 0, 2".
std::string describeBoundInput(const BoundInput &b);
/// The error for setting an input the package does not have: one bound at compile
/// time says so (with its value), another lists the package's inputs.
std::string unknownInputMessage(const Package &m, const std::string &name);
/// The smallest and largest shape input `index` takes: its shape, widened along the
/// package's shape ranges (equal bounds where a dimension is fixed).
struct ShapeBounds {
  std::vector<int64_t> min, max;
};
ShapeBounds inputShapeBounds(const Package &m, uint32_t index);
/// Why `shape` does not fit input `index` ("input 'x' has shape [5,4], the model expects
/// [1..4,4]", or which dimension is outside its range), or "" when it fits.
std::string inputShapeProblem(const Package &m, uint32_t index, const std::vector<int64_t> &shape);
/// Whether a step runs when the package's steps for `arch` (chooseStepArch) are chosen.
bool stepRunsOn(const Step &s, int arch);

/// Tactics (Step::tactic): the most alternatives a layer may carry.
inline constexpr int kMaxTactics = 8;
/// "dlc", "cudnn", "cublaslt" ("" for None).
const char *tacticKindName(TacticKind k);
/// One alternative of a tactic group, as a schedule lists it: its first step's index
/// and how many steps follow it.
struct TacticAlt {
  uint8_t alt = 0;
  TacticKind kind = TacticKind::None;
  std::string desc;
  size_t first = 0, count = 0;
};
/// A layer's tactics: its group, node and alternatives in alt order.
struct TacticGroup {
  uint32_t group = 0;
  std::string node;
  std::vector<TacticAlt> alts;
  /// The first alternative of kind `k`, or null.
  const TacticAlt *find(TacticKind k) const;
  /// The alternative emu and the cost model run: the first dlc one (else the first).
  uint8_t defaultAlt() const;
};
/// The tactic groups of a schedule among the steps that run on `arch`, in the order
/// of their first steps.
std::vector<TacticGroup> tacticGroups(const flatbuffers::Vector<flatbuffers::Offset<Step>> *steps,
                                      int arch);

/// A finished package that is not one buffer: the header and metadata, then each
/// section where its owner keeps it. Weights (gigabytes, for some models) are written
/// to the file once and never copied into an image.
class PackageImage {
public:
  uint64_t size() const { return size_; }
  /// Calls `write` for each consecutive piece of the file.
  void forEachPiece(const std::function<void(const uint8_t *, size_t)> &write) const;
  /// The whole file in one buffer.
  std::vector<uint8_t> bytes() const;
  /// Keeps what the sections point into alive as long as the image.
  void keepAlive(std::shared_ptr<const void> p) { keepAlive_.push_back(std::move(p)); }

private:
  friend class PackageWriter;
  std::vector<uint8_t> head_; // header, metadata, padding up to the first section
  struct Piece {
    const uint8_t *data;
    size_t size, padding; // zero bytes after it (256-byte alignment)
  };
  std::vector<Piece> pieces_;
  uint64_t size_ = 0;
  std::vector<std::shared_ptr<const void>> keepAlive_;
};

/// Builds a package: sections first (their offsets are final), then metadata.
class PackageWriter {
public:
  /// Appends a 256-byte aligned section and returns its location in the file. The
  /// bytes are not copied: they must stay valid as long as the image.
  Section addSection(const void *data, size_t n);
  /// The section of the host-code signature (Package.host_signature), after every
  /// other section: no section may be added after it.
  Section reserveSignature();
  flatbuffers::FlatBufferBuilder &builder() { return fbb_; }
  /// Finishes with the root table; a reserved signature is computed with `key`.
  PackageImage finishImage(flatbuffers::Offset<Package> root, const HostKey *key = nullptr);
  /// Finishes with the root table and returns the whole file.
  std::vector<uint8_t> finish(flatbuffers::Offset<Package> root) {
    return finishImage(root).bytes();
  }

private:
  flatbuffers::FlatBufferBuilder fbb_;
  struct Pending {
    const void *data;
    size_t size;
    uint64_t offset; // relative to the start of the sections
  };
  std::vector<Pending> pending_;
  uint64_t sectionsSize_ = 0;
  std::shared_ptr<Digest> signature_; // the reserved signature's bytes
};

class PackageFile;

/// A copy of `pf` whose metadata also holds tactic choices `picks` for the GPU key
/// `key` (Package.embedded_tactics; a set embedded before for the same key is
/// replaced, the others stay), every section unchanged. A package with a host-code
/// signature is re-signed with `hostKey` when that key verifies it; otherwise it is
/// refused (the signature would no longer hold). The image refers to pf's bytes.
Result<PackageImage> embedTactics(const PackageFile &pf, const std::string &key,
                                  const std::vector<TacticPick> &picks, const HostKey *hostKey);

/// A loaded, verified package. Owns the file's bytes (read, not mapped: a change to the
/// file cannot reach a session), or refers to bytes that outlive it.
class PackageFile {
public:
  /// Reads and verifies a file. Errors name the file and what is wrong.
  static Result<std::shared_ptr<PackageFile>> load(const std::string &path);
  /// Reads `size` bytes at `offset` of a file: a package embedded in an executable.
  /// size == 0: to the end of the file.
  static Result<std::shared_ptr<PackageFile>> load(const std::string &path, uint64_t offset,
                                                   uint64_t size);
  /// Verifies bytes in memory (copied).
  static Result<std::shared_ptr<PackageFile>> fromBytes(const void *data, size_t n,
                                                        const std::string &name);
  /// Verifies bytes that outlive the package (e.g. linked into the program); not
  /// copied when 256-byte aligned.
  static Result<std::shared_ptr<PackageFile>> fromStaticBytes(const void *data, size_t n,
                                                              const std::string &name);

  const Package &meta() const { return *meta_; }
  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  /// Bytes of a section (offsets are relative to the section area).
  const uint8_t *section(const Section *s) const { return data_sections_ + s->offset(); }
  const std::string &name() const { return name_; }
  /// The metadata FlatBuffer's bytes (after the header), and the section area's (the
  /// file's tail).
  uint64_t metadataBytes() const;
  uint64_t sectionsBytes() const { return size_ - static_cast<size_t>(data_sections_ - data_); }
  /// Whether the package has a host-code signature that verifies with `key`.
  bool signedWith(const HostKey &key) const;

  ~PackageFile();

private:
  PackageFile() = default;
  Status verify();
  std::string name_;
  const uint8_t *data_ = nullptr;
  const uint8_t *data_sections_ = nullptr;
  size_t size_ = 0;
  std::vector<uint8_t> owned_;
  const Package *meta_ = nullptr;
};

} // namespace dlc::pkg
