//===- Window.h - Conv/pool window geometry for emitters --------*- C++ -*-===//
#pragma once

#include "EmitterUtils.h"

namespace dlc::codegen {

/// Window parameters normalized to 3 spatial dims (leading 1s), like the reference.
struct Window3 {
  int64_t N = 1, C = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, padB[3] = {0, 0, 0}, padE[3] = {0, 0, 0};
  int64_t inSize() const { return in[0] * in[1] * in[2]; }
  int64_t outSize() const { return out[0] * out[1] * out[2]; }
  int64_t kSize() const { return k[0] * k[1] * k[2]; }
};

/// Reads the window of a Conv/ConvTranspose (kernel from W) or pooling node.
Window3 windowOf(const ir::Node &n, const ir::Shape &x, const ir::Shape &y,
                 const ir::Shape &kernel);

/// A channels-last value's shape seen channels-first ([N, D..., C] -> [N, C, D...]),
/// as windowOf reads it.
ir::Shape channelsFirst(const ir::Value *v);

/// Copies a window into a kernel-library shape struct's in/out/k/stride/dil/pad arrays.
template <class S> void setWindow(S &s, const Window3 &w) {
  for (int d = 0; d < 3; ++d) {
    s.in[d] = w.in[d];
    s.out[d] = w.out[d];
    s.k[d] = w.k[d];
    s.stride[d] = w.stride[d];
    s.dil[d] = w.dil[d];
    s.pad[d] = w.padB[d];
  }
}

} // namespace dlc::codegen
