// Checkpoint load benchmark (not a test): load_weights of an F32 and a BF16 checkpoint (about
// 0.5 GB each, generated once per folder) against two baselines measured in the same run with
// a warm page cache, interleaved run by run: a read(2) of the same files into one reused
// buffer, and a read into fresh anonymous memory of the size the loader produces (f32). The
// fresh-memory read and the load are measured first in a new (forked) process, as a run pays
// them, and again in this process. Prints every run, the medians and the ratios with their
// targets; checks that every load's records equal a single-threaded load's.
// Usage: load_bench [--dir DIR] [--runs N] [--threads T] [--dtype float32|bfloat16] [--only-load 1]
// (models go to DIR-f32 and DIR-bf16; T defaults to DAYZERO_THREADS, else the cores).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_model.h"
#include "core/clock.h"
#include "runtime/model_loader.h"

namespace fs = std::filesystem;
using namespace dayzero;

namespace {

double seconds_since(int64_t t0) { return static_cast<double>(monotonic_ns() - t0) * 1e-9; }

// CPU seconds of this process so far, all threads, user and system.
double cpu_seconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Reads every file front to back into one reused 16 MiB buffer: the ceiling for loading, and
// the bound for a loader that stages through reused (pinned) memory. Returns seconds.
double reused_read_seconds(const std::vector<std::string>& files) {
  static std::vector<char> buf(16 << 20);
  const int64_t t0 = monotonic_ns();
  for (const auto& f : files) {
    const int fd = open(f.c_str(), O_RDONLY);
    while (read(fd, buf.data(), buf.size()) > 0) {
    }
    close(fd);
  }
  return seconds_since(t0);
}

// Reads every file into newly mapped anonymous memory of `expand` times its size (the f32 the
// loader produces), kernel default page size, and touches the remaining pages: what a loader
// that does nothing but place the bytes pays for fresh destination memory. Returns seconds.
double fresh_read_seconds(const std::vector<std::string>& files, int expand) {
  const int64_t t0 = monotonic_ns();
  for (const auto& f : files) {
    const auto size = static_cast<size_t>(fs::file_size(f));
    const size_t bytes = size * expand;
    auto* p = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) return 1e30;
    const int fd = open(f.c_str(), O_RDONLY);
    size_t done = 0;
    ssize_t n;
    while (done < size && (n = read(fd, p + done, std::min<size_t>(16 << 20, size - done))) > 0) done += n;
    close(fd);
    for (size_t i = size; i < bytes; i += 4096) p[i] = 1;
    munmap(p, bytes);
  }
  return seconds_since(t0);
}

// Kilobytes of this process's anonymous memory in transparent huge pages.
long anon_huge_kb() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
  std::fclose(f);
  return kb;
}

bool same_records(const std::vector<checkpoint::WeightRecord>& a, const std::vector<checkpoint::WeightRecord>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].checksum != b[i].checksum || a[i].bytes_read != b[i].bytes_read ||
        a[i].nan_count != b[i].nan_count || a[i].inf_count != b[i].inf_count || a[i].reads != b[i].reads)
      return false;
  return true;
}

// f() in a forked child, whose new allocations are memory this process never touched (as
// for a new `dayzero run`); NaN when the child fails.
double in_child(const std::function<double()>& f) {
  int fds[2];
  if (pipe(fds) != 0) return NAN;
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const double v = f();
    if (write(fds[1], &v, sizeof v) != sizeof v) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  double v = NAN;
  if (pid < 0 || read(fds[0], &v, sizeof v) != sizeof v) v = NAN;
  close(fds[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return v;
}

bool g_only_load = false;  // --only-load: skip the baselines (for profiling the loader)

int bench_one(const std::string& dir, DType dtype, int n_layer, int runs, int threads) {
  int code = 0;
  const model::ModelShape shape{.n_vocab = 8192, .n_embd = 1024, .n_layer = n_layer, .n_head = 16,
                                .n_head_kv = 8, .head_dim = 0, .n_ff = 2816};
  auto bm = bench::open_bench_model(dir, shape, dtype, 2, threads, &code);
  if (!bm) return code;
  const model::ModelFolder* info = &bm->info;
  backend::Backend& be = *bm->be;
  const auto& files = info->catalog.files();
  const double disk = static_cast<double>(info->catalog.total_bytes());
  const int expand = dtype == DType::kF32 ? 1 : 2;
  std::printf("%s: %s, %lld layers, %zu files, %.1f MB on disk -> %.1f MB f32\n", dtype_name(dtype), dir.c_str(),
              static_cast<long long>(info->hp.n_layer), files.size(), disk * 1e-6, disk * expand * 1e-6);

  std::vector<checkpoint::WeightRecord> reference;
  {
    model::Weights w;
    reused_read_seconds(files);  // warms the page cache
    const double cpu0 = cpu_seconds();
    auto st = runtime::load_weights(*info, be, w, reference, {}, {}, checkpoint::kDefaultStagingBytes, 1);
    const double cpu = cpu_seconds() - cpu0;
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.status().message().c_str());
      return 3;
    }
    std::printf("  1-thread load (reference records): %.2f GB/s (%.3f s, %.3f CPU s), %.0f MB of it in huge pages\n",
                static_cast<double>(st->bytes_read) / st->seconds * 1e-9, st->seconds, cpu, anon_huge_kb() * 1e-3 * 1.024);
  }
  // Per run, interleaved: the reused-buffer read; the fresh-memory read and the load, each
  // first in a new process (what a run pays) and again in this one, whose freed memory the
  // kernel hands back already backed (what a second load in one process pays).
  std::vector<double> raw, fresh_new, load_new, fresh, load;
  const auto load_gbs = [&](std::vector<checkpoint::WeightRecord>* recs, double* cpu) -> double {
    model::Weights w;
    std::vector<checkpoint::WeightRecord> local;
    const double cpu0 = cpu_seconds();
    auto st = runtime::load_weights(*info, be, w, recs ? *recs : local, {}, {}, checkpoint::kDefaultStagingBytes,
                                    threads);
    if (cpu) *cpu = cpu_seconds() - cpu0;
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.status().message().c_str());
      return NAN;
    }
    if (!same_records(recs ? *recs : local, reference)) {
      std::fprintf(stderr, "records differ from the single-threaded load's\n");
      return NAN;
    }
    return static_cast<double>(st->bytes_read) / st->seconds * 1e-9;
  };
  for (int r = 0; r < runs; ++r) {
    if (!g_only_load) {
      raw.push_back(disk / reused_read_seconds(files) * 1e-9);
      fresh_new.push_back(in_child([&] { return disk / fresh_read_seconds(files, expand) * 1e-9; }));
    }
    load_new.push_back(in_child([&] { return load_gbs(nullptr, nullptr); }));
    if (!g_only_load) fresh.push_back(disk / fresh_read_seconds(files, expand) * 1e-9);
    double cpu = 0;
    load.push_back(load_gbs(nullptr, &cpu));
    if (std::isnan(load.back()) || std::isnan(load_new.back())) return 1;
    if (g_only_load) {
      std::printf("  run %d: load %.2f GB/s in a new process, %.2f GB/s again (%.3f CPU s)\n", r, load_new[r], load[r],
                  cpu);
    } else {
      std::printf("  run %d: reused-buffer read %.2f | new process: fresh-memory read %.2f, load %.2f | again: "
                  "fresh-memory read %.2f, load %.2f (%.3f CPU s) GB/s\n",
                  r, raw[r], fresh_new[r], load_new[r], fresh[r], load[r], cpu);
    }
  }
  if (g_only_load) return 0;
  const double mr = median(raw);
  std::printf("  median of %d, GB/s of on-disk bytes: reused-buffer read %.2f\n", runs, mr);
  for (int again = 0; again < 2; ++again) {
    const double mf = median(again ? fresh : fresh_new), ml = median(again ? load : load_new);
    std::printf("  %-12s fresh-memory read %.2f, load %.2f: load / reused-buffer read %.2f (target >= 0.50), "
                "load / fresh-memory read %.2f (target >= 0.90)\n",
                again ? "again:" : "new process:", mf, ml, ml / mr, ml / mf);
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/bench-load";
  std::string only;
  int runs = 5, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--dtype") only = argv[i + 1];
    else if (a == "--only-load") g_only_load = std::string(argv[i + 1]) == "1";
  }
  if (threads <= 0) {
    const char* e = std::getenv("DAYZERO_THREADS");
    threads = e ? std::max(1, std::atoi(e)) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  std::printf("load pipeline threads: %d (the caller included)\n\n", threads);
  // About 0.5 GB on disk each: 10 layers in f32, 20 in bf16.
  if (only != "bfloat16")
    if (int rc = bench_one(dir + "-f32", DType::kF32, 10, runs, threads)) return rc;
  if (only != "float32") return bench_one(dir + "-bf16", DType::kBF16, 20, runs, threads);
  return 0;
}
