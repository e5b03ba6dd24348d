// Deterministic pseudo-random test data, the same on host and device: element i of stream `seed`
// is k/128 for an integer k in [-128, 128], so it is exact in fp64, fp32, tf32, fp16 and bf16.
// The host can regenerate any device buffer bit for bit and compute a float64 reference.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/errors.h"
#include "common/layer_spec.h"

#if defined(__CUDACC__)
#define GDL_HD __host__ __device__ __forceinline__
#else
#define GDL_HD inline
#endif

namespace gdl {

GDL_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

GDL_HD float fill_value(uint64_t seed, uint64_t index) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ index);
  const int k = static_cast<int>(h % 257u) - 128;  // [-128, 128]
  return static_cast<float>(k) * (1.0f / 128.0f);
}

// Host byte patterns for copy checks: a value that differs per 8 bytes, so a copy that misses
// or shifts data is caught, and the count of bytes that differ.
// (OpenMP where the including module has it: _core does, _cuda's host code does not.)
inline void fill_bytes(char* p, std::size_t n, uint64_t seed) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::size_t i = 0; i < n / 8; ++i) {
    const uint64_t v = splitmix64(seed + i);
    std::memcpy(p + 8 * i, &v, 8);
  }
  for (std::size_t i = n / 8 * 8; i < n; ++i) p[i] = char(seed + i);
}

inline std::size_t count_wrong_bytes(const char* a, const char* b, std::size_t n) {
  std::size_t wrong = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(+ : wrong)
#endif
  for (std::size_t i = 0; i < n; ++i) wrong += a[i] != b[i];
  return wrong;
}

// The labels of the test data, for the loss layer: sample i has class (i * 7919) mod classes.
inline std::vector<int32_t> test_labels(int batch, int64_t classes) {
  std::vector<int32_t> l(batch > 0 ? batch : 0);
  const int64_t c = classes > 1 ? classes : 1;
  for (int i = 0; i < batch; ++i) l[i] = static_cast<int32_t>((int64_t(i) * 7919) % c);
  return l;
}

// A loss layer's labels: one class in [0, C) per position of its input (C, H, W), i.e. H*W per
// sample (a classifier's (K, 1, 1) scores: one; a language model's (vocab, S, 1) logits: one per
// token), batch-major: the label of sample b at position p is at b * positions + p.
struct LabelShape {
  int64_t positions = 1, classes = 1;
  int64_t count(int batch) const { return batch * positions; }
};
inline LabelShape label_shape(const LayerSpec& loss) {
  const Shape& in = loss.in_shapes.at(0);
  const int64_t classes = in.empty() ? 1 : in[0];
  return {classes > 0 ? numel(in) / classes : 1, classes};
}

// Token ids, for a network whose data feeds an embedding (a language model): position p of
// sample b reads token ((b * S + p) * 7919 + 13) mod vocab, stored as a float (exact below 2^24;
// the embedding reads the id back with a round). The executors keep one input batch, so the
// labels (advance_labels) carry the change from batch to batch.
inline void fill_token_ids(float* ids, int64_t count, int64_t vocab) {
  const int64_t v = vocab > 1 ? vocab : 1;
  for (int64_t i = 0; i < count; ++i) ids[i] = static_cast<float>((i * 7919 + 13) % v);
}
inline bool reads_token_ids(const LayerSpec& s) { return s.type == "embedding"; }

// The net's embedding when its data are token ids (a language model), else nullptr; a data input
// that feeds an embedding and another layer at once is refused. Both executors fill their data by it.
inline const LayerSpec* token_input(const std::vector<LayerSpec>& specs) {
  const LayerSpec* embedding = nullptr;
  bool other = false;
  for (const auto& s : specs)
    for (int j : s.inputs) {
      if (j >= 0) continue;
      if (reads_token_ids(s))
        embedding = &s;
      else
        other = true;
    }
  GDL_REQUIRE(!(embedding && other), "the data feeds an embedding (token ids) and other layers (values) at once");
  return embedding;
}

// The next iteration's labels: every sample's class moves on by one. An SGD iteration trains on a
// new batch; trained again and again on one (input, label) batch, a net memorizes it within tens
// of iterations, its loss and gradients shrink into denormal floats, and backward slows several
// fold on a CPU (GoogLeNet, batch 8: from 0.54 to 3.7 s per iteration after 24 iterations).
// The executors keep one input batch (the read's bytes are timed, not fed in), so the labels carry
// the change: no class is right twice in a row and the gradients stay at a training run's scale.
inline void advance_labels(int32_t* labels, int n, int64_t classes) {
  const int64_t c = classes > 1 ? classes : 1;
  for (int i = 0; i < n; ++i) labels[i] = static_cast<int32_t>((labels[i] + 1) % c);
}

}  // namespace gdl
