//===- Sass.cpp - Kernel facts from the SASS of a cubin -------------------===//
//
// The opcode table below was derived, not copied: each entry is the 9-bit opcode that
// appears when a PTX probe kernel gains one instruction (ptxas 13.0, sm_80/86/89/90;
// the probes are described in docs/ARCHITECTURE.md, "Kernel facts"), and
// tests/unit/codegen/SassTest.cpp recompiles kernels with known instructions and checks the
// classes, widths and loop structure decoded here.
//===----------------------------------------------------------------------===//
#include "dlc/codegen/Sass.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

namespace dlc::codegen::sass {

const char *className(Class c) {
  static const char *names[] = {
      "tensor",      "fp32",         "fp16x2",   "fp64",        "mufu",         "convert",
      "imad",        "alu",          "uniform",  "global load", "global store", "local",
      "shared load", "shared store", "ldmatrix", "cp.async",    "atomic",       "shuffle",
      "barrier",     "control",      "nop",      "other"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<int>(Class::Count));
  return names[static_cast<int>(c)];
}

namespace {

/// Bytes per thread of a load/store by the size field (bits 73-75): U8, S8, U16, S16,
/// 32, 64, 128 (probes: ld.global.u8/u16/u32/v2.u32/v4.u32, and the same for stores and
/// shared memory); code 7 (256 bits) was not seen in any probe.
int accessBytes(uint64_t hi) {
  static const int bytes[] = {1, 1, 2, 2, 4, 8, 16, 32};
  return bytes[(hi >> 9) & 7];
}

Class classOf(uint16_t op) {
  switch (op) {
  case 0x03c: // HMMA (mma.sync f16/bf16/tf32)
  case 0x037: // IMMA (mma.sync s8/u8)
    return Class::Tensor;
  case 0x020: // FMUL
  case 0x021: // FADD
  case 0x022: // FADD32I form
  case 0x023: // FFMA
    return Class::Fp32;
  case 0x030: // HADD2
  case 0x031: // HFMA2
  case 0x032: // HMUL2
  case 0x035: // HFMA2.MMA (sm_80 and sm_90 issue fma.f16x2 here)
    return Class::Fp16x2;
  case 0x028: // DMUL
  case 0x029: // DADD
  case 0x02b: // DFMA
    return Class::Fp64;
  case 0x108: // MUFU
    return Class::Mufu;
  case 0x03e: // F2FP (cvt.rn.f16x2.f32)
  case 0x045: // I2FP (sm_86+)
  case 0x104: // F2F
  case 0x105: // F2I
  case 0x106: // I2F
  case 0x110: // F2F.F64
    return Class::Convert;
  case 0x024: // IMAD
  case 0x025: // IMAD.WIDE
  case 0x027: // IMAD.HI
    return Class::IntMad;
  case 0x181: // LDG
  case 0x180: // LD (generic)
    return Class::GlobalLoad;
  case 0x186: // STG
  case 0x185: // ST (generic)
    return Class::GlobalStore;
  case 0x183: // LDL
  case 0x187: // STL
    return Class::LocalMemory;
  case 0x184: // LDS
    return Class::SharedLoad;
  case 0x188: // STS
    return Class::SharedStore;
  case 0x03b: // LDSM
    return Class::Ldsm;
  case 0x1ae: // LDGSTS
    return Class::CpAsync;
  case 0x1a8: // ATOMG
  case 0x18e: // RED (sm_80 ... sm_89)
  case 0x1a6: // REDG (sm_90)
  case 0x18c: // ATOMS
    return Class::Atomic;
  case 0x189: // SHFL
    return Class::Shuffle;
  case 0x11d: // BAR
  case 0x192: // MEMBAR
  case 0x11a: // DEPBAR (cp.async.wait_group)
  case 0x1af: // LDGDEPBAR (cp.async.commit_group)
  case 0x1ab: // ERRBAR (with fences)
    return Class::Barrier;
  case 0x118: // NOP
    return Class::Nop;
  case 0x141: // BSYNC
  case 0x145: // BSSY
  case 0x147: // BRA
  case 0x148: // WARPSYNC
  case 0x14d: // EXIT
  case 0x150: // RET
  case 0x143: // CALL
    return Class::Branch;
  case 0x1c3: // S2UR
  case 0x119: // S2R
  case 0x182: // LDC (kernel parameters and constants; sm_90 loads them in loops)
    return Class::Uniform;
  default:
    break;
  }
  if (op < 0x020 || op == 0x036 || op == 0x048 || op == 0x100 || op == 0x109)
    return Class::Alu; // IADD3 LEA LOP3 SHF ISETP SEL MOV PRMT FSETP FSEL FMNMX IMNMX FLO POPC
  if (op >= 0x080 && op < 0x0c0)
    return Class::Uniform; // UIADD3 UMOV ULEA ULDC VOTE ... (0x080-0x0bf)
  return Class::Other;
}

} // namespace

Instr decode(uint64_t lo, uint64_t hi, int arch) {
  Instr in;
  in.opcode = static_cast<uint16_t>(lo & 0x1ff);
  in.cls = classOf(in.opcode);
  // QMMA (sm_89's mma.sync e4m3/e5m2, m16n8k32: one per PTX mma, as ptxas 13.0 writes it
  // for a kernel of one; sm_90 has none, ptxas converts to FP16 and uses HMMA).
  if (arch == 89 && in.opcode == 0x07a) {
    in.cls = Class::Tensor;
    in.mmaFlops = 8192;
    in.fp8Mma = true; // (at twice FP16's rate: one HMMA.16816's issue)
    return in;
  }
  switch (in.cls) {
  case Class::GlobalLoad:
  case Class::GlobalStore:
  case Class::SharedLoad:
  case Class::SharedStore:
  case Class::LocalMemory:
  case Class::CpAsync:
  case Class::Atomic:
    in.bytes = static_cast<uint8_t>(in.cls == Class::Atomic ? 4 : accessBytes(hi));
    break;
  case Class::Ldsm: // .x1 .x2 .x4 in bits 72-73: 4, 8 or 16 bytes per thread
    in.bytes = static_cast<uint8_t>(4 << std::min<int>((hi >> 8) & 3, 2));
    break;
  case Class::Tensor:
    if (in.opcode == 0x037) { // IMMA: bit 75 k32 (m16n8k32) else m16n8k16
      in.integerMma = true;
      in.mmaFlops = (hi >> 11) & 1 ? 8192 : 4096;
    } else {
      in.tf32 = (hi >> 19) & 1;
      bool k16 = (hi >> 11) & 1, k4 = (hi >> 14) & 1;
      in.mmaFlops = static_cast<uint16_t>(in.tf32 ? (k4 ? 1024 : 2048) : (k16 ? 4096 : 2048));
    }
    break;
  case Class::Fp16x2:
    // ptxas writes `mov 0` as HFMA2.MMA Rd, -RZ, RZ, imm: an immediate form (bits 9-11
    // = 2) whose first source is RZ (bits 24-31 = 255).
    if (in.opcode == 0x035 && ((lo >> 9) & 7) == 2 && ((lo >> 24) & 0xff) == 0xff)
      in.cls = Class::Alu;
    break;
  case Class::Branch:
    if (in.opcode == 0x147) {
      // The target's offset from the next instruction (a signed field whose upper bits
      // in the second word only extend its sign; cubins are far below 2 GB):
      //  - sm_80, sm_86, sm_89: bytes, bits 32-63;
      //  - sm_90: 4-byte units, bits 16-23 low, bits 34-63 high.
      int32_t upper = static_cast<int32_t>(lo >> 32);
      in.branchTarget = arch >= 90 ? 4 * ((static_cast<int64_t>(upper >> 2) << 8) |
                                          static_cast<int64_t>((lo >> 16) & 0xff))
                                   : upper; // relative; made absolute by analyze()
    }
    break;
  default:
    break;
  }
  return in;
}

void Mix::add(const Instr &i) {
  ++count[static_cast<int>(i.cls)];
  switch (i.cls) {
  case Class::GlobalLoad:
  case Class::GlobalStore:
  case Class::LocalMemory:
  case Class::SharedLoad:
  case Class::SharedStore:
  case Class::Ldsm:
  case Class::CpAsync:
  case Class::Atomic:
  case Class::Shuffle:
    lsuCycles += std::max(1.0, 32.0 * i.bytes / 128.0);
    break;
  default:
    break;
  }
  if (i.cls != Class::Nop)
    ++instructions;
  switch (i.cls) {
  case Class::Tensor:
    mmaFlops += i.mmaFlops;
    tensorEquiv +=
        i.integerMma || i.fp8Mma ? i.mmaFlops / 8192.0 : (i.tf32 ? 2 : 1) * i.mmaFlops / 4096.0;
    break;
  case Class::Fp32:
    ffma += i.opcode == 0x023;
    break;
  case Class::Fp16x2:
    hfma2 += i.opcode == 0x031 || i.opcode == 0x035;
    break;
  case Class::GlobalLoad:
    ++globalLoadWidths[i.bytes];
    globalLoadBytes += i.bytes;
    break;
  case Class::GlobalStore:
    ++globalStoreWidths[i.bytes];
    globalStoreBytes += i.bytes;
    break;
  case Class::SharedLoad:
    ++sharedLoadWidths[i.bytes];
    sharedBytes += i.bytes;
    break;
  case Class::SharedStore:
    ++sharedStoreWidths[i.bytes];
    sharedBytes += i.bytes;
    break;
  case Class::Ldsm:
    ldsmBytes += i.bytes;
    sharedBytes += i.bytes;
    break;
  case Class::CpAsync:
    ++cpAsyncWidths[i.bytes];
    cpAsyncBytes += i.bytes;
    break;
  default:
    break;
  }
}

double KernelFacts::instructionsPerMma() const {
  const Mix *m = main();
  return m && m->of(Class::Tensor) ? double(m->instructions) / m->of(Class::Tensor) : 0.0;
}

bool decodable(int arch) {
  return arch == 80 || arch == 86 || arch == 87 || arch == 89 || arch == 90;
}

namespace {

template <typename T> bool read(llvm::ArrayRef<uint8_t> b, uint64_t off, T &v) {
  if (off > b.size() || b.size() - off < sizeof(T))
    return false;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return true;
}

/// The loop that does the most work per iteration: tensor-core FLOPs, else FMAs; among
/// equals a loop nested in the other (an outer loop holds its inner loops' work once,
/// as written), else the most global-memory bytes (loads and cp.async), else the
/// smaller.
bool hotter(const Loop &a, const Loop &b) {
  // FLOPs per lane: FFMA 2, FADD/FMUL 1, HFMA2 4, HADD2/HMUL2 2.
  auto arithmetic = [](const Loop &l) {
    const Mix &m = l.mix;
    return std::make_pair(m.mmaFlops, int64_t(m.ffma) + m.of(Class::Fp32) + 2 * m.hfma2 +
                                          2 * int64_t(m.of(Class::Fp16x2)));
  };
  if (arithmetic(a) != arithmetic(b))
    return arithmetic(a) > arithmetic(b);
  if (a.begin >= b.begin && a.end <= b.end)
    return true; // a inside b
  if (b.begin >= a.begin && b.end <= a.end)
    return false;
  int ab = a.mix.globalLoadBytes + a.mix.cpAsyncBytes,
      bb = b.mix.globalLoadBytes + b.mix.cpAsyncBytes;
  if (ab != bb)
    return ab > bb;
  return a.end - a.begin < b.end - b.begin;
}

/// How many times a kernel reads its data, from its loops (sorted by address): the
/// innermost loops that load from global memory, grouped by the loop that encloses
/// them (none: the kernel's top level). Within a group, in address order:
///  - ptxas unrolls a loop with an unknown trip count and follows it with loops of
///    fewer copies of the same body (x16, then x4, then the remainder): a chain of
///    load loops close together, each reading less per iteration, is one pass;
///  - a chain that reads less than half as much per iteration as the group's largest
///    is a tail (the elements a vectorized loop leaves), not a pass.
/// Groups are alternatives (ptxas versions a loop for the cases it can tell apart), so
/// the kernel's count is the largest group's: softmax's max, sum and write loops over
/// a row are three passes; a reduction's unrolled loop and its remainder are one.
int passesOverData(const std::vector<Loop> &loops) {
  std::map<int64_t, std::vector<const Loop *>> groups; // by the enclosing loop's begin
  for (const Loop &l : loops) {
    if (!l.innermost || l.mix.globalLoadBytes + l.mix.cpAsyncBytes == 0)
      continue;
    int64_t parent = -1, parentSize = INT64_MAX;
    for (const Loop &o : loops)
      if (&o != &l && o.begin <= l.begin && o.end >= l.end && o.end - o.begin < parentSize)
        parent = o.begin, parentSize = o.end - o.begin;
    groups[parent].push_back(&l);
  }
  int passes = 0;
  for (const auto &[parent, members] : groups) {
    std::vector<int64_t> chains; // each chain's bytes per iteration (its first, largest loop)
    const Loop *prev = nullptr;
    for (const Loop *l : members) {
      int64_t bytes = l->mix.globalLoadBytes + l->mix.cpAsyncBytes;
      int64_t prevBytes = prev ? prev->mix.globalLoadBytes + prev->mix.cpAsyncBytes : 0;
      if (!(prev && bytes < prevBytes && l->begin - prev->end <= 64 * 16))
        chains.push_back(bytes);
      prev = l;
    }
    int64_t largest = *std::max_element(chains.begin(), chains.end());
    int counted = 0;
    for (int64_t bytes : chains)
      counted += 2 * bytes >= largest;
    passes = std::max(passes, counted);
  }
  return passes;
}

KernelFacts analyze(const std::string &symbol, int arch, llvm::ArrayRef<uint8_t> text,
                    Budget &budget) {
  KernelFacts f;
  f.symbol = symbol;
  f.arch = arch;
  size_t n = text.size() / 16;
  std::vector<Instr> code(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t lo, hi;
    std::memcpy(&lo, text.data() + 16 * i, 8);
    std::memcpy(&hi, text.data() + 16 * i + 8, 8);
    code[i] = decode(lo, hi, arch);
    code[i].branchTarget =
        code[i].opcode == 0x147 ? static_cast<int64_t>(16 * (i + 1)) + code[i].branchTarget : -1;
  }
  finishFacts(f, code, budget);
  return f;
}

} // namespace

void finishFacts(KernelFacts &f, const std::vector<Instr> &code, Budget &budget) {
  size_t n = code.size();
  constexpr size_t kMaxLoops = 4096;
  for (size_t i = 0; i < n; ++i) {
    f.whole.add(code[i]);
    int64_t target = code[i].branchTarget;
    // A backward branch to an earlier instruction is a loop; a branch to itself is the
    // trap after EXIT.
    if (target < 0 || target % 16 != 0 || target >= static_cast<int64_t>(16 * i))
      continue;
    size_t length = i - static_cast<size_t>(target / 16) + 1;
    if (f.loops.size() < kMaxLoops && budget.loops > 0 && length <= budget.visits) {
      --budget.loops;
      budget.visits -= length;
      f.loops.push_back({target, static_cast<int64_t>(16 * i), true, {}});
    } else {
      f.truncated = true;
    }
  }
  std::vector<bool> inLoop(n, false);
  for (Loop &l : f.loops)
    for (int64_t pc = l.begin; pc <= l.end; pc += 16) {
      l.mix.add(code[static_cast<size_t>(pc / 16)]);
      inLoop[static_cast<size_t>(pc / 16)] = true;
    }
  std::sort(f.loops.begin(), f.loops.end(), [](const Loop &a, const Loop &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  // A loop holding a smaller loop is not innermost (loops sorted by start, outer first).
  for (size_t k = 0; k < f.loops.size(); ++k)
    for (size_t j = k + 1; j < f.loops.size() && f.loops[j].begin <= f.loops[k].end; ++j)
      if (f.loops[j].end <= f.loops[k].end &&
          f.loops[j].end - f.loops[j].begin < f.loops[k].end - f.loops[k].begin)
        f.loops[k].innermost = false;
  for (size_t i = 0; i < n; ++i)
    if (!inLoop[i])
      f.straight.add(code[i]);
  for (size_t k = 0; k < f.loops.size(); ++k)
    if (f.mainLoop < 0 || hotter(f.loops[k], f.loops[static_cast<size_t>(f.mainLoop)]))
      f.mainLoop = static_cast<int>(k);
  f.loadLoops = passesOverData(f.loops);
}

int cubinArch(llvm::ArrayRef<uint8_t> b) {
  uint8_t abiVersion = 0;
  uint32_t flags = 0;
  if (b.size() < 64 ||
      std::memcmp(b.data(),
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      b[4] != 2 || b[5] != 1 || !read(b, 8, abiVersion) || !read(b, 48, flags))
    return 0;
  uint16_t machine = 0;
  if (!read(b, 18, machine) || machine != 190) // EM_CUDA
    return 0;
  // ELF ABI version 8 and later (CUDA 12.8+) keep the SM number in bits 8-15 of
  // e_flags; earlier cubins in bits 0-7.
  return static_cast<int>(abiVersion >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
}

llvm::Expected<std::map<std::string, KernelFacts>> decodeCubin(llvm::ArrayRef<uint8_t> b) {
  Budget budget;
  return decodeCubin(b, budget);
}

llvm::Expected<std::map<std::string, KernelFacts>> decodeCubin(llvm::ArrayRef<uint8_t> b,
                                                               Budget &budget) {
  auto bad = [](const std::string &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s", why.c_str());
  };
  int arch = cubinArch(b);
  if (!arch)
    return bad("not a CUDA cubin (an ELF file for EM_CUDA)");
  if (!decodable(arch))
    return bad("sm_" + std::to_string(arch) +
               ": the SASS decoder knows sm_80, sm_86, sm_87, sm_89 and sm_90 only");
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!read(b, 0x28, shoff) || !read(b, 0x3a, shentsize) || !read(b, 0x3c, shnum) ||
      !read(b, 0x3e, shstrndx) || shentsize < 64 || shstrndx >= shnum)
    return bad("damaged ELF header");
  struct Sec {
    uint32_t name, type;
    uint64_t off, size;
  };
  std::vector<Sec> secs;
  for (uint16_t i = 0; i < shnum; ++i) {
    uint64_t base = shoff + uint64_t(i) * shentsize;
    Sec s{};
    if (shoff > b.size() || !read(b, base, s.name) || !read(b, base + 4, s.type) ||
        !read(b, base + 0x18, s.off) || !read(b, base + 0x20, s.size))
      return bad("damaged ELF section table");
    if (s.type == 8) // SHT_NOBITS (shared memory, .bss): no bytes in the file
      s.off = s.size = 0;
    if (s.off > b.size() || b.size() - s.off < s.size)
      return bad("damaged ELF section table");
    secs.push_back(s);
  }
  const Sec &strtab = secs[shstrndx];
  std::vector<std::pair<std::string, const Sec *>> texts;
  for (const Sec &s : secs) {
    if (s.name >= strtab.size)
      continue;
    const char *p = reinterpret_cast<const char *>(b.data() + strtab.off + s.name);
    size_t maxLen = strtab.size - s.name;
    std::string name(p, strnlen(p, maxLen));
    if (name.rfind(".text.", 0) == 0 && s.size % 16 == 0 && s.size > 0)
      texts.emplace_back(name.substr(6), &s);
  }
  // Each kernel's code is its own: overlapping or repeated text sections are damage
  // (and would multiply the work).
  std::vector<const Sec *> byOffset;
  for (const auto &t : texts)
    byOffset.push_back(t.second);
  std::sort(byOffset.begin(), byOffset.end(),
            [](const Sec *x, const Sec *y) { return x->off < y->off; });
  for (size_t i = 1; i < byOffset.size(); ++i)
    if (byOffset[i]->off < byOffset[i - 1]->off + byOffset[i - 1]->size)
      return bad("damaged ELF: overlapping text sections");
  std::map<std::string, KernelFacts> out;
  for (const auto &[symbol, s] : texts)
    out[symbol] = analyze(symbol, arch, b.slice(s->off, s->size), budget);
  return out;
}

std::string describe(const Mix &m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << m.instructions << " instructions";
  auto widths = [&](const char *what, const std::map<int, int> &w) {
    for (const auto &[bytes, count] : w)
      os << ", " << what << "." << 8 * bytes << " x" << count;
  };
  if (m.of(Class::Tensor))
    os << ", " << m.of(Class::Tensor) << " MMA";
  if (m.ffma)
    os << ", " << m.ffma << " FFMA";
  if (m.hfma2)
    os << ", " << m.hfma2 << " HFMA2";
  widths("LDG", m.globalLoadWidths);
  widths("STG", m.globalStoreWidths);
  widths("LDGSTS", m.cpAsyncWidths);
  widths("LDS", m.sharedLoadWidths);
  widths("STS", m.sharedStoreWidths);
  if (m.of(Class::Ldsm))
    os << ", " << m.of(Class::Ldsm) << " LDSM";
  if (m.of(Class::Barrier))
    os << ", " << m.of(Class::Barrier) << " barriers";
  os << ", " << m.integerOps() << " integer";
  if (m.of(Class::Mufu) + m.of(Class::Convert))
    os << ", " << m.of(Class::Mufu) + m.of(Class::Convert) << " MUFU/convert";
  return s;
}

} // namespace dlc::codegen::sass
