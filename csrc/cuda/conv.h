// cuDNN convolution: the "conv" cuda::Layer and what the standalone timing binding needs from it.
//
// Spec attributes, beyond the shared geometry (common/conv_geometry.h):
//   dtype            0 float32, 1 float16, 2 bfloat16 (cuda/layer.h's convention)
//   tf32             1: float32 storage with TF32 tensor-core math (CUDNN_TENSOR_OP_MATH); float32
//                    without it is strict FMA math (CUDNN_FMA_MATH), as torch with allow_tf32 off
//   nhwc             1: activations NHWC and filters KRSC; 0: NCHW and KCRS
//   algo_mode        0 heuristic (cudnnGetConvolution*Algorithm_v7), 1 exhaustive search
//                    (cudnnFindConvolution*AlgorithmEx on scratch buffers), 2 named
//   algo_fwd, algo_bwd_data, algo_bwd_filter   the algorithms (cuDNN enum values) when named
//   workspace_limit  bytes (default 1 GiB); algorithms needing more are never chosen
// fp16/bf16 compute in float (CUDNN_DATA_FLOAT, cuDNN's "pseudo half"), tensor cores allowed.
// Parameters and their gradients are in the activation dtype (cuDNN needs the filter in the data
// type), weights then bias, laid out by Layer::bind_params with elem_size = dtype_size(dtype()).
#pragma once
#include <cudnn.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common/conv_geometry.h"
#include "cuda/layer.h"

namespace gdl::cuda {

enum class ConvPass { fwd = 0, bwd_data = 1, bwd_filter = 2 };
ConvPass parse_conv_pass(const std::string& name);  // fwd, bwd-data, bwd-filter
const char* conv_pass_name(ConvPass p);
int conv_algo_count(ConvPass p);
std::string conv_algo_name(ConvPass p, int algo);                 // e.g. IMPLICIT_PRECOMP_GEMM
int conv_algo_from_name(ConvPass p, const std::string& name);     // -1 when unknown
DType conv_dtype_from_attr(double dtype_attr, double tf32_attr);

// The search (algo_mode 1) runs once per shape in the process, as torch's cudnn.benchmark: later
// layers of the same shape, dtype, layout and workspace limit take the first one's algorithms.
struct ConvSearchStats {
  long long searched = 0;  // shapes searched (cudnnFind*Ex, three passes each)
  long long reused = 0;    // layers that took an earlier search's choice
};
ConvSearchStats conv_search_stats();

struct ConvAlgoQuery {
  bool supported = false;     // cuDNN accepts the algorithm for this shape and type
  std::size_t workspace = 0;  // bytes it needs
  std::string status;         // cuDNN's word when not supported
};

// The cuDNN workspace, one for all convolution layers alive in the process: they run one after
// another on one stream, so a network needs its largest layer's workspace, not the sum of them
// (up to workspace_limit, 1 GiB by default, each). Freed with the last layer that holds it.
class SharedWorkspace {
 public:
  static std::shared_ptr<SharedWorkspace> get();
  void reserve(std::size_t bytes);  // grows (after the stream is idle), never shrinks
  void* data() const { return buf_ ? buf_->data() : nullptr; }
  std::size_t bytes() const { return buf_ ? buf_->nbytes() : 0; }

 private:
  std::unique_ptr<DeviceBuffer> buf_;
};

class ConvLayer : public Layer {
 public:
  explicit ConvLayer(const LayerSpec& spec);
  ~ConvLayer() override;

  void forward(const std::vector<const void*>& x, void* y) override;
  // dx[0] += dL/dx (beta = 1); nullptr: nothing to do.
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override;
  // dw = dL/dw and db = dL/db, overwritten (beta = 0).
  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override;

  const ConvGeometry& geometry() const { return g_; }
  DType dtype() const { return dtype_; }
  bool nhwc() const { return nhwc_; }
  int algo(ConvPass p) const { return algo_[int(p)]; }
  std::size_t workspace_bytes(ConvPass p) const { return ws_need_[int(p)]; }
  std::size_t workspace_limit() const { return ws_limit_; }
  std::string selection() const { return selection_; }  // heuristic / search / named
  ConvAlgoQuery query(ConvPass p, int algo) const;
  // Use `algo` for pass p from now on (std::invalid_argument when cuDNN does not support it).
  void set_algo(ConvPass p, int algo);

 private:
  void make_descriptors();
  void choose_heuristic(ConvPass p);
  void choose_by_search();  // through the per-shape cache (conv_search_stats)
  void search_all();        // cudnnFind*Ex for the three passes
  void choose_named(ConvPass p, int algo);
  void bias(bool grad, void* out, const void* in) const;

  ConvGeometry g_;
  DType dtype_;
  bool nhwc_;
  cudnnDataType_t data_type_;
  cudnnMathType_t math_;
  std::size_t ws_limit_;
  std::string selection_;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  std::array<cudnnConvolutionDescriptor_t, 3> conv_desc_{};  // one per pass: each its own math type
  std::array<int, 3> algo_{{-1, -1, -1}};
  std::array<std::size_t, 3> ws_need_{{0, 0, 0}};
  std::shared_ptr<SharedWorkspace> workspace_ = SharedWorkspace::get();
};

}  // namespace gdl::cuda
