//===- Ptx.cpp - Kernel facts from PTX, where no SASS can be read ----------===//
//
// A package's PTX (compute_XX) is what the driver compiles for a GPU it has no cubin
// for. Its instructions are virtual: ptxas unrolls, schedules and expands them, so the
// counts here are the PTX's, not the machine's. The cost model uses them only for GPUs
// whose architecture has no cubin in the package, and says so.
//
// Each statement of an .entry's body becomes one Instr (class by opcode, access width,
// MMA shape), labels are positions, and `bra LABEL` to an earlier label is a loop; then
// the same analysis as for SASS (finishFacts).
//===----------------------------------------------------------------------===//
#include "dlc/codegen/Sass.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <cctype>

namespace dlc::codegen::sass {

namespace {

int typeBytes(llvm::StringRef op) {
  for (auto [suffix, bytes] : {std::pair{".b8", 1},
                               {".u8", 1},
                               {".s8", 1},
                               {".b16", 2},
                               {".u16", 2},
                               {".s16", 2},
                               {".f16", 2},
                               {".bf16", 2},
                               {".f16x2", 4},
                               {".bf16x2", 4},
                               {".b32", 4},
                               {".u32", 4},
                               {".s32", 4},
                               {".f32", 4},
                               {".b64", 8},
                               {".u64", 8},
                               {".s64", 8},
                               {".f64", 8},
                               {".b128", 16}})
    if (op.endswith(suffix))
      return bytes;
  return 4;
}

/// One PTX instruction (its opcode with modifiers, "ld.global.nc.v4.f32") and the text
/// after it.
Instr classify(llvm::StringRef op, llvm::StringRef operands) {
  Instr in;
  auto has = [&](llvm::StringRef part) { return op.contains(part); };
  int vec = has(".v4") ? 4 : has(".v2") ? 2 : has(".v8") ? 8 : 1;
  if (op.startswith("mma.sync") || op.startswith("wmma.mma")) {
    in.cls = Class::Tensor;
    in.integerMma = has(".s8") || has(".u8");
    in.tf32 = has(".tf32");
    int m = 16, n = 8, k = 16;
    if (has(".m16n16k16") || has(".m32n8k16") || has(".m8n32k16"))
      n = 16; // 8192 FLOPs each
    else if (has(".m16n8k8"))
      k = 8;
    else if (has(".m16n8k4"))
      k = 4;
    else if (has(".m16n8k32"))
      k = 32;
    in.mmaFlops = static_cast<uint16_t>(2 * m * n * k);
  } else if (op.startswith("wmma.load") || op.startswith("wmma.store")) {
    // A 16x16 fragment through shared memory (dlc stages WMMA operands there).
    in.cls = op.startswith("wmma.load") ? Class::Ldsm : Class::SharedStore;
    in.bytes = 16;
    return in;
  } else if (op.startswith("ld.param") || op.startswith("ld.const") || op.startswith("st.param")) {
    in.cls = Class::Uniform;
  } else if (op.startswith("ld.shared")) {
    in.cls = Class::SharedLoad;
  } else if (op.startswith("st.shared")) {
    in.cls = Class::SharedStore;
  } else if (op.startswith("ld.local") || op.startswith("st.local")) {
    in.cls = Class::LocalMemory;
  } else if (op == "ld" || op.startswith("ld.") || op.startswith("ldu")) {
    in.cls = Class::GlobalLoad; // .global, or generic (global memory in dlc's kernels)
  } else if (op == "st" || op.startswith("st.")) {
    in.cls = Class::GlobalStore;
  } else if (op.startswith("ldmatrix")) {
    in.cls = Class::Ldsm;
    in.bytes = static_cast<uint8_t>(has(".x4") ? 16 : has(".x2") ? 8 : 4);
    return in;
  } else if (op.startswith("cp.async.commit") || op.startswith("cp.async.wait")) {
    in.cls = Class::Barrier;
  } else if (op.startswith("cp.async")) {
    in.cls = Class::CpAsync;
    // cp.async.ca.shared.global [dst], [src], 16{, src-size or ignore-src};: the size
    // follows the source address.
    size_t close = operands.rfind(']');
    unsigned size = 4;
    if (close != llvm::StringRef::npos) {
      llvm::StringRef rest = operands.substr(close + 1).ltrim(" \t,");
      rest.substr(0, rest.find(',')).trim().getAsInteger(10, size);
    }
    in.bytes = static_cast<uint8_t>(std::min(size, 16u));
    return in;
  } else if (op.startswith("atom") || op.startswith("red")) {
    in.cls = Class::Atomic;
  } else if (op.startswith("shfl")) {
    in.cls = Class::Shuffle;
  } else if (op.startswith("bar") || op.startswith("membar") || op.startswith("fence")) {
    in.cls = Class::Barrier;
  } else if (op.startswith("bra") || op.startswith("ret") || op.startswith("exit") ||
             op.startswith("call")) {
    in.cls = Class::Branch;
  } else if (op.startswith("cvta")) {
    in.cls = Class::Alu; // address-space conversion: integer arithmetic
  } else if (op.startswith("cvt")) {
    in.cls = Class::Convert;
  } else if (op.startswith("ex2") || op.startswith("lg2") || op.startswith("rcp") ||
             op.startswith("rsqrt") || op.startswith("sqrt") || op.startswith("sin") ||
             op.startswith("cos") || op.startswith("tanh")) {
    in.cls = Class::Mufu;
  } else if (op.startswith("fma") || op.startswith("mul") || op.startswith("add") ||
             op.startswith("sub") || op.startswith("mad")) {
    if (has(".f64"))
      in.cls = Class::Fp64;
    else if (has("f16x2") || has("bf16x2"))
      in.cls = Class::Fp16x2, in.opcode = op.startswith("fma") ? 0x031 : 0x030;
    else if (has(".f32") || has(".f16") || has(".bf16"))
      in.cls = Class::Fp32, in.opcode = op.startswith("fma") ? 0x023 : 0x020;
    else
      in.cls = op.startswith("mad") || op.startswith("mul") ? Class::IntMad : Class::Alu;
  } else {
    in.cls = Class::Alu; // mov setp selp and or xor shl shr min max neg abs ...
  }
  if (in.cls == Class::GlobalLoad || in.cls == Class::GlobalStore || in.cls == Class::SharedLoad ||
      in.cls == Class::SharedStore || in.cls == Class::LocalMemory)
    in.bytes = static_cast<uint8_t>(std::min(16, vec * typeBytes(op)));
  else if (in.cls == Class::Atomic)
    in.bytes = 4;
  return in;
}

} // namespace

std::map<std::string, KernelFacts> analyzePtx(llvm::StringRef ptx, Budget &budget) {
  std::map<std::string, KernelFacts> out;
  size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != llvm::StringRef::npos) {
    size_t nameBegin = pos + 6;
    while (nameBegin < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[nameBegin])))
      ++nameBegin;
    size_t nameEnd = nameBegin;
    while (nameEnd < ptx.size() && (std::isalnum(static_cast<unsigned char>(ptx[nameEnd])) ||
                                    ptx[nameEnd] == '_' || ptx[nameEnd] == '$'))
      ++nameEnd;
    std::string symbol = ptx.slice(nameBegin, nameEnd).str();
    // The body: from the first '{' after the parameter list to its matching '}'.
    size_t close = ptx.find(')', nameEnd), open = ptx.find('{', close);
    if (symbol.empty() || close == llvm::StringRef::npos || open == llvm::StringRef::npos)
      break;
    size_t end = open + 1;
    int depth = 1;
    while (end < ptx.size() && depth > 0) {
      depth += ptx[end] == '{' ? 1 : ptx[end] == '}' ? -1 : 0;
      ++end;
    }
    llvm::StringRef body = ptx.slice(open + 1, end - 1);
    pos = end;
    // Statements: split at ';', comments dropped; "LABEL:" marks the next statement.
    std::vector<Instr> code;
    llvm::StringMap<int64_t> labels;
    std::vector<std::pair<size_t, std::string>> branches; // code index, label
    std::string text;
    for (llvm::StringRef line : llvm::split(body, '\n')) {
      size_t comment = line.find("//");
      text += line.substr(0, comment).str() + " ";
    }
    for (llvm::StringRef stmt : llvm::split(text, ';')) {
      stmt = stmt.trim();
      while (!stmt.empty() && (stmt.front() == '{' || stmt.front() == '}'))
        stmt = stmt.drop_front().trim();
      // Labels before the statement.
      // A label is an identifier and one ':' ("$L__BB0_2:"), unlike the '::' of
      // qualifiers such as .L2::128B.
      for (;;) {
        size_t colon = stmt.find(':');
        if (colon == 0 || colon == llvm::StringRef::npos || stmt.substr(colon).startswith("::"))
          break;
        llvm::StringRef label = stmt.substr(0, colon);
        if (!llvm::all_of(label, [](char ch) {
              return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '$';
            }))
          break;
        labels[label] = static_cast<int64_t>(16 * code.size());
        stmt = stmt.substr(colon + 1).trim();
      }
      if (stmt.empty() || stmt.front() == '.')
        continue;              // a directive (.reg, .shared, .pragma, ...)
      if (stmt.front() == '@') // a guard predicate
        stmt = stmt.substr(std::min(stmt.find(' '), stmt.size())).trim();
      size_t space = stmt.find_first_of(" \t");
      llvm::StringRef op = stmt.substr(0, space), operands = space == llvm::StringRef::npos
                                                                 ? llvm::StringRef()
                                                                 : stmt.substr(space).trim();
      Instr in = classify(op, operands);
      in.branchTarget = -1;
      if (op.startswith("bra"))
        branches.emplace_back(code.size(), operands.str());
      code.push_back(in);
    }
    for (const auto &[at, label] : branches) {
      auto l = labels.find(label);
      if (l != labels.end())
        code[at].branchTarget = l->second;
    }
    KernelFacts f;
    f.symbol = symbol;
    f.arch = 0; // PTX
    finishFacts(f, code, budget);
    out[symbol] = std::move(f);
  }
  return out;
}

} // namespace dlc::codegen::sass
