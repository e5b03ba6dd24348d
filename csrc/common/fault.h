// Test-only fault injection. GDLBENCH_FAULT="target=K[,target=K...]" makes the untimed
// correctness checks corrupt K elements of the result they are about to compare, so that a test
// can prove each check fires (tests/test_faults.py). Targets read here: collective (the exact
// check of every collective and algorithm, on every rank, every round), grads (the executor's
// grads() copy). Unset, as everywhere outside those tests: 0. Never read inside a timed loop.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

namespace gdl {

inline std::size_t fault_count(const char* target) {
  const char* env = std::getenv("GDLBENCH_FAULT");
  if (env == nullptr || *env == '\0') return 0;
  const std::string spec(env), want = std::string(target) + "=";
  std::size_t at = 0;
  while (at <= spec.size()) {
    std::size_t end = spec.find(',', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    if (item.compare(0, want.size(), want) == 0) return std::strtoull(item.c_str() + want.size(), nullptr, 10);
    at = end + 1;
  }
  return 0;
}

}  // namespace gdl
