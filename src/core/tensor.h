// Tensor: a dtype, a shape and a view into device-owned storage (contiguous, row-major,
// PyTorch dimension order). Storage is allocated by a backend (backend/backend.h); a CPU
// tensor's data() is a host pointer, a CUDA tensor's is a device pointer and must only be
// handed to that backend's ops.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace dayzero {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  std::string to_string() const;
};

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
// Bytes of a row-major array of this shape: numel x element size; a sub-byte type's rows (the
// last dimension) each start on a byte (dtype_row_bytes).
size_t shape_bytes(DType dtype, const Shape& s);
std::string shape_str(const Shape& s);  // "[4, 128]"

// Owning allocation on one device; freed by its destructor.
class Storage {
 public:
  virtual ~Storage() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  virtual Device device() const = 0;
};

// Host memory, 64-byte aligned (AVX-512 loads); buffers of 4 MiB and more are 2 MiB aligned
// and advised for transparent huge pages, which cuts page faults when weights are loaded.
class HostStorage final : public Storage {
 public:
  explicit HostStorage(size_t bytes, bool zero = true);
  ~HostStorage() override;
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return {}; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Tensor;

// One host allocation that many tensors are placed in, back to back (each 64-byte aligned):
// a CPU rank's weights, so that all of them sit on 2 MiB transparent huge pages (HostStorage
// of the total) instead of one allocation each, most of them too small for a huge page. A
// weight-streaming decode reads every weight once per token, and 4 KiB pages cost it a TLB
// miss per page. Not a general allocator: nothing is freed before the arena's last tensor.
// Not thread-safe.
class HostArena {
 public:
  explicit HostArena(size_t bytes);
  // An uninitialised tensor placed in the arena, or allocated on its own (Tensor::
  // host_uninitialized) once the arena is full, so a short estimate costs speed, not a failure.
  Tensor take(DType dtype, Shape shape);
  size_t capacity() const;
  size_t used() const { return used_; }
  static size_t padded(size_t bytes) { return (bytes + 63) / 64 * 64; }  // bytes a tensor takes

 private:
  std::shared_ptr<HostStorage> slab_;
  size_t used_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t offset_bytes = 0);

  // A zero-filled host tensor.
  static Tensor host(DType dtype, Shape shape);
  // A host tensor whose contents are undefined until written (for buffers filled at once).
  static Tensor host_uninitialized(DType dtype, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t bytes() const { return shape_bytes(dtype_, shape_); }
  Device device() const { return storage_ ? storage_->device() : Device{}; }

  void* data() { return static_cast<char*>(storage_->data()) + offset_; }
  const void* data() const { return static_cast<const char*>(storage_->data()) + offset_; }
  // Host f32 access. REQUIRES: CPU tensor of dtype F32.
  float* f32() {
    DZ_CHECK(dtype_ == DType::kF32 && device().is_cpu());
    return static_cast<float*>(data());
  }
  const float* f32() const {
    DZ_CHECK(dtype_ == DType::kF32 && device().is_cpu());
    return static_cast<const float*>(data());
  }

  // Rows [begin, end) of the first dimension, sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;
  // Same storage viewed with another shape of equal numel.
  Tensor reshape(Shape shape) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
};

// "f32[4, 128]": a tensor as messages name it.
std::string dtype_shape_str(const Tensor& t);

}  // namespace dayzero
