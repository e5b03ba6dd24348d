// What the single-layer benchmarks of both backends share (cpu/layer_bench.h, cuda/layer_bench.h):
// the passes a layer is timed in and the work of each, the test labels, and what a checked run
// returns. One place, so both backends time and check the same thing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.h"

namespace gdl {

enum class LayerPass { fwd, bwd_data, bwd_filter, bwd };  // bwd: bwd_filter then bwd_data

inline LayerPass parse_layer_pass(const std::string& s) {
  if (s == "fwd") return LayerPass::fwd;
  if (s == "bwd-data") return LayerPass::bwd_data;
  if (s == "bwd-filter") return LayerPass::bwd_filter;
  if (s == "bwd") return LayerPass::bwd;
  GDL_FAIL("pass must be fwd, bwd, bwd-data or bwd-filter, got '", s, "'");
}

// One pass of `layer` (a cpu::Layer or cuda::Layer) on its buffers.
template <class Layer, class Xs, class Y, class DY, class DXs>
void run_layer_pass(Layer& layer, LayerPass p, const Xs& xs, Y y, DY dy, const DXs& dxs) {
  if (p == LayerPass::fwd) return layer.forward(xs, y);
  if (p != LayerPass::bwd_data) layer.backward_params(xs, y, dy);
  if (p != LayerPass::bwd_filter) layer.backward_data(xs, y, dy, dxs);
}

// The labels of the test data: sample i has class (i * 7919) mod classes.
inline std::vector<int32_t> test_labels(int batch, int64_t classes) {
  std::vector<int32_t> l(batch > 0 ? batch : 0);
  const int64_t c = classes > 1 ? classes : 1;
  for (int i = 0; i < batch; ++i) l[i] = static_cast<int32_t>((int64_t(i) * 7919) % c);
  return l;
}

// A host array handed to a checked run.
struct Floats {
  const float* data;
  int64_t size;
};

// Forward + backward once: y, the input gradients and the parameter gradients, flat float32.
struct LayerRun {
  std::vector<float> y;
  std::vector<std::vector<float>> dx, dw;
};

}  // namespace gdl
