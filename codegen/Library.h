//===- Library.h - Instantiating the kernel library -------------*- C++ -*-===//
//
// Non-trivial kernels are templates in codegen/device/*.cuh. Code generation emits
// only what differs between layers:
//  - functors (the fused element-wise prologues and epilogues): a struct with a
//    Params member and device functions. Their code never contains an extent, a
//    stride or an offset; those are Params fields, so layers whose fused code has the
//    same structure share one functor;
//  - explicit instantiations of the templates with tile configurations, index
//    widths, storage types and functors as template arguments. Identical
//    instantiations are one kernel: layers differ only in their launch parameters.
// A launch's parameter buffer is the template's argument struct: the library's
// shape struct (dlc_params.h, filled here) followed by each functor's Params.
//===----------------------------------------------------------------------===//
#pragma once

#include "Lowering.h"
#include "device/dlc_params.h"

#include <cstddef>
#include <string>
#include <vector>

namespace dlc::codegen {

/// The fields of a generated Params struct and the values one launch gives them.
/// Every field is 8 bytes or a Divmod, so the values are appended in order.
class ParamList {
public:
  /// A pointer to `dt` elements of buffer `r`; `bytes` is what the kernel touches
  /// (0: from the offset to the buffer's end), for the cost model. Returns "P.aN".
  std::string pointer(ir::DType dt, BufferRef r, bool isConst, uint64_t bytes);
  /// Marks the last pointer as read as well as written (the cost model's traffic).
  void alsoRead() { accesses_.push_back({accesses_.back().ref, accesses_.back().bytes, false}); }
  /// An integer (extent, stride, offset). Returns "P.aN".
  std::string i64(int64_t v);
  /// A fast divisor (dlc::Divmod). Returns "P.aN".
  std::string divmod(int64_t d);
  /// The member declarations of the Params struct (never empty).
  std::string declarations() const;
  /// Appends the values (8-byte aligned) to a parameter buffer.
  void append(ParamBlob &b) const;

  struct Access {
    BufferRef ref;
    uint64_t bytes;
    bool write;
  };
  const std::vector<Access> &accesses() const { return accesses_; }

private:
  struct Field {
    enum Kind { Pointer, Int, Div } kind;
    std::string type;
    BufferRef ref;
    int64_t value = 0;
  };
  std::string add(Field f);
  std::vector<Field> fields_;
  std::vector<Access> accesses_;
};

/// A generated functor: Params plus device functions (`methods`, written against
/// `P`, the Params argument, and the index type template parameter `I`).
struct Functor {
  ParamList params;
  std::string valueType = "float";
  std::string methods;
  /// The struct definition under `name`.
  std::string text(const std::string &name) const;
};

/// The parameters and memory traffic of one launch, in the order of the kernel's
/// argument struct: the library shape struct, then the functors' Params.
class LaunchArgs {
public:
  /// The library's shape struct (must come first: relocation offsets are its field offsets).
  template <class S> void shape(const S &s) {
    static_assert(sizeof(S) % 8 == 0, "shape structs are made of 8-byte fields");
    blob.raw(&s, sizeof(S), 8);
  }
  /// A pointer field at `offset` in the blob (a shape struct's field, or a slot).
  /// `accessed = false`: the launch passes it but does not touch it (no traffic).
  void pointer(size_t offset, BufferRef r, uint64_t bytes, bool write, bool accessed = true);
  /// Appends a pointer slot (an argument struct's `const void *` member).
  void slot(BufferRef r, uint64_t bytes, bool write);
  void functor(const Functor &f, bool accessed = true);

  ParamBlob blob;
  uint64_t bytesRead = 0, bytesWritten = 0;

  /// Distinct (buffer, offset) views, each counted once.
  void finishTraffic(const Lowering &l);

private:
  std::vector<ParamList::Access> accesses_;
};

/// One instantiation of a library template.
struct Instantiation {
  std::string tmpl;                  // "dlc::conv_igemm"
  std::vector<std::string> targs;    // template arguments, as written
  std::string argsType;              // the kernel's parameter type, "dlc::ConvArgs<F_.., F_..>"
  std::vector<std::string> functors; // names of the functors it uses
  bool needsSync = false, cooperative = false;
  /// Runs its multiply-adds on tensor cores (WMMA/mma): inspect and the cost model.
  bool tensorCore = false;
  /// ... in TF32 (FP32 operands): priced at the TF32 rate.
  bool tf32 = false;
  /// Its multiply-adds are on integers (quantized models): inspect counts them apart.
  bool integer = false;
  /// ... on float8 operands (FP8 QDQ models) on tensor cores: inspect counts them apart.
  bool fp8 = false;
};

/// Grid size for a grid-stride kernel over n items with `block` threads.
uint32_t gridFor(uint64_t n, uint32_t block);

/// A strided view of up to kMaxRank dims (dims right-aligned in the struct).
llvm::Expected<Strided> stridedView(const ir::Shape &dims, const std::vector<int64_t> &strides);

} // namespace dlc::codegen
