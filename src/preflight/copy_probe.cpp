// The host-device copy test of preflight (probes.h host_device_copy): pinned host memory to and
// from one device through the CUDA runtime, timed by events on a stream of its own. Compiles to
// an Unsupported answer without CUDA.
#include "preflight/probes.h"

#ifdef DAYZERO_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <limits>
#include <string>

namespace dayzero::preflight {

#ifdef DAYZERO_WITH_CUDA
namespace {

// The buffers, stream and events of one test; everything made is released, on every path.
struct CopyRig {
  void* host = nullptr;
  void* device = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  ~CopyRig() {
    if (end) cudaEventDestroy(end);
    if (begin) cudaEventDestroy(begin);
    if (stream) cudaStreamDestroy(stream);
    if (device) cudaFree(device);
    if (host) cudaFreeHost(host);
  }
};

Status copy_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // the error is reported here, not left for the next CUDA call
  return Status::Internal("host-device copy test: " + what + ": " + cudaGetErrorString(e));
}

}  // namespace

Result<CopyFigure> host_device_copy(int device, int64_t bytes, int reps) {
  const auto n = static_cast<size_t>(std::max<int64_t>(1, bytes));
  const std::string on = " (device " + std::to_string(device) + ", " + std::to_string(n) + " bytes)";
  CopyRig rig;
  DZ_RETURN_IF_ERROR(copy_status(cudaSetDevice(device), "cudaSetDevice" + on));
  DZ_RETURN_IF_ERROR(copy_status(cudaMallocHost(&rig.host, n), "cudaMallocHost" + on));
  DZ_RETURN_IF_ERROR(copy_status(cudaMalloc(&rig.device, n), "cudaMalloc" + on));
  DZ_RETURN_IF_ERROR(copy_status(cudaStreamCreateWithFlags(&rig.stream, cudaStreamNonBlocking), "cudaStreamCreate" + on));
  DZ_RETURN_IF_ERROR(copy_status(cudaEventCreate(&rig.begin), "cudaEventCreate" + on));
  DZ_RETURN_IF_ERROR(copy_status(cudaEventCreate(&rig.end), "cudaEventCreate" + on));
  std::fill_n(static_cast<unsigned char*>(rig.host), n, static_cast<unsigned char>(0x5a));
  // Best of reps copies one way, after a warm-up, in bytes/s.
  auto best_rate = [&](cudaMemcpyKind kind, const char* what) -> Result<double> {
    void* dst = kind == cudaMemcpyHostToDevice ? rig.device : rig.host;
    const void* src = kind == cudaMemcpyHostToDevice ? rig.host : rig.device;
    float best_ms = std::numeric_limits<float>::max();
    for (int r = 0; r <= reps; ++r) {
      DZ_RETURN_IF_ERROR(copy_status(cudaEventRecord(rig.begin, rig.stream), std::string("cudaEventRecord") + on));
      DZ_RETURN_IF_ERROR(copy_status(cudaMemcpyAsync(dst, src, n, kind, rig.stream), std::string(what) + on));
      DZ_RETURN_IF_ERROR(copy_status(cudaEventRecord(rig.end, rig.stream), std::string("cudaEventRecord") + on));
      DZ_RETURN_IF_ERROR(copy_status(cudaEventSynchronize(rig.end), std::string(what) + on));
      float ms = 0;
      DZ_RETURN_IF_ERROR(copy_status(cudaEventElapsedTime(&ms, rig.begin, rig.end), "cudaEventElapsedTime" + on));
      if (r > 0) best_ms = std::min(best_ms, ms);
    }
    return best_ms > 0 ? static_cast<double>(n) / (static_cast<double>(best_ms) * 1e-3) : 0.0;
  };
  CopyFigure f;
  f.bytes = static_cast<int64_t>(n);
  DZ_ASSIGN_OR_RETURN(f.h2d, best_rate(cudaMemcpyHostToDevice, "cudaMemcpyAsync host to device"));
  DZ_ASSIGN_OR_RETURN(f.d2h, best_rate(cudaMemcpyDeviceToHost, "cudaMemcpyAsync device to host"));
  return f;
}

#else

Result<CopyFigure> host_device_copy(int device, int64_t bytes, int reps) {
  (void)device;
  (void)bytes;
  (void)reps;
  return Status::Unsupported("host-device copy test: this dayzero was built without CUDA");
}

#endif

}  // namespace dayzero::preflight
