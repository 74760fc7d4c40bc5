//===- Recurrent.cpp - LSTM and GRU as GEMMs plus fused cell kernels --------===//
//
// Per direction: one GEMM computes X W^T for all time steps; then for each step a
// GEMM computes h R^T and one cell kernel (two for GRU without
// linear_before_reset, with a second GEMM in between) applies the gates and
// writes h, c and Y. The cell kernel is generated once per direction and launched
// per step with the step index as an argument; h ping-pongs between two buffers.
// sequence_lens freezes a batch entry's state after its length (Y stays zero).
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

namespace dlc::codegen {

using namespace ir;

namespace {

std::string activation(const std::string &name, double alpha, double beta, const std::string &expr,
                       const std::string &ct) {
  const std::string v = "(" + expr + ")";
  auto lit = [&](double x) { return "(" + ct + ")" + literal(DType::F64, x); };
  if (name == "Sigmoid") return "((" + ct + ")1 / ((" + ct + ")1 + dlc::exp_(-" + v + ")))";
  if (name == "Tanh") return "dlc::tanh_(" + v + ")";
  if (name == "Relu") return "dlc::stdmax((" + ct + ")0, " + v + ")";
  if (name == "HardSigmoid")
    return "dlc::stdmin((" + ct + ")1, dlc::stdmax((" + ct + ")0, " + lit(alpha) + " * " + v + " + " + lit(beta) + "))";
  if (name == "LeakyRelu") return "(" + v + " < 0 ? " + lit(alpha) + " * " + v + " : " + v + ")";
  if (name == "ThresholdedRelu") return "(" + v + " > " + lit(alpha) + " ? " + v + " : (" + ct + ")0)";
  if (name == "ScaledTanh") return "(" + lit(alpha) + " * dlc::tanh_(" + lit(beta) + " * " + v + "))";
  if (name == "Affine") return "(" + lit(alpha) + " * " + v + " + " + lit(beta) + ")";
  if (name == "Elu") return "(" + v + " < 0 ? " + lit(alpha) + " * (dlc::exp_(" + v + ") - 1) : " + v + ")";
  if (name == "Softsign") return "(" + v + " / ((" + ct + ")1 + dlc::fabs_(" + v + ")))";
  if (name == "Softplus") return "dlc::log1p_(dlc::exp_(" + v + "))";
  return v;
}

} // namespace

llvm::Error lowerRecurrent(Lowering &l, const Node &n) {
  bool lstm = n.kind() == OpKind::LSTM;
  const Value *x = n.operand(0), *W = n.operand(1), *R = n.operand(2), *Bv = n.operand(3),
              *lens = n.operand(4), *h0 = n.operand(5), *c0 = lstm ? n.operand(6) : nullptr,
              *P = lstm ? n.operand(7) : nullptr;
  DType dt = x->dtype();
  if (dt != DType::F32 && dt != DType::F64)
    return errorf("{0} on {1} is not supported by code generation", n.opName(), dtypeName(dt));
  bool batchFirst = n.attrInt("layout") == 1;
  const std::string &dir = n.attrString("direction");
  int64_t dirs = dir == "bidirectional" ? 2 : 1, H = n.attrInt("hidden_size"), G = lstm ? 4 : 3;
  int64_t S = batchFirst ? x->shape()[1] : x->shape()[0], B = batchFirst ? x->shape()[0] : x->shape()[1],
          I = x->shape()[2];
  bool lbr = !lstm && n.attrInt("linear_before_reset") != 0;
  double clip = n.attrFloat("clip");
  bool coupled = lstm && n.attrInt("input_forget") != 0;
  std::vector<std::string> acts = n.attrStrings("activations");
  if (acts.empty())
    for (int64_t d = 0; d < dirs; ++d)
      for (const char *a : lstm ? std::vector<const char *>{"Sigmoid", "Tanh", "Tanh"}
                                : std::vector<const char *>{"Sigmoid", "Tanh"})
        acts.push_back(a);
  const auto &alphas = n.attrFloats("activation_alpha"), &betas = n.attrFloats("activation_beta");
  std::string ct = computeType(dt);
  size_t es = dtypeSize(dt);

  const Value *Y = n.result(0), *Yh = n.numResults() > 1 ? n.result(1) : nullptr,
              *Yc = n.numResults() > 2 ? n.result(2) : nullptr;
  BufferRef yb = l.allocate(Y);
  l.addMemset(yb, Y->type().byteSize(), 0, n);
  if (Yh)
    l.allocate(Yh);
  if (Yc)
    l.allocate(Yc);
  if (S == 0 || B == 0)
    return llvm::Error::success();
  BufferRef xw = l.temp(S * B * G * H * es, Y->name() + ".xw");
  BufferRef hr = l.temp(B * G * H * es, Y->name() + ".hr");
  BufferRef hs[2] = {l.temp(B * H * es, Y->name() + ".h0"), l.temp(B * H * es, Y->name() + ".h1")};
  BufferRef cs = l.temp(B * H * es, Y->name() + ".c");
  BufferRef rhIn = l.temp(B * H * es, Y->name() + ".rh"), rhOut = l.temp(B * H * es, Y->name() + ".rhR");
  auto stateIdx = [&](int64_t d) { // [dirs, B, H] or [B, dirs, H]
    return batchFirst ? "(b * " + ll(dirs) + " + " + ll(d) + ") * " + ll(H) + " + h"
                      : "(" + ll(d) + " * " + ll(B) + " + b) * " + ll(H) + " + h";
  };

  for (int64_t d = 0; d < dirs; ++d) {
    bool reverse = dir == "reverse" || d == 1;
    std::string aF = acts[d * (lstm ? 3 : 2)], aG = acts[d * (lstm ? 3 : 2) + 1];
    std::string aH = lstm ? acts[d * 3 + 2] : aG;
    auto act = [&](int k, const std::string &v) {
      size_t idx = d * (lstm ? 3 : 2) + k;
      const std::string &name = acts[idx];
      double al = idx < alphas.size() ? alphas[idx] : (name == "HardSigmoid" ? 0.2 : name == "LeakyRelu" ? 0.01 : 1.0);
      double be = idx < betas.size() ? betas[idx] : (name == "HardSigmoid" ? 0.5 : 0.0);
      return activation(name, al, be, v, ct);
    };
    auto clipv = [&](const std::string &v) {
      return clip > 0 ? "dlc::stdmin((" + ct + ")" + literal(DType::F64, clip) + ", dlc::stdmax((" + ct + ")" +
                            literal(DType::F64, -clip) + ", " + v + "))"
                      : v;
    };
    // X W^T for all steps: [S*B, I] x [I, G*H] (X rows in its own order).
    GemmStep g;
    g.dtype = dt;
    g.transB = true;
    g.m = S * B;
    g.n = G * H;
    g.k = I;
    g.a = l.bufferOf(x);
    g.b = l.bufferOf(W);
    g.b.offset += d * G * H * I * es;
    g.c = xw;
    g.lda = I;
    g.ldb = I;
    g.ldc = G * H;
    l.addGemm(g, n);

    // Initial state.
    {
      KernelBuilder kb(l, n, "init" + std::to_string(d));
      std::string hp = kb.pointer(dt, hs[0], false), cp = kb.pointer(dt, cs, false);
      std::string ih = h0 ? kb.pointerTo(h0) : "", ic = c0 ? kb.pointerTo(c0) : "";
      {
        CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(B * H)));
        kb.body().line("const long long b = i / " + ll(H) + ", h = i % " + ll(H) + ";");
        kb.body().line(hp + "[i] = " + (h0 ? ih + "[" + stateIdx(d) + "]" : "dlc::cvt<" + std::string(cudaType(dt)) + ">(0)") + ";");
        kb.body().line(cp + "[i] = " + (c0 ? ic + "[" + stateIdx(d) + "]" : "dlc::cvt<" + std::string(cudaType(dt)) + ">(0)") + ";");
      }
      uint64_t grid;
      uint32_t block;
      elementwiseLaunchShape(B * H, grid, block);
      kb.launch(grid, block);
    }

    // Step kernels (built once, relaunched per step).
    auto cellPrologue = [&](KernelBuilder &kb, std::string &stepName, std::string &lenExpr) {
      stepName = kb.int64Param(0);
      std::string lp = lens ? kb.pointerTo(lens) : "";
      CodeStream &b = kb.body();
      b.line("const long long b = i / " + ll(H) + ", h = i % " + ll(H) + ";");
      if (lens)
        b.line("long long len = (long long)" + lp + "[b]; len = len < 0 ? 0 : (len > " + ll(S) + " ? " + ll(S) + " : len);");
      else
        b.line("const long long len = " + ll(S) + ";");
      b.line("const long long s = " + stepName + ";");
      lenExpr = "len";
    };
    auto biasLoad = [&](KernelBuilder &, const std::string &bp, int64_t gate, bool recurrent) {
      if (!Bv)
        return std::string("(" + ct + ")0");
      return "dlc::ld<" + ct + ">(" + bp + ", " + ll(d * 2 * G * H + (recurrent ? G * H : 0) + gate * H) + " + h)";
    };
    std::string yIdx = batchFirst ? "((b * " + ll(S) + " + t) * " + ll(dirs) + " + " + ll(d) + ") * " + ll(H) + " + h"
                                  : "((t * " + ll(dirs) + " + " + ll(d) + ") * " + ll(B) + " + b) * " + ll(H) + " + h";
    std::string xwRow = batchFirst ? "(b * " + ll(S) + " + t)" : "(t * " + ll(B) + " + b)";

    // Cell kernel (LSTM, or GRU's first/only stage).
    KernelBuilder cell(l, n, "cell" + std::to_string(d));
    std::string xwp = cell.pointer(dt, xw, true), hrp = cell.pointer(dt, hr, true);
    std::string curp = cell.pointer(dt, hs[0], true), nextp = cell.pointer(dt, hs[1], false);
    std::string cp = cell.pointer(dt, cs, false), yp = cell.outputPointer(Y);
    std::string bp = Bv ? cell.pointerTo(Bv) : "", pp = P ? cell.pointerTo(P) : "";
    std::string rhp = !lstm && !lbr ? cell.pointer(dt, rhIn, false) : "";
    std::string stepName, lenExpr;
    CodeStream &b = cell.body();
    {
      CodeStream::Block loop(b, gridStrideLoop("i", ll(B * H)));
      cellPrologue(cell, stepName, lenExpr);
      b.line("const " + ct + " hp = dlc::ld<" + ct + ">(" + curp + ", i);");
      b.line("if (s >= len) { " + nextp + "[i] = " + curp + "[i];" + (!lstm && !lbr ? " " + rhp + "[i] = 0;" : "") + " continue; }");
      b.line("const long long t = " + std::string(reverse ? "len - 1 - s" : "s") + ";");
      auto gx = [&](int64_t gate) {
        return "dlc::ld<" + ct + ">(" + xwp + ", " + xwRow + " * " + ll(G * H) + " + " + ll(gate * H) + " + h) + " +
               biasLoad(cell, bp, gate, false);
      };
      auto gh = [&](int64_t gate) {
        return "dlc::ld<" + ct + ">(" + hrp + ", b * " + ll(G * H) + " + " + ll(gate * H) + " + h) + " +
               biasLoad(cell, bp, gate, true);
      };
      if (lstm) {
        auto peep = [&](int64_t k, const std::string &c) {
          return P ? " + dlc::ld<" + ct + ">(" + pp + ", " + ll(d * 3 * H + k * H) + " + h) * " + c : std::string();
        };
        b.line("const " + ct + " cprev = dlc::ld<" + ct + ">(" + cp + ", i);");
        b.line("const " + ct + " ig = " + act(0, clipv(gx(0) + " + " + gh(0) + peep(0, "cprev"))) + ";");
        if (coupled)
          b.line("const " + ct + " fg = (" + ct + ")1 - ig;");
        else
          b.line("const " + ct + " fg = " + act(0, clipv(gx(2) + " + " + gh(2) + peep(2, "cprev"))) + ";");
        b.line("const " + ct + " cg = " + act(1, clipv(gx(3) + " + " + gh(3))) + ";");
        b.line("const " + ct + " cn = fg * cprev + ig * cg;");
        b.line("const " + ct + " og = " + act(0, clipv(gx(1) + " + " + gh(1) + peep(1, "cn"))) + ";");
        b.line("const " + ct + " hn = og * " + act(2, "cn") + ";");
        b.line("dlc::st(" + cp + ", i, cn);");
        b.line("dlc::st(" + nextp + ", i, hn);");
        b.line("dlc::st(" + yp + ", " + yIdx + ", hn);");
      } else {
        b.line("const " + ct + " zg = " + act(0, clipv(gx(0) + " + " + gh(0))) + ";");
        b.line("const " + ct + " rg = " + act(0, clipv(gx(1) + " + " + gh(1))) + ";");
        if (lbr) {
          b.line("const " + ct + " hh = " + act(1, clipv(gx(2) + " + rg * (" + gh(2) + ")")) + ";");
          b.line("const " + ct + " hn = ((" + ct + ")1 - zg) * hh + zg * hp;");
          b.line("dlc::st(" + nextp + ", i, hn);");
          b.line("dlc::st(" + yp + ", " + yIdx + ", hn);");
        } else {
          // Stage 1: keep z in the next-h buffer for stage 2, and r * h for the second GEMM.
          b.line("dlc::st(" + rhp + ", i, rg * hp);");
          b.line("dlc::st(" + nextp + ", i, zg);");
        }
      }
    }
    uint64_t grid;
    uint32_t block;
    elementwiseLaunchShape(B * H, grid, block);

    // GRU stage 2 (without linear_before_reset): hh = g(xh + (r*h) Rh^T + Rbh).
    std::unique_ptr<KernelBuilder> cell2;
    if (!lstm && !lbr) {
      cell2 = std::make_unique<KernelBuilder>(l, n, "cell" + std::to_string(d) + "b");
      KernelBuilder &k2 = *cell2;
      std::string xwp2 = k2.pointer(dt, xw, true), rp2 = k2.pointer(dt, rhOut, true);
      std::string curp2 = k2.pointer(dt, hs[0], true), nextp2 = k2.pointer(dt, hs[1], false);
      std::string yp2 = k2.outputPointer(Y), bp2 = Bv ? k2.pointerTo(Bv) : "";
      std::string step2, len2;
      CodeStream &b2 = k2.body();
      CodeStream::Block loop(b2, gridStrideLoop("i", ll(B * H)));
      cellPrologue(k2, step2, len2);
      b2.line("if (s >= len) continue;");
      b2.line("const long long t = " + std::string(reverse ? "len - 1 - s" : "s") + ";");
      b2.line("const " + ct + " hp = dlc::ld<" + ct + ">(" + curp2 + ", i);");
      b2.line("const " + ct + " zg = dlc::ld<" + ct + ">(" + nextp2 + ", i);");
      std::string xh = "dlc::ld<" + ct + ">(" + xwp2 + ", " + xwRow + " * " + ll(G * H) + " + " + ll(2 * H) + " + h) + " +
                       biasLoad(k2, bp2, 2, false);
      std::string rh = "dlc::ld<" + ct + ">(" + rp2 + ", i) + " + biasLoad(k2, bp2, 2, true);
      b2.line("const " + ct + " hh = " + act(1, clipv(xh + " + " + rh)) + ";");
      b2.line("const " + ct + " hn = ((" + ct + ")1 - zg) * hh + zg * hp;");
      b2.line("dlc::st(" + nextp2 + ", i, hn);");
      b2.line("dlc::st(" + yp2 + ", " + yIdx + ", hn);");
    }

    for (int64_t s = 0; s < S; ++s) {
      BufferRef cur = hs[s % 2], next = hs[(s + 1) % 2];
      GemmStep hg;
      hg.dtype = dt;
      hg.transB = true;
      hg.m = B;
      hg.n = G * H;
      hg.k = H;
      hg.a = cur;
      hg.b = l.bufferOf(R);
      hg.b.offset += d * G * H * H * es;
      hg.c = hr;
      hg.lda = H;
      hg.ldb = H;
      hg.ldc = G * H;
      l.addGemm(hg, n);
      auto editCell = [&](std::vector<KernelArg> &args) {
        args[2].ref = cur;  // curp
        args[3].ref = next; // nextp
        for (KernelArg &a : args)
          if (a.kind == KernelArg::I64)
            a.i = s;
      };
      if (s == 0)
        cell.define(grid, block);
      cell.relaunch(editCell);
      if (cell2) {
        GemmStep rg;
        rg.dtype = dt;
        rg.transB = true;
        rg.m = B;
        rg.n = H;
        rg.k = H;
        rg.a = rhIn;
        rg.b = l.bufferOf(R);
        rg.b.offset += (d * G * H + 2 * H) * H * es;
        rg.c = rhOut;
        rg.lda = H;
        rg.ldb = H;
        rg.ldc = H;
        l.addGemm(rg, n);
        if (s == 0)
          cell2->define(grid, block);
        cell2->relaunch([&](std::vector<KernelArg> &args) {
          args[2].ref = cur;
          args[3].ref = next;
          for (KernelArg &a : args)
            if (a.kind == KernelArg::I64)
              a.i = s;
        });
      }
    }
    (void)aF;
    (void)aH;
    // Final states of this direction.
    BufferRef last = hs[S % 2];
    for (const Value *outV : {Yh, Yc}) {
      if (!outV)
        continue;
      KernelBuilder kb(l, n, (outV == Yh ? "yh" : "yc") + std::to_string(d));
      std::string src = kb.pointer(dt, outV == Yh ? last : cs, true), dst = kb.outputPointer(outV);
      {
        CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(B * H)));
        kb.body().line("const long long b = i / " + ll(H) + ", h = i % " + ll(H) + ";");
        kb.body().line(dst + "[" + stateIdx(d) + "] = " + src + "[i];");
      }
      kb.launch(grid, block);
    }
  }
  return llvm::Error::success();
}

} // namespace dlc::codegen
