// cuDNN convolution layer (see cuda/conv.h for the attributes). Every cuDNN and CUDA call is
// checked; an algorithm cuDNN rejects for a shape is an std::invalid_argument (a usage error),
// a failure while running one a std::runtime_error.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda/conv.h"
#include "cuda/layer_util.h"

namespace gdl::cuda {

namespace {
const char* const kFwdNames[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                 "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
const char* const kBwdDataNames[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
const char* const kBwdFilterNames[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                       "FFT_TILING"};
static_assert(sizeof(kFwdNames) / sizeof(*kFwdNames) == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
static_assert(sizeof(kBwdDataNames) / sizeof(*kBwdDataNames) == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
static_assert(sizeof(kBwdFilterNames) / sizeof(*kBwdFilterNames) == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);

constexpr std::size_t kDefaultWorkspaceLimit = std::size_t(1) << 30;

// alpha/beta for float, half and bfloat16 data are floats (kOne, kZero: cuda/layer_util.h).

// The bias, by our own kernels rather than cuDNN's AddTensor and ConvolutionBackwardBias (legacy
// ops, deprecated in cuDNN 9); arithmetic in float, stored in the data type, as cuDNN does.
__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ float as_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ int64_t channel_of(int64_t i, int64_t k, int64_t pq, bool nhwc) {
  return nhwc ? i % k : (i / pq) % k;
}

// y[n, k, p, q] += b[k]
template <class T>
__global__ void add_bias(T* __restrict__ y, const T* __restrict__ b, int64_t n, int64_t k, int64_t pq, bool nhwc) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(as_float(y[i]) + as_float(b[channel_of(i, k, pq, nhwc)]));
}

// db[c] = sum of dy over n, p, q: one block per channel (blockDim.x = 256).
template <class T>
__global__ void bias_grad(T* __restrict__ db, const T* __restrict__ dy, int64_t batch, int64_t k, int64_t pq,
                          bool nhwc) {
  __shared__ float part[256];
  const int64_t c = blockIdx.x, m = batch * pq;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x)
    s += as_float(dy[nhwc ? j * k + c : (j / pq) * k * pq + c * pq + j % pq]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = from_float<T>(part[0]);
}

template <class T>
void launch_bias(bool grad, void* out, const void* in, const ConvGeometry& g, bool nhwc, cudaStream_t s) {
  if (grad) {
    bias_grad<T><<<static_cast<unsigned>(g.k), 256, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(in), g.n, g.k,
                                                             g.pq(), nhwc);
  } else {
    const int64_t n = g.n * g.k * g.pq();
    add_bias<T><<<grid_for(n), 256, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(in), n, g.k, g.pq(), nhwc);
  }
  CUDA_CHECK(cudaGetLastError());
}
}  // namespace

// grad false: y += bias (out = y, in = bias); true: dbias = sum of dy (out = dbias, in = dy).
void ConvLayer::bias(bool grad, void* out, const void* in) const {
  const cudaStream_t s = context().stream;
  switch (dtype_) {
    case DType::f16: return launch_bias<__half>(grad, out, in, g_, nhwc_, s);
    case DType::bf16: return launch_bias<__nv_bfloat16>(grad, out, in, g_, nhwc_, s);
    default: return launch_bias<float>(grad, out, in, g_, nhwc_, s);
  }
}

std::shared_ptr<SharedWorkspace> SharedWorkspace::get() {
  static std::mutex mu;
  static std::weak_ptr<SharedWorkspace> current;
  std::lock_guard<std::mutex> lock(mu);
  auto ws = current.lock();
  if (!ws) current = ws = std::make_shared<SharedWorkspace>();
  return ws;
}

void SharedWorkspace::reserve(std::size_t bytes) {
  if (buf_ && buf_->nbytes() >= bytes) return;
  CUDA_CHECK(cudaStreamSynchronize(context().stream));  // the old one may still be in use
  buf_.reset();
  buf_ = std::make_unique<DeviceBuffer>(bytes);
}

ConvPass parse_conv_pass(const std::string& name) {
  if (name == "fwd") return ConvPass::fwd;
  if (name == "bwd-data") return ConvPass::bwd_data;
  if (name == "bwd-filter") return ConvPass::bwd_filter;
  GDL_REQUIRE(false, "conv: pass must be fwd, bwd-data or bwd-filter, got '", name, "'");
  return ConvPass::fwd;
}

const char* conv_pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::fwd: return "fwd";
    case ConvPass::bwd_data: return "bwd-data";
    default: return "bwd-filter";
  }
}

int conv_algo_count(ConvPass p) {
  switch (p) {
    case ConvPass::fwd: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case ConvPass::bwd_data: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    default: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
}

std::string conv_algo_name(ConvPass p, int algo) {
  if (algo < 0 || algo >= conv_algo_count(p)) return concat("ALGO#", algo);
  switch (p) {
    case ConvPass::fwd: return kFwdNames[algo];
    case ConvPass::bwd_data: return kBwdDataNames[algo];
    default: return kBwdFilterNames[algo];
  }
}

int conv_algo_from_name(ConvPass p, const std::string& name) {
  for (int a = 0; a < conv_algo_count(p); ++a)
    if (conv_algo_name(p, a) == name) return a;
  return -1;
}

DType conv_dtype_from_attr(double dtype_attr, double tf32_attr) {
  const int d = static_cast<int>(dtype_attr);
  GDL_REQUIRE(d >= 0 && d <= 2, "conv: attrs dtype must be 0 (float32), 1 (float16) or 2 (bfloat16), got ", d);
  if (d == 1) return DType::f16;
  if (d == 2) return DType::bf16;
  return tf32_attr != 0 ? DType::tf32 : DType::f32;
}

ConvLayer::ConvLayer(const LayerSpec& spec)
    : Layer(spec),
      g_(ConvGeometry::from_spec(spec_)),
      dtype_(conv_dtype_from_attr(spec_.attr("dtype", 0), spec_.attr("tf32", 0))),
      nhwc_(spec_.attr("nhwc", 0) != 0) {
  const double limit = spec_.attr("workspace_limit", double(kDefaultWorkspaceLimit));
  GDL_REQUIRE(limit >= 0, "conv: workspace_limit must be >= 0");
  ws_limit_ = static_cast<std::size_t>(limit);
  switch (dtype_) {
    case DType::f16: data_type_ = CUDNN_DATA_HALF; math_ = CUDNN_TENSOR_OP_MATH; break;
    case DType::bf16: data_type_ = CUDNN_DATA_BFLOAT16; math_ = CUDNN_TENSOR_OP_MATH; break;
    case DType::tf32: data_type_ = CUDNN_DATA_FLOAT; math_ = CUDNN_TENSOR_OP_MATH; break;
    default: data_type_ = CUDNN_DATA_FLOAT; math_ = CUDNN_FMA_MATH; break;
  }
  struct Cleanup {  // the destructor does not run when a constructor throws
    ConvLayer* self;
    bool armed = true;
    ~Cleanup() {
      if (!armed) return;
      for (auto d : self->conv_desc_)
        if (d) cudnnDestroyConvolutionDescriptor(d);
      if (self->w_desc_) cudnnDestroyFilterDescriptor(self->w_desc_);
      for (auto d : {self->x_desc_, self->y_desc_})
        if (d) cudnnDestroyTensorDescriptor(d);
    }
  } cleanup{this};
  make_descriptors();
  const int mode = static_cast<int>(spec_.attr("algo_mode", 0));
  GDL_REQUIRE(mode >= 0 && mode <= 2, "conv: algo_mode must be 0 (heuristic), 1 (search) or 2 (named)");
  if (mode == 1) {
    selection_ = "search";
    choose_by_search();
  } else if (mode == 2) {
    selection_ = "named";
    choose_named(ConvPass::fwd, static_cast<int>(spec_.attr("algo_fwd")));
    choose_named(ConvPass::bwd_data, static_cast<int>(spec_.attr("algo_bwd_data")));
    choose_named(ConvPass::bwd_filter, static_cast<int>(spec_.attr("algo_bwd_filter")));
  } else {
    selection_ = "heuristic";
    for (auto p : {ConvPass::fwd, ConvPass::bwd_data, ConvPass::bwd_filter}) choose_heuristic(p);
  }
  workspace_->reserve(*std::max_element(ws_need_.begin(), ws_need_.end()));
  cleanup.armed = false;
}

ConvLayer::~ConvLayer() {
  for (auto d : conv_desc_)
    if (d) cudnnDestroyConvolutionDescriptor(d);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  for (auto d : {x_desc_, y_desc_})
    if (d) cudnnDestroyTensorDescriptor(d);
}

void ConvLayer::make_descriptors() {
  const cudnnTensorFormat_t fmt = nhwc_ ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, fmt, data_type_, i(g_.n), i(g_.c), i(g_.h), i(g_.w)));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_desc_));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_desc_, fmt, data_type_, i(g_.n), i(g_.k), i(g_.p), i(g_.q)));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_, data_type_, fmt, i(g_.k), i(g_.cg()), i(g_.r), i(g_.s)));
  for (auto& d : conv_desc_) {
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, i(g_.pad_h), i(g_.pad_w), i(g_.stride_h), i(g_.stride_w),
                                                i(g_.dil_h), i(g_.dil_w), CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, i(g_.groups)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(d, math_));
  }
  // cuDNN computes the output shape itself: it must agree with the spec's.
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_desc_[0], x_desc_, w_desc_, &n, &c, &h, &w));
  if (n != g_.n || c != g_.k || h != g_.p || w != g_.q)
    GDL_FAIL("conv: cuDNN's output shape ", n, "x", c, "x", h, "x", w, " differs from the spec's ", g_.n, "x", g_.k,
             "x", g_.p, "x", g_.q);
}

ConvAlgoQuery ConvLayer::query(ConvPass p, int algo) const {
  ConvAlgoQuery q;
  GDL_REQUIRE(algo >= 0 && algo < conv_algo_count(p), "conv: no ", conv_pass_name(p), " algorithm ", algo);
  const Context& ctx = context();
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  auto d = conv_desc_[int(p)];
  switch (p) {
    case ConvPass::fwd:
      s = cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, x_desc_, w_desc_, d, y_desc_,
                                                  static_cast<cudnnConvolutionFwdAlgo_t>(algo), &q.workspace);
      break;
    case ConvPass::bwd_data:
      s = cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.cudnn, w_desc_, y_desc_, d, x_desc_,
                                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                                       &q.workspace);
      break;
    case ConvPass::bwd_filter:
      s = cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx.cudnn, x_desc_, y_desc_, d, w_desc_,
                                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                         &q.workspace);
      break;
  }
  q.supported = s == CUDNN_STATUS_SUCCESS;
  if (!q.supported) {
    q.status = cudnnGetErrorString(s);
    q.workspace = 0;
  }
  return q;
}

void ConvLayer::choose_named(ConvPass p, int algo) {
  const ConvAlgoQuery q = query(p, algo);
  GDL_REQUIRE(q.supported, "conv: cuDNN does not support ", conv_pass_name(p), " algorithm ",
              conv_algo_name(p, algo), " for this shape and dtype (", q.status, ")");
  GDL_REQUIRE(q.workspace <= ws_limit_, "conv: ", conv_pass_name(p), " algorithm ", conv_algo_name(p, algo),
              " needs a ", q.workspace, "-byte workspace, above the limit of ", ws_limit_);
  algo_[int(p)] = algo;
  ws_need_[int(p)] = q.workspace;
}

void ConvLayer::set_algo(ConvPass p, int algo) {
  const ConvAlgoQuery q = query(p, algo);
  GDL_REQUIRE(q.supported, "conv: cuDNN does not support ", conv_pass_name(p), " algorithm ",
              conv_algo_name(p, algo), " (", q.status, ")");
  algo_[int(p)] = algo;
  ws_need_[int(p)] = q.workspace;
  workspace_->reserve(q.workspace);
}

namespace {
// The first result that ran and fits: heuristics and searches both return best first. Strict
// float32 never takes a tensor-core result.
template <class Perf>
const Perf* pick(const Perf* perf, int count, std::size_t limit, bool strict_fp32) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > limit) continue;
    if (strict_fp32 && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH) continue;
    return &perf[i];
  }
  return nullptr;
}
}  // namespace

void ConvLayer::choose_heuristic(ConvPass p) {
  const Context& ctx = context();
  const bool strict = dtype_ == DType::f32;
  auto d = conv_desc_[int(p)];
  int returned = 0;
  auto take = [&](auto* best) {
    GDL_REQUIRE(best, "conv: no ", conv_pass_name(p), " algorithm from cuDNN's heuristic fits a ", ws_limit_,
                "-byte workspace");
    algo_[int(p)] = static_cast<int>(best->algo);
    ws_need_[int(p)] = best->memory;
    // Strict float32 keeps FMA math: DEFAULT_MATH would allow TF32 on Ampere and newer.
    if (!strict) CUDNN_CHECK(cudnnSetConvolutionMathType(d, best->mathType));
  };
  if (p == ConvPass::fwd) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, x_desc_, w_desc_, d, y_desc_,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
    take(pick(perf, returned, ws_limit_, strict));
  } else if (p == ConvPass::bwd_data) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.cudnn, w_desc_, y_desc_, d, x_desc_,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
    take(pick(perf, returned, ws_limit_, strict));
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.cudnn, x_desc_, y_desc_, d, w_desc_,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
                                                              perf));
    take(pick(perf, returned, ws_limit_, strict));
  }
}

namespace {
// One search per shape, as torch's cudnn.benchmark keeps one per shape: layers of the same shape,
// type, layout, workspace limit and device reuse the first one's choice.
struct SearchChoice {
  std::array<int, 3> algo;
  std::array<std::size_t, 3> ws;
  std::array<cudnnMathType_t, 3> math;
};
struct SearchCache {
  std::mutex mu;
  std::map<std::string, SearchChoice> choices;
  ConvSearchStats stats;
};
SearchCache& search_cache() {
  static SearchCache* c = new SearchCache;  // layers may outlive static destructors (Python's GC)
  return *c;
}
}  // namespace

ConvSearchStats conv_search_stats() {
  SearchCache& c = search_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void ConvLayer::choose_by_search() {
  const ConvGeometry& g = g_;
  const std::string key = concat(current_device(), ":", g.n, ",", g.c, ",", g.h, ",", g.w, ",", g.k, ",", g.r, ",",
                                 g.s, ",", g.stride_h, ",", g.stride_w, ",", g.pad_h, ",", g.pad_w, ",", g.dil_h, ",",
                                 g.dil_w, ",", g.groups, ":", int(dtype_), ":", nhwc_, ":", ws_limit_);
  SearchCache& cache = search_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    const auto it = cache.choices.find(key);
    if (it != cache.choices.end()) {
      ++cache.stats.reused;
      for (int p = 0; p < 3; ++p) {
        algo_[p] = it->second.algo[p];
        ws_need_[p] = it->second.ws[p];
        if (dtype_ != DType::f32) CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_[p], it->second.math[p]));
      }
      return;
    }
  }
  search_all();
  SearchChoice choice{};
  for (int p = 0; p < 3; ++p) {
    choice.algo[p] = algo_[p];
    choice.ws[p] = ws_need_[p];
    CUDNN_CHECK(cudnnGetConvolutionMathType(conv_desc_[p], &choice.math[p]));
  }
  std::lock_guard<std::mutex> lock(cache.mu);
  ++cache.stats.searched;
  cache.choices.emplace(key, choice);
}

void ConvLayer::search_all() {
  // cudnnFind*Ex runs every algorithm on real buffers: scratch copies of the layer's tensors filled
  // with test data (the outputs are overwritten, so the caller's buffers are never touched).
  const Context& ctx = context();
  const std::size_t es = dtype_size(dtype_);
  DeviceBuffer x(g_.n * g_.c * g_.h * g_.w * es), y(g_.n * g_.k * g_.pq() * es), w(g_.k * g_.crs() * es);
  DeviceBuffer dy(y.nbytes()), dx(x.nbytes()), dw(w.nbytes());
  fill(x.data(), x.nbytes() / es, dtype_, 11);
  fill(w.data(), w.nbytes() / es, dtype_, 5);
  fill(dy.data(), dy.nbytes() / es, dtype_, 7);
  std::size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const std::size_t ws_bytes = std::min(ws_limit_, free_b / 10 * 9);
  DeviceBuffer ws(ws_bytes);
  const bool strict = dtype_ == DType::f32;
  int returned = 0;
  auto take = [&](ConvPass p, auto* best) {
    GDL_REQUIRE(best, "conv: no ", conv_pass_name(p), " algorithm ran within a ", ws_bytes, "-byte workspace");
    algo_[int(p)] = static_cast<int>(best->algo);
    ws_need_[int(p)] = best->memory;
    if (!strict) CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_[int(p)], best->mathType));
  };
  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(ctx.cudnn, x_desc_, x.data(), w_desc_, w.data(),
                                                       conv_desc_[0], y_desc_, y.data(),
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ws.data(),
                                                       ws_bytes));
    take(ConvPass::fwd, pick(perf, returned, ws_bytes, strict));
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(ctx.cudnn, w_desc_, w.data(), y_desc_, dy.data(),
                                                            conv_desc_[1], x_desc_, dx.data(),
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf,
                                                            ws.data(), ws_bytes));
    take(ConvPass::bwd_data, pick(perf, returned, ws_bytes, strict));
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(ctx.cudnn, x_desc_, x.data(), y_desc_, dy.data(),
                                                              conv_desc_[2], w_desc_, dw.data(),
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
                                                              perf, ws.data(), ws_bytes));
    take(ConvPass::bwd_filter, pick(perf, returned, ws_bytes, strict));
  }
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // the scratch buffers are freed on return
}

void ConvLayer::forward(const std::vector<const void*>& x, void* y) {
  const Context& ctx = context();
  GDL_REQUIRE(params_.size() == (g_.bias ? 2u : 1u), "conv: bind_params first");
  CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn, &kOne, x_desc_, x.at(0), w_desc_, params_[0], conv_desc_[0],
                                      static_cast<cudnnConvolutionFwdAlgo_t>(algo_[0]), workspace_->data(),
                                      ws_need_[0], &kZero, y_desc_, y));
  if (g_.bias) bias(false, y, params_[1]);
}

void ConvLayer::backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                              const std::vector<void*>& dx) {
  if (dx.empty() || !dx[0]) return;
  const Context& ctx = context();
  CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn, &kOne, w_desc_, params_.at(0), y_desc_, dy, conv_desc_[1],
                                           static_cast<cudnnConvolutionBwdDataAlgo_t>(algo_[1]), workspace_->data(),
                                           ws_need_[1], &kOne, x_desc_, dx[0]));
}

void ConvLayer::backward_params(const std::vector<const void*>& x, const void* y, const void* dy) {
  const Context& ctx = context();
  GDL_REQUIRE(grads_.size() == (g_.bias ? 2u : 1u), "conv: bind_params first");
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn, &kOne, x_desc_, x.at(0), y_desc_, dy, conv_desc_[2],
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo_[2]),
                                             workspace_->data(), ws_need_[2], &kZero, w_desc_, grads_[0]));
  if (g_.bias) bias(true, grads_[1], dy);
}

GDL_REGISTER_CUDA_LAYER("conv", ConvLayer);

}  // namespace gdl::cuda
