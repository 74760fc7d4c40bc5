//===- Recurrent.cpp - LSTM and GRU ----------------------------------------===//
//
// ONNX semantics: gate orders iofc (LSTM) and zrh (GRU); layout 0 is
// [seq, batch, ...], layout 1 is [batch, seq, ...]; optional sequence_lens
// stop each batch entry early (its outputs past the end are zero).
//===----------------------------------------------------------------------===//
#include "OpUtils.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace dlc::ir {
namespace {
using namespace ops;

struct RnnDims {
  int64_t seq, batch, input, hidden, dirs;
  bool batchFirst;
};

int gatesOf(OpKind k) {
  return k == OpKind::LSTM ? 4 : 3;
}

llvm::Expected<RnnDims> rnnDims(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  if (x.size() != 3)
    return errorf("X must have rank 3, got {0}", shapeStr(x));
  RnnDims d;
  d.batchFirst = n.attrInt("layout") == 1;
  d.seq = d.batchFirst ? x[1] : x[0];
  d.batch = d.batchFirst ? x[0] : x[1];
  d.input = x[2];
  d.hidden = n.attrInt("hidden_size");
  const std::string &dir = n.attrString("direction");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    return errorf("unknown direction \"{0}\"", dir);
  d.dirs = dir == "bidirectional" ? 2 : 1;
  if (d.hidden <= 0)
    return makeError("hidden_size must be positive");
  return d;
}

Shape stateShape(const RnnDims &d) {
  return d.batchFirst ? Shape{d.batch, d.dirs, d.hidden} : Shape{d.dirs, d.batch, d.hidden};
}

llvm::Error verifyRnn(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  auto d = rnnDims(n);
  if (!d)
    return d.takeError();
  int64_t G = gatesOf(n.kind());
  auto expectShape = [&](unsigned i, const Shape &s, const char *what) -> llvm::Error {
    Value *v = n.operand(i);
    if (!v)
      return ok();
    if (i != 4)
      if (auto e = requireSameType(n, 0, i))
        return e;
    if (v->shape() != s)
      return errorf("{0} must have shape {1}, got {2}", what, shapeStr(s), shapeStr(v->shape()));
    return ok();
  };
  if (auto e = expectShape(1, {d->dirs, G * d->hidden, d->input}, "W"))
    return e;
  if (auto e = expectShape(2, {d->dirs, G * d->hidden, d->hidden}, "R"))
    return e;
  if (auto e = expectShape(3, {d->dirs, 2 * G * d->hidden}, "B"))
    return e;
  if (n.operand(4)) {
    if (auto e = requireType(n, 4, kInt))
      return e;
    if (n.operand(4)->shape() != Shape{d->batch})
      return errorf("sequence_lens must have shape [{0}]", d->batch);
  }
  if (auto e = expectShape(5, stateShape(*d), "initial_h"))
    return e;
  if (n.kind() == OpKind::LSTM) {
    if (auto e = expectShape(6, stateShape(*d), "initial_c"))
      return e;
    if (auto e = expectShape(7, {d->dirs, 3 * d->hidden}, "P"))
      return e;
  }
  if (auto acts = rnnActivations(n); !acts)
    return acts.takeError();
  return ok();
}

InferResult inferRnn(const Node &n) {
  auto d = rnnDims(n);
  if (!d)
    return d.takeError();
  DType dt = n.operand(0)->dtype();
  Shape y = d->batchFirst ? Shape{d->batch, d->seq, d->dirs, d->hidden}
                          : Shape{d->seq, d->dirs, d->batch, d->hidden};
  TypeList r{{dt, y}};
  for (unsigned i = 1; i < n.numResults(); ++i)
    r.push_back({dt, stateShape(*d)});
  return r;
}

llvm::Error refRnn(const Node &n, const Inputs &in, Outputs &out) {
  auto dd = rnnDims(n);
  if (!dd)
    return dd.takeError();
  const RnnDims &d = *dd;
  bool lstm = n.kind() == OpKind::LSTM;
  int64_t G = gatesOf(n.kind()), H = d.hidden, B = d.batch, I = d.input, S = d.seq;
  auto acts = rnnActivations(n);
  if (!acts)
    return acts.takeError();
  auto get = [&](unsigned i) {
    return i < in.size() && in[i] ? in[i]->toVector<double>() : std::vector<double>();
  };
  auto x = get(0), w = get(1), r = get(2), bias = get(3), h0 = get(5);
  std::vector<double> c0 = lstm ? get(6) : std::vector<double>(),
                      peep = lstm ? get(7) : std::vector<double>();
  std::vector<int64_t> lens(B, S);
  if (in.size() > 4 && in[4])
    for (int64_t b = 0; b < B; ++b)
      lens[b] = std::clamp<int64_t>(in[4]->getInt(b), 0, S);
  double clip = n.attrFloat("clip");
  bool coupled = lstm && n.attrInt("input_forget") != 0;
  bool lbr = !lstm && n.attrInt("linear_before_reset") != 0;
  const std::string &dir = n.attrString("direction");

  auto xAt = [&](int64_t t, int64_t b, int64_t i) {
    return x[(d.batchFirst ? (b * S + t) : (t * B + b)) * I + i];
  };
  auto stateIdx = [&](int64_t dir_, int64_t b, int64_t h) {
    return (d.batchFirst ? (b * d.dirs + dir_) : (dir_ * B + b)) * H + h;
  };
  std::vector<double> y(S * d.dirs * B * H, 0.0), yh(d.dirs * B * H, 0.0), yc(d.dirs * B * H, 0.0);
  auto yIdx = [&](int64_t t, int64_t dir_, int64_t b, int64_t h) {
    return d.batchFirst ? ((b * S + t) * d.dirs + dir_) * H + h
                        : ((t * d.dirs + dir_) * B + b) * H + h;
  };
  auto clipv = [&](double v) { return clip > 0 ? std::clamp(v, -double(clip), double(clip)) : v; };

  for (int64_t di = 0; di < d.dirs; ++di) {
    bool reverse = dir == "reverse" || (dir == "bidirectional" && di == 1);
    const RnnActivation &f = (*acts)[di * (lstm ? 3 : 2)], &g = (*acts)[di * (lstm ? 3 : 2) + 1];
    const RnnActivation &hact = lstm ? (*acts)[di * 3 + 2] : g;
    const double *W = w.data() + di * G * H * I, *R = r.data() + di * G * H * H;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> hs(H, 0.0), cs(H, 0.0);
      for (int64_t h = 0; h < H; ++h) {
        if (!h0.empty())
          hs[h] = h0[stateIdx(di, b, h)];
        if (!c0.empty())
          cs[h] = c0[stateIdx(di, b, h)];
      }
      for (int64_t step = 0; step < lens[b]; ++step) {
        int64_t t = reverse ? lens[b] - 1 - step : step;
        // Pre-activations: gx = W x + Wb, gh = R h + Rb, per gate.
        std::vector<double> gx(G * H, 0.0), gh(G * H, 0.0);
        for (int64_t k = 0; k < G * H; ++k) {
          double sx = bias.empty() ? 0 : bias[di * 2 * G * H + k];
          double sh = bias.empty() ? 0 : bias[di * 2 * G * H + G * H + k];
          for (int64_t i = 0; i < I; ++i)
            sx += W[k * I + i] * xAt(t, b, i);
          for (int64_t j = 0; j < H; ++j)
            sh += R[k * H + j] * hs[j];
          gx[k] = sx;
          gh[k] = sh;
        }
        std::vector<double> hn(H), cn(H);
        if (lstm) {
          const double *P = peep.empty() ? nullptr : peep.data() + di * 3 * H;
          for (int64_t h = 0; h < H; ++h) {
            double it = f(clipv(gx[h] + gh[h] + (P ? P[h] * cs[h] : 0)));
            double ft =
                coupled ? 1 - it
                        : f(clipv(gx[2 * H + h] + gh[2 * H + h] + (P ? P[2 * H + h] * cs[h] : 0)));
            double ct = g(clipv(gx[3 * H + h] + gh[3 * H + h]));
            cn[h] = ft * cs[h] + it * ct;
            double ot = f(clipv(gx[H + h] + gh[H + h] + (P ? P[H + h] * cn[h] : 0)));
            hn[h] = ot * hact(cn[h]);
          }
        } else {
          // Without linear_before_reset the reset gate multiplies h before Rh:
          // (r_t (.) h_{t-1}) Rh^T sums R[2H + h][j] * r_t[j] * h_{t-1}[j] over j.
          std::vector<double> zt(H), rt(H);
          for (int64_t h = 0; h < H; ++h) {
            zt[h] = f(clipv(gx[h] + gh[h]));
            rt[h] = f(clipv(gx[H + h] + gh[H + h]));
          }
          for (int64_t h = 0; h < H; ++h) {
            double hh;
            if (lbr) {
              hh = g(clipv(gx[2 * H + h] + rt[h] * gh[2 * H + h]));
            } else {
              double s = bias.empty() ? 0 : bias[di * 2 * G * H + G * H + 2 * H + h];
              for (int64_t j = 0; j < H; ++j)
                s += R[(2 * H + h) * H + j] * rt[j] * hs[j];
              hh = g(clipv(gx[2 * H + h] + s));
            }
            hn[h] = (1 - zt[h]) * hh + zt[h] * hs[h];
          }
        }
        hs = hn;
        if (lstm)
          cs = cn;
        for (int64_t h = 0; h < H; ++h)
          y[yIdx(t, di, b, h)] = hs[h];
      }
      for (int64_t h = 0; h < H; ++h) {
        yh[stateIdx(di, b, h)] = hs[h];
        yc[stateIdx(di, b, h)] = cs[h];
      }
    }
  }
  out[0] = Tensor::fromVector(out[0].type(), y);
  if (out.size() > 1)
    out[1] = Tensor::fromVector(out[1].type(), yh);
  if (out.size() > 2)
    out[2] = Tensor::fromVector(out[2].type(), yc);
  return ok();
}

//===----------------------------------------------------------------------===//
// Decomposition for training: the recurrence unrolled over the (static) sequence
// into MatMul, Sigmoid, Tanh and element-wise ops, which autodiff differentiates.
//===----------------------------------------------------------------------===//

llvm::Expected<std::vector<Value *>> decomposeRnn(GradBuilder &b, const Node &n) {
  auto dd = rnnDims(n);
  if (!dd)
    return dd.takeError();
  const RnnDims d = *dd;
  bool lstm = n.kind() == OpKind::LSTM;
  int64_t G = gatesOf(n.kind()), H = d.hidden, B = d.batch, S = d.seq;
  auto acts = rnnActivations(n);
  if (!acts)
    return acts.takeError();
  for (size_t i = 0; i < acts->size(); ++i)
    if ((*acts)[i].name != ((lstm ? i % 3 : i % 2) == 0 ? "Sigmoid" : "Tanh"))
      return makeError("only the default activations (Sigmoid, Tanh) are differentiable");
  if (n.attrFloat("clip") > 0 || n.operand(4) ||
      (lstm && (n.operand(7) || n.attrInt("input_forget"))))
    return makeError("clip, sequence_lens, peepholes and input_forget are not differentiable");
  bool lbr = !lstm && n.attrInt("linear_before_reset") != 0;
  const std::string &dir = n.attrString("direction");
  DType dt = n.operand(0)->dtype();

  auto slice = [&](Value *v, int64_t axis, int64_t from, int64_t to) {
    return b.op(OpKind::Slice, {v},
                {{"axes", std::vector<int64_t>{axis}},
                 {"starts", std::vector<int64_t>{from}},
                 {"ends", std::vector<int64_t>{to}}});
  };
  auto gate = [&](Value *v, int64_t k) { return slice(v, 1, k * H, (k + 1) * H); };
  auto concat = [&](std::vector<Value *> vs, int64_t axis) {
    return vs.size() == 1 ? vs[0] : b.op(OpKind::Concat, vs, {{"axis", axis}});
  };
  auto unsq = [&](Value *v) {
    return b.op(OpKind::Unsqueeze, {v}, {{"axes", std::vector<int64_t>{0}}});
  };
  auto sigmoid = [&](Value *v) { return b.op(OpKind::Sigmoid, {v}); };
  auto tanh = [&](Value *v) { return b.op(OpKind::Tanh, {v}); };

  Value *x = n.operand(0); // [S, B, I]
  if (d.batchFirst)
    x = b.transpose(x, {1, 0, 2});
  auto state0 = [&](unsigned operand, int64_t di) -> Value * { // [B, H]
    Value *v = n.operand(operand);
    if (!v)
      return b.full(0, dt, {B, H});
    if (d.batchFirst) // [B, dirs, H]
      return b.reshape(slice(v, 1, di, di + 1), {B, H});
    return b.reshape(slice(v, 0, di, di + 1), {B, H});
  };
  std::vector<Value *> ys, hs, cs;
  for (int64_t di = 0; di < d.dirs; ++di) {
    bool reverse = dir == "reverse" || (dir == "bidirectional" && di == 1);
    Value *wT =
        b.transpose(b.reshape(slice(n.operand(1), 0, di, di + 1), {G * H, d.input}), {1, 0});
    Value *rT = b.transpose(b.reshape(slice(n.operand(2), 0, di, di + 1), {G * H, H}), {1, 0});
    Value *xw = b.op(OpKind::MatMul, {x, wT}); // [S, B, G*H]
    Value *rb = nullptr;
    if (Value *bias = n.operand(3)) {
      Value *bd = b.reshape(slice(bias, 0, di, di + 1), {2 * G * H});
      xw = b.add(xw, slice(bd, 0, 0, G * H));
      rb = slice(bd, 0, G * H, 2 * G * H);
    }
    Value *h = state0(5, di), *c = lstm ? state0(6, di) : nullptr;
    std::vector<Value *> out(S);
    for (int64_t step = 0; step < S; ++step) {
      int64_t t = reverse ? S - 1 - step : step;
      Value *gx = b.reshape(slice(xw, 0, t, t + 1), {B, G * H});
      Value *gh = b.op(OpKind::MatMul, {h, rT});
      if (rb)
        gh = b.add(gh, rb);
      if (lstm) { // gates i, o, f, c
        Value *pre = b.add(gx, gh);
        Value *i = sigmoid(gate(pre, 0)), *o = sigmoid(gate(pre, 1)), *f = sigmoid(gate(pre, 2));
        c = b.add(b.mul(f, c), b.mul(i, tanh(gate(pre, 3))));
        h = b.mul(o, tanh(c));
      } else { // gates z, r, h
        Value *z = sigmoid(b.add(gate(gx, 0), gate(gh, 0)));
        Value *r = sigmoid(b.add(gate(gx, 1), gate(gh, 1)));
        Value *hh;
        if (lbr) {
          hh = tanh(b.add(gate(gx, 2), b.mul(r, gate(gh, 2))));
        } else { // (r . h) Rh^T + Rbh
          Value *rh = b.op(OpKind::MatMul, {b.mul(r, h), slice(rT, 1, 2 * H, 3 * H)});
          if (rb)
            rh = b.add(rh, slice(rb, 0, 2 * H, 3 * H));
          hh = tanh(b.add(gate(gx, 2), rh));
        }
        h = b.add(b.mul(b.sub(b.scalar(1, dt), z), hh), b.mul(z, h));
      }
      out[t] = unsq(h); // [1, B, H]
    }
    ys.push_back(b.op(OpKind::Unsqueeze, {concat(out, 0)},
                      {{"axes", std::vector<int64_t>{1}}})); // [S,1,B,H]
    hs.push_back(unsq(h));
    if (lstm)
      cs.push_back(unsq(c));
  }
  Value *y = concat(ys, 1), *yh = concat(hs, 0),
        *yc = lstm ? concat(cs, 0) : nullptr; // [S,dirs,B,H], [dirs,B,H]
  if (d.batchFirst) {
    y = b.transpose(y, {2, 0, 1, 3});
    yh = b.transpose(yh, {1, 0, 2});
    if (yc)
      yc = b.transpose(yc, {1, 0, 2});
  }
  if (auto e = b.takeError())
    return e;
  std::vector<Value *> results{y, yh, yc};
  results.resize(n.numResults());
  return results;
}

OpBuilder rnn(OpTable &t, OpKind k) {
  return t.def(k)
      .attr("activation_alpha", AttrKind::Floats, std::vector<float>{})
      .attr("activation_beta", AttrKind::Floats, std::vector<float>{})
      .attr("activations", AttrKind::Strings, std::vector<std::string>{})
      .attr("clip", AttrKind::Float, 0.0f)
      .attr("direction", AttrKind::String, "forward")
      .attr("hidden_size", AttrKind::Int)
      .attr("layout", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Deny)
      .layout(LayoutRule::fixed())
      .verify(verifyRnn)
      .infer(inferRnn)
      .reference(refRnn)
      .decompose(decomposeRnn);
}

} // namespace

void defineRecurrentOps(OpTable &t) {
  // Operands: X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?
  rnn(t, OpKind::LSTM).operands(3, 8).results(1, 3).attr("input_forget", AttrKind::Int, int64_t{0});
  // Operands: X, W, R, B?, sequence_lens?, initial_h?
  rnn(t, OpKind::GRU)
      .operands(3, 6)
      .results(1, 2)
      .attr("linear_before_reset", AttrKind::Int, int64_t{0});
}

double RnnActivation::operator()(double x) const {
  if (name == "Sigmoid")
    return 1 / (1 + std::exp(-x));
  if (name == "Tanh")
    return std::tanh(x);
  if (name == "Relu")
    return std::max(0.0, x);
  if (name == "HardSigmoid")
    return std::clamp(alpha * x + beta, 0.0, 1.0);
  if (name == "LeakyRelu")
    return x < 0 ? alpha * x : x;
  if (name == "ThresholdedRelu")
    return x > alpha ? x : 0.0;
  if (name == "ScaledTanh")
    return alpha * std::tanh(beta * x);
  if (name == "Affine")
    return alpha * x + beta;
  if (name == "Elu")
    return x < 0 ? alpha * (std::exp(x) - 1) : x;
  if (name == "Softsign")
    return x / (1 + std::fabs(x));
  assert(name == "Softplus" && "rnnActivations admits no other");
  return std::log1p(std::exp(x));
}

llvm::Expected<std::vector<RnnActivation>> rnnActivations(const Node &n) {
  size_t perDirection = n.kind() == OpKind::LSTM ? 3 : 2;
  size_t dirs = n.attrString("direction") == "bidirectional" ? 2 : 1;
  std::vector<std::string> names = n.attrStrings("activations");
  if (names.empty())
    for (size_t d = 0; d < dirs; ++d)
      for (size_t k = 0; k < perDirection; ++k)
        names.push_back(k == 0 ? "Sigmoid" : "Tanh");
  if (names.size() != dirs * perDirection)
    return errorf("activations must list {0} functions", dirs * perDirection);
  const auto &al = n.attrFloats("activation_alpha"), &be = n.attrFloats("activation_beta");
  static const char *known[] = {
      "Sigmoid",    "Tanh",   "Relu", "HardSigmoid", "LeakyRelu", "ThresholdedRelu",
      "ScaledTanh", "Affine", "Elu",  "Softsign",    "Softplus"};
  std::vector<RnnActivation> r;
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::none_of(std::begin(known), std::end(known),
                     [&](const char *k) { return names[i] == k; }))
      return errorf("unsupported activation \"{0}\"", names[i]);
    double dflA = names[i] == "HardSigmoid" ? 0.2 : names[i] == "LeakyRelu" ? 0.01 : 1.0;
    double dflB = names[i] == "HardSigmoid" ? 0.5 : 0.0;
    r.push_back({names[i], i < al.size() ? al[i] : dflA, i < be.size() ? be[i] : dflB});
  }
  return r;
}

} // namespace dlc::ir
