// A value attached to an MPI communicator (an MPI attribute): created by the caller on first use,
// deleted by MPI when the communicator is freed. A cache keyed by the MPI_Comm handle would be
// wrong: MPICH hands a freed communicator's handle out again, and the new communicator would find
// the old one's value (an NCCL communicator over other ranks, say). Header-only, for both modules.
#pragma once
#include <mpi.h>

#include <atomic>
#include <memory>

#include "common/errors.h"

namespace gdl::comm {

template <class T>
class CommAttribute {
 public:
  // The value on comm, or nullptr when it has none (yet).
  T* get(MPI_Comm comm) const {
    void* v = nullptr;
    int found = 0;
    MPI_Comm_get_attr(comm, keyval(), &v, &found);
    return found ? static_cast<T*>(v) : nullptr;
  }

  // Attaches value to comm (replacing any earlier one, which is deleted); returns the stored copy.
  T& set(MPI_Comm comm, std::unique_ptr<T> value) {
    const int rc = MPI_Comm_set_attr(comm, keyval(), value.get());
    if (rc != MPI_SUCCESS) GDL_FAIL("MPI_Comm_set_attr failed (", rc, ")");
    return *value.release();
  }

 private:
  // Not copied to duplicates (MPI_Comm_dup makes a new communicator: it builds its own value).
  static int keyval() {
    static const int k = [] {
      int key = MPI_KEYVAL_INVALID;
      const int rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &remove, &key, nullptr);
      if (rc != MPI_SUCCESS) GDL_FAIL("MPI_Comm_create_keyval failed (", rc, ")");
      return key;
    }();
    return k;
  }
  static int remove(MPI_Comm, int, void* value, void*) {
    delete static_cast<T*>(value);
    return MPI_SUCCESS;
  }
};

// A number that names comm for as long as it lives: no two communicators get the same one, even
// when MPI hands a freed communicator's handle out again. Keyed as the NCCL communicators are.
inline long long comm_serial(MPI_Comm comm) {
  static CommAttribute<long long> serials;
  static std::atomic<long long> next{1};
  if (const long long* s = serials.get(comm)) return *s;
  return serials.set(comm, std::make_unique<long long>(next++));
}

}  // namespace gdl::comm
