// Helpers for end-to-end tests: run the dayzero binary (DAYZERO_BIN, set by ctest) in a
// scratch folder, capture its exit code and output (per rank under MPI), make tiny models from
// YAML sizes, and merge the rank files of a multi-rank run into one map of datasets.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <sstream>
#include <iomanip>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "dump/dump_reader.h"

namespace dayzero::e2e {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

inline std::string dayzero_bin() {
  const char* b = std::getenv("DAYZERO_BIN");
  return b ? b : DAYZERO_BINARY_DIR "/src/cli/dayzero";
}

// Runs a shell command line, capturing stdout and stderr together.
inline Outcome run_shell(const std::string& command) {
  Outcome o;
  const std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.output.append(buf.data(), n);
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

// Runs `dayzero <args>` through the shell; args are passed as written.
inline Outcome run_dayzero(const std::string& args) { return run_shell(dayzero_bin() + " " + args); }

// Runs `mpiexec -n <ranks> --oversubscribe dayzero <args>` with the mpiexec found on PATH (ctest
// sets the Open MPI variables that allow running as root).
inline Outcome run_dayzero_mpi(int ranks, const std::string& args) {
  return run_shell("mpiexec -n " + std::to_string(ranks) + " --oversubscribe " + dayzero_bin() + " " + args);
}

// Why this machine cannot run the CPU kernel path the environment asks for (DAYZERO_CPU_ISA,
// DAYZERO_GEMM_LARGE_M: the kernel-path variants of a test, cmake/DayzeroTargets.cmake), "" when
// it can. A variant skips with it; ctest reads "kernel path not runnable here" as a skip.
inline std::string kernel_path_unavailable() {
  // Once per test process: the environment does not change between its cases.
  static const std::string why = [] {
    const Outcome o = run_dayzero("kernels --check");
    return o.exit_code == 0 ? std::string() : o.output;
  }();
  return why;
}
#define DZ_SKIP_UNLESS_KERNEL_PATH_RUNS()                                                  \
  if (const std::string dz_why = ::dayzero::e2e::kernel_path_unavailable(); !dz_why.empty()) \
  GTEST_SKIP() << dz_why

// Two runs compare bit for bit only when their products take the same GEMM paths. The large-M
// path is timed at start-up on the weights a run holds (docs/gemm.md), so two runs of one model
// under different plans or weight formats may each pick another library; a test that claims bit
// identity between runs keeps the fixed rule (DAYZERO_GEMM_TUNE=off) unless its variant pins a
// path itself.
inline void same_gemm_paths_in_every_run() {
  if (!std::getenv("DAYZERO_GEMM_LARGE_M") && !std::getenv("DAYZERO_GEMM")) setenv("DAYZERO_GEMM_TUNE", "off", 1);
}

// A fresh scratch folder under the build tree (or under $DAYZERO_SCRATCH_DIR, where the test
// binaries run away from their build tree: tools/gpu-check.sh), unique per test.
inline fs::path scratch_dir(const std::string& name) {
  const char* root = std::getenv("DAYZERO_SCRATCH_DIR");
  const fs::path d = (root ? fs::path(root) : fs::path(DAYZERO_BINARY_DIR) / "e2e-scratch") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// make-model from one of tests/data/golden/<family>.yaml (or any sizes file) into dir.
inline void make_model_from_yaml(const fs::path& yaml, const fs::path& dir, const std::string& extra = "") {
  const Outcome o = run_dayzero("make-model --config " + yaml.string() + " --out " + dir.string() + " " + extra);
  ASSERT_EQ(o.exit_code, 0) << o.output;
}

// tests/data/golden/<family>.yaml: the tiny (n_embd 64, 2 layers) sizes of one family.
// $DAYZERO_SOURCE_DIR overrides the source tree's location (a packed copy of tests/data).
inline fs::path golden_sizes(const std::string& family) {
  const char* src = std::getenv("DAYZERO_SOURCE_DIR");
  return fs::path(src ? src : DAYZERO_SOURCE_DIR) / "tests" / "data" / "golden" / (family + ".yaml");
}

// The single rank file of a run folder.
inline fs::path rank0_dump(const fs::path& run_dir) { return run_dir / "rank-00000.h5"; }

// rank-0000<r>.h5 of a run folder.
inline fs::path rank_dump(const fs::path& run_dir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.h5", rank);
  return run_dir / name;
}

// One MPI job with every rank's own exit code. Each rank runs through `sh -c`, which records
// dayzero's exit code in codes_dir/exit-<rank> and then exits 0, so the launcher never kills the
// other ranks early and each rank's code is what that rank returned by itself. A rank that
// never returned leaves -1. The job is killed after limit_s seconds (outcome.exit_code 124).
struct MpiOutcome {
  Outcome outcome;         // of the launcher: its exit code and every rank's output
  std::vector<int> codes;  // [ranks] dayzero's exit code on each rank
  double seconds = 0;      // wall time of the whole job
};

inline MpiOutcome run_dayzero_mpi_each(int ranks, const std::string& args, const fs::path& codes_dir,
                                       int limit_s) {
  fs::create_directories(codes_dir);
  const std::string code_file = (codes_dir / "exit-").string() + "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}";
  const std::string rank_cmd = dayzero_bin() + " " + args + "; echo $? > " + code_file + "; exit 0";
  MpiOutcome m;
  const auto t0 = std::chrono::steady_clock::now();
  m.outcome = run_shell("timeout -k 10 " + std::to_string(limit_s) + " mpiexec -n " + std::to_string(ranks) +
                        " --oversubscribe sh -c '" + rank_cmd + "'");
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < ranks; ++r) {
    const fs::path f = codes_dir / ("exit-" + std::to_string(r));
    m.codes.push_back(fs::exists(f) ? std::atoi(read_file(f).c_str()) : -1);
  }
  return m;
}

// One dataset of a rank file: float values or integer ids, with its shape and the rank that
// wrote it.
struct DumpArray {
  std::vector<int64_t> shape;
  bool integer = false;
  std::vector<float> values;  // when !integer
  std::vector<int32_t> ids;   // when integer
  int rank = -1;
};
// Keyed "activations/<prompt>/<phase>/<name>" and "outputs/<prompt>/<dataset>".
using MergedDump = std::map<std::string, DumpArray>;

// Adds every /activations and /outputs dataset of rank-0000<r>.h5, r in [0, world), to into.
// Fails when a rank file is missing or not marked complete, when a rank file past the world
// exists, or when a key is written by two rank files (or is already in into).
inline void merge_rank_files(const fs::path& run_dir, int world, MergedDump& into) {
  ASSERT_FALSE(fs::exists(rank_dump(run_dir, world))) << "rank file " << world << " in a world of " << world;
  for (int rank = 0; rank < world; ++rank) {
    const fs::path h5 = rank_dump(run_dir, rank);
    auto r = dump::DumpReader::open(h5.string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    auto complete = r->complete();
    ASSERT_TRUE(complete.ok()) << complete.status().message();
    ASSERT_TRUE(*complete) << h5 << " is not marked complete";
    const auto add = [&](const std::string& key, const std::string& dataset) {
      DumpArray a;
      a.rank = rank;
      auto f = r->read_float(dataset);
      if (f.ok()) {
        a.shape = f->shape;
        a.values = std::move(f->data);
      } else {
        auto i = r->read_int32(dataset);
        ASSERT_TRUE(i.ok()) << f.status().message() << "; " << i.status().message();
        a.integer = true;
        a.shape = i->shape;
        a.ids = std::move(i->data);
      }
      const auto it = into.find(key);
      ASSERT_TRUE(it == into.end()) << key << " is written by rank " << it->second.rank << " and rank " << rank;
      into.emplace(key, std::move(a));
    };
    for (const std::string top : {"activations", "outputs"}) {
      if (!r->exists("/" + top)) continue;
      auto prompts = r->list("/" + top);
      ASSERT_TRUE(prompts.ok()) << prompts.status().message();
      for (const std::string& p : *prompts) {
        if (top == "outputs") {
          auto names = r->list("/outputs/" + p);
          ASSERT_TRUE(names.ok()) << names.status().message();
          for (const std::string& n : *names)
            ASSERT_NO_FATAL_FAILURE(add("outputs/" + p + "/" + n, "/outputs/" + p + "/" + n));
          continue;
        }
        auto phases = r->list("/activations/" + p);
        ASSERT_TRUE(phases.ok()) << phases.status().message();
        for (const std::string& phase : *phases) {
          auto names = r->list_activations(p, phase);
          ASSERT_TRUE(names.ok()) << names.status().message();
          for (const std::string& n : *names)
            ASSERT_NO_FATAL_FAILURE(add("activations/" + p + "/" + phase + "/" + n, dump::activation_path(p, phase, n)));
        }
      }
    }
  }
}

// ||got - want|| / ||want|| (0 when both are zero, +inf when only want is).
inline double rel_l2(const std::vector<float>& want, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

// Where |got - want| is largest, for failure messages: [row, column] of a [rows, width] dataset,
// [index] when width is 0 (a vector).
inline std::string worst_element(const std::vector<float>& want, const std::vector<float>& got, size_t width) {
  size_t at = 0;
  double worst = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (d > worst || std::isnan(d)) {
      worst = d;
      at = i;
      if (std::isnan(d)) break;
    }
  }
  std::ostringstream os;
  os << "largest difference at [";
  if (width > 0) os << at / width << ", " << at % width;
  else os << at;
  os << "]: " << std::setprecision(9) << want[at] << " vs " << got[at];
  return os.str();
}

// Every dataset of want against got's dataset of the same key (REQUIRES: got has every key of
// want): ids must be equal, floats within tol relative L2. mismatches name the key and, for
// floats, the error and the largest difference; worst is the largest float error.
struct DumpDiff {
  double worst = 0;
  std::string worst_key;  // empty when every float dataset is bit-identical
  std::vector<std::string> mismatches;
};

inline DumpDiff diff_dumps(const MergedDump& want, const MergedDump& got, double tol) {
  DumpDiff d;
  for (const auto& [key, w] : want) {
    const DumpArray& g = got.at(key);
    if (g.shape != w.shape || g.integer != w.integer) {
      d.mismatches.push_back(key + ": another shape or element type");
      continue;
    }
    if (w.integer) {
      if (g.ids != w.ids) d.mismatches.push_back(key + ": ids differ");
      continue;
    }
    const double e = rel_l2(w.values, g.values);
    if (!(e <= tol)) {
      std::ostringstream os;
      os << key << ": relative L2 " << e << ", "
         << worst_element(w.values, g.values, w.shape.size() < 2 ? 0 : static_cast<size_t>(w.shape.back()));
      d.mismatches.push_back(os.str());
    }
    if (!(e <= d.worst)) {
      d.worst = e;
      d.worst_key = key;
    }
  }
  return d;
}

// A heading with the count of lines and the first few of them.
inline std::string first_lines(const std::string& heading, const std::vector<std::string>& lines) {
  std::ostringstream os;
  os << heading << ": " << lines.size() << " in all";
  for (size_t i = 0; i < lines.size() && i < 8; ++i) os << "\n  " << lines[i];
  return os.str();
}

}  // namespace dayzero::e2e
