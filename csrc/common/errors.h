// Errors shared by every backend. Bad input throws std::invalid_argument (Python: ValueError,
// the CLI's exit 2); failures of a library or the machine throw std::runtime_error.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace gdl {

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

}  // namespace gdl

#define GDL_REQUIRE(cond, ...)                                    \
  do {                                                            \
    if (!(cond)) throw std::invalid_argument(::gdl::concat(__VA_ARGS__)); \
  } while (0)

#define GDL_FAIL(...) throw std::runtime_error(::gdl::concat(__VA_ARGS__))
