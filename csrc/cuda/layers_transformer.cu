// CUDA twins of the CPU transformer layers (gdlbench/nets/network.py's docstring lists them): embedding,
// tokens, layernorm, linear, gelu, tanh, select_token, attention (unfused: cuBLAS GEMMs and our
// softmax kernel) and lm_head. float32 NCHW, parameters float32, as the other CUDA layers.
// A sequence of S tokens of width D is (D, S, 1) per sample: element (b, d, s) at b*D*S + d*S + s,
// so a per-position product is W[F, C] @ X_b[C, S]: one cuBLAS GEMM per sample, strided batched.
// Row-major [R, S] blocks are column-major [S, R] ones to cuBLAS (ld S), as gemm.cu explains.
// A token id outside [0, vocab) cannot be reported from the device (the CPU layer raises): its
// embedding row is NaN and it gets no gradient.
#include <cmath>

#include "common/dropout.h"
#include "cuda/layer_util.h"

namespace gdl::cuda {
namespace {

#define GDL_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

constexpr int kThreads = 256;

void launched() { CUDA_CHECK(cudaGetLastError()); }

int cublas_dim(int64_t n, const LayerSpec& s) {
  GDL_REQUIRE(n > 0 && n < (int64_t(1) << 31), s.type, " ", s.name, ": a dimension of ", n, " is too large for cuBLAS");
  return static_cast<int>(n);
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // a previous call's readers are done with part
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  float t = lane < int(blockDim.x / 32) ? part[lane] : 0.f;
  for (int o = 16; o > 0; o /= 2) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

// out[f] (= or +=) sum over b < batch, p < P of x[(b * F + f) * P + p]: one block per f.
__global__ void sum_positions(float* __restrict__ out, const float* __restrict__ x, int64_t F, int64_t P,
                              int64_t batch, bool add) {
  for (int64_t f = blockIdx.x; f < F; f += gridDim.x) {
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < batch * P; i += blockDim.x) s += x[((i / P) * F + f) * P + i % P];
    s = block_sum(s);
    if (threadIdx.x == 0) out[f] = add ? out[f] + s : s;
  }
}

void sum_positions_into(float* out, const float* x, int64_t F, int64_t P, int64_t batch, bool add) {
  sum_positions<<<static_cast<int>(std::min<int64_t>(F, 65535)), kThreads, 0, context().stream>>>(out, x, F, P, batch,
                                                                                                  add);
  launched();
}

// y[b, f, p] = bias[f]
__global__ void broadcast_bias(float* __restrict__ y, const float* __restrict__ bias, int64_t F, int64_t P, int64_t n) {
  GDL_GRID_STRIDE(i, n) y[i] = bias[(i / P) % F];
}

// The per-position product of linear, attention and lm_head: Y_b[F, P] = W[F, C] @ X_b[C, P] (+ bias)
// for every sample, and its two gradients.
struct PositionGemm {
  int C, F, P, batch;

  // Y_b = W X_b (+ bias[f]); column-major: Y_b^T[P x F] = X_b^T[P x C] W^T[C x F], W shared (stride 0).
  void forward(const float* w, const float* bias, const float* x, float* y) const {
    const int64_t n = int64_t(batch) * F * P;
    if (bias) {
      broadcast_bias<<<grid_for(n), kThreads, 0, context().stream>>>(y, bias, F, P, n);
      launched();
    }
    CUBLAS_CHECK(cublasSgemmStridedBatched(context().cublas, CUBLAS_OP_N, CUBLAS_OP_N, P, F, C, &kOne, x, P,
                                           int64_t(C) * P, w, C, 0, bias ? &kOne : &kZero, y, P, int64_t(F) * P,
                                           batch));
  }
  // dX_b (beta: 0 overwrite, 1 add) += W^T dY_b; column-major: dX_b^T[P x C] = dY_b^T[P x F] W[F x C].
  void backward_data(const float* w, const float* dy, float* dx, const float* beta) const {
    CUBLAS_CHECK(cublasSgemmStridedBatched(context().cublas, CUBLAS_OP_N, CUBLAS_OP_T, P, C, F, &kOne, dy, P,
                                           int64_t(F) * P, w, C, 0, beta, dx, P, int64_t(C) * P, batch));
  }
  // dW = sum_b dY_b X_b^T (overwritten, or added to when add); column-major dW^T[C x F] += X_b[C x P] dY_b^T[P x F],
  // one GEMM per sample accumulating; db[f] = sum over b, p of dY.
  void backward_params(const float* x, const float* dy, float* dw, float* db, bool add) const {
    for (int b = 0; b < batch; ++b)
      CUBLAS_CHECK(cublasSgemm(context().cublas, CUBLAS_OP_T, CUBLAS_OP_N, C, F, P, &kOne, x + int64_t(b) * C * P, P,
                               dy + int64_t(b) * F * P, P, (b > 0 || add) ? &kOne : &kZero, dw, C));
    if (db) sum_positions_into(db, dy, F, P, batch, false);
  }
};

float* f32(void* p) { return static_cast<float*>(p); }
const float* f32(const void* p) { return static_cast<const float*>(p); }

// ---- embedding: y(b, d, p) = token[id(b, p), d] + position[p, d] + type[tt(p), d] -------------------

// The token type of position p in a sequence of S: 0 in the first half, 1 after (capped at types - 1).
__device__ __forceinline__ int64_t token_type(int64_t p, int64_t S, int64_t types) {
  return p < S / 2 ? 0 : (types - 1 < 1 ? types - 1 : 1);
}

// The id stored as a float at ids[i] (lround), or -1 outside [0, vocab) (and for NaN).
__device__ __forceinline__ int64_t token_id(const float* ids, int64_t i, int64_t vocab) {
  const float v = ids[i];
  if (!(v > -0.5f && v < float(vocab) - 0.5f)) return -1;
  const long long id = llroundf(v);
  return id >= 0 && id < vocab ? id : -1;
}

__global__ void embed_fwd(float* __restrict__ y, const float* __restrict__ ids, const float* __restrict__ tok,
                          const float* __restrict__ pos, const float* __restrict__ typ, int64_t vocab, int64_t D,
                          int64_t S, int64_t types, int64_t n) {
  GDL_GRID_STRIDE(i, n) {
    const int64_t p = i % S, d = (i / S) % D, b = i / (S * D);
    const int64_t id = token_id(ids, b * S + p, vocab);
    float v = id < 0 ? nanf("") : tok[id * D + d] + pos[p * D + d];
    if (typ) v += typ[token_type(p, S, types) * D + d];
    y[i] = v;
  }
}

__global__ void embed_token_grad(float* __restrict__ dtok, const float* __restrict__ ids, const float* __restrict__ dy,
                                 int64_t vocab, int64_t D, int64_t S, int64_t n) {
  GDL_GRID_STRIDE(i, n) {
    const int64_t p = i % S, d = (i / S) % D, b = i / (S * D);
    const int64_t id = token_id(ids, b * S + p, vocab);
    if (id >= 0) atomicAdd(dtok + id * D + d, dy[i]);
  }
}

// dpos[p, d] = sum_b dy(b, d, p) for p < S, 0 for the positions beyond the sequence.
__global__ void embed_position_grad(float* __restrict__ dpos, const float* __restrict__ dy, int64_t D, int64_t S,
                                    int64_t positions, int64_t batch) {
  GDL_GRID_STRIDE(i, positions * D) {
    const int64_t p = i / D, d = i % D;
    float s = 0.f;
    if (p < S)
      for (int64_t b = 0; b < batch; ++b) s += dy[(b * D + d) * S + p];
    dpos[i] = s;
  }
}

// dtype[t, d] = sum over b and the positions p of type t of dy(b, d, p).
__global__ void embed_type_grad(float* __restrict__ dtyp, const float* __restrict__ dy, int64_t D, int64_t S,
                                int64_t types, int64_t batch) {
  GDL_GRID_STRIDE(i, types * D) {
    const int64_t t = i / D, d = i % D;
    float s = 0.f;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < S; ++p)
        if (token_type(p, S, types) == t) s += dy[(b * D + d) * S + p];
    dtyp[i] = s;
  }
}

class EmbeddingLayer : public Layer {
 public:
  explicit EmbeddingLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    vocab_ = int64_t(s.attr("vocab")), D_ = int64_t(s.attr("hidden")), positions_ = int64_t(s.attr("positions"));
    types_ = int64_t(s.attr("token_types", 0));
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3 && s.in_shapes[0][0] == 1 &&
                    s.in_shapes[0][2] == 1, "embedding ", s.name, ": takes token ids (1, S, 1)");
    S_ = s.in_shapes[0][1];
    GDL_REQUIRE(vocab_ > 0 && D_ > 0 && S_ <= positions_, "embedding ", s.name, ": needs vocab, hidden > 0 and S <= positions");
    GDL_REQUIRE(s.out_shape == Shape({D_, S_, 1}), "embedding ", s.name, ": out_shape must be (hidden, S, 1)");
    std::vector<Shape> want{{vocab_, D_}, {positions_, D_}};
    if (types_ > 0) want.push_back({types_, D_});
    GDL_REQUIRE(s.param_shapes == want, "embedding ", s.name,
                ": param_shapes must be token [vocab, hidden], position [positions, hidden] (, type [token_types, hidden])");
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    const int64_t n = out_count();
    embed_fwd<<<grid_for(n), kThreads, 0, context().stream>>>(f32(y), f32(x[0]), f32(params_[0]), f32(params_[1]),
                                                              types_ ? f32(params_[2]) : nullptr, vocab_, D_, S_,
                                                              types_, n);
    launched();
  }
  // Token ids carry no gradient.
  void backward_data(const std::vector<const void*>&, const void*, const void*, const std::vector<void*>&) override {}
  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    const cudaStream_t st = context().stream;
    // Tied (grads_shared_): the LM head has already written its gradient of the table; add to it.
    if (!grads_shared_) CUDA_CHECK(cudaMemsetAsync(grads_[0], 0, std::size_t(vocab_ * D_) * sizeof(float), st));
    const int64_t n = out_count();
    embed_token_grad<<<grid_for(n), kThreads, 0, st>>>(f32(grads_[0]), f32(x[0]), f32(dy), vocab_, D_, S_, n);
    launched();
    embed_position_grad<<<grid_for(positions_ * D_), kThreads, 0, st>>>(f32(grads_[1]), f32(dy), D_, S_, positions_,
                                                                         spec_.batch);
    launched();
    if (types_) {
      embed_type_grad<<<grid_for(types_ * D_), kThreads, 0, st>>>(f32(grads_[2]), f32(dy), D_, S_, types_, spec_.batch);
      launched();
    }
  }

 private:
  int64_t vocab_ = 0, D_ = 0, positions_ = 0, types_ = 0, S_ = 0;
};
GDL_REGISTER_CUDA_LAYER("embedding", EmbeddingLayer);

// ---- tokens (ViT): (C, H, W) -> (C, H*W [+1], 1), class token first, position table added ----------

__global__ void tokens_fwd(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ cls,
                           const float* __restrict__ pos, int64_t C, int64_t S, int64_t off, int64_t n) {
  GDL_GRID_STRIDE(i, n) {
    const int64_t s = i % S, c = (i / S) % C, b = i / (S * C);
    const float v = s < off ? cls[c] : x[(b * C + c) * (S - off) + s - off];
    y[i] = v + pos[s * C + c];
  }
}

__global__ void tokens_bwd_data(float* __restrict__ dx, const float* __restrict__ dy, int64_t C, int64_t S, int64_t off,
                                int64_t n) {
  GDL_GRID_STRIDE(i, n) {  // over the input: (b, c, p) takes dy(b, c, p + off)
    const int64_t P = S - off, p = i % P, bc = i / P;
    dx[i] += dy[bc * S + p + off];
  }
}

// dpos[s, c] = sum_b dy(b, c, s); dcls[c] = dpos's row 0 when there is a class token.
__global__ void tokens_param_grad(float* __restrict__ dpos, float* __restrict__ dcls, const float* __restrict__ dy,
                                  int64_t C, int64_t S, int64_t batch) {
  GDL_GRID_STRIDE(i, S * C) {
    const int64_t s = i / C, c = i % C;
    float t = 0.f;
    for (int64_t b = 0; b < batch; ++b) t += dy[(b * C + c) * S + s];
    dpos[i] = t;
    if (dcls && s == 0) dcls[c] = t;
  }
}

class TokensLayer : public Layer {
 public:
  explicit TokensLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && !s.in_shapes[0].empty(), "tokens ", s.name, ": takes one input (C, H, W)");
    C_ = s.in_shapes[0][0];
    GDL_REQUIRE(C_ > 0, "tokens ", s.name, ": no channels");
    off_ = s.attr("class_token", 1) != 0 ? 1 : 0;
    S_ = numel(s.in_shapes[0]) / C_ + off_;
    GDL_REQUIRE(s.out_shape == Shape({C_, S_, 1}), "tokens ", s.name, ": out_shape must be (C, H*W", off_ ? " + 1" : "",
                ", 1)");
    std::vector<Shape> want;
    if (off_) want.push_back({1, C_});
    want.push_back({S_, C_});
    GDL_REQUIRE(C_ > 0 && s.param_shapes == want, "tokens ", s.name,
                ": param_shapes must be ", off_ ? "class token [1, C], " : "", "position [S, C]");
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    const int64_t n = out_count();
    tokens_fwd<<<grid_for(n), kThreads, 0, context().stream>>>(f32(y), f32(x[0]), off_ ? f32(params_[0]) : nullptr,
                                                               f32(params_[off_]), C_, S_, off_, n);
    launched();
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    const int64_t n = in_count();
    tokens_bwd_data<<<grid_for(n), kThreads, 0, context().stream>>>(f32(dx[0]), f32(dy), C_, S_, off_, n);
    launched();
  }
  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    tokens_param_grad<<<grid_for(S_ * C_), kThreads, 0, context().stream>>>(
        f32(grads_[off_]), off_ ? f32(grads_[0]) : nullptr, f32(dy), C_, S_, spec_.batch);
    launched();
  }

 private:
  int64_t C_ = 0, S_ = 0, off_ = 1;
};
GDL_REGISTER_CUDA_LAYER("tokens", TokensLayer);

// ---- layernorm over D at each position: y = (x - mean) / sqrt(var + eps) * gamma[d] + beta[d] -------
// One thread per (b, s), looping over d (adjacent threads read adjacent s: coalesced). The mean and
// 1/sqrt(var + eps) (biased variance, two passes) are kept for backward.

__global__ void layernorm_fwd(float* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                              const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ beta,
                              int64_t D, int64_t S, int64_t rows, float eps) {
  GDL_GRID_STRIDE(r, rows) {
    const int64_t b = r / S, s = r % S;
    const float* xr = x + b * D * S + s;
    float m = 0.f;
    for (int64_t d = 0; d < D; ++d) m += xr[d * S];
    m /= float(D);
    float v = 0.f;
    for (int64_t d = 0; d < D; ++d) v += (xr[d * S] - m) * (xr[d * S] - m);
    const float rs = rsqrtf(v / float(D) + eps);
    mean[r] = m, rstd[r] = rs;
    for (int64_t d = 0; d < D; ++d) y[b * D * S + d * S + s] = (xr[d * S] - m) * rs * g[d] + beta[d];
  }
}

// dx += rstd * (g - mean_d(g) - xhat * mean_d(g * xhat)), g = dy * gamma.
__global__ void layernorm_bwd_data(float* __restrict__ dx, const float* __restrict__ x, const float* __restrict__ dy,
                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                   const float* __restrict__ gamma, int64_t D, int64_t S, int64_t rows) {
  GDL_GRID_STRIDE(r, rows) {
    const int64_t base = (r / S) * D * S + r % S;
    const float m = mean[r], rs = rstd[r];
    float a = 0.f, c = 0.f;
    for (int64_t d = 0; d < D; ++d) {
      const float g = dy[base + d * S] * gamma[d];
      a += g;
      c += g * (x[base + d * S] - m) * rs;
    }
    a /= float(D), c /= float(D);
    for (int64_t d = 0; d < D; ++d) {
      const float xhat = (x[base + d * S] - m) * rs;
      dx[base + d * S] += rs * (dy[base + d * S] * gamma[d] - a - xhat * c);
    }
  }
}

// dgamma[d] = sum over (b, s) of dy * xhat, dbeta[d] = sum of dy: one block per d.
__global__ void layernorm_bwd_params(float* __restrict__ dgamma, float* __restrict__ dbeta,
                                     const float* __restrict__ x, const float* __restrict__ dy,
                                     const float* __restrict__ mean, const float* __restrict__ rstd, int64_t D,
                                     int64_t S, int64_t rows) {
  for (int64_t d = blockIdx.x; d < D; d += gridDim.x) {
    float sg = 0.f, sb = 0.f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
      const int64_t i = (r / S) * D * S + d * S + r % S;
      sg += dy[i] * (x[i] - mean[r]) * rstd[r];
      sb += dy[i];
    }
    sg = block_sum(sg);
    sb = block_sum(sb);
    if (threadIdx.x == 0) dgamma[d] = sg, dbeta[d] = sb;
  }
}

class LayerNormLayer : public Layer {
 public:
  explicit LayerNormLayer(const LayerSpec& s)
      : Layer(s),
        rows_(s.in_shapes.empty() || s.in_shapes[0].empty() ? 0 : s.batch * (numel(s.in_shapes[0]) / std::max<int64_t>(1, s.in_shapes[0][0]))),
        mean_(std::size_t(std::max<int64_t>(rows_, 1)) * sizeof(float)),
        rstd_(std::size_t(std::max<int64_t>(rows_, 1)) * sizeof(float)) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && !s.in_shapes[0].empty() && s.out_shape == s.in_shapes[0], "layernorm ", s.name,
                ": out_shape must equal the input shape");
    D_ = s.in_shapes[0][0];
    GDL_REQUIRE(D_ > 0, "layernorm ", s.name, ": no features");
    S_ = rows_ / s.batch;
    GDL_REQUIRE(s.param_shapes == std::vector<Shape>({{D_}, {D_}}), "layernorm ", s.name,
                ": param_shapes must be scale [D], shift [D]");
    eps_ = float(s.attr("eps", 1e-5));
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    layernorm_fwd<<<grid_for(rows_), kThreads, 0, context().stream>>>(f32(y), f32(mean_.data()), f32(rstd_.data()),
                                                                       f32(x[0]), f32(params_[0]), f32(params_[1]), D_,
                                                                       S_, rows_, eps_);
    launched();
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    layernorm_bwd_data<<<grid_for(rows_), kThreads, 0, context().stream>>>(
        f32(dx[0]), f32(x[0]), f32(dy), f32(mean_.data()), f32(rstd_.data()), f32(params_[0]), D_, S_, rows_);
    launched();
  }
  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    layernorm_bwd_params<<<static_cast<int>(std::min<int64_t>(D_, 65535)), kThreads, 0, context().stream>>>(
        f32(grads_[0]), f32(grads_[1]), f32(x[0]), f32(dy), f32(mean_.data()), f32(rstd_.data()), D_, S_, rows_);
    launched();
  }

 private:
  int64_t rows_, D_ = 0, S_ = 1;  // rows_: batch * positions
  float eps_ = 1e-5f;
  DeviceBuffer mean_, rstd_;
};
GDL_REGISTER_CUDA_LAYER("layernorm", LayerNormLayer);

// ---- linear, per position: (C, H, W) -> (F, H, W), W [F, C] (+ b [F]) --------------------------------

class LinearLayer : public Layer {
 public:
  explicit LinearLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && !s.in_shapes[0].empty() && !s.out_shape.empty(), "linear ", s.name,
                ": takes one input (C, H, W)");
    GDL_REQUIRE(s.in_shapes[0][0] > 0, "linear ", s.name, ": no channels");
    const int64_t C = s.in_shapes[0][0], F = s.out_shape[0], P = numel(s.in_shapes[0]) / C;
    bias_ = s.attr("bias", 1) != 0;
    GDL_REQUIRE(numel(s.out_shape) == F * P, "linear ", s.name, ": out_shape must be (F, H, W) of the input's H, W");
    GDL_REQUIRE(s.param_shapes.size() == (bias_ ? 2u : 1u) && s.param_shapes[0] == Shape({F, C}), "linear ", s.name,
                ": param_shapes must be [F, C] (, [F])");
    g_ = {cublas_dim(C, s), cublas_dim(F, s), cublas_dim(P, s), s.batch};
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    g_.forward(f32(params_[0]), bias_ ? f32(params_[1]) : nullptr, f32(x[0]), f32(y));
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (dx[0]) g_.backward_data(f32(params_[0]), f32(dy), f32(dx[0]), &kOne);
  }
  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    g_.backward_params(f32(x[0]), f32(dy), f32(grads_[0]), bias_ ? f32(grads_[1]) : nullptr, false);
  }

 private:
  PositionGemm g_{};
  bool bias_ = true;
};
GDL_REGISTER_CUDA_LAYER("linear", LinearLayer);

// ---- gelu (attrs.approximate: 0 erf, 1 tanh) and tanh ---------------------------------------------

constexpr float kSqrt2OverPi = 0.7978845608028654f, kInvSqrt2 = 0.7071067811865476f,
                kInvSqrt2Pi = 0.3989422804014327f, kGeluCubic = 0.044715f;

__global__ void gelu_fwd(float* __restrict__ y, const float* __restrict__ x, int64_t n, bool tanh_form) {
  GDL_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = tanh_form ? 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v)))
                     : 0.5f * v * (1.f + erff(v * kInvSqrt2));
  }
}

__global__ void gelu_bwd(float* __restrict__ dx, const float* __restrict__ x, const float* __restrict__ dy, int64_t n,
                         bool tanh_form) {
  GDL_GRID_STRIDE(i, n) {
    const float v = x[i];
    float d;
    if (tanh_form) {
      const float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      d = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCubic * v * v);
    } else {
      d = 0.5f * (1.f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    dx[i] += dy[i] * d;
  }
}

__global__ void tanh_fwd(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  GDL_GRID_STRIDE(i, n) y[i] = tanhf(x[i]);
}

__global__ void tanh_bwd(float* __restrict__ dx, const float* __restrict__ y, const float* __restrict__ dy, int64_t n) {
  GDL_GRID_STRIDE(i, n) dx[i] += dy[i] * (1.f - y[i] * y[i]);
}

class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), s.type, " ", s.name,
                ": out_shape must have as many elements as the input");
    const double a = s.attr("approximate", 0);
    GDL_REQUIRE(a == 0 || a == 1, s.type, " ", s.name, ": approximate must be 0 (erf) or 1 (tanh), got ", a);
    tanh_form_ = a == 1;
  }

 protected:
  bool tanh_form_ = false;
};

class GeluLayer : public ActivationLayer {
 public:
  using ActivationLayer::ActivationLayer;
  void forward(const std::vector<const void*>& x, void* y) override {
    gelu_fwd<<<grid_for(out_count()), kThreads, 0, context().stream>>>(f32(y), f32(x[0]), out_count(), tanh_form_);
    launched();
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    gelu_bwd<<<grid_for(out_count()), kThreads, 0, context().stream>>>(f32(dx[0]), f32(x[0]), f32(dy), out_count(),
                                                                       tanh_form_);
    launched();
  }
};
GDL_REGISTER_CUDA_LAYER("gelu", GeluLayer);

class TanhLayer : public ActivationLayer {
 public:
  using ActivationLayer::ActivationLayer;
  void forward(const std::vector<const void*>& x, void* y) override {
    tanh_fwd<<<grid_for(out_count()), kThreads, 0, context().stream>>>(f32(y), f32(x[0]), out_count());
    launched();
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    tanh_bwd<<<grid_for(out_count()), kThreads, 0, context().stream>>>(f32(dx[0]), f32(y), f32(dy), out_count());
    launched();
  }
};
GDL_REGISTER_CUDA_LAYER("tanh", TanhLayer);

// ---- select_token: (C, S, 1) -> (C, 1, 1), position `index` -----------------------------------------

__global__ void select_fwd(float* __restrict__ y, const float* __restrict__ x, int64_t S, int64_t index, int64_t n) {
  GDL_GRID_STRIDE(i, n) y[i] = x[i * S + index];
}

__global__ void select_bwd(float* __restrict__ dx, const float* __restrict__ dy, int64_t S, int64_t index, int64_t n) {
  GDL_GRID_STRIDE(i, n) dx[i * S + index] += dy[i];
}

class SelectTokenLayer : public Layer {
 public:
  explicit SelectTokenLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && !s.in_shapes[0].empty(), "select_token ", s.name, ": takes one input (C, S, 1)");
    const int64_t C = s.in_shapes[0][0];
    GDL_REQUIRE(C > 0, "select_token ", s.name, ": no channels");
    S_ = numel(s.in_shapes[0]) / C;
    index_ = int64_t(s.attr("index", 0));
    GDL_REQUIRE(index_ >= 0 && index_ < S_, "select_token ", s.name, ": index ", index_, " is outside the sequence of ", S_);
    GDL_REQUIRE(numel(s.out_shape) == C, "select_token ", s.name, ": out_shape must be (C, 1, 1)");
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    select_fwd<<<grid_for(out_count()), kThreads, 0, context().stream>>>(f32(y), f32(x[0]), S_, index_, out_count());
    launched();
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    select_bwd<<<grid_for(out_count()), kThreads, 0, context().stream>>>(f32(dx[0]), f32(dy), S_, index_, out_count());
    launched();
  }

 private:
  int64_t S_ = 1, index_ = 0;
};
GDL_REGISTER_CUDA_LAYER("select_token", SelectTokenLayer);

// ---- attention ---------------------------------------------------------------------------------------
// QKV[3D, S] = Wqkv X_b + bqkv (rows: Q, then K, then V; head h takes rows h*dh .. of each);
// scores[i, j] = Q_h[:, i] . K_h[:, j] / sqrt(dh), j > i masked when causal; P = softmax over j;
// Pd = P * keep / (1 - ratio) with dropout_keep(seed, ((b * heads + h) * S + i) * S + j, ratio);
// O_h[:, i] = sum_j Pd[i, j] V_h[:, j]; y = Wo O + bo.

// One warp per row (b, h, i) of the scores, in place: P, and Pd into dropped (when dropping).
__global__ void attn_softmax(float* __restrict__ probs, float* __restrict__ dropped, int64_t rows, int64_t S,
                             bool causal, uint64_t seed, float ratio) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    float* row = probs + r * S;
    const int64_t valid = causal ? r % S + 1 : S;  // keys 0 .. i when causal
    float mx = -INFINITY;
    for (int64_t j = lane; j < valid; j += 32) mx = fmaxf(mx, row[j]);
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float z = 0.f;
    for (int64_t j = lane; j < valid; j += 32) z += expf(row[j] - mx);
    for (int o = 16; o > 0; o /= 2) z += __shfl_xor_sync(0xffffffffu, z, o);
    const float inv = 1.f / z, scale = 1.f / (1.f - ratio);
    for (int64_t j = lane; j < S; j += 32) {
      const float p = j < valid ? expf(row[j] - mx) * inv : 0.f;
      row[j] = p;
      if (dropped) dropped[r * S + j] = dropout_keep(seed, uint64_t(r * S + j), ratio) ? p * scale : 0.f;
    }
  }
}

// In place on the gradient of Pd: dS = P * (dP - sum_j P dP), dP = dPd * keep / (1 - ratio).
__global__ void attn_softmax_bwd(float* __restrict__ grad, const float* __restrict__ probs, int64_t rows, int64_t S,
                                 bool dropping, uint64_t seed, float ratio) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  const float scale = 1.f / (1.f - ratio);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    float* g = grad + r * S;
    const float* p = probs + r * S;
    float dot = 0.f;
    for (int64_t j = lane; j < S; j += 32) {
      const float d = dropping ? (dropout_keep(seed, uint64_t(r * S + j), ratio) ? g[j] * scale : 0.f) : g[j];
      g[j] = d;
      dot += p[j] * d;
    }
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    for (int64_t j = lane; j < S; j += 32) g[j] = p[j] * (g[j] - dot);
  }
}

// Backward scratch (the gradients of O, of the probabilities and of QKV), shared by every attention
// layer: they run one after another on the one stream, so the largest layer's is enough.
std::shared_ptr<DeviceBuffer> shared_scratch(std::size_t bytes) {
  static std::weak_ptr<DeviceBuffer> kept;
  auto p = kept.lock();
  if (!p || p->nbytes() < bytes) {
    p = std::make_shared<DeviceBuffer>(bytes);
    kept = p;
  }
  return p;
}

class AttentionLayer : public Layer {
 public:
  explicit AttentionLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3 && s.in_shapes[0][2] == 1 &&
                    s.out_shape == s.in_shapes[0], "attention ", s.name, ": takes (D, S, 1) and returns its shape");
    D_ = s.in_shapes[0][0], S_ = s.in_shapes[0][1], heads_ = int64_t(s.attr("heads"));
    GDL_REQUIRE(heads_ > 0 && D_ % heads_ == 0, "attention ", s.name, ": heads must divide the width ", D_);
    dh_ = D_ / heads_;
    bias_ = s.attr("bias", 1) != 0, causal_ = s.attr("causal", 0) != 0;
    ratio_ = float(s.attr("dropout", 0)), seed_ = uint64_t(s.attr("seed", 0));
    GDL_REQUIRE(ratio_ >= 0.f && ratio_ < 1.f, "attention ", s.name, ": dropout must be in [0, 1), got ", ratio_);
    const std::vector<Shape> want = bias_ ? std::vector<Shape>{{3 * D_, D_}, {3 * D_}, {D_, D_}, {D_}}
                                          : std::vector<Shape>{{3 * D_, D_}, {D_, D_}};
    GDL_REQUIRE(s.param_shapes == want, "attention ", s.name, ": param_shapes must be [3D, D] (, [3D]), [D, D] (, [D])");
    const int B = s.batch, d = cublas_dim(D_, s), S = cublas_dim(S_, s);
    qkv_gemm_ = {d, cublas_dim(3 * D_, s), S, B};
    out_gemm_ = {d, d, S, B};
    const std::size_t act = std::size_t(B) * D_ * S_, scores = std::size_t(B) * heads_ * S_ * S_;
    qkv_ = std::make_unique<DeviceBuffer>(3 * act * sizeof(float));
    probs_ = std::make_unique<DeviceBuffer>(scores * sizeof(float));
    if (ratio_ > 0) dropped_ = std::make_unique<DeviceBuffer>(scores * sizeof(float));
    o_ = std::make_unique<DeviceBuffer>(act * sizeof(float));
    scratch_ = shared_scratch((4 * act + scores) * sizeof(float));  // dO [act], dQKV [3 act], dP [scores]
  }

  void forward(const std::vector<const void*>& x, void* y) override {
    qkv_gemm_.forward(wqkv(), bqkv(), f32(x[0]), f32(qkv_->data()));
    float* P = f32(probs_->data());
    for (int b = 0; b < spec_.batch; ++b)  // scores^T[j, i] = K_h^T Q_h: column-major K_h (S x dh), Q_h op T
      heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, int(S_), int(S_), int(dh_), 1.f / std::sqrt(float(dh_)), k(qkv(), b), S_,
                 dh_ * S_, q(qkv(), b), S_, dh_ * S_, P + b * heads_ * S_ * S_, S_, S_ * S_);
    const int64_t rows = spec_.batch * heads_ * S_;
    attn_softmax<<<grid_for(rows * 32), kThreads, 0, context().stream>>>(
        P, ratio_ > 0 ? f32(dropped_->data()) : nullptr, rows, S_, causal_, seed_, ratio_);
    launched();
    const float* Pd = ratio_ > 0 ? f32(dropped_->data()) : P;
    for (int b = 0; b < spec_.batch; ++b)  // O_h^T[i, e] = sum_j Pd[i, j] V_h^T[j, e]
      heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, int(S_), int(dh_), int(S_), 1.f, Pd + b * heads_ * S_ * S_, S_, S_ * S_,
                 v(qkv(), b), S_, dh_ * S_, f32(o_->data()) + b * D_ * S_, S_, dh_ * S_);
    out_gemm_.forward(wo(), bo(), f32(o_->data()), f32(y));
    have_dqkv_ = false;
  }

  // The parameter gradients, and dQKV kept for backward_data (which computes it when run alone).
  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    backprop_to_qkv(f32(dy), true);
    qkv_gemm_.backward_params(f32(x[0]), dqkv(), f32(grads_[0]), bias_ ? f32(grads_[1]) : nullptr, false);
    have_dqkv_ = true;
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    if (!have_dqkv_) backprop_to_qkv(f32(dy), false);
    qkv_gemm_.backward_data(wqkv(), dqkv(), f32(dx[0]), &kOne);
    have_dqkv_ = false;
  }

 private:
  float* qkv() const { return f32(qkv_->data()); }
  float* q(float* base, int b) const { return base + int64_t(b) * 3 * D_ * S_; }
  float* k(float* base, int b) const { return q(base, b) + D_ * S_; }
  float* v(float* base, int b) const { return q(base, b) + 2 * D_ * S_; }
  const float* wqkv() const { return f32(params_[0]); }
  const float* bqkv() const { return bias_ ? f32(params_[1]) : nullptr; }
  const float* wo() const { return f32(params_[bias_ ? 2 : 1]); }
  const float* bo() const { return bias_ ? f32(params_[3]) : nullptr; }
  float* d_o() const { return f32(scratch_->data()); }
  float* dqkv() const { return d_o() + spec_.batch * D_ * S_; }
  float* dprobs() const { return dqkv() + 3 * spec_.batch * D_ * S_; }

  // One sample's GEMM for every head at once (strided batched over the heads).
  void heads_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int kk, float alpha, const float* A,
                  int64_t lda, int64_t sa, const float* B, int64_t ldb, int64_t sb, float* C, int64_t ldc,
                  int64_t sc) const {
    CUBLAS_CHECK(cublasSgemmStridedBatched(context().cublas, ta, tb, m, n, kk, &alpha, A, int(lda), sa, B, int(ldb), sb,
                                           &kZero, C, int(ldc), sc, int(heads_)));
  }

  // dy -> dO (and, when params, dWo and dbo) -> dPd, dV -> dS -> dQ, dK: dQKV in the scratch.
  void backprop_to_qkv(const float* dy, bool params) {
    const int B = spec_.batch, S = int(S_), dh = int(dh_);
    out_gemm_.backward_data(wo(), dy, d_o(), &kZero);
    if (params)
      out_gemm_.backward_params(f32(o_->data()), dy, f32(grads_[bias_ ? 2 : 1]), bias_ ? f32(grads_[3]) : nullptr, false);
    const float* P = f32(probs_->data());
    const float* Pd = ratio_ > 0 ? f32(dropped_->data()) : P;
    const float scale = 1.f / std::sqrt(float(dh_));
    float *dP = dprobs(), *dQKV = dqkv();
    const int64_t SS = S_ * S_, hs = dh_ * S_;
    for (int b = 0; b < B; ++b) {
      const float* dO = d_o() + b * D_ * S_;
      float* dPb = dP + b * heads_ * SS;
      const float* Pdb = Pd + b * heads_ * SS;
      // dPd^T[j, i] = sum_e V_h^T[j, e] dO_h[e, i]
      heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, S, S, dh, 1.f, v(qkv(), b), S_, hs, dO, S_, hs, dPb, S_, SS);
      // dV_h^T[j, e] = sum_i Pd^T[j, i] dO_h^T[i, e]
      heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, S, dh, S, 1.f, Pdb, S_, SS, dO, S_, hs, v(dQKV, b), S_, hs);
    }
    const int64_t rows = B * heads_ * S_;
    attn_softmax_bwd<<<grid_for(rows * 32), kThreads, 0, context().stream>>>(dP, P, rows, S_, ratio_ > 0, seed_, ratio_);
    launched();
    for (int b = 0; b < B; ++b) {
      const float* dS = dP + b * heads_ * SS;
      // dQ_h^T[i, e] = scale sum_j dS[i, j] K_h^T[j, e]; dK_h^T[j, e] = scale sum_i dS^T[j, i] Q_h^T[i, e]
      heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, S, dh, S, scale, dS, S_, SS, k(qkv(), b), S_, hs, q(dQKV, b), S_, hs);
      heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, S, dh, S, scale, dS, S_, SS, q(qkv(), b), S_, hs, k(dQKV, b), S_, hs);
    }
  }

  int64_t D_ = 0, S_ = 0, heads_ = 1, dh_ = 0;
  bool bias_ = true, causal_ = false, have_dqkv_ = false;
  float ratio_ = 0.f;
  uint64_t seed_ = 0;
  PositionGemm qkv_gemm_{}, out_gemm_{};
  std::unique_ptr<DeviceBuffer> qkv_, probs_, dropped_, o_;  // kept from forward for backward
  std::shared_ptr<DeviceBuffer> scratch_;
};
GDL_REGISTER_CUDA_LAYER("attention", AttentionLayer);

// ---- lm_head: (D, S, 1) -> (vocab, S, 1) logits = W[vocab, D] X_b (+ b) ----------------------------
// Tied: W is the first embedding's token table (bind_tied); its gradient is OVERWRITTEN here (the
// embedding adds its own after). A tied head never bound (the single-layer benchmark) uses a table
// of its own: element i is fill_value(3, i) * 0.125 (common/fill.h; as cpu/lm_head.cpp), made at its first pass.

__global__ void scale_in_place(float* p, float s, int64_t n) {
  GDL_GRID_STRIDE(i, n) p[i] *= s;
}

class LmHeadLayer : public Layer {
 public:
  explicit LmHeadLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3 && s.in_shapes[0][2] == 1, "lm_head ", s.name,
                ": takes (D, S, 1)");
    D_ = s.in_shapes[0][0], V_ = int64_t(s.attr("vocab"));
    const int64_t S = s.in_shapes[0][1];
    tied_ = s.attr("tied", 1) != 0, bias_ = s.attr("bias", 0) != 0;
    GDL_REQUIRE(s.out_shape == Shape({V_, S, 1}), "lm_head ", s.name, ": out_shape must be (vocab, S, 1)");
    std::vector<Shape> want;
    if (!tied_) want.push_back({V_, D_});
    if (bias_) want.push_back({V_});
    GDL_REQUIRE(s.param_shapes == want, "lm_head ", s.name,
                ": param_shapes must be [vocab, D] unless tied, then [vocab] when bias");
    g_ = {cublas_dim(D_, s), cublas_dim(V_, s), cublas_dim(S, s), s.batch};
  }
  void bind_tied(void* weight, void* grad) override {
    GDL_REQUIRE(tied_, "lm_head ", spec_.name, ": not tied");
    w_ = f32(weight), dw_ = f32(grad);
  }

  void forward(const std::vector<const void*>& x, void* y) override {
    g_.forward(weight(), bias_ ? f32(params_[tied_ ? 0 : 1]) : nullptr, f32(x[0]), f32(y));
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (dx[0]) g_.backward_data(weight(), f32(dy), f32(dx[0]), &kOne);
  }
  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    weight();
    g_.backward_params(f32(x[0]), f32(dy), tied_ ? dw_ : f32(grads_[0]), bias_ ? f32(grads_[tied_ ? 0 : 1]) : nullptr,
                       false);
  }

 private:
  // The weight: the tied table, the layer's parameter, or (tied, never bound) a table of its own.
  const float* weight() {
    if (!tied_) return f32(params_[0]);
    if (!w_) {
      const int64_t n = V_ * D_;
      own_ = std::make_unique<DeviceBuffer>(std::size_t(n) * sizeof(float) * 2);
      fill(own_->data(), std::size_t(n), DType::f32, 3);  // the CPU head's kOwnSeed
      scale_in_place<<<grid_for(n), kThreads, 0, context().stream>>>(f32(own_->data()), 0.125f, n);
      launched();
      w_ = f32(own_->data()), dw_ = w_ + n;
    }
    return w_;
  }

  int64_t D_ = 0, V_ = 0;
  bool tied_ = true, bias_ = false;
  PositionGemm g_{};
  float *w_ = nullptr, *dw_ = nullptr;
  std::unique_ptr<DeviceBuffer> own_;
};
GDL_REGISTER_CUDA_LAYER("lm_head", LmHeadLayer);

}  // namespace
}  // namespace gdl::cuda
