// cuda_bench: the reference figures tools/gpu-check.sh holds dayzero's CUDA run against, on
// the machine it runs on: raw read of a model folder's safetensors files into one reused
// buffer (GB/s), device-to-device copy bandwidth (GB/s, read + write), and cuBLAS bf16 GEMMs
// (f32 accumulation, the backend's own Gemm) of a dense llama layer's prefill shapes plus the
// lm_head of the one sequence's last row, as dayzero's prefill computes it (TFLOP/s), on seeded
// random inputs (zeros run faster than real data and would flatter the reference). Prints one
// JSON object. Not a test; not dayzero's own load or forward.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.h"

namespace fs = std::filesystem;
using dayzero::kernels::cuda::Elem;
using dayzero::kernels::cuda::Gemm;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cuda_bench: %s\n", what.c_str());
  std::exit(3);
}
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Every *.safetensors file of dir read sequentially into one 64 MiB buffer.
double raw_read_gbps(const fs::path& dir, double* bytes_out) {
  std::vector<char> buf(size_t{64} << 20);
  double bytes = 0;
  const double t0 = now_s();
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    const int fd = open(e.path().c_str(), O_RDONLY);
    if (fd < 0) die("cannot open " + e.path().string());
    for (ssize_t n; (n = read(fd, buf.data(), buf.size())) > 0;) bytes += static_cast<double>(n);
    close(fd);
  }
  const double dt = now_s() - t0;
  *bytes_out = bytes;
  return dt > 0 ? bytes / dt * 1e-9 : 0;
}

double d2d_gbps() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  ck(cudaMalloc(&a, bytes), "cudaMalloc");
  ck(cudaMalloc(&b, bytes), "cudaMalloc");
  ck(cudaMemset(a, 1, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  ck(cudaEventCreate(&e0), "cudaEventCreate");
  ck(cudaEventCreate(&e1), "cudaEventCreate");
  ck(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "warm-up copy");
  const int reps = 10;
  ck(cudaEventRecord(e0), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) ck(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
  ck(cudaEventRecord(e1), "cudaEventRecord");
  ck(cudaEventSynchronize(e1), "cudaEventSynchronize");
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) * reps / (ms * 1e-3) * 1e-9;  // read + write
}

// count seeded uniform values in [-1, 1) rounded to bf16 (round to nearest even), copied to dst.
void fill_random_bf16(void* dst, int64_t count, uint64_t seed) {
  std::vector<uint16_t> h(static_cast<size_t>(count));
  uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : h) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    const float f = static_cast<float>(static_cast<int32_t>(st >> 32)) * (1.0f / 2147483648.0f);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    v = static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
  }
  ck(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy (random inputs)");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: cuda_bench MODEL_DIR TOKENS N_EMBD N_HEAD_KV_X_HEAD_DIM N_FF N_LAYER N_VOCAB\n");
    return 2;
  }
  const fs::path dir = argv[1];
  const int64_t m = std::atoll(argv[2]), d = std::atoll(argv[3]), kv = std::atoll(argv[4]), ff = std::atoll(argv[5]),
                layers = std::atoll(argv[6]), vocab = std::atoll(argv[7]);
  double file_bytes = 0;
  const double read_gbps = raw_read_gbps(dir, &file_bytes);
  const double copy_gbps = d2d_gbps();

  // [n, k] of each Linear of one layer (q, k, v, o, gate, up, down), then the lm_head over the
  // last row of the one sequence (dayzero's prefill computes the logits of each sequence's last
  // position only: forward.cpp).
  const std::vector<std::pair<int64_t, int64_t>> layer = {{d, d}, {kv, d}, {kv, d}, {d, d}, {ff, d}, {ff, d}, {d, ff}};
  int64_t max_elems = m * std::max(d, ff);
  int64_t max_w = std::max<int64_t>(ff * d, vocab * d);
  void *x = nullptr, *w = nullptr, *y = nullptr;
  ck(cudaMalloc(&x, static_cast<size_t>(max_elems) * 2), "cudaMalloc x");
  ck(cudaMalloc(&w, static_cast<size_t>(max_w) * 2), "cudaMalloc w");
  ck(cudaMalloc(&y, static_cast<size_t>(m * std::max<int64_t>({d, ff, vocab})) * 4), "cudaMalloc y");
  fill_random_bf16(x, max_elems, 1);
  fill_random_bf16(w, max_w, 2);
  cudaStream_t s;
  ck(cudaStreamCreate(&s), "cudaStreamCreate");
  Gemm gemm;
  if (auto st = gemm.init(s); !st.ok()) die(st.message());
  const auto run_layer = [&] {
    for (const auto& [n, k] : layer)
      if (auto st = gemm.matmul_nt(m, n, k, Elem::kBF16, x, w, static_cast<float*>(y), false); !st.ok())
        die(st.message());
  };
  run_layer();  // warm-up (heuristics, workspace)
  cudaEvent_t e0, e1;
  ck(cudaEventCreate(&e0), "cudaEventCreate");
  ck(cudaEventCreate(&e1), "cudaEventCreate");
  ck(cudaEventRecord(e0, s), "cudaEventRecord");
  for (int64_t l = 0; l < layers; ++l) run_layer();
  constexpr int64_t kLmHeadRows = 1;  // one sequence
  if (auto st = gemm.matmul_nt(kLmHeadRows, vocab, d, Elem::kBF16, x, w, static_cast<float*>(y), false); !st.ok())
    die(st.message());
  ck(cudaEventRecord(e1, s), "cudaEventRecord");
  ck(cudaEventSynchronize(e1), "cudaEventSynchronize");
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
  double flops = 2.0 * static_cast<double>(kLmHeadRows * vocab) * static_cast<double>(d);
  for (const auto& [n, k] : layer) flops += 2.0 * static_cast<double>(m * n * k) * static_cast<double>(layers);
  const double tflops = flops / (ms * 1e-3) * 1e-12;
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf(
      "{\"device\": \"%s\", \"file_bytes\": %.0f, \"raw_read_gbps\": %.3f, \"d2d_copy_gbps\": %.1f, "
      "\"gemm_tokens\": %lld, \"lm_head_rows\": %lld, \"gemm_inputs\": \"random bf16\", \"gemm_flops\": %.4e, "
      "\"gemm_seconds\": %.6f, \"gemm_bf16_tflops\": %.2f}\n",
      prop.name, file_bytes, read_gbps, copy_gbps, static_cast<long long>(m), static_cast<long long>(kLmHeadRows),
      flops, ms * 1e-3, tflops);
  return 0;
}
