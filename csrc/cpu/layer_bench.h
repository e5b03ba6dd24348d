// One CPU layer on its own (common/layer_bench.h): host buffers, timed on the host steady clock.
#pragma once
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "common/layer_bench.h"
#include "common/timer.h"
#include "cpu/layer.h"

namespace gdl::cpu {

struct HostMemory {
  using Elem = float;
  class Buffer {  // float-aligned host bytes
   public:
    explicit Buffer(std::size_t n) : v_((n + sizeof(float) - 1) / sizeof(float)) {}
    void* data() { return v_.data(); }

   private:
    std::vector<float> v_;
  };
  static std::unique_ptr<Layer> make_layer(const LayerSpec& spec) { return cpu::make_layer(spec); }
  static void copy(void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); }
  static void zero(void* dst, std::size_t n) { std::memset(dst, 0, n); }
  static std::vector<double> time(const TimingPlan& plan, const std::function<void()>& pass) {
    return time_steady(plan, pass);
  }
};

using LayerBench = LayerBenchOn<HostMemory>;

}  // namespace gdl::cpu
