#include "cpu/layer.h"

#include <omp.h>

namespace gdl::cpu {

void set_compute_threads(int n) { omp_set_num_threads(n); }
int compute_threads() { return omp_get_max_threads(); }

}  // namespace gdl::cpu
