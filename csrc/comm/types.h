// Element types, reduction operators and the exact-check data shared by the MPI collectives
// (gdlbench._core) and the NCCL ones (gdlbench._cuda). Header-only and free of MPI and CUDA, so
// both modules compile it. float16 and bfloat16 are raw 16-bit storage, converted in software.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/errors.h"

namespace gdl::comm {

enum class DType { f32, f64, f16, bf16, i32 };
enum class Op { sum, prod, max, min };

inline DType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "float") return DType::f32;
  if (s == "float64" || s == "double") return DType::f64;
  if (s == "float16" || s == "half") return DType::f16;
  if (s == "bfloat16") return DType::bf16;
  if (s == "int32") return DType::i32;
  GDL_REQUIRE(false, "unknown dtype '", s, "' (float32, float64, float16, bfloat16, int32)");
  return DType::f32;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
  }
  return "?";
}

inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f16:
    case DType::bf16: return 2;
    default: return 4;
  }
}

inline Op parse_op(const std::string& s) {
  if (s == "sum") return Op::sum;
  if (s == "prod") return Op::prod;
  if (s == "max") return Op::max;
  if (s == "min") return Op::min;
  GDL_REQUIRE(false, "unknown op '", s, "' (sum, prod, max, min)");
  return Op::sum;
}

// --- 16-bit floats ------------------------------------------------------------------------
inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal: value = man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t float_to_half(float f) {  // round to nearest even
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (>= 65520) -> inf
  if (a < 0x38800000u) {                                   // below the smallest normal, 2^-14
    // subnormal or zero: round |f| * 2^24 to an integer, ties to even
    const float v = bits_to_float(a) * 16777216.0f;
    return uint16_t(sign | static_cast<uint16_t>(std::nearbyint(v)));
  }
  uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);  // round mantissa to 10 bits
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

// --- reduction: inout[i] = inout[i] (op) in[i] ------------------------------------------------
template <class T, Op O>
inline T apply(T a, T b) {
  if constexpr (O == Op::sum) return a + b;
  else if constexpr (O == Op::prod) return a * b;
  else if constexpr (O == Op::max) return a < b ? b : a;
  else return b < a ? b : a;
}

template <class T, Op O>
inline void reduce_loop(T* __restrict inout, const T* __restrict in, std::size_t n) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) inout[i] = apply<T, O>(inout[i], in[i]);
}

// 16-bit floats: widen to float, reduce, round once (what NCCL and PyTorch do per step).
template <bool BF16, Op O>
inline void reduce_loop16(uint16_t* __restrict inout, const uint16_t* __restrict in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float a = BF16 ? bf16_to_float(inout[i]) : half_to_float(inout[i]);
    const float b = BF16 ? bf16_to_float(in[i]) : half_to_float(in[i]);
    const float r = apply<float, O>(a, b);
    inout[i] = BF16 ? float_to_bf16(r) : float_to_half(r);
  }
}

template <Op O>
inline void reduce_op(void* inout, const void* in, std::size_t n, DType t) {
  switch (t) {
    case DType::f32: return reduce_loop<float, O>(static_cast<float*>(inout), static_cast<const float*>(in), n);
    case DType::f64: return reduce_loop<double, O>(static_cast<double*>(inout), static_cast<const double*>(in), n);
    case DType::i32: return reduce_loop<int32_t, O>(static_cast<int32_t*>(inout), static_cast<const int32_t*>(in), n);
    case DType::f16: return reduce_loop16<false, O>(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in), n);
    case DType::bf16: return reduce_loop16<true, O>(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in), n);
  }
}

inline void reduce(void* inout, const void* in, std::size_t n, DType t, Op op) {
  switch (op) {
    case Op::sum: return reduce_op<Op::sum>(inout, in, n, t);
    case Op::prod: return reduce_op<Op::prod>(inout, in, n, t);
    case Op::max: return reduce_op<Op::max>(inout, in, n, t);
    case Op::min: return reduce_op<Op::min>(inout, in, n, t);
  }
}

// --- exact check data --------------------------------------------------------------------
// Rank r's element i is a small integer (or +-1/+-2 for prod) chosen so that the reduction over
// any number of ranks, in any order, is exactly representable in every dtype: sums stay within
// +-256 (bfloat16 holds every integer up to 256), a product has exactly one factor of +-2 and the
// rest +-1, max/min pick one of the inputs.
inline int check_bound(int nranks) {  // |value| <= bound, so |sum| <= nranks * bound <= 256
  const int b = 256 / (nranks > 0 ? nranks : 1);
  return b < 1 ? 1 : (b > 8 ? 8 : b);
}

inline uint32_t mix32(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(x ^ (x >> 31));
}

// Value of element i on rank r (of n ranks) in check round `seed`.
inline double check_value(Op op, uint64_t seed, int r, int n, std::size_t i) {
  const uint32_t h = mix32((seed << 40) ^ (uint64_t(r) << 32) ^ i);
  if (op == Op::prod) {
    const double sign = (h & 1u) ? -1.0 : 1.0;
    // exactly one rank (chosen by i) contributes a factor 2
    const bool two = static_cast<int>((i + seed) % static_cast<uint64_t>(n)) == r;
    return sign * (two ? 2.0 : 1.0);
  }
  if (n > 256 && op == Op::sum) return (h & 1u) ? 1.0 : 0.0;  // sum <= n: exact in fp16 up to 2048
  const int b = check_bound(n);
  return static_cast<double>(static_cast<int>((h >> 1) % uint32_t(2 * b + 1)) - b);
}

inline double check_expected(Op op, uint64_t seed, int n, std::size_t i) {
  double acc = check_value(op, seed, 0, n, i);
  for (int r = 1; r < n; ++r) {
    const double v = check_value(op, seed, r, n, i);
    switch (op) {
      case Op::sum: acc += v; break;
      case Op::prod: acc *= v; break;
      case Op::max: acc = v > acc ? v : acc; break;
      case Op::min: acc = v < acc ? v : acc; break;
    }
  }
  return acc;
}

inline void store(void* p, std::size_t i, DType t, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v)); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
  }
}

inline double load(const void* p, std::size_t i, DType t) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

// Fill `count` elements with rank r's check values for elements [first, first + count).
inline void fill_check(void* p, std::size_t count, DType t, Op op, uint64_t seed, int r, int n,
                       std::size_t first = 0) {
  for (std::size_t i = 0; i < count; ++i) store(p, i, t, check_value(op, seed, r, n, first + i));
}

// Poison a buffer (all bytes 0xFF: NaN for floats, -1 for int32) so unwritten output is caught.
inline void poison(void* p, std::size_t count, DType t) { std::memset(p, 0xFF, count * dtype_size(t)); }

// Elements of p[0, count) that differ from expected(i) (exact comparison; NaN is wrong).
template <class Expected>
inline std::size_t count_wrong(const void* p, std::size_t count, DType t, Expected&& expected) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double got = load(p, i, t);
    if (!(got == expected(i))) ++wrong;
  }
  return wrong;
}

}  // namespace gdl::comm
