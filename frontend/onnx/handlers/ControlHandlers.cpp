//===- ControlHandlers.cpp - Constant, If, Loop, Scan and Einsum ------------===//
#include "Common.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace dlc::frontend {
namespace {

using namespace ir;

llvm::Error importConstant(NodeImporter &ni) {
  Tensor t;
  if (ni.hasAttr("value")) {
    DLC_TRY(v, ni.attrTensor("value"));
    t = v;
  } else if (ni.hasAttr("value_float")) {
    t = Tensor::fromVector<float>(TensorType(DType::F32, {}), {ni.attrFloat("value_float", 0)});
  } else if (ni.hasAttr("value_floats")) {
    auto v = ni.attrFloats("value_floats");
    t = Tensor::fromVector(TensorType(DType::F32, {int64_t(v.size())}), v);
  } else if (ni.hasAttr("value_int")) {
    t = Tensor::fromVector<int64_t>(TensorType(DType::I64, {}), {ni.attrInt("value_int", 0)});
  } else if (ni.hasAttr("value_ints")) {
    auto v = ni.attrInts("value_ints");
    t = Tensor::fromVector(TensorType(DType::I64, {int64_t(v.size())}), v);
  } else if (ni.hasAttr("value_string") || ni.hasAttr("value_strings")) {
    return ni.unsupported("string constants");
  } else if (ni.hasAttr("sparse_value")) {
    return ni.unsupported("sparse constants");
  } else {
    return ni.error("Constant has no value attribute");
  }
  ni.setOutput(0, ni.constant(std::move(t), ni.proto().output(0)));
  return llvm::Error::success();
}

/// Adds a guard (a run fails when `failing` holds) that counts only where the nodes
/// being imported run: under the taken sides of the enclosing run-time Ifs and the
/// gates of the enclosing loop iterations.
llvm::Error addGuard(NodeImporter &ni, const std::string &node, std::string what, Value *failing) {
  Importer &imp = ni.importer();
  for (Value *c : imp.runConditions()) {
    DLC_TRY(both, ni.op(OpKind::And, {failing, c}));
    failing = both;
  }
  if (failing->isConstant() && failing->data().getDouble(0) == 0)
    return llvm::Error::success(); // it can never fail
  std::string name = std::string(kGuardOutputPrefix) + node + ": " + what;
  for (int k = 2; std::any_of(imp.guards().begin(), imp.guards().end(),
                              [&](const auto &g) { return g.first == name; });
       ++k)
    name = std::string(kGuardOutputPrefix) + node + ": " + what + " [" + std::to_string(k) + "]";
  imp.addGuard(std::move(name), failing);
  return llvm::Error::success();
}

/// Runs f with `cond` (null: none) as one more run condition of the nodes it imports.
template <class F> auto underCondition(Importer &imp, Value *cond, F f) {
  if (cond)
    imp.runConditions().push_back(cond);
  auto r = f();
  if (cond)
    imp.runConditions().pop_back();
  return r;
}

/// One branch of an If imported into the graph: its outputs, or why it cannot be built
/// at the shapes being compiled (`problems`, the importer's messages of its nodes).
struct Branch {
  std::vector<Value *> outputs;
  std::vector<std::string> problems;
  bool deferrable = true; // every problem is one of shapes or types, not a missing op
};

/// Imports one branch of an If into the graph. The importer's errors of the branch's
/// nodes are taken out of its list and returned in the Branch.
llvm::Expected<Branch> importBranch(NodeImporter &ni, const char *which) {
  const auto *branch = ni.attr(std::string(which) + "_branch");
  if (!branch || !branch->has_g())
    return ni.error(std::string("missing ") + which + " branch graph");
  const onnx::GraphProto &g = branch->g();
  Importer &imp = ni.importer();
  Scope inner(&ni.scope());
  size_t errorsBefore = imp.errors().size(), guardsBefore = imp.guardCount(),
         warningsBefore = imp.warnings().size();
  if (auto e = imp.importInitializers(g, inner))
    return e;
  imp.importNodes(g, inner);
  Branch b;
  if (imp.errors().size() != errorsBefore) {
    // The branch goes, with what its nodes reported and added.
    b.problems.assign(imp.errors().begin() + errorsBefore, imp.errors().end());
    for (size_t i = errorsBefore; i < imp.errorKinds().size(); ++i)
      b.deferrable &= imp.errorKinds()[i] == Importer::ErrorKind::ShapeOrType;
    imp.errors().resize(errorsBefore);
    imp.errorKinds().resize(errorsBefore);
    imp.dropGuardsFrom(guardsBefore);
    imp.warnings().resize(warningsBefore);
    return b;
  }
  if (g.output_size() != static_cast<int>(ni.numOutputs()))
    return ni.error(std::string("the ") + which + " branch has " + std::to_string(g.output_size()) +
                    " outputs, If has " + std::to_string(ni.numOutputs()));
  for (int i = 0; i < g.output_size(); ++i) {
    Value *v = inner.lookup(g.output(i).name());
    if (!v)
      return ni.error("branch output '" + g.output(i).name() + "' is not defined");
    b.outputs.push_back(v);
  }
  return b;
}

/// Branches that could not be imported, as the error of the If node.
llvm::Error branchError(NodeImporter &ni,
                        std::vector<std::pair<const char *, const Branch *>> bad) {
  std::string msg;
  for (auto [which, b] : bad) {
    msg += std::string(msg.empty() ? "" : "\n") + "the " + which + " branch could not be imported:";
    for (const std::string &p : b->problems)
      msg += "\n  " + p;
  }
  return ni.error(msg);
}

/// If. With a condition known at compile time (a constant, or an input bound with
/// --bind), the taken branch is inlined. With a run-time condition, both branches are
/// inlined and each output is Where(cond, then, else): the branches must agree on
/// each output's type (static shapes). The code generator runs the steps that feed
/// only one side of such a Where when the condition selects it (Lowering::predicates).
///
/// A branch of a run-time If that cannot be built at the compiled shapes (a shape or
/// type error, as Silero VAD's 8 kHz branch at 16 kHz input sizes) is deferred, as
/// ONNX Runtime does: the If's outputs are the other branch's, and a guard
/// (ir::kGuardOutputPrefix) fails the run with a data error naming the If node and the
/// reason when the condition selects the deferred branch. The importer warns.
llvm::Error importIf(NodeImporter &ni) {
  if (const Tensor *cond = ni.constInput(0)) {
    if (cond->numElements() != 1)
      return ni.error("the condition must have one element");
    const char *which = cond->getDouble(0) != 0 ? "then" : "else";
    DLC_TRY(b, importBranch(ni, which));
    if (!b.problems.empty())
      return branchError(ni, {{which, &b}});
    for (size_t i = 0; i < b.outputs.size(); ++i)
      ni.setOutput(i, b.outputs[i]);
    return llvm::Error::success();
  }
  Value *cond = ni.input(0);
  if (!cond || cond->dtype() != DType::Bool || cond->type().numElements() != 1)
    return ni.error("the condition must be one bool element");
  if (cond->rank() != 0) {
    DLC_TRY(scalar, ni.op(OpKind::Reshape, {cond}, {{"shape", Attribute(std::vector<int64_t>{})}}));
    cond = scalar;
  }
  DLC_TRY(notCond, ni.op(OpKind::Not, {cond}));
  // Each branch's guards count only when it is taken.
  Importer &imp = ni.importer();
  DLC_TRY(thenB, underCondition(imp, cond, [&] { return importBranch(ni, "then"); }));
  DLC_TRY(elseB, underCondition(imp, notCond, [&] { return importBranch(ni, "else"); }));
  bool thenBad = !thenB.problems.empty(), elseBad = !elseB.problems.empty();
  if (thenBad && elseBad)
    return branchError(ni, {{"then", &thenB}, {"else", &elseB}});
  if (thenBad && !thenB.deferrable)
    return branchError(ni, {{"then", &thenB}});
  if (elseBad && !elseB.deferrable)
    return branchError(ni, {{"else", &elseB}});
  if (thenBad || elseBad) {
    const char *which = thenBad ? "then" : "else";
    const Branch &bad = thenBad ? thenB : elseB, &good = thenBad ? elseB : thenB;
    std::string reason = bad.problems.front();
    std::string what = std::string("the ") + which + " branch was taken, but it " +
                       std::string(kDeferredBranchText) + " (" + reason + ")";
    std::string node = !ni.proto().name().empty() ? ni.proto().name()
                       : ni.numOutputs()          ? ni.proto().output(0)
                                                  : std::string("If");
    if (auto e = addGuard(ni, node, what, thenBad ? cond : notCond))
      return e;
    ni.importer().warnings().push_back(describeOnnxNode(ni.proto(), ni.opset()) + ": the " + which +
                                       " branch cannot be built at the compiled shapes and is "
                                       "deferred: taking it at run time is an error (" +
                                       reason + ")");
    for (size_t i = 0; i < good.outputs.size(); ++i)
      ni.setOutput(i, good.outputs[i]);
    return llvm::Error::success();
  }
  for (size_t i = 0; i < thenB.outputs.size(); ++i) {
    if (thenB.outputs[i]->type() != elseB.outputs[i]->type())
      return ni.unsupported(
          "If with a run-time condition whose branches give output " + std::to_string(i) +
          " different types (" + thenB.outputs[i]->type().str() + " and " +
          elseB.outputs[i]->type().str() + "); dlc compiles static shapes" + ni.bindHint(0));
    DLC_TRY(out, ni.op(OpKind::Where, {cond, thenB.outputs[i], elseB.outputs[i]}));
    ni.setOutput(i, out);
  }
  return llvm::Error::success();
}

/// Loop, unrolled at compile time. The trip count M must be known (a constant, or an
/// input bound with --bind) and at most ImportOptions::maxLoopUnroll; or, with
/// ImportOptions::loopBound, it may be known only at run time (an input, or a while
/// loop): the loop is unrolled to the bound, iteration k gated by k < M and the
/// condition, and a guard output (ir::kGuardOutputPrefix) fails the run when
/// iteration `bound` would still run. Iteration k
/// imports the body with iteration_num = k and the previous iteration's condition and
/// carried values. A run-time condition becomes a flag: while it may be false, the
/// carried values are Where(active, body's, previous) and active = active AND cond_out
/// (the If predication then skips nothing here: every iteration's steps run). Scan
/// outputs are stacked on a new axis 0; their length must not depend on a run-time
/// condition.
llvm::Error importLoop(NodeImporter &ni) {
  const auto *body = ni.attr("body");
  if (!body || !body->has_g())
    return ni.error("missing body graph");
  const onnx::GraphProto &g = body->g();
  size_t carriedCount = ni.numInputs() > 2 ? ni.numInputs() - 2 : 0;
  if (g.input_size() != static_cast<int>(2 + carriedCount) ||
      g.output_size() < static_cast<int>(1 + carriedCount))
    return ni.error("the body has " + std::to_string(g.input_size()) + " inputs and " +
                    std::to_string(g.output_size()) + " outputs for " +
                    std::to_string(carriedCount) + " loop-carried values");
  size_t scanCount = static_cast<size_t>(g.output_size()) - 1 - carriedCount;
  // The trip count: a constant, or known only at run time (an input; none or INT64_MAX:
  // a while loop), which --loop-bound allows: that many iterations, each gated.
  int64_t limit = ni.importer().options().maxLoopUnroll, bound = ni.importer().options().loopBound;
  const Tensor *trip = ni.hasInput(0) ? ni.constInput(0) : nullptr;
  bool unbounded =
      !ni.hasInput(0) || (trip && trip->getInt(0) == std::numeric_limits<int64_t>::max());
  Value *runtimeTrip = nullptr; // gates iteration k by k < M
  if (!unbounded && !trip) {
    Value *mIn = ni.input(0);
    if (!mIn || mIn->dtype() != DType::I64 || mIn->type().numElements() != 1)
      return ni.error("the trip count must be one int64 element");
    if (!bound)
      return ni.unsupported(
          "Loop whose trip count is not a compile-time constant: dlc unrolls loops at "
          "compile time; give a bound with --loop-bound N" +
          ni.bindHint(0));
    DLC_TRY(scalar, ni.op(OpKind::Reshape, {mIn}, {{"shape", Attribute(std::vector<int64_t>{})}}));
    runtimeTrip = scalar;
  }
  if (unbounded && !bound)
    return ni.unsupported(
        "Loop without a bound (no trip count, or INT64_MAX: a while loop, or a for loop "
        "with a break as TorchScript exports it): dlc unrolls loops at compile time; give a "
        "bound with --loop-bound N");
  int64_t m = trip && !unbounded ? std::max<int64_t>(0, trip->getInt(0)) : bound;
  if (m > limit)
    return ni.error("Loop with trip count " + std::to_string(m) + " exceeds the unroll limit of " +
                    std::to_string(limit) + " iterations (raise it with --max-loop-unroll)");
  // The condition: null while known to be true.
  Value *active = nullptr;
  bool stopped = false;
  if (ni.hasInput(1)) {
    if (const Tensor *c = ni.constInput(1))
      stopped = c->getDouble(0) == 0;
    else if (ni.input(1)->dtype() != DType::Bool || ni.input(1)->type().numElements() != 1)
      return ni.error("the condition must be one bool element");
    else {
      DLC_TRY(scalar, ni.op(OpKind::Reshape, {ni.input(1)},
                            {{"shape", Attribute(std::vector<int64_t>{})}}));
      active = scalar;
    }
  }
  std::vector<Value *> carried;
  for (size_t j = 0; j < carriedCount; ++j)
    carried.push_back(ni.input(2 + j));
  std::vector<std::vector<Value *>> scans(scanCount);
  Importer &imp = ni.importer();
  auto constant = [&](auto v, DType dt) {
    return ni.constant(Tensor::fromVector<decltype(v)>(TensorType(dt, {}), {v}));
  };
  // Whether iteration k runs: k < M (a run-time trip count) and the condition so far.
  auto gateFor = [&](int64_t k) -> llvm::Expected<Value *> {
    if (!runtimeTrip)
      return active;
    DLC_TRY(less, ni.op(OpKind::Less, {constant(k, DType::I64), runtimeTrip}));
    if (!active)
      return less;
    return ni.op(OpKind::And, {active, less});
  };
  for (int64_t k = 0; k < m && !stopped; ++k) {
    if (auto e = imp.chargeUnrolled(g))
      return ni.error(llvm::toString(std::move(e)));
    DLC_TRY(gate, gateFor(k));
    Scope inner(&ni.scope());
    inner.bind(g.input(0).name(),
               ni.constant(Tensor::fromVector<int64_t>(TensorType(DType::I64, {}), {k})));
    inner.bind(g.input(1).name(),
               active ? active
                      : ni.constant(Tensor::fromVector<bool>(TensorType(DType::Bool, {}), {true})));
    for (size_t j = 0; j < carriedCount; ++j)
      inner.bind(g.input(2 + static_cast<int>(j)).name(), carried[j]);
    size_t errorsBefore = imp.errors().size();
    if (auto e = imp.importInitializers(g, inner))
      return e;
    // The body's guards count only when the iteration runs.
    underCondition(imp, gate, [&] {
      imp.importNodes(g, inner);
      return 0;
    });
    if (imp.errors().size() != errorsBefore)
      return ni.error("iteration " + std::to_string(k) +
                      " of the body could not be imported (see above)");
    std::vector<Value *> outs;
    for (int i = 0; i < g.output_size(); ++i) {
      Value *v = inner.lookup(g.output(i).name());
      if (!v)
        return ni.error("body output '" + g.output(i).name() + "' is not defined");
      outs.push_back(v);
    }
    for (size_t j = 0; j < carriedCount; ++j) {
      Value *next = outs[1 + j];
      if (gate) {
        if (next->type() != carried[j]->type())
          return ni.unsupported("loop-carried value " + std::to_string(j) + " changes type (" +
                                carried[j]->type().str() + " to " + next->type().str() +
                                ") under a run-time condition");
        DLC_TRY(sel, ni.op(OpKind::Where, {gate, next, carried[j]}));
        next = sel;
      }
      carried[j] = next;
    }
    for (size_t s = 0; s < scanCount; ++s) {
      if (gate)
        return ni.unsupported(
            "scan outputs of a Loop whose iterations are decided at run time (their "
            "length depends on them)" +
            ni.bindHint(runtimeTrip ? 0 : 1));
      Value *v = outs[1 + carriedCount + s];
      Shape one{1};
      one.insert(one.end(), v->shape().begin(), v->shape().end());
      DLC_TRY(r, ni.op(OpKind::Reshape, {v}, {{"shape", Attribute(one)}}));
      scans[s].push_back(r);
    }
    // The condition for the next iteration.
    Value *condOut = outs[0];
    if (condOut->isConstant()) {
      if (condOut->data().getDouble(0) == 0) {
        if (!active)
          stopped = true; // a constant break: no further iterations
        else {
          DLC_TRY(f, ni.op(OpKind::And, {active, condOut}));
          active = f;
        }
      }
    } else {
      if (condOut->dtype() != DType::Bool || condOut->type().numElements() != 1)
        return ni.error("the body's condition output must be one bool element");
      if (condOut->rank() != 0) {
        DLC_TRY(scalar,
                ni.op(OpKind::Reshape, {condOut}, {{"shape", Attribute(std::vector<int64_t>{})}}));
        condOut = scalar;
      }
      if (active) {
        DLC_TRY(both, ni.op(OpKind::And, {active, condOut}));
        active = both;
      } else {
        active = condOut;
      }
    }
  }
  if ((runtimeTrip || unbounded) && !stopped) {
    // Iteration m would run: the loop needs more than its bound.
    DLC_TRY(beyond, gateFor(m));
    std::string node = ni.proto().name().empty() ? "Loop" : ni.proto().name();
    std::string what = "the loop needs more than " + std::to_string(m) +
                       " iterations, the bound it was compiled with (raise --loop-bound)";
    if (!beyond || (beyond->isConstant() && beyond->data().getDouble(0) != 0))
      return ni.error("Loop never stops within --loop-bound " + std::to_string(m) +
                      " (its condition does not depend on run-time values)");
    if (!beyond->isConstant())
      if (auto e = addGuard(ni, node, what, beyond))
        return e;
  }
  for (size_t j = 0; j < carriedCount; ++j)
    ni.setOutput(j, carried[j]);
  for (size_t s = 0; s < scanCount; ++s) {
    if (scans[s].empty())
      return ni.unsupported(
          "a Loop that runs no iteration with scan outputs (their element shape is unknown)");
    Value *stacked = scans[s].front();
    if (scans[s].size() > 1) {
      DLC_TRY(c, ni.op(OpKind::Concat, scans[s], {{"axis", Attribute(int64_t{0})}}));
      stacked = c;
    }
    ni.setOutput(carriedCount + s, stacked);
  }
  return llvm::Error::success();
}

/// Scan (opset 9+), unrolled at compile time like Loop: the sequence length is the
/// scan inputs' extent along their scan axes (static), at most
/// ImportOptions::maxLoopUnroll. Iteration t binds the body's state inputs to the
/// previous states and each scan input to its slice at t (from the end when its
/// direction is reverse; Gather with a scalar index drops the axis); scan output
/// elements are stacked along their output axes, in reverse order for a reverse
/// direction.
llvm::Error importScan(NodeImporter &ni) {
  const auto *body = ni.attr("body");
  if (!body || !body->has_g())
    return ni.error("missing body graph");
  const onnx::GraphProto &g = body->g();
  int64_t m = ni.attrInt("num_scan_inputs", -1);
  size_t inputs = ni.numInputs();
  if (m < 1 || static_cast<size_t>(m) > inputs)
    return ni.error("num_scan_inputs is " + std::to_string(m) + " with " + std::to_string(inputs) +
                    " inputs");
  size_t scanIns = static_cast<size_t>(m), states = inputs - scanIns;
  if (g.input_size() != static_cast<int>(inputs) || g.output_size() < static_cast<int>(states))
    return ni.error("the body has " + std::to_string(g.input_size()) + " inputs and " +
                    std::to_string(g.output_size()) + " outputs for " + std::to_string(states) +
                    " states and " + std::to_string(scanIns) + " scan inputs");
  size_t scanOuts = static_cast<size_t>(g.output_size()) - states;
  auto perScan = [&](const char *name, size_t n) -> llvm::Expected<std::vector<int64_t>> {
    std::vector<int64_t> v = ni.attrInts(name);
    if (v.empty())
      v.assign(n, 0);
    if (v.size() != n)
      return ni.error(std::string(name) + " has " + std::to_string(v.size()) + " entries for " +
                      std::to_string(n));
    return v;
  };
  DLC_TRY(inAxes, perScan("scan_input_axes", scanIns));
  DLC_TRY(inDirs, perScan("scan_input_directions", scanIns));
  DLC_TRY(outAxes, perScan("scan_output_axes", scanOuts));
  DLC_TRY(outDirs, perScan("scan_output_directions", scanOuts));
  int64_t length = -1;
  std::vector<Value *> seqs;
  for (size_t i = 0; i < scanIns; ++i) {
    Value *x = ni.input(states + i);
    if (!x)
      return ni.error("scan input " + std::to_string(i) + " is missing");
    int64_t r = x->rank();
    if (inAxes[i] < -r || inAxes[i] >= r)
      return ni.error("scan_input_axes[" + std::to_string(i) + "] = " + std::to_string(inAxes[i]) +
                      " is out of range for rank " + std::to_string(r));
    inAxes[i] = inAxes[i] < 0 ? inAxes[i] + r : inAxes[i];
    int64_t len = x->shape()[static_cast<size_t>(inAxes[i])];
    if (length >= 0 && len != length)
      return ni.error("scan inputs have different sequence lengths (" + std::to_string(length) +
                      " and " + std::to_string(len) + ")");
    length = len;
    seqs.push_back(x);
  }
  int64_t limit = ni.importer().options().maxLoopUnroll;
  if (length > limit)
    return ni.error("Scan over " + std::to_string(length) + " steps exceeds the unroll limit of " +
                    std::to_string(limit) + " iterations (raise it with --max-loop-unroll)");
  if (length == 0 && scanOuts)
    return ni.unsupported(
        "a Scan over an empty sequence with scan outputs (their element shape is unknown)");
  std::vector<Value *> state;
  for (size_t j = 0; j < states; ++j)
    state.push_back(ni.input(j));
  std::vector<std::vector<Value *>> elems(scanOuts);
  Importer &imp = ni.importer();
  for (int64_t t = 0; t < length; ++t) {
    if (auto e = imp.chargeUnrolled(g))
      return ni.error(llvm::toString(std::move(e)));
    Scope inner(&ni.scope());
    for (size_t j = 0; j < states; ++j)
      inner.bind(g.input(static_cast<int>(j)).name(), state[j]);
    for (size_t i = 0; i < scanIns; ++i) {
      int64_t at = inDirs[i] ? length - 1 - t : t;
      DLC_TRY(slice,
              ni.op(OpKind::Gather,
                    {seqs[i],
                     ni.constant(Tensor::fromVector<int64_t>(TensorType(DType::I64, {}), {at}))},
                    {{"axis", Attribute(inAxes[i])}}));
      inner.bind(g.input(static_cast<int>(states + i)).name(), slice);
    }
    size_t errorsBefore = imp.errors().size();
    if (auto e = imp.importInitializers(g, inner))
      return e;
    imp.importNodes(g, inner);
    if (imp.errors().size() != errorsBefore)
      return ni.error("step " + std::to_string(t) +
                      " of the body could not be imported (see above)");
    for (int o = 0; o < g.output_size(); ++o) {
      Value *v = inner.lookup(g.output(o).name());
      if (!v)
        return ni.error("body output '" + g.output(o).name() + "' is not defined");
      if (static_cast<size_t>(o) < states)
        state[static_cast<size_t>(o)] = v;
      else
        elems[static_cast<size_t>(o) - states].push_back(v);
    }
  }
  for (size_t j = 0; j < states; ++j)
    ni.setOutput(j, state[j]);
  for (size_t k = 0; k < scanOuts; ++k) {
    std::vector<Value *> parts = elems[k];
    if (outDirs[k])
      std::reverse(parts.begin(), parts.end());
    int64_t r = parts.front()->rank() + 1;
    int64_t axis = outAxes[k] < 0 ? outAxes[k] + r : outAxes[k];
    if (axis < 0 || axis >= r)
      return ni.error("scan_output_axes[" + std::to_string(k) +
                      "] = " + std::to_string(outAxes[k]) + " is out of range for rank " +
                      std::to_string(r));
    const TensorType elem = parts.front()->type();
    for (Value *&p : parts) {
      if (p->type() != elem)
        return ni.error("scan output " + std::to_string(k) + " changes type between steps");
      Shape s = p->shape();
      s.insert(s.begin() + axis, 1);
      DLC_TRY(reshaped, ni.op(OpKind::Reshape, {p}, {{"shape", Attribute(s)}}));
      p = reshaped;
    }
    Value *stacked = parts.front();
    if (parts.size() > 1) {
      DLC_TRY(c, ni.op(OpKind::Concat, parts, {{"axis", Attribute(axis)}}));
      stacked = c;
    }
    ni.setOutput(states + k, stacked);
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Einsum: operands are contracted pairwise with Transpose/Reshape/MatMul, after
// summing labels that only one operand has. Repeated labels inside one operand
// (diagonals) are not supported.
//===----------------------------------------------------------------------===//

struct Term {
  Value *v;
  std::string labels; // one char per dim
};

llvm::Expected<Value *> transposeTo(NodeImporter &ni, Term &t, const std::string &order) {
  if (order == t.labels)
    return t.v;
  Shape perm;
  for (char c : order)
    perm.push_back(static_cast<int64_t>(t.labels.find(c)));
  auto r = ni.op(OpKind::Transpose, {t.v}, {{"perm", Attribute(perm)}});
  if (r) {
    t.v = *r;
    t.labels = order;
  }
  return r;
}

/// Sums out the labels of t that are not in `keep`.
llvm::Error sumOut(NodeImporter &ni, Term &t, const std::set<char> &keep) {
  std::vector<int64_t> axes;
  std::string rest;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (keep.count(t.labels[i]))
      rest += t.labels[i];
    else
      axes.push_back(static_cast<int64_t>(i));
  }
  if (axes.empty())
    return llvm::Error::success();
  DLC_TRY(r, ni.op(OpKind::ReduceSum, {t.v},
                   {{"axes", Attribute(axes)}, {"keepdims", Attribute(int64_t{0})}}));
  t.v = r;
  t.labels = rest;
  return llvm::Error::success();
}

llvm::Expected<Term> contract(NodeImporter &ni, Term a, Term b, const std::set<char> &keep) {
  std::string batch, contractL, aOnly, bOnly;
  for (char c : a.labels) {
    bool inB = b.labels.find(c) != std::string::npos;
    if (inB && keep.count(c))
      batch += c;
    else if (inB)
      contractL += c;
    else
      aOnly += c;
  }
  for (char c : b.labels)
    if (a.labels.find(c) == std::string::npos)
      bOnly += c;
  auto dim = [](const Term &t, char c) { return t.v->shape()[t.labels.find(c)]; };
  int64_t B = 1, M = 1, K = 1, N = 1;
  Shape outShape;
  for (char c : batch) {
    if (dim(a, c) != dim(b, c))
      return ni.error(std::string("dimension '") + c + "' differs between operands");
    B *= dim(a, c);
    outShape.push_back(dim(a, c));
  }
  for (char c : aOnly) {
    M *= dim(a, c);
    outShape.push_back(dim(a, c));
  }
  for (char c : contractL) {
    if (dim(a, c) != dim(b, c))
      return ni.error(std::string("dimension '") + c + "' differs between operands");
    K *= dim(a, c);
  }
  for (char c : bOnly) {
    N *= dim(b, c);
    outShape.push_back(dim(b, c));
  }
  DLC_TRY(ta, transposeTo(ni, a, batch + aOnly + contractL));
  DLC_TRY(tb, transposeTo(ni, b, batch + contractL + bOnly));
  (void)ta;
  (void)tb;
  DLC_TRY(ra, ni.op(OpKind::Reshape, {a.v}, {{"shape", Attribute(Shape{B, M, K})}}));
  DLC_TRY(rb, ni.op(OpKind::Reshape, {b.v}, {{"shape", Attribute(Shape{B, K, N})}}));
  DLC_TRY(mm, ni.op(OpKind::MatMul, {ra, rb}));
  DLC_TRY(out, ni.op(OpKind::Reshape, {mm}, {{"shape", Attribute(outShape)}}));
  return Term{out, batch + aOnly + bOnly};
}

llvm::Error importEinsum(NodeImporter &ni) {
  std::string eq;
  for (char c : ni.attrString("equation", ""))
    if (c != ' ')
      eq += c;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> specs;
  for (size_t pos = 0;;) {
    size_t comma = lhs.find(',', pos);
    specs.push_back(lhs.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  auto ins = allInputs(ni);
  if (specs.size() != ins.size())
    return ni.error("the equation has " + std::to_string(specs.size()) +
                    " operands, the node has " + std::to_string(ins.size()));
  // Expand "..." into fresh upper-case labels, right-aligned across operands.
  int64_t ellRank = 0;
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].find("...") != std::string::npos)
      ellRank = std::max<int64_t>(ellRank, ins[i]->rank() - (int64_t(specs[i].size()) - 3));
  auto ellLabels = [&](int64_t n) {
    std::string s;
    for (int64_t k = ellRank - n; k < ellRank; ++k)
      s += static_cast<char>('A' + k);
    return s;
  };
  std::vector<Term> terms;
  std::map<char, int> count;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string s = specs[i];
    size_t e = s.find("...");
    if (e != std::string::npos)
      s = s.substr(0, e) + ellLabels(ins[i]->rank() - (int64_t(s.size()) - 3)) + s.substr(e + 3);
    if (static_cast<int64_t>(s.size()) != ins[i]->rank())
      return ni.error("operand " + std::to_string(i) + " has rank " +
                      std::to_string(ins[i]->rank()) + " but the equation gives it " +
                      std::to_string(s.size()) + " labels");
    std::set<char> seen;
    for (char c : s) {
      if (!seen.insert(c).second)
        return ni.unsupported("Einsum with a repeated label in one operand (diagonal)");
      ++count[c];
    }
    terms.push_back({ins[i], s});
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    size_t e = out.find("...");
    if (e != std::string::npos)
      out = out.substr(0, e) + ellLabels(ellRank) + out.substr(e + 3);
  } else { // implicit output: ellipsis dims, then labels seen once, alphabetically
    out = ellLabels(ellRank);
    for (auto [c, n] : count)
      if (n == 1 && !(c >= 'A' && c < 'A' + ellRank))
        out += c;
  }
  std::set<char> outSet(out.begin(), out.end());
  auto keepFor = [&](size_t from) { // labels needed by the output or terms[from..]
    std::set<char> keep = outSet;
    for (size_t j = from; j < terms.size(); ++j)
      keep.insert(terms[j].labels.begin(), terms[j].labels.end());
    return keep;
  };
  Term acc = terms[0];
  {
    std::set<char> keep = keepFor(1);
    if (auto e = sumOut(ni, acc, keep))
      return e;
  }
  for (size_t i = 1; i < terms.size(); ++i) {
    std::set<char> keepB = keepFor(i + 1);
    keepB.insert(acc.labels.begin(), acc.labels.end());
    if (auto e = sumOut(ni, terms[i], keepB))
      return e;
    DLC_TRY(c, contract(ni, acc, terms[i], keepFor(i + 1)));
    acc = c;
  }
  if (auto e = sumOut(ni, acc, outSet))
    return e;
  DLC_TRY(r, transposeTo(ni, acc, out));
  if (r == ins[0]) { // a no-op equation still gets its own value
    DLC_TRY(c, ni.op(OpKind::Identity, {r}));
    ni.setOutput(0, c);
    return llvm::Error::success();
  }
  ni.setOutput(0, r);
  return llvm::Error::success();
}

} // namespace

void registerControlHandlers(std::vector<HandlerEntry> &t) {
  t.push_back({"Constant", 1, kMaxOpset, importConstant});
  t.push_back({"If", 1, kMaxOpset, importIf});
  t.push_back({"Loop", 1, kMaxOpset, importLoop});
  t.push_back({"Scan", 9, kMaxOpset, importScan});
  t.push_back({"Einsum", 12, kMaxOpset, importEinsum});
}

} // namespace dlc::frontend
