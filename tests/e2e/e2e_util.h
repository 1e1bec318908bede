// Helpers for end-to-end tests: run the dayzero binary (DAYZERO_BIN, set by ctest) in a
// scratch folder, capture its exit code and output, and make tiny models from YAML sizes.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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

// A fresh scratch folder under the build tree, unique per test.
inline fs::path scratch_dir(const std::string& name) {
  const fs::path d = fs::path(DAYZERO_BINARY_DIR) / "e2e-scratch" / name;
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
inline fs::path golden_sizes(const std::string& family) {
  return fs::path(DAYZERO_SOURCE_DIR) / "tests" / "data" / "golden" / (family + ".yaml");
}

// The single rank file of a run folder.
inline fs::path rank0_dump(const fs::path& run_dir) { return run_dir / "rank-00000.h5"; }

// rank-0000<r>.h5 of a run folder.
inline fs::path rank_dump(const fs::path& run_dir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.h5", rank);
  return run_dir / name;
}

}  // namespace dayzero::e2e
