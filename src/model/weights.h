// Weights: the tensors this rank holds, by HF name, on the backend's device (f32).
// Filled by the loader after it has checked every spec; lookups of a missing name are a bug.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dayzero::model {

class Weights {
 public:
  Weights() = default;
  // A view of `base` in which get/find/has of `name` look up prefix + name: a family that
  // nests another's layout (llava's "language_model.") runs that family's blocks unchanged.
  // REQUIRES: base outlives the view; a view holds no tensors of its own.
  Weights(const Weights& base, std::string prefix) : base_(&base), prefix_(std::move(prefix)) {}

  void put(const std::string& name, Tensor t) { by_name_[name] = std::move(t); }
  bool has(const std::string& name) const { return base_ ? base_->has(prefix_ + name) : by_name_.count(name) != 0; }
  const Tensor& get(const std::string& name) const {
    if (base_) return base_->get(prefix_ + name);
    auto it = by_name_.find(name);
    DZ_CHECK(it != by_name_.end(), "weight " << name << " was not loaded");
    return it->second;
  }
  const Tensor* find(const std::string& name) const {
    if (base_) return base_->find(prefix_ + name);
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &it->second;
  }
  size_t size() const { return by_name_.size(); }
  // Every tensor held, in name order (not through a view).
  std::vector<const Tensor*> tensors() const {
    std::vector<const Tensor*> out;
    for (const auto& [n, t] : by_name_) out.push_back(&t);
    return out;
  }
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& [n, t] : by_name_) b += static_cast<int64_t>(t.bytes());
    return b;
  }

 private:
  std::map<std::string, Tensor> by_name_;
  const Weights* base_ = nullptr;
  std::string prefix_;
};

}  // namespace dayzero::model
