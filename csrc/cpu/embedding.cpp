// The layers at the two ends of a transformer's sequence (gdlbench/nets/network.py's docstring):
// embedding (token ids -> vectors), tokens (ViT patches -> tokens with a class token) and
// select_token (one position out). A sequence of S tokens of width D is the per-sample shape
// (D, S, 1): sample b, feature d, position s at (b * D + d) * S + s. Tables are [rows, D].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/errors.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

bool is_shape(const Shape& s, std::initializer_list<int64_t> want) { return s == Shape(want); }

// Token + learned position (+ token-type) embedding, summed: y[b, :, s] = tok[id] + pos[s] (+ type[t(s)]).
// Input (1, S, 1) token ids stored as floats, read with lround; an id outside [0, vocab) is an error.
// Token types (BERT's segment ids, token_types > 0): the input holds no segment ids, so the layer
// models a sentence pair: position s has type 0 for s < S/2 and 1 from S/2 on (S/2 rounded down),
// capped at token_types - 1 (a single type when token_types is 1).
// Parameters in network.py's order: token [vocab, D], position [positions, D], type [token_types, D].
// No input gradient (ids). backward_params overwrites the tables' gradients, except the token
// table's when share_grads() tied it to an LM head: then it adds (the head wrote it first).
class EmbeddingLayer : public Layer {
 public:
  explicit EmbeddingLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3 && s.in_shapes[0][0] == 1 &&
                    s.in_shapes[0][2] == 1,
                "embedding ", s.name, ": takes token ids (1, S, 1)");
    vocab_ = int64_t(s.attr("vocab"));
    d_ = int64_t(s.attr("hidden"));
    positions_ = int64_t(s.attr("positions"));
    types_ = int64_t(s.attr("token_types", 0));
    seq_ = s.in_shapes[0][1];
    GDL_REQUIRE(vocab_ >= 1 && d_ >= 1 && positions_ >= 1 && types_ >= 0, "embedding ", s.name,
                ": vocab, hidden and positions must be >= 1 and token_types >= 0");
    GDL_REQUIRE(seq_ <= positions_, "embedding ", s.name, ": sequence ", seq_, " is longer than positions ",
                positions_);
    GDL_REQUIRE(is_shape(s.out_shape, {d_, seq_, 1}), "embedding ", s.name, ": out_shape must be (", d_, ", ",
                seq_, ", 1)");
    const bool ok = s.param_shapes.size() == std::size_t(types_ ? 3 : 2) &&
                    is_shape(s.param_shapes[0], {vocab_, d_}) && is_shape(s.param_shapes[1], {positions_, d_}) &&
                    (!types_ || is_shape(s.param_shapes[2], {types_, d_}));
    GDL_REQUIRE(ok, "embedding ", s.name, ": param_shapes must be [vocab, hidden], [positions, hidden]",
                types_ ? ", [token_types, hidden]" : "");
    type_of_.resize(seq_);
    for (int64_t p = 0; p < seq_; ++p) type_of_[p] = types_ ? std::min<int64_t>(p < seq_ / 2 ? 0 : 1, types_ - 1) : 0;
    ids_.resize(spec_.batch * seq_);
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    read_ids(x[0]);
    const int64_t d = d_, s = seq_, rows = spec_.batch * d;
    const float *tok = params_[0], *pos = params_[1], *typ = types_ ? params_[2] : nullptr;
    const int64_t* ids = ids_.data();
    const int64_t* tof = type_of_.data();
    // One output row (sample b, feature f) per iteration: contiguous writes; the table reads of
    // neighbouring features share cache lines.
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / d, f = r % d;
      const int64_t* id = ids + b * s;
      float* out = y + r * s;
      for (int64_t p = 0; p < s; ++p) out[p] = tok[id[p] * d + f] + pos[p * d + f];
      if (typ)
        for (int64_t p = 0; p < s; ++p) out[p] += typ[tof[p] * d + f];
    }
  }

  void backward_data(const std::vector<const float*>&, const float*, const float*,
                     const std::vector<float*>&) override {}  // ids have no gradient

  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    read_ids(x[0]);
    const int64_t d = d_, s = seq_, n = spec_.batch;
    float *gtok = grads_[0], *gpos = grads_[1], *gtyp = types_ ? grads_[2] : nullptr;
    if (!grads_shared_) zero(gtok, vocab_ * d);
    zero(gpos + s * d, (positions_ - s) * d);  // positions past the sequence get none
    if (gtyp) zero(gtyp, types_ * d);
    const int64_t* ids = ids_.data();
    const int64_t* tof = type_of_.data();
    // Parallel over the features: each thread owns columns of every table, so repeated ids
    // scatter-add without races.
#pragma omp parallel for schedule(static)
    for (int64_t f = 0; f < d; ++f) {
      for (int64_t p = 0; p < s; ++p) gpos[p * d + f] = 0.f;
      for (int64_t b = 0; b < n; ++b) {
        const float* g = dy + (b * d + f) * s;
        const int64_t* id = ids + b * s;
        for (int64_t p = 0; p < s; ++p) {
          gtok[id[p] * d + f] += g[p];
          gpos[p * d + f] += g[p];
        }
        if (gtyp)
          for (int64_t p = 0; p < s; ++p) gtyp[tof[p] * d + f] += g[p];
      }
    }
  }

 private:
  static void zero(float* p, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = 0.f;
  }
  // The ids of the batch, checked (serially: a throw must not leave an OpenMP region).
  void read_ids(const float* x) {
    const double hi = double(vocab_) - 0.5;
    for (int64_t i = 0; i < spec_.batch * seq_; ++i) {
      const double v = x[i];
      GDL_REQUIRE(v > -0.5 && v < hi, "embedding ", spec_.name, ": token id ", v, " at position ", i % seq_,
                  " of sample ", i / seq_, " is outside [0, ", vocab_, ")");
      ids_[i] = std::lround(v);
    }
  }

  int64_t vocab_ = 0, d_ = 0, positions_ = 0, types_ = 0, seq_ = 0;
  std::vector<int64_t> type_of_, ids_;
};
GDL_REGISTER_LAYER("embedding", EmbeddingLayer);

// ViT's patches to tokens: (C, H, W) -> (C, S, 1), S = H*W (+1): the H*W positions in order, a
// learned class token [1, C] prepended when class_token, and a learned position embedding [S, C]
// added (torchvision's class_token and pos_embedding, in network.py's order).
class TokensLayer : public Layer {
 public:
  explicit TokensLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "tokens ", s.name, ": needs one input (C, H, W)");
    c_ = s.in_shapes[0][0];
    p_ = s.in_shapes[0][1] * s.in_shapes[0][2];
    ct_ = s.attr("class_token", 1) != 0 ? 1 : 0;
    s_ = p_ + ct_;
    GDL_REQUIRE(is_shape(s.out_shape, {c_, s_, 1}), "tokens ", s.name, ": out_shape must be (", c_, ", ", s_, ", 1)");
    const bool ok = s.param_shapes.size() == std::size_t(1 + ct_) && (!ct_ || is_shape(s.param_shapes[0], {1, c_})) &&
                    is_shape(s.param_shapes[ct_], {s_, c_});
    GDL_REQUIRE(ok, "tokens ", s.name, ": param_shapes must be ", ct_ ? "[1, C] (class token), " : "",
                "[S, C] (positions)");
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t c = c_, p = p_, s = s_, ct = ct_, rows = spec_.batch * c_;
    const float *cls = ct_ ? params_[0] : nullptr, *pos = params_[ct_];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t f = r % c;
      const float* in = x[0] + r * p;
      float* out = y + r * s;
      if (ct) out[0] = cls[f] + pos[f];
      for (int64_t i = 0; i < p; ++i) out[ct + i] = in[i] + pos[(ct + i) * c + f];
    }
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t p = p_, s = s_, ct = ct_, rows = spec_.batch * c_;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < p; ++i) dx[0][r * p + i] += dy[r * s + ct + i];
  }

  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    const int64_t c = c_, s = s_, n = spec_.batch;
    float *gcls = ct_ ? grads_[0] : nullptr, *gpos = grads_[ct_];
#pragma omp parallel for schedule(static)
    for (int64_t f = 0; f < c; ++f) {
      for (int64_t i = 0; i < s; ++i) gpos[i * c + f] = 0.f;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < s; ++i) gpos[i * c + f] += dy[(b * c + f) * s + i];
      if (gcls) gcls[f] = gpos[f];  // the class token sits at position 0
    }
  }

 private:
  int64_t c_ = 0, p_ = 0, s_ = 0, ct_ = 1;
};
GDL_REGISTER_LAYER("tokens", TokensLayer);

// One position of a sequence: (C, S, 1) -> (C, 1, 1), position `index` (ViT's class token).
class SelectTokenLayer : public Layer {
 public:
  explicit SelectTokenLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "select_token ", s.name,
                ": needs one input (C, S, 1)");
    c_ = s.in_shapes[0][0];
    s_ = s.in_shapes[0][1] * s.in_shapes[0][2];
    const double index = s.attr("index", 0);
    GDL_REQUIRE(index >= 0 && index < double(s_) && index == std::floor(index), "select_token ", s.name, ": index ",
                index, " is outside the sequence of ", s_);
    index_ = int64_t(index);
    GDL_REQUIRE(is_shape(s.out_shape, {c_, 1, 1}), "select_token ", s.name, ": out_shape must be (", c_, ", 1, 1)");
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t rows = spec_.batch * c_, s = s_, k = index_;
#pragma omp parallel for simd schedule(static)
    for (int64_t r = 0; r < rows; ++r) y[r] = x[0][r * s + k];
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t rows = spec_.batch * c_, s = s_, k = index_;
#pragma omp parallel for simd schedule(static)
    for (int64_t r = 0; r < rows; ++r) dx[0][r * s + k] += dy[r];
  }

 private:
  int64_t c_ = 0, s_ = 0, index_ = 0;
};
GDL_REGISTER_LAYER("select_token", SelectTokenLayer);

}  // namespace
}  // namespace gdl::cpu
