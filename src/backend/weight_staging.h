// How a device backend stages one weight through its pinned buffers: the element sizes on the
// host and on the device, whether the device converts, and the chunk that fits a buffer. Host
// code, so that it is tested on the CPU (tests/unit/runtime/weight_staging_test.cpp); the CUDA
// backend's to_device_weight copies and converts what it says. Not the buffers themselves.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace dayzero::backend {

struct WeightStaging {
  DType host = DType::kF32;  // the host tensor's: F32, or BF16/F16 as stored
  DType kept = DType::kF32;  // the device's: F32 or BF16 (plan::kept_dtype)
  size_t staging_bytes = 0;  // one pinned buffer

  size_t host_size() const { return dtype_size(host); }
  size_t kept_size() const { return dtype_size(kept); }
  // The device converts each chunk (staged bytes -> kept) unless the dtypes are equal, in which
  // case the chunk is copied into the weight as it is.
  bool converts() const { return host != kept; }
  // Elements per chunk: as many of the host's as fill one buffer (at least one).
  size_t chunk_elems() const { return std::max<size_t>(1, staging_bytes / host_size()); }
  // Bytes that cross PCIe for n elements.
  uint64_t transfer_bytes(int64_t n) const { return static_cast<uint64_t>(n) * host_size(); }
};

}  // namespace dayzero::backend
