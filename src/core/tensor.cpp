// Tensor views and host storage.
#include "core/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace dayzero {

std::string Device::to_string() const {
  return kind == DeviceKind::kCpu ? "cpu" : "cuda:" + std::to_string(index);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

size_t shape_bytes(DType dtype, const Shape& s) {
  if (dtype_bits(dtype) % 8 == 0) return static_cast<size_t>(shape_numel(s)) * dtype_size(dtype);
  if (s.empty()) return dtype_row_bytes(dtype, 1);
  const int64_t cols = s.back();
  return cols == 0 ? 0 : static_cast<size_t>(shape_numel(s) / cols) * dtype_row_bytes(dtype, cols);
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

std::string dtype_shape_str(const Tensor& t) { return std::string(dtype_name(t.dtype())) + shape_str(t.shape()); }

HostStorage::HostStorage(size_t bytes, bool zero) : bytes_(bytes) {
  constexpr size_t kHuge = 2u << 20;
  const size_t align = bytes >= 2 * kHuge ? kHuge : 64;
  const size_t rounded = std::max<size_t>((bytes + align - 1) / align * align, align);
  ptr_ = std::aligned_alloc(align, rounded);
  if (!ptr_) throw std::bad_alloc();
  if (align == kHuge) madvise(ptr_, rounded, MADV_HUGEPAGE);
  if (zero) std::memset(ptr_, 0, rounded);
}
HostStorage::~HostStorage() { std::free(ptr_); }

HostArena::HostArena(size_t bytes) : slab_(std::make_shared<HostStorage>(bytes, false)) {}

size_t HostArena::capacity() const { return slab_->bytes(); }

Tensor HostArena::take(DType dtype, Shape shape) {
  const size_t bytes = shape_bytes(dtype, shape);
  if (used_ + bytes > slab_->bytes()) return Tensor::host_uninitialized(dtype, std::move(shape));
  Tensor t(dtype, std::move(shape), slab_, used_);
  used_ += std::min(padded(bytes), slab_->bytes() - used_);
  return t;
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t offset_bytes)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)), offset_(offset_bytes) {
  DZ_CHECK(!storage_ || offset_ + bytes() <= storage_->bytes(),
           "tensor " << shape_str(shape_) << " exceeds its storage");
}

Tensor Tensor::host(DType dtype, Shape shape) {
  const size_t bytes = shape_bytes(dtype, shape);
  return Tensor(dtype, std::move(shape), std::make_shared<HostStorage>(bytes));
}

Tensor Tensor::host_uninitialized(DType dtype, Shape shape) {
  const size_t bytes = shape_bytes(dtype, shape);
  return Tensor(dtype, std::move(shape), std::make_shared<HostStorage>(bytes, false));
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  DZ_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= shape_[0]);
  Shape s = shape_;
  s[0] = end - begin;
  const size_t row_bytes = shape_[0] ? bytes() / static_cast<size_t>(shape_[0]) : 0;
  return Tensor(dtype_, std::move(s), storage_, offset_ + static_cast<size_t>(begin) * row_bytes);
}

Tensor Tensor::reshape(Shape shape) const {
  DZ_CHECK(shape_numel(shape) == numel(), "reshape " << shape_str(shape_) << " -> " << shape_str(shape));
  return Tensor(dtype_, std::move(shape), storage_, offset_);
}

}  // namespace dayzero
