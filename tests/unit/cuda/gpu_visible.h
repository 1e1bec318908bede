// Why a gpu-labelled unit test cannot run here: CUDA not built in, the runtime unable to count
// devices, or no device visible (the message ctest's SKIP_REGULAR_EXPRESSION matches). Empty
// when a device is visible. Not a device choice: the tests take device 0.
#pragma once

#include <string>

#include "backend/backend.h"

namespace dayzero::test_util {

inline std::string why_no_gpu() {
  if (!backend::cuda_built()) return "this dayzero was built without CUDA";
  auto n = backend::cuda_device_count();
  if (!n.ok()) return "the CUDA runtime cannot count devices: " + n.status().message();
  if (*n == 0) return "no CUDA device is visible";
  return {};
}

}  // namespace dayzero::test_util
