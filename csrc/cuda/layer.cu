#include "cuda/gemm.h"
#include "cuda/layer.h"

namespace gdl::cuda {

Context& context() {
  static Context ctx = [] {
    Context c{};
    c.stream = default_stream();
    c.cublas = cublas_handle();
    CUDNN_CHECK(cudnnCreate(&c.cudnn));
    CUDNN_CHECK(cudnnSetStream(c.cudnn, c.stream));
    return c;
  }();
  return ctx;
}

}  // namespace gdl::cuda
