//===- Artifacts.h - Executables, libraries and sources from a package -*- C++ -*-===//
//
// What `dlc compile --emit exe|lib|cuda` writes, built from a package's bytes:
//   exe:  the stub executable (runtime linked statically) with the package appended;
//   lib:  a shared library embedding the package, with a generated C header of typed
//         entry points (NAME_create / NAME_run / NAME_free), linked against libdlcrt.a;
//   cuda: the generated CUDA sources, the device header and a readable host schedule.
// Every writer writes to a temporary name and renames, so a failure leaves nothing.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/Package.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace dlc::codegen {

/// Writes `path` whole or not at all (dlc::AtomicFile): `body` writes the contents to
/// a stream; when it fails, or the writing does, `path` is left as it was.
llvm::Error writeFileAtomically(const std::string &path,
                                llvm::function_ref<llvm::Error(llvm::raw_ostream &)> body,
                                unsigned mode = 0644);
llvm::Error writeFileAtomically(const std::string &path, llvm::StringRef data);

/// The package's steps, one readable line each, with buffers named after the
/// inputs, outputs and weights they hold.
std::string formatSchedule(const pkg::PackageFile &pf);

/// Appends the package to a copy of `stubPath` (dlc-exe-stub) and writes `out` (mode 0755).
llvm::Error writeExecutable(llvm::ArrayRef<uint8_t> package, const std::string &stubPath,
                            const std::string &out);

struct LibraryOptions {
  std::string name;           // C identifier prefix of the entry points ("digits")
  std::string libraryPath;    // "out/libdigits.so"
  std::string headerPath;     // "out/digits.h"
  std::string runtimeArchive; // libdlcrt.a
  std::string hostCompiler;   // empty: as for the emu target
};
/// The header text for a package (also written by writeLibrary).
std::string libraryHeader(const pkg::Package &meta, const std::string &name);
llvm::Error writeLibrary(const pkg::PackageFile &pf, const LibraryOptions &opts);

/// Writes DIR/kernels.cu, DIR/dlc_device.cuh, DIR/schedule.txt and DIR/README.txt.
llvm::Error writeCudaDirectory(const pkg::PackageFile &pf, const std::string &dir);

/// A C identifier from a file or tensor name ("digits-cnn.v2" -> "digits_cnn_v2").
std::string cIdentifier(const std::string &s);

} // namespace dlc::codegen
