// LRN (cuDNN cross-channel, the same formula as Caffe's: alpha is divided by size) and batch
// normalization in training mode (cuDNN spatial BN), twins of cpu/normalization.cpp.
#include "cuda/layer_util.h"

namespace gdl::cuda {
namespace {

class LrnLayer : public Layer {
 public:
  explicit LrnLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "lrn ", s.name, ": needs one input {C, H, W}");
    const int size = int(s.attr("size", 5));
    const double alpha = s.attr("alpha", 1e-4), beta = s.attr("beta", 0.75), k = s.attr("k", 1.0);
    // Even sizes centre the window differently in cuDNN and Caffe; cuDNN's limits on the rest.
    GDL_REQUIRE(size % 2 == 1 && size >= CUDNN_LRN_MIN_N && size <= CUDNN_LRN_MAX_N, "lrn ", s.name,
                ": size must be odd and in [", CUDNN_LRN_MIN_N, ", ", CUDNN_LRN_MAX_N, "]");
    GDL_REQUIRE(k >= CUDNN_LRN_MIN_K && beta >= CUDNN_LRN_MIN_BETA, "lrn ", s.name, ": cuDNN needs k >= ",
                CUDNN_LRN_MIN_K, " and beta >= ", CUDNN_LRN_MIN_BETA);
    describe(desc_, s.batch, s.in_shapes[0]);
    CUDNN_CHECK(cudnnCreateLRNDescriptor(&lrn_));
    CUDNN_CHECK(cudnnSetLRNDescriptor(lrn_, unsigned(size), alpha, beta, k));
  }
  ~LrnLayer() override { cudnnDestroyLRNDescriptor(lrn_); }
  void forward(const std::vector<const void*>& x, void* y) override {
    CUDNN_CHECK(cudnnLRNCrossChannelForward(context().cudnn, lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, desc_, x[0],
                                            &kZero, desc_, y));
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;  // beta = 1: accumulate
    CUDNN_CHECK(cudnnLRNCrossChannelBackward(context().cudnn, lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, desc_, y,
                                             desc_, dy, desc_, x[0], &kOne, desc_, dx[0]));
  }

 private:
  TensorDesc desc_;
  cudnnLRNDescriptor_t lrn_{};
};
GDL_REGISTER_CUDA_LAYER("lrn", LrnLayer);

// cuDNN computes dx, dgamma and dbeta in one call. backward_params runs it (dx into scratch) and
// remembers that it did for this dy; backward_data then only adds the scratch into dx. Called alone,
// backward_data runs the whole call itself (parameter gradients into scratch). Either way the
// iteration pays for one cuDNN backward plus one accumulate, whichever order the executor uses.
class BatchNormLayer : public Layer {
 public:
  explicit BatchNormLayer(const LayerSpec& s)
      : Layer(s), c_(s.in_shapes.at(0).at(0)), dx_scratch_(std::size_t(in_count()) * sizeof(float)),
        stats_(std::size_t(4 * c_) * sizeof(float)), pgrad_scratch_(std::size_t(2 * c_) * sizeof(float)) {
    require_fp32_nchw(s);
    GDL_REQUIRE(numel(s.out_shape) == numel(s.in_shapes[0]), "bn ", s.name, ": out_shape must equal the input shape");
    GDL_REQUIRE(s.param_shapes.size() == 2 && numel(s.param_shapes[0]) == c_ && numel(s.param_shapes[1]) == c_,
                "bn ", s.name, ": param_shapes must be [C] (scale) then [C] (shift), C = ", c_);
    eps_ = s.attr("eps", 1e-5);
    GDL_REQUIRE(eps_ > 0 && eps_ >= CUDNN_BN_MIN_EPSILON, "bn ", s.name, ": eps must be > 0");
    describe(x_, s.batch, s.in_shapes[0]);
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(bn_, x_, CUDNN_BATCHNORM_SPATIAL));
    CUDA_CHECK(cudaMemsetAsync(stats_.data(), 0, stats_.nbytes(), context().stream));
  }

  void forward(const std::vector<const void*>& x, void* y) override {
    done_for_ = nullptr;
    float* st = static_cast<float*>(stats_.data());  // running mean, running var, saved mean, saved inv std
    CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(context().cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_,
                                                       x[0], x_, y, bn_, params_[0], params_[1], 0.1, st, st + c_,
                                                       eps_, st + 2 * c_, st + 3 * c_));
  }

  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    run_backward(x[0], dy, grads_[0], grads_[1]);
    done_for_ = dy;
  }

  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    if (done_for_ != dy) {
      float* pg = static_cast<float*>(pgrad_scratch_.data());
      run_backward(x[0], dy, pg, pg + c_);
    }
    accumulate(static_cast<float*>(dx[0]), static_cast<const float*>(dx_scratch_.data()), in_count(), context().stream);
    done_for_ = nullptr;
  }

 private:
  void run_backward(const void* x, const void* dy, void* dgamma, void* dbeta) {
    const float* st = static_cast<const float*>(stats_.data());
    CUDNN_CHECK(cudnnBatchNormalizationBackward(context().cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero,
                                                x_, x, x_, dy, x_, dx_scratch_.data(), bn_, params_[0], dgamma, dbeta,
                                                eps_, st + 2 * c_, st + 3 * c_));
  }

  int64_t c_;
  double eps_ = 1e-5;
  TensorDesc x_, bn_;
  DeviceBuffer dx_scratch_, stats_, pgrad_scratch_;
  const void* done_for_ = nullptr;  // dy of the backward whose dx sits in dx_scratch_
};
GDL_REGISTER_CUDA_LAYER("bn", BatchNormLayer);

}  // namespace
}  // namespace gdl::cuda
