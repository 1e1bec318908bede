// ForwardingBackend: a test backend that hands every backend::Backend op to a wrapped backend
// (the CPU backend it owns, or one it borrows), so that a test overrides only the ops it counts
// or changes. When Backend gains an op, it is forwarded here and nowhere else.
// Not a backend of its own: it adds no behaviour; a test subclass does.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "backend/backend.h"

namespace dayzero::test_util {

class ForwardingBackend : public backend::Backend {
 public:
  // Owns a CPU backend made with default options. REQUIRES: the CPU backend can be made.
  ForwardingBackend() : owned_(std::move(backend::make_backend({})).value()), inner_(*owned_) {}
  // Borrows inner. REQUIRES: inner outlives this backend.
  explicit ForwardingBackend(backend::Backend& inner) : inner_(inner) {}

  std::string name() const override { return inner_.name(); }
  std::string describe() const override { return inner_.describe(); }
  Device device() const override { return inner_.device(); }

  Tensor empty(DType d, Shape s) override { return inner_.empty(d, std::move(s)); }
  Tensor empty_output(DType d, Shape s) override { return inner_.empty_output(d, std::move(s)); }
  Tensor to_device(const Tensor& h) override { return inner_.to_device(h); }
  Tensor to_device_weight(const Tensor& h) override { return inner_.to_device_weight(h); }
  Tensor to_device_weight(const Tensor& h, DType kept) override { return inner_.to_device_weight(h, kept); }
  bool wants_stored_dtype() const override { return inner_.wants_stored_dtype(); }
  bool keeps_stored(StoredScheme s) const override { return inner_.keeps_stored(s); }
  Tensor to_device_stored(const StoredWeightSlice& w) override { return inner_.to_device_stored(w); }
  Status reserve(const backend::Reservation& r) override { return inner_.reserve(r); }
  void to_host(const Tensor& s, Tensor& d) override { inner_.to_host(s, d); }
  void copy(const Tensor& s, Tensor& d) override { inner_.copy(s, d); }
  void synchronize() override { inner_.synchronize(); }
  backend::MemoryInfo memory_info() const override { return inner_.memory_info(); }
  void* device_stream() const override { return inner_.device_stream(); }

  void matmul(const Tensor& x, const Tensor& w, Tensor& y, bool acc) override { inner_.matmul(x, w, y, acc); }
  // matmul_shared_x is not forwarded: its default calls this->matmul for each product, so a
  // subclass that overrides matmul sees every product (as with add_rmsnorm and its parts).
  void add_bias(const Tensor& b, Tensor& y) override { inner_.add_bias(b, y); }
  void add(const Tensor& x, Tensor& y) override { inner_.add(x, y); }
  void rmsnorm(const Tensor& x, const Tensor& w, float e, Tensor& y) override { inner_.rmsnorm(x, w, e, y); }
  void rope(Tensor& x, const Tensor& p, const Tensor& f) override { inner_.rope(x, p, f); }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t p, float s, Tensor& o) override {
    inner_.attention(q, k, v, p, s, o);
  }
  void swiglu(const Tensor& g, const Tensor& u, Tensor& o) override { inner_.swiglu(g, u, o); }
  void embedding(const Tensor& i, const Tensor& t, int64_t r, Tensor& o) override { inner_.embedding(i, t, r, o); }
  void layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float e, Tensor& y) override {
    inner_.layernorm(x, w, b, e, y);
  }
  void gelu(backend::GeluKind k, const Tensor& x, Tensor& y) override { inner_.gelu(k, x, y); }
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float s, Tensor& o) override {
    inner_.attention_full(q, k, v, s, o);
  }
  void route_topk(const Tensor& l, const Tensor* b, const backend::RouterOptions& o, Tensor& i, Tensor& w) override {
    inner_.route_topk(l, b, o, i, w);
  }

 protected:
  backend::Backend& inner() const { return inner_; }

 private:
  std::unique_ptr<backend::Backend> owned_;  // null when borrowed
  backend::Backend& inner_;
};

}  // namespace dayzero::test_util
