// 2-D convolution on the CPU by Caffe's method: im2col (unfold the input into a matrix whose
// columns are receptive fields) and one OpenBLAS GEMM per group; backward-data is a GEMM into
// columns and col2im, backward-filter a GEMM of dy with the columns. fp32, NCHW, batch-major.
//
// Speed (benchmarks/conv_vs_torch.py holds it against oneDNN):
// - 1x1 stride-1 unpadded layers skip im2col: the input sample already is the column matrix.
// - Layers with small outputs (P*Q, e.g. 7x7) put the columns of several samples side by side so
//   that each GEMM has at least kTargetCols columns; one GEMM per sample would be too thin for
//   the BLAS kernels. The output is then scattered back to NCHW (a cheap copy).
// - Threads: see ConvLayer::prepare.
// - The column and scratch buffers belong to the layer and are written (touched) when it is
//   built, so no page faults happen inside a timed pass.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/conv_geometry.h"
#include "cpu/blas.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

constexpr int64_t kTargetCols = 512;            // min GEMM columns worth batching samples for
constexpr int64_t kMaxColFloats = int64_t(1) << 24;  // 64 MiB of columns at most per chunk

// Valid output columns q (input column w = q*stride + w0 inside [0, W)): [lo, hi).
inline void valid_range(int64_t w0, int64_t stride, int64_t width, int64_t q_count, int64_t& lo, int64_t& hi) {
  lo = w0 >= 0 ? 0 : (-w0 + stride - 1) / stride;
  hi = width - 1 - w0 < 0 ? 0 : std::min(q_count, (width - 1 - w0) / stride + 1);
  if (hi < lo) hi = lo;
}

// Columns of channel c of one sample x (C*H*W) into rows (c*R + kh)*S + kw of col (leading dim ld).
void im2col_channel(const float* x, const ConvGeometry& g, int64_t c, float* col, int64_t ld) {
  const float* plane = x + c * g.h * g.w;
  for (int64_t kh = 0; kh < g.r; ++kh) {
    for (int64_t kw = 0; kw < g.s; ++kw) {
      float* row = col + ((c * g.r + kh) * g.s + kw) * ld;
      const int64_t w0 = kw * g.dil_w - g.pad_w;
      int64_t lo, hi;
      valid_range(w0, g.stride_w, g.w, g.q, lo, hi);
      for (int64_t p = 0; p < g.p; ++p) {
        float* dst = row + p * g.q;
        const int64_t h = p * g.stride_h - g.pad_h + kh * g.dil_h;
        if (h < 0 || h >= g.h) {
          std::fill(dst, dst + g.q, 0.f);
          continue;
        }
        const float* src = plane + h * g.w + w0;
        std::fill(dst, dst + lo, 0.f);
        if (g.stride_w == 1) {
          std::memcpy(dst + lo, src + lo, sizeof(float) * (hi - lo));
        } else {
          for (int64_t q = lo; q < hi; ++q) dst[q] = src[q * g.stride_w];
        }
        std::fill(dst + hi, dst + g.q, 0.f);
      }
    }
  }
}

// The adjoint of im2col_channel: dx[c] += the columns' contributions (race-free per channel).
void col2im_channel(const float* col, int64_t ld, const ConvGeometry& g, int64_t c, float* dx) {
  float* plane = dx + c * g.h * g.w;
  for (int64_t kh = 0; kh < g.r; ++kh) {
    for (int64_t kw = 0; kw < g.s; ++kw) {
      const float* row = col + ((c * g.r + kh) * g.s + kw) * ld;
      const int64_t w0 = kw * g.dil_w - g.pad_w;
      int64_t lo, hi;
      valid_range(w0, g.stride_w, g.w, g.q, lo, hi);
      for (int64_t p = 0; p < g.p; ++p) {
        const int64_t h = p * g.stride_h - g.pad_h + kh * g.dil_h;
        if (h < 0 || h >= g.h) continue;
        const float* src = row + p * g.q;
        float* dst = plane + h * g.w + w0;
        if (g.stride_w == 1) {
#pragma omp simd
          for (int64_t q = lo; q < hi; ++q) dst[q] += src[q];
        } else {
          for (int64_t q = lo; q < hi; ++q) dst[q * g.stride_w] += src[q];
        }
      }
    }
  }
}

// Scratch of one worker: the column matrix and a [K, nb*PQ] staging matrix (output or dy).
struct Scratch {
  std::vector<float> col, tmp, dw;  // dw: this worker's partial filter gradient
};

class ConvLayer : public Layer {
 public:
  explicit ConvLayer(const LayerSpec& spec) : Layer(spec), g_(ConvGeometry::from_spec(spec_)) {
    one_by_one_ = g_.r == 1 && g_.s == 1 && g_.stride_h == 1 && g_.stride_w == 1 && g_.pad_h == 0 && g_.pad_w == 0;
    prepare(compute_threads());
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t chw = g_.c * g_.h * g_.w, kpq = g_.k * g_.pq();
    const float* bias = g_.bias ? params_.at(1) : nullptr;
    run([&](int64_t n0, int64_t b, Scratch& sc, bool par) {
      forward_chunk(x[0] + n0 * chw, y + n0 * kpq, b, sc, bias, par);
    });
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (dx.empty() || !dx[0]) return;
    const int64_t chw = g_.c * g_.h * g_.w, kpq = g_.k * g_.pq();
    run([&](int64_t n0, int64_t b, Scratch& sc, bool par) {
      backward_data_chunk(dy + n0 * kpq, dx[0] + n0 * chw, b, sc, par);
    });
  }

  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    float* dw = grads_.at(0);
    const int64_t chw = g_.c * g_.h * g_.w, kpq = g_.k * g_.pq();
    const int64_t wsize = g_.k * g_.crs();
    // Each worker sums its samples into its own buffer (the first of them: into dw itself).
    const int workers = run([&](int64_t n0, int64_t b, Scratch& sc, bool par) {
      float* out = &sc == &scratch_[0] ? dw : sc.dw.data();
      const bool first = n0 == first_sample(&sc - scratch_.data());
      filter_chunk(x[0] + n0 * chw, dy + n0 * kpq, b, sc, out, first ? 0.f : 1.f, par);
    });
    if (workers > 1) {
      const int nw = workers;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < wsize; ++i) {
        float acc = dw[i];
        for (int t = 1; t < nw; ++t) acc += scratch_[t].dw[i];
        dw[i] = acc;
      }
    }
    if (g_.bias) {
      float* db = grads_.at(1);
      const int64_t n = g_.n, k_count = g_.k, pq = g_.pq();
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < k_count; ++k) {
        double acc = 0;  // long sums (N*P*Q terms): accumulate in double
        for (int64_t i = 0; i < n; ++i) {
          const float* p = dy + (i * k_count + k) * pq;
          float part = 0.f;
#pragma omp simd reduction(+ : part)
          for (int64_t j = 0; j < pq; ++j) part += p[j];
          acc += part;
        }
        db[k] = static_cast<float>(acc);
      }
    }
  }

 private:
  // Two ways to use T threads. With at least T samples, each thread takes a contiguous share of
  // the batch and runs im2col and single-threaded GEMMs on it: the columns stay in that core's
  // cache, and OpenMP and OpenBLAS threads never spin against each other on the same cores. With
  // fewer samples, chunks run one after another, im2col on OpenMP threads, GEMMs on OpenBLAS's.
  void prepare(int threads) {
    threads_ = std::max(1, threads);
    workers_ = (threads_ > 1 && g_.n >= threads_) ? threads_ : 1;
    const int64_t pq = g_.pq(), per_worker = (g_.n + workers_ - 1) / workers_;
    nb_ = std::clamp<int64_t>((kTargetCols + pq - 1) / pq, 1, per_worker);
    const int64_t col_rows = g_.groups * g_.crs();
    nb_ = std::max<int64_t>(1, std::min(nb_, kMaxColFloats / std::max<int64_t>(1, col_rows * pq)));
    const int64_t chunks = (per_worker + nb_ - 1) / nb_;
    nb_ = (per_worker + chunks - 1) / chunks;  // equal chunks: 4 samples go 2+2, not 3+1
    // std::vector value-initialises: every page is written now, not in the first timed pass.
    // A 1x1 layer with one sample per chunk never needs columns.
    scratch_.clear();
    scratch_.resize(workers_);
    for (int t = 0; t < workers_; ++t) {
      Scratch& sc = scratch_[t];
      if (!(one_by_one_ && nb_ == 1)) sc.col.assign(col_rows * nb_ * pq, 0.f);
      if (nb_ > 1) sc.tmp.assign(g_.k * nb_ * pq, 0.f);
      if (t > 0) sc.dw.assign(g_.k * g_.crs(), 0.f);
    }
  }

  int64_t first_sample(int64_t worker) const { return worker * g_.n / workers_; }

  // Calls chunk(n0, b, scratch, parallel_inside) over the batch; returns the number of workers.
  template <class Chunk>
  int run(Chunk&& chunk) {
    const int threads = compute_threads();
    if (threads != threads_) prepare(threads);  // thread count changed since construction
    if (workers_ == 1) {
      for (int64_t n0 = 0; n0 < g_.n; n0 += nb_) chunk(n0, std::min(nb_, g_.n - n0), scratch_[0], true);
      return 1;
    }
    const int saved = blas_threads();
    set_blas_threads(1);
    const int nw = workers_;
#pragma omp parallel num_threads(nw)
    {
      const int t = omp_get_thread_num();
      const int64_t lo = first_sample(t), hi = first_sample(t + 1);
      for (int64_t n0 = lo; n0 < hi; n0 += nb_) chunk(n0, std::min(nb_, hi - n0), scratch_[t], false);
    }
    set_blas_threads(saved);
    return nw;
  }

  void forward_chunk(const float* xs, float* ys, int64_t b, Scratch& sc, const float* bias, bool par) {
    const int64_t pq = g_.pq(), kg = g_.kg(), crs = g_.crs(), ld = b * pq;
    const float* w = params_.at(0);
    const float* col = columns(xs, b, sc, par);
    float* out = b == 1 ? ys : sc.tmp.data();
    for (int64_t grp = 0; grp < g_.groups; ++grp)
      gemm(false, false, int(kg), int(ld), int(crs), 1.f, w + grp * kg * crs, int(crs), col + grp * crs * ld,
           int(ld), 0.f, out + grp * kg * ld, int(ld));
    if (b > 1) {
      scatter(sc.tmp.data(), ys, b, bias, par);
    } else if (bias) {
      const int64_t k_count = g_.k;
#pragma omp parallel for schedule(static) if (par)
      for (int64_t k = 0; k < k_count; ++k)
        for (int64_t j = 0; j < pq; ++j) out[k * pq + j] += bias[k];
    }
  }

  void backward_data_chunk(const float* dys, float* dxs, int64_t b, Scratch& sc, bool par) {
    const int64_t pq = g_.pq(), kg = g_.kg(), crs = g_.crs(), ld = b * pq, chw = g_.c * g_.h * g_.w;
    const float* w = params_.at(0);
    const float* d = gather(dys, b, sc, par);
    if (one_by_one_ && b == 1) {  // dx += W^T dy straight into the input gradient
      for (int64_t grp = 0; grp < g_.groups; ++grp)
        gemm(true, false, int(crs), int(pq), int(kg), 1.f, w + grp * kg * crs, int(crs), d + grp * kg * pq, int(pq),
             1.f, dxs + grp * crs * pq, int(pq));
      return;
    }
    float* col = sc.col.data();
    for (int64_t grp = 0; grp < g_.groups; ++grp)
      gemm(true, false, int(crs), int(ld), int(kg), 1.f, w + grp * kg * crs, int(crs), d + grp * kg * ld, int(ld),
           0.f, col + grp * crs * ld, int(ld));
    const ConvGeometry& g = g_;
#pragma omp parallel for collapse(2) schedule(static) if (par)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t c = 0; c < g.c; ++c) col2im_channel(col + i * pq, ld, g, c, dxs + i * chw);
  }

  void filter_chunk(const float* xs, const float* dys, int64_t b, Scratch& sc, float* dw, float beta, bool par) {
    const int64_t pq = g_.pq(), kg = g_.kg(), crs = g_.crs(), ld = b * pq;
    const float* col = columns(xs, b, sc, par);
    const float* d = gather(dys, b, sc, par);
    for (int64_t grp = 0; grp < g_.groups; ++grp)
      gemm(false, true, int(kg), int(crs), int(ld), 1.f, d + grp * kg * ld, int(ld), col + grp * crs * ld, int(ld),
           beta, dw + grp * kg * crs, int(crs));
  }

  // The column matrix [G*CRS, b*PQ] of samples xs[0..b): the input itself for 1x1 stride-1 layers.
  const float* columns(const float* xs, int64_t b, Scratch& sc, bool par) {
    if (one_by_one_ && b == 1) return xs;
    const int64_t pq = g_.pq(), ld = b * pq, chw = g_.c * g_.h * g_.w;
    float* col = sc.col.data();
    const ConvGeometry& g = g_;
    if (one_by_one_) {  // a gather of whole planes
#pragma omp parallel for collapse(2) schedule(static) if (par)
      for (int64_t i = 0; i < b; ++i)
        for (int64_t c = 0; c < g.c; ++c) std::memcpy(col + c * ld + i * pq, xs + i * chw + c * pq, sizeof(float) * pq);
      return col;
    }
#pragma omp parallel for collapse(2) schedule(static) if (par)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t c = 0; c < g.c; ++c) im2col_channel(xs + i * chw, g, c, col + i * pq, ld);
    return col;
  }

  // dy of samples [0, b) as one matrix [K, b*PQ] (dy itself when b == 1).
  const float* gather(const float* dys, int64_t b, Scratch& sc, bool par) {
    if (b == 1) return dys;
    const int64_t pq = g_.pq(), ld = b * pq, k_count = g_.k;
    float* t = sc.tmp.data();
#pragma omp parallel for collapse(2) schedule(static) if (par)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t k = 0; k < k_count; ++k) std::memcpy(t + k * ld + i * pq, dys + (i * k_count + k) * pq, sizeof(float) * pq);
    return t;
  }

  // [K, b*PQ] back to NCHW samples of y, adding the bias on the way.
  void scatter(const float* t, float* ys, int64_t b, const float* bias, bool par) {
    const int64_t pq = g_.pq(), ld = b * pq, k_count = g_.k;
#pragma omp parallel for collapse(2) schedule(static) if (par)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t k = 0; k < k_count; ++k) {
        const float* src = t + k * ld + i * pq;
        float* dst = ys + (i * k_count + k) * pq;
        const float bk = bias ? bias[k] : 0.f;
        for (int64_t j = 0; j < pq; ++j) dst[j] = src[j] + bk;
      }
  }

  ConvGeometry g_;
  int threads_ = 1, workers_ = 1;
  int64_t nb_ = 1;           // samples per GEMM
  bool one_by_one_ = false;  // 1x1, stride 1, no padding
  std::vector<Scratch> scratch_;
};
GDL_REGISTER_LAYER("conv", ConvLayer);

}  // namespace
}  // namespace gdl::cpu
