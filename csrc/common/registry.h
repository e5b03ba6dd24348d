// Layer types by name, one registry per backend: each layer file registers its factory at load
// time (GDL_REGISTER_LAYER / GDL_REGISTER_CUDA_LAYER), the executors build layers by spec type.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace gdl {

template <class Factory>
class Registry {
 public:
  static Registry& instance() {
    static Registry r;  // function-local: safe to use from other files' static initialisers
    return r;
  }
  bool add(const std::string& name, Factory f) {
    factories_[name] = std::move(f);
    return true;
  }
  const Factory* find(const std::string& name) const {
    auto it = factories_.find(name);
    return it == factories_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& kv : factories_) v.push_back(kv.first);
    return v;
  }

 private:
  std::map<std::string, Factory> factories_;
};

}  // namespace gdl
