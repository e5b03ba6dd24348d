// exp in float arithmetic only, so that the loops calling it vectorise (libm's expf is a scalar
// call here). Used by the GELU/tanh activations (position_wise.cpp), the softmax of the loss
// (loss.cpp) and of attention (attention.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace gdl::cpu {

// Cephes' expf polynomial after x = n ln2 + r, about 2 ulp; 0 below -87.3, saturating at e^88.3
// above (its callers only divide by it, sum it or multiply it by a small number).
inline float exp_poly(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.3f);
  // n = round(x / ln2) by the 1.5 * 2^23 trick (std::floor would be a call that stops vectorising)
  const float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (int32_t(n) + 127) << 23;  // 2^n, n in [-126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.3f ? 0.f : p * scale;
}

}  // namespace gdl::cpu
