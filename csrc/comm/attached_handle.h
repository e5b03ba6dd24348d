// A library communicator (an NCCL one, say) attached to an MPI communicator, that may be aborted.
// The entry lives in an MPI attribute (comm_attribute.h) and is destroyed when MPI frees the
// communicator, at MPI_Finalize at the latest. An aborted handle is already released by its
// library: destroying it again there is a double free. So an abort goes through abort(handle),
// which finds the entry the handle belongs to and marks it aborted before it calls the library's
// abort; the entry's destructor then leaves the handle alone, and get() no longer returns it (the
// next use attaches a new one, and MPI deletes the aborted entry it replaces).
// Traits: `using Handle = ...;` (null: none), `static void destroy(Handle)`, `static void abort(Handle)`.
// Header-only: the CUDA module uses it for NCCL, the core module tests it with a stand-in library.
#pragma once
#include <mpi.h>

#include <map>
#include <memory>
#include <mutex>

#include "comm/comm_attribute.h"

namespace gdl::comm {

template <class Traits>
class AttachedHandles {
 public:
  using Handle = typename Traits::Handle;

  // The live (not aborted) handle attached to comm, or a null Handle.
  Handle get(MPI_Comm comm) const {
    Entry* e = attr_.get(comm);
    std::lock_guard<std::mutex> lock(registry().mu);
    return e && !e->aborted ? e->h : Handle{};
  }

  // Attaches h to comm, replacing (and so deleting) any earlier entry; returns h.
  Handle attach(MPI_Comm comm, Handle h) {
    auto e = std::make_unique<Entry>();
    e->h = h;
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      registry().live[h] = e.get();
    }
    try {
      attr_.set(comm, std::move(e));
    } catch (...) {
      std::lock_guard<std::mutex> lock(registry().mu);
      registry().live.erase(h);
      throw;
    }
    return h;
  }

  // Aborts h through the library, marking its entry (when it has one) aborted first.
  static void abort(Handle h) {
    if (!h) return;
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      const auto it = registry().live.find(h);
      if (it != registry().live.end()) {
        if (it->second->aborted) return;  // aborted once already: the library has released it
        it->second->aborted = true;
      }
    }
    Traits::abort(h);
  }

 private:
  struct Entry {
    Handle h{};
    bool aborted = false;
    Entry() = default;
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    ~Entry() {
      bool destroy = false;
      {
        std::lock_guard<std::mutex> lock(registry().mu);
        const auto it = registry().live.find(h);
        if (it != registry().live.end() && it->second == this) registry().live.erase(it);
        destroy = h && !aborted;
      }
      if (destroy) Traits::destroy(h);
    }
  };
  struct Registry {
    std::mutex mu;
    std::map<Handle, Entry*> live;  // handle -> its entry, for abort(handle)
  };
  static Registry& registry() {
    static Registry* r = new Registry;  // never destroyed: MPI_Finalize may run after static destructors
    return *r;
  }
  CommAttribute<Entry> attr_;
};

}  // namespace gdl::comm
