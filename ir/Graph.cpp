#include "dlc/ir/Graph.h"

#include <algorithm>
#include <cassert>
#include <unordered_map>
#include <unordered_set>

namespace dlc::ir {

//===----------------------------------------------------------------------===//
// Value / Node
//===----------------------------------------------------------------------===//

void Value::removeUse(Node *user, unsigned idx) {
  auto it = std::find(uses_.begin(), uses_.end(), Use{user, idx});
  assert(it != uses_.end() && "use list out of sync");
  uses_.erase(it);
}

void Node::setOperand(unsigned i, Value *v) {
  if (i >= operands_.size())
    operands_.resize(i + 1, nullptr);
  if (operands_[i])
    operands_[i]->removeUse(this, i);
  operands_[i] = v;
  if (v)
    v->uses_.push_back({this, i});
}

void Node::addOperand(Value *v) {
  setOperand(numOperands(), v);
}

void Node::resizeOperands(unsigned n) {
  for (unsigned i = n; i < operands_.size(); ++i)
    if (operands_[i])
      operands_[i]->removeUse(this, i);
  operands_.resize(n, nullptr);
}

const Attribute *Node::attr(std::string_view n) const {
  auto it = attrs_.find(n);
  if (it != attrs_.end())
    return &it->second;
  if (const AttrSpec *spec = def().findAttr(n))
    if (spec->dflt)
      return &*spec->dflt;
  return nullptr;
}

void Node::removeAttr(std::string_view n) {
  auto it = attrs_.find(n);
  if (it != attrs_.end())
    attrs_.erase(it);
}

std::string Node::describe() const {
  std::string r;
  if (!name_.empty())
    r += "'" + name_ + "' ";
  r += "(" + std::string(opName()) + ")";
  return r;
}

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

Value *Graph::registerValue(std::unique_ptr<Value> v, std::vector<std::unique_ptr<Value>> *owner) {
  Value *raw = v.get();
  assert(!names_.count(raw->name_) && "duplicate value name");
  names_[raw->name_] = raw;
  if (owner)
    owner->push_back(std::move(v));
  else
    v.release(); // owned by a node's result list by the caller
  return raw;
}

Value *Graph::addInput(std::string name, TensorType type) {
  if (name.empty() || names_.count(name))
    name = uniqueName(name);
  return registerValue(
      std::unique_ptr<Value>(new Value(this, Value::Kind::Input, std::move(name), std::move(type))),
      &inputs_);
}

Value *Graph::addConstant(std::string name, Tensor data) {
  if (name.empty() || names_.count(name))
    name = uniqueName(name);
  auto v =
      std::unique_ptr<Value>(new Value(this, Value::Kind::Constant, std::move(name), data.type()));
  v->data_ = std::move(data);
  return registerValue(std::move(v), &constants_);
}

Value *Graph::addParameter(std::string name, Tensor data, bool trainable) {
  if (name.empty() || names_.count(name))
    name = uniqueName(name);
  auto v =
      std::unique_ptr<Value>(new Value(this, Value::Kind::Parameter, std::move(name), data.type()));
  v->data_ = std::move(data);
  v->trainable_ = trainable;
  return registerValue(std::move(v), &parameters_);
}

void Graph::makeParameter(Value *constant, bool trainable) {
  assert(constant->isConstant() && constant->graph() == this);
  auto it = std::find_if(constants_.begin(), constants_.end(),
                         [&](const std::unique_ptr<Value> &c) { return c.get() == constant; });
  constant->kind_ = Value::Kind::Parameter;
  constant->trainable_ = trainable;
  parameters_.push_back(std::move(*it));
  constants_.erase(it);
}

void Graph::makeConstant(Value *parameter) {
  assert(parameter->isParameter() && parameter->graph() == this);
  auto it = std::find_if(parameters_.begin(), parameters_.end(),
                         [&](const std::unique_ptr<Value> &p) { return p.get() == parameter; });
  parameter->kind_ = Value::Kind::Constant;
  parameter->trainable_ = false;
  constants_.push_back(std::move(*it));
  parameters_.erase(it);
}

bool Graph::isOutput(const Value *v) const {
  return std::any_of(outputs_.begin(), outputs_.end(),
                     [&](const GraphOutput &o) { return o.value == v; });
}

std::vector<Node *> Graph::nodeList() const {
  std::vector<Node *> r;
  r.reserve(nodes_.size());
  for (auto &n : nodes_)
    r.push_back(n.get());
  return r;
}

std::vector<Node *> Graph::nodesOf(OpKind k) const {
  std::vector<Node *> out;
  for (const auto &n : nodes_)
    if (n->kind() == k)
      out.push_back(n.get());
  return out;
}

Node *Graph::createNode(OpKind kind, std::vector<Value *> operands,
                        std::vector<TensorType> resultTypes, AttrMap attrs, std::string name,
                        Node *before, std::vector<std::string> resultNames) {
  auto node = std::unique_ptr<Node>(new Node(this, kind));
  Node *n = node.get();
  n->name_ = std::move(name);
  n->attrs_ = std::move(attrs);
  for (unsigned i = 0; i < operands.size(); ++i)
    n->setOperand(i, operands[i]);
  for (unsigned i = 0; i < resultTypes.size(); ++i) {
    std::string rn = i < resultNames.size() ? resultNames[i] : std::string();
    if (rn.empty() || names_.count(rn))
      rn = uniqueName(rn);
    auto v = std::unique_ptr<Value>(
        new Value(this, Value::Kind::Result, std::move(rn), std::move(resultTypes[i])));
    v->def_ = n;
    v->resultIndex_ = i;
    names_[v->name_] = v.get();
    n->results_.push_back(std::move(v));
  }
  auto pos = before ? before->self_ : nodes_.end();
  n->self_ = nodes_.insert(pos, std::move(node));
  return n;
}

llvm::Expected<Node *> Graph::createInferred(OpKind kind, std::vector<Value *> operands,
                                             AttrMap attrs, unsigned numResults, std::string name,
                                             Node *before) {
  std::vector<TensorType> placeholder(numResults);
  Node *n = createNode(kind, std::move(operands), std::move(placeholder), std::move(attrs),
                       std::move(name), before);
  auto fail = [&](llvm::Error e) -> llvm::Expected<Node *> {
    for (auto &r : n->results_)
      names_.erase(r->name_);
    n->resizeOperands(0);
    nodes_.erase(n->self_);
    return e;
  };
  if (auto types = [&]() -> llvm::Expected<std::vector<TensorType>> {
        if (auto e = verifyNodeSignature(*n))
          return e;
        return n->def().infer(*n);
      }()) {
    if (types->size() != n->numResults())
      return fail(errorf("{0}: shape inference produced {1} results, expected {2}", n->describe(),
                         types->size(), n->numResults()));
    // Shape arithmetic is checked here once for every op: a result whose element
    // count is negative or past 2^48 (an expanded, tiled or resized shape) is an
    // error naming the node, never a wrapped size.
    for (unsigned i = 0; i < n->numResults(); ++i) {
      auto count = (*types)[i].checkedNumElements();
      if (!count || *count > kMaxTensorElements)
        return fail(errorf("result {0} would have type {1}, {2}", i, (*types)[i].str(),
                           count ? "more than 2^48 elements" : "whose size overflows"));
    }
    for (unsigned i = 0; i < n->numResults(); ++i)
      n->results_[i]->type_ = (*types)[i];
    return n;
  } else {
    return fail(types.takeError());
  }
}

void Graph::eraseNode(Node *n) {
  if (n->group_)
    dissolve(n->group_);
  for (auto &r : n->results_) {
    assert(!r->hasUses() && !isOutput(r.get()) && "erasing a node whose results are used");
    names_.erase(r->name_);
  }
  n->resizeOperands(0);
  nodes_.erase(n->self_);
}

void Graph::eraseConstant(Value *v) {
  dissolveGroupsNaming(v);
  assert(v->isConstant() && !v->hasUses() && !isOutput(v));
  names_.erase(v->name_);
  auto it = std::find_if(constants_.begin(), constants_.end(),
                         [&](const std::unique_ptr<Value> &c) { return c.get() == v; });
  constants_.erase(it);
}

void Graph::eraseInput(Value *v) {
  dissolveGroupsNaming(v);
  assert(v->isInput() && !v->hasUses() && !isOutput(v));
  names_.erase(v->name_);
  auto it = std::find_if(inputs_.begin(), inputs_.end(),
                         [&](const std::unique_ptr<Value> &c) { return c.get() == v; });
  inputs_.erase(it);
}

size_t Graph::removeUnusedConstants() {
  size_t before = constants_.size();
  std::vector<std::unique_ptr<Value>> kept;
  for (auto &c : constants_) {
    if (c->hasUses() || isOutput(c.get()))
      kept.push_back(std::move(c));
    else
      names_.erase(c->name_);
  }
  constants_ = std::move(kept);
  return before - constants_.size();
}

void Graph::moveBefore(Node *n, Node *pos) {
  nodes_.splice(pos ? pos->self_ : nodes_.end(), nodes_, n->self_);
}

bool Graph::topologicalSort() {
  // Kahn's algorithm, choosing among ready nodes by original position (stable).
  std::unordered_map<Node *, size_t> position, pending;
  std::vector<Node *> order = nodeList();
  for (size_t i = 0; i < order.size(); ++i)
    position[order[i]] = i;
  std::vector<std::vector<Node *>> users(order.size());
  for (Node *n : order) {
    std::unordered_set<Node *> producers;
    for (Value *v : n->operands())
      if (v && v->definingNode() && v->definingNode()->graph() == this)
        producers.insert(v->definingNode());
    pending[n] = producers.size();
    for (Node *p : producers)
      users[position[p]].push_back(n);
  }
  auto cmp = [&](Node *a, Node *b) { return position[a] > position[b]; };
  std::vector<Node *> ready;
  for (Node *n : order)
    if (pending[n] == 0)
      ready.push_back(n);
  std::make_heap(ready.begin(), ready.end(), cmp);
  std::vector<Node *> sorted;
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), cmp);
    Node *n = ready.back();
    ready.pop_back();
    sorted.push_back(n);
    for (Node *u : users[position[n]])
      if (--pending[u] == 0) {
        ready.push_back(u);
        std::push_heap(ready.begin(), ready.end(), cmp);
      }
  }
  if (sorted.size() != order.size())
    return false;
  for (Node *n : sorted)
    nodes_.splice(nodes_.end(), nodes_, n->self_);
  return true;
}

void Graph::replaceAllUsesWith(Value *from, Value *to) {
  assert(from != to);
  std::vector<Use> uses = from->uses_;
  for (const Use &u : uses)
    u.user->setOperand(u.operandIndex, to);
  for (auto &o : outputs_)
    if (o.value == from)
      o.value = to;
}

std::string Graph::uniqueName(std::string_view hint) {
  if (!hint.empty() && !names_.count(std::string(hint)))
    return std::string(hint);
  for (;;) {
    std::string cand = hint.empty() ? std::to_string(nextId_++)
                                    : std::string(hint) + "_" + std::to_string(nextId_++);
    if (!names_.count(cand))
      return cand;
  }
}

void Graph::renameValue(Value *v, std::string newName) {
  if (v->name_ == newName)
    return;
  assert(!names_.count(newName));
  names_.erase(v->name_);
  v->name_ = std::move(newName);
  names_[v->name_] = v;
}

Value *Graph::findValue(std::string_view name) const {
  auto it = names_.find(std::string(name));
  return it == names_.end() ? nullptr : it->second;
}

const FusionGroup *Graph::addFusionGroup(FusionGroup group) {
  groups_.push_back(std::make_unique<FusionGroup>(std::move(group)));
  FusionGroup *g = groups_.back().get();
  for (Node *n : g->nodes) {
    assert(n->graph_ == this && !n->group_ && "a node joins one fusion group");
    n->group_ = g;
  }
  return g;
}

void Graph::clearFusionGroups() {
  for (auto &g : groups_)
    for (Node *n : g->nodes)
      n->group_ = nullptr;
  groups_.clear();
}

void Graph::dissolve(const FusionGroup *group) {
  auto it = std::find_if(groups_.begin(), groups_.end(),
                         [&](const std::unique_ptr<FusionGroup> &g) { return g.get() == group; });
  for (Node *n : (*it)->nodes)
    n->group_ = nullptr;
  groups_.erase(it);
}

void Graph::dissolveGroupsNaming(const Value *v) {
  for (size_t i = groups_.size(); i-- > 0;)
    if (groups_[i]->bias == v || groups_[i]->residual == v)
      dissolve(groups_[i].get());
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>(name_);
  std::unordered_map<const Value *, Value *> map;
  auto mapped = [&](Value *v) -> Value * { return v ? map.at(v) : nullptr; };
  for (auto &in : inputs_)
    map[in.get()] = g->addInput(in->name(), in->type());
  for (auto &c : constants_)
    map[c.get()] = g->addConstant(c->name(), c->data());
  for (auto &p : parameters_)
    map[p.get()] = g->addParameter(p->name(), p->data(), p->isTrainable());
  g->nextId_ = nextId_;
  g->bound_ = bound_;
  for (auto &n : nodes_) {
    std::vector<Value *> ops;
    for (Value *v : n->operands())
      ops.push_back(mapped(v));
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (auto &r : n->results_) {
      types.push_back(r->type());
      names.push_back(r->name());
    }
    Node *c = g->createNode(n->kind(), ops, types, n->attrs(), n->name(), nullptr, names);
    c->setLoc(n->loc());
    for (unsigned i = 0; i < c->numResults(); ++i)
      map[n->result(i)] = c->result(i);
  }
  for (auto &o : outputs_)
    if (o.isUpdate())
      g->addUpdate(map.at(o.variable), mapped(o.value));
    else
      g->addOutput(o.name, mapped(o.value));
  auto node = [&](Node *n) { return n ? map.at(n->result())->definingNode() : nullptr; };
  auto nodes = [&](const std::vector<Node *> &ns) {
    std::vector<Node *> out;
    for (Node *n : ns)
      out.push_back(node(n));
    return out;
  };
  for (const auto &fg : groups_) {
    FusionGroup c = *fg;
    c.nodes = nodes(fg->nodes);
    c.prologue = nodes(fg->prologue);
    c.core = nodes(fg->core);
    c.epilogue = nodes(fg->epilogue);
    c.anchor = node(fg->anchor);
    c.bias = mapped(fg->bias);
    c.residual = mapped(fg->residual);
    g->addFusionGroup(std::move(c));
  }
  return g;
}

} // namespace dlc::ir
