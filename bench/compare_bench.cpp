// Compare benchmark (not a test): writes two finished single-rank run folders with DumpWriter
// (D prefill activations of [R, W] f32 each, named layers.<i>.<point> so the forward order and
// blame apply; run b = run a with a 1e-6 relative perturbation, so every tensor agrees), then
// times what `dayzero compare` does (open_run on both, tolerance_preset, compare_runs) against
// a raw HDF5 read of the same datasets of both files (H5Dread into one reused buffer), runs
// interleaved, warm page cache. Prints GB/s of dump data (both runs' bytes) for both, medians
// and the ratio; target: compare >= 1 GB/s.
// Usage: compare_bench [--dir DIR] [--datasets D] [--rows R] [--width W] [--runs N] [--keep 1]
//        [--reuse 1]
// (defaults: build/bench-compare, 200 x [512, 4096] = 1.68 GB per run, 3 runs; --reuse 1 uses
// the run folders a previous --keep 1 left, for profiling the compare alone).
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/clock.h"
#include "diag/compare_run.h"
#include "diag/compare_tolerance.h"
#include "dump/dump_writer.h"
#include "dump/run_folder.h"
#include "dump/schema.h"

namespace fs = std::filesystem;
using namespace dayzero;

namespace {

const char* kPoints[] = {"attn_norm", "attn_out", "ffn_norm", "ffn_out", "layer_out"};

double seconds_since(int64_t t0) { return static_cast<double>(monotonic_ns() - t0) * 1e-9; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string name_of(int i) { return "layers." + std::to_string(i / 5) + "." + kPoints[i % 5]; }

void check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "compare_bench: %s: %s\n", what, s.message().c_str());
    std::exit(2);
  }
}

void write_run(const fs::path& dir, int datasets, int64_t rows, int64_t width, bool perturbed) {
  fs::create_directories(dir);
  dump::RootAttributes a;
  a.dayzero_version = "bench";
  a.hostname = "bench";
  a.device = "cpu";
  a.backend = "cpu";
  a.model_config = "{}";
  a.plan = "{}";
  a.run_config = "model:\n  dtype: float32\n";
  a.started_at = "2026-12-01T00:00:00Z";
  auto w = dump::DumpWriter::create(dump::dump_path(dir.string(), 0), a);
  check(w.status(), "create");
  std::vector<float> data(static_cast<size_t>(rows * width));
  for (int d = 0; d < datasets; ++d) {
    std::mt19937 rng(1234 + d);  // the same values for both runs
    std::normal_distribution<float> nd(0.f, 1.f);
    for (float& x : data) x = nd(rng);
    if (perturbed)
      for (size_t i = 0; i < data.size(); ++i) data[i] *= 1.f + 1e-6f * static_cast<float>((i % 3)) - 1e-6f;
    check((*w)->write_activation("p0", dump::kPhasePrefill, name_of(d), data.data(), rows, width), "write_activation");
  }
  check((*w)->mark_complete(), "mark_complete");
  check((*w)->close(), "close");
}

// H5Dread of every dataset of both files into one reused buffer. Returns seconds.
double raw_read_seconds(const std::vector<std::string>& files, int datasets, std::vector<float>& buf) {
  const int64_t t0 = monotonic_ns();
  for (const std::string& f : files) {
    const hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) std::exit(2);
    for (int d = 0; d < datasets; ++d) {
      const std::string p = dump::activation_path("p0", dump::kPhasePrefill, name_of(d));
      const hid_t ds = H5Dopen2(file, p.c_str(), H5P_DEFAULT);
      if (ds < 0 || H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) std::exit(2);
      H5Dclose(ds);
    }
    H5Fclose(file);
  }
  return seconds_since(t0);
}

// What run_compare in cli/compare_cmd.cpp does, without the printing. Returns seconds.
double compare_seconds(const std::string& a, const std::string& b, int datasets) {
  const int64_t t0 = monotonic_ns();
  auto ra = diag::open_run(a, false);
  check(ra.status(), "open_run a");
  auto rb = diag::open_run(b, false);
  check(rb.status(), "open_run b");
  const std::string preset =
      diag::looser_preset(diag::preset_for_dtype(ra->compute_dtype), diag::preset_for_dtype(rb->compute_dtype));
  auto tol = diag::tolerance_preset(preset);
  check(tol.status(), "tolerance");
  auto res = diag::compare_runs(*ra, *rb, *tol, false);
  check(res.status(), "compare_runs");
  const double s = seconds_since(t0);
  size_t n = 0;
  for (const auto& g : res->groups) n += g.tensors.size();
  if (!res->pass || n != static_cast<size_t>(datasets)) {
    std::fprintf(stderr, "compare_bench: expected %d agreeing tensors, got %zu (pass %d)\n", datasets, n, res->pass);
    std::exit(1);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/bench-compare";
  int datasets = 200, runs = 3;
  int64_t rows = 512, width = 4096;
  bool keep = false, reuse = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--dir") dir = argv[i + 1];
    else if (k == "--datasets") datasets = std::atoi(argv[i + 1]);
    else if (k == "--rows") rows = std::atoll(argv[i + 1]);
    else if (k == "--width") width = std::atoll(argv[i + 1]);
    else if (k == "--runs") runs = std::atoi(argv[i + 1]);
    else if (k == "--keep") keep = std::atoi(argv[i + 1]) != 0;
    else if (k == "--reuse") reuse = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "usage: compare_bench [--dir DIR] [--datasets D] [--rows R] [--width W] [--runs N] [--keep 1] [--reuse 1]\n");
      return 2;
    }
  }
  const double run_bytes = static_cast<double>(datasets) * static_cast<double>(rows * width) * 4.0;
  fs::create_directories(dir);
  const double free_gb = static_cast<double>(fs::space(dir).available) * 1e-9;
  std::printf("two runs of %d activations [%lld, %lld] f32: %.2f GB each, %.2f GB in all (disk free %.1f GB)\n", datasets,
              static_cast<long long>(rows), static_cast<long long>(width), run_bytes * 1e-9, 2 * run_bytes * 1e-9, free_gb);
  if (2 * run_bytes * 1e-9 > 0.5 * free_gb) {
    std::fprintf(stderr, "compare_bench: would use more than half the free disk; pass a smaller size\n");
    return 2;
  }
  const fs::path da = fs::path(dir) / "run-a", db = fs::path(dir) / "run-b";
  const bool reused = reuse && fs::exists(dump::dump_path(da.string(), 0)) && fs::exists(dump::dump_path(db.string(), 0));
  const int64_t tw = monotonic_ns();
  if (!reused) {
    fs::remove_all(da);
    fs::remove_all(db);
    write_run(da, datasets, rows, width, false);
    write_run(db, datasets, rows, width, true);
  }
  std::printf(reused ? "reused (%.1f s): %s, %s\n" : "written in %.1f s: %s, %s\n", seconds_since(tw), dump::dump_path(da.string(), 0).c_str(),
              dump::dump_path(db.string(), 0).c_str());

  const std::vector<std::string> files = {dump::dump_path(da.string(), 0), dump::dump_path(db.string(), 0)};
  std::vector<float> buf(static_cast<size_t>(rows * width));
  raw_read_seconds(files, datasets, buf);  // warm the page cache once
  std::vector<double> raw, cmp;
  for (int r = 0; r < runs; ++r) {
    raw.push_back(raw_read_seconds(files, datasets, buf));
    cmp.push_back(compare_seconds(da.string(), db.string(), datasets));
    std::printf("run %d: raw H5Dread %.2f s (%.2f GB/s), compare %.2f s (%.2f GB/s)\n", r + 1, raw.back(),
                2 * run_bytes * 1e-9 / raw.back(), cmp.back(), 2 * run_bytes * 1e-9 / cmp.back());
  }
  const double raw_gbs = 2 * run_bytes * 1e-9 / median(raw), cmp_gbs = 2 * run_bytes * 1e-9 / median(cmp);
  std::printf("median: raw H5Dread %.2f GB/s, compare %.2f GB/s; compare / raw = %.2f\n", raw_gbs, cmp_gbs,
              cmp_gbs / raw_gbs);
  std::printf("target: compare >= 1 GB/s of dump data: %s\n", cmp_gbs >= 1.0 ? "met" : "NOT met");
  if (!keep) {
    fs::remove_all(da);
    fs::remove_all(db);
  }
  return 0;
}
