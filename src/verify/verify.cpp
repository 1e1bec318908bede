// The distributed verify: plan (every rank, cheap: the index, file sizes, expectations), the
// owned files streamed (a reader thread fills large blocks while this thread hashes and
// scans), an all-gather of the per-file results, and the checks every rank makes alike.
#include "verify/verify.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <mpi.h>

#include "checkpoint/catalog.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/xxhash.h"
#include "verify/progress.h"
#include "comm/mpi_env.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/json.h"
#include "model/model_folder.h"
#include "verify/expected_hashes.h"
#include "verify/sha256.h"

namespace dayzero::verify {
namespace fs = std::filesystem;
using nlohmann::json;

Result<ScanOptions> parse_scan_list(const std::string& list) {
  ScanOptions s;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "nan") s.nan = true;
    else if (item == "inf") s.inf = true;
    else if (item == "range") s.range = true;
    else return Status::InvalidArgument("--scan: unknown item '" + item + "' (known: nan, inf, range)");
  }
  if (!s.any()) return Status::InvalidArgument("--scan: empty list (known: nan, inf, range)");
  return s;
}

int Report::errors() const {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(), [](const Finding& f) { return f.error; }));
}

std::vector<int> assign_by_bytes(const std::vector<uint64_t>& sizes, int world_size) {
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<uint64_t> load(static_cast<size_t>(std::max(world_size, 1)), 0);
  std::vector<int> owner(sizes.size(), 0);
  for (size_t i : order) {
    const size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(r);
    load[r] += sizes[i];
  }
  return owner;
}

namespace {

std::string hex64(uint64_t v) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << v;
  return os.str();
}

// ---- plan -------------------------------------------------------------------------------

struct Plan {
  std::vector<std::string> files;                 // relative names, sorted
  std::vector<bool> present;
  std::vector<uint64_t> sizes;
  std::vector<std::string> open_errors;           // present but not a readable regular file
  bool has_index = false;
  std::map<std::string, std::string> weight_map;  // tensor -> file (index only)
  std::vector<std::string> extra_files;           // *.safetensors in the folder the index does not name
};

bool safe_relative(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : fs::path(name))
    if (part == "..") return false;
  return true;
}

Result<Plan> make_plan(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + ": not a folder");
  Plan p;
  const std::string index_path = (fs::path(dir) / checkpoint::kIndexFileName).string();
  if (fs::exists(index_path, ec)) {
    p.has_index = true;
    JsonParseOptions opt;
    opt.reject_duplicate_keys = true;
    DZ_ASSIGN_OR_RETURN(json index, read_json_file(index_path, opt));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return Status::Corrupt(index_path + ": no weight_map object");
    std::set<std::string> files;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string())
        return Status::Corrupt(index_path + ": weight_map entry " + tensor + " is " + json_kind(file) + ", not a file name");
      const std::string f = file.get<std::string>();
      if (!safe_relative(f))
        return Status::InvalidArgument(index_path + ": weight_map entry " + tensor + " names '" + f +
                                       "', which is absolute or leaves the folder");
      p.weight_map[tensor] = f;
      files.insert(f);
    }
    if (files.empty()) return Status::Corrupt(index_path + ": weight_map is empty");
    p.files.assign(files.begin(), files.end());
  } else if (fs::exists(fs::path(dir) / checkpoint::kSingleFileName, ec)) {
    p.files = {checkpoint::kSingleFileName};
  } else {
    return Status::NotFound(dir + ": neither " + checkpoint::kSingleFileName + " nor " + checkpoint::kIndexFileName +
                            " (is it a checkpoint folder?)");
  }
  const std::set<std::string> named(p.files.begin(), p.files.end());
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors" && !named.count(n)) p.extra_files.push_back(n);
  }
  std::sort(p.extra_files.begin(), p.extra_files.end());
  for (const auto& f : p.files) {
    auto rf = open_regular_file((fs::path(dir) / f).string());
    p.present.push_back(rf.ok() || rf.status().code() != StatusCode::kNotFound);
    p.sizes.push_back(rf.ok() ? rf->size : 0);
    p.open_errors.push_back(rf.ok() || rf.status().code() == StatusCode::kNotFound ? "" : rf.status().message());
    if (rf.ok()) ::close(rf->fd);
  }
  return p;
}

// ---- streaming one file -----------------------------------------------------------------

// Per-tensor XXH64 and value scan over the blocks of a file, in file order.
class TensorWalker {
 public:
  TensorWalker(std::vector<TensorResult>& tensors, const ScanOptions& scan) : t_(tensors), scan_(scan) {}

  void feed(const uint8_t* data, uint64_t pos, size_t len) {
    const uint64_t end = pos + len;
    while (cur_ < t_.size()) {
      TensorResult& t = t_[cur_];
      const uint64_t t_end = t.offset + t.nbytes;
      if (t.offset > end || (t.offset == end && t.nbytes > 0)) break;
      const uint64_t lo = std::max(pos, t.offset), hi = std::min(end, t_end);
      if (hi > lo) {
        h_.update(data + (lo - pos), hi - lo);
        if (scan_.any()) scan(t, data + (lo - pos), hi - lo);
      }
      if (t_end > end) break;
      finish(t);
    }
  }
  // Tensors left (only empty ones can be at the very end).
  void flush() {
    while (cur_ < t_.size() && t_[cur_].nbytes == 0) finish(t_[cur_]);
  }

 private:
  void finish(TensorResult& t) {
    t.xxh64 = h_.digest();
    if (scan_.any()) t.all_zero = !nonzero_ && t.nbytes > 0;
    h_ = checkpoint::Xxh64();
    nonzero_ = false;
    carry_len_ = 0;
    ++cur_;
  }
  void scan(TensorResult& t, const uint8_t* p, size_t n) {
    const size_t es = dtype_size(t.dtype);
    if (carry_len_ > 0) {
      const size_t take = std::min(n, es - carry_len_);
      std::memcpy(carry_ + carry_len_, p, take);
      carry_len_ += take;
      p += take;
      n -= take;
      if (carry_len_ < es) return;
      scan_elems(t, carry_, 1);
      carry_len_ = 0;
    }
    const size_t whole = n / es;
    scan_elems(t, p, whole);
    carry_len_ = n - whole * es;
    std::memcpy(carry_, p + whole * es, carry_len_);
  }
  void scan_elems(TensorResult& t, const uint8_t* p, size_t n) {
    if (!dtype_is_float(t.dtype)) {
      if (!nonzero_)
        for (size_t i = 0; i < n * dtype_size(t.dtype); ++i)
          if (p[i]) {
            nonzero_ = true;
            break;
          }
      return;
    }
    const float limit = static_cast<float>(scan_.range_limit);
    constexpr size_t kChunk = 16384;
    float f[kChunk];
    for (size_t i = 0; i < n; i += kChunk) {
      const size_t m = std::min(kChunk, n - i);
      convert_to_f32(t.dtype, p + i * dtype_size(t.dtype), f, m);
      int64_t nan = 0, inf = 0, big = 0, nz = 0;
      for (size_t k = 0; k < m; ++k) {
        const float v = f[k];
        nan += std::isnan(v);
        inf += std::isinf(v);
        big += std::isfinite(v) && std::fabs(v) > limit;
        nz += v != 0.0f;
      }
      t.nan += nan;
      t.inf += inf;
      t.out_of_range += big;
      nonzero_ = nonzero_ || nz > 0;
    }
  }

  std::vector<TensorResult>& t_;
  const ScanOptions& scan_;
  size_t cur_ = 0;
  checkpoint::Xxh64 h_;
  bool nonzero_ = false;
  uint8_t carry_[8];
  size_t carry_len_ = 0;
};

// Reads fd [0, size) in blocks on a reader thread (three buffers in flight) and hands each
// block to consume in order on this thread. Returns the read error, if any.
template <class F>
std::string stream_file(int fd, uint64_t size, size_t block, F&& consume) {
  constexpr int kBuffers = 3;
  // Kept across files (uninitialised, allocated once per block size): a fresh 48 MiB per small
  // shard would cost more than reading it.
  static thread_local std::vector<std::unique_ptr<uint8_t[]>> pool;
  static thread_local size_t bufs_block = 0;
  std::vector<std::unique_ptr<uint8_t[]>>& bufs = pool;  // the reader thread sees this thread's pool
  block = static_cast<size_t>(std::min<uint64_t>(block, std::max<uint64_t>(size, 1)));
  if (bufs.empty() || bufs_block < block) {
    bufs.clear();
    for (int i = 0; i < kBuffers; ++i) bufs.emplace_back(new uint8_t[block]);
    bufs_block = block;
  }
  std::vector<size_t> lens(kBuffers, 0);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> free_q = {0, 1, 2}, full_q;
  std::string error;
  bool done = false;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::thread reader([&] {
    for (uint64_t pos = 0; pos < size;) {
      int slot;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return !free_q.empty(); });
        slot = free_q.back();
        free_q.pop_back();
      }
      const size_t want = static_cast<size_t>(std::min<uint64_t>(block, size - pos));
      size_t got = 0;
      std::string err;
      while (got < want) {
        const ssize_t n = ::pread(fd, bufs[slot].get() + got, want - got, static_cast<off_t>(pos + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          err = std::string("read failed at byte ") + std::to_string(pos + got) + ": " + std::strerror(errno);
          break;
        }
        if (n == 0) {
          err = "file ends at byte " + std::to_string(pos + got) + ", shorter than its size at open (" +
                std::to_string(size) + ")";
          break;
        }
        got += static_cast<size_t>(n);
      }
      std::lock_guard<std::mutex> lk(mu);
      if (!err.empty()) {
        error = err;
        break;
      }
      lens[slot] = got;
      full_q.insert(full_q.begin(), slot);
      cv.notify_all();
      pos += got;
    }
    std::lock_guard<std::mutex> lk(mu);
    done = true;
    cv.notify_all();
  });
  uint64_t pos = 0;
  for (;;) {
    int slot;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return !full_q.empty() || done; });
      if (full_q.empty()) break;
      slot = full_q.back();
      full_q.pop_back();
    }
    consume(bufs[slot].get(), pos, lens[slot]);
    pos += lens[slot];
    std::lock_guard<std::mutex> lk(mu);
    free_q.push_back(slot);
    cv.notify_all();
  }
  reader.join();
  return error;
}

FileResult verify_file(const std::string& dir, const std::string& name, const VerifyOptions& o, VerifyProgress& progress) {
  FileResult r;
  r.name = name;
  const int64_t t0 = monotonic_ns();
  const std::string path = (fs::path(dir) / name).string();
  auto header = checkpoint::SafetensorsFile::open(path);
  if (header.ok()) {
    for (const auto& t : header->tensors())
      r.tensors.push_back({t.name, t.dtype, t.shape, t.offset, t.nbytes, 0, 0, 0, 0, false});
    std::sort(r.tensors.begin(), r.tensors.end(),
              [](const TensorResult& a, const TensorResult& b) { return a.offset < b.offset; });
  } else {
    r.header_error = header.status().message();
  }
  auto rf = open_regular_file(path);
  if (!rf.ok()) {
    r.read_error = rf.status().message();
    return r;
  }
  r.bytes = rf->size;
  if (!o.structure_only) {
    Sha256 sha;
    TensorWalker walker(r.tensors, o.scan);
    const bool walk = r.header_error.empty();
    const std::string err = stream_file(rf->fd, rf->size, o.block_bytes, [&](const uint8_t* d, uint64_t pos, size_t n) {
      sha.update(d, n);
      if (walk) walker.feed(d, pos, n);
      progress.add(n);
    });
    if (walk) walker.flush();
    if (err.empty()) r.sha256 = to_hex(sha.finish());
    else r.read_error = path + ": " + err;
  }
  ::close(rf->fd);
  r.seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  return r;
}

// ---- gather -----------------------------------------------------------------------------

json file_to_json(const FileResult& f) {
  json j = {{"name", f.name}, {"present", f.present}, {"rank", f.rank}, {"bytes", f.bytes}, {"seconds", f.seconds},
            {"sha256", f.sha256}, {"header_error", f.header_error}, {"read_error", f.read_error}};
  json ts = json::array();
  for (const auto& t : f.tensors)
    ts.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"offset", t.offset},
                  {"nbytes", t.nbytes}, {"xxh64", hex64(t.xxh64)}, {"nan", t.nan}, {"inf", t.inf},
                  {"out_of_range", t.out_of_range}, {"all_zero", t.all_zero}});
  j["tensors"] = std::move(ts);
  return j;
}

FileResult file_from_json(const json& j) {
  FileResult f;
  f.name = j.at("name");
  f.present = j.at("present");
  f.rank = j.at("rank");
  f.bytes = j.at("bytes");
  f.seconds = j.at("seconds");
  f.sha256 = j.at("sha256");
  f.header_error = j.at("header_error");
  f.read_error = j.at("read_error");
  for (const auto& t : j.at("tensors")) {
    TensorResult r;
    r.name = t.at("name");
    r.dtype = *parse_dtype(t.at("dtype").get<std::string>());
    r.shape = t.at("shape").get<Shape>();
    r.offset = t.at("offset");
    r.nbytes = t.at("nbytes");
    r.xxh64 = std::stoull(t.at("xxh64").get<std::string>(), nullptr, 16);
    r.nan = t.at("nan");
    r.inf = t.at("inf");
    r.out_of_range = t.at("out_of_range");
    r.all_zero = t.at("all_zero");
    f.tensors.push_back(std::move(r));
  }
  return f;
}

// ---- manifest ---------------------------------------------------------------------------

constexpr const char* kManifestFormat = "dayzero-verify-manifest";

struct ManifestFile {
  uint64_t size = 0;
  std::string sha256;
  std::map<std::string, uint64_t> tensor_xxh64;
};

Result<std::map<std::string, ManifestFile>> read_manifest(const std::string& path) {
  DZ_ASSIGN_OR_RETURN(json j, read_json_file(path));
  if (!j.is_object() || j.value("format", "") != kManifestFormat || j.value("version", 0) != 1 ||
      !j.contains("files") || !j["files"].is_array())
    return Status::Corrupt(path + ": not a verify manifest (format " + kManifestFormat + ", version 1, files)");
  std::map<std::string, ManifestFile> out;
  try {
    for (const auto& f : j["files"]) {
      ManifestFile m;
      m.size = f.at("size").get<uint64_t>();
      m.sha256 = f.at("sha256").get<std::string>();
      for (const auto& t : f.at("tensors"))
        m.tensor_xxh64[t.at("name").get<std::string>()] = std::stoull(t.at("xxh64").get<std::string>(), nullptr, 16);
      out[f.at("name").get<std::string>()] = std::move(m);
    }
  } catch (const std::exception& e) {
    return Status::Corrupt(path + ": malformed manifest entry: " + e.what());
  }
  return out;
}

Status write_manifest(const std::string& path, const Report& r) {
  json files = json::array();
  for (const auto& f : r.files) {
    if (!f.present || f.sha256.empty()) continue;
    json ts = json::array();
    for (const auto& t : f.tensors)
      ts.push_back({{"name", t.name}, {"offset", t.offset}, {"nbytes", t.nbytes}, {"xxh64", hex64(t.xxh64)}});
    files.push_back({{"name", f.name}, {"size", f.bytes}, {"sha256", f.sha256}, {"tensors", std::move(ts)}});
  }
  const json j = {{"format", kManifestFormat}, {"version", 1}, {"files", std::move(files)}};
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  out.close();
  if (!out) return Status::IoError(path + ": cannot write the manifest");
  return Status::Ok();
}

// ---- checks -----------------------------------------------------------------------------

struct Expectations {
  std::map<std::string, ExpectedHash> hashes;           // --hashes
  std::map<std::string, ManifestFile> manifest;         // --manifest
};

void check(Report& rep, const Plan& plan, const Expectations& ex, const VerifyOptions& o) {
  std::vector<Finding>& out = rep.findings;
  const auto add = [&](std::string kind, std::string file, std::string tensor, std::string detail, bool error = true) {
    out.push_back({std::move(kind), std::move(file), std::move(tensor), std::move(detail), error});
  };
  std::map<std::string, std::pair<const FileResult*, const TensorResult*>> actual;
  std::set<std::string> missing_files;
  for (const auto& f : rep.files) {
    if (!f.present) {
      size_t n = 0;
      for (const auto& [t, file] : plan.weight_map) n += file == f.name;
      add("missing_file", f.name, "", "named by the index for " + std::to_string(n) + " tensors, absent from the folder");
      missing_files.insert(f.name);
      continue;
    }
    if (!f.header_error.empty()) add("bad_header", f.name, "", f.header_error);
    if (!f.read_error.empty()) add("read_error", f.name, "", f.read_error);
    for (const auto& t : f.tensors) {
      auto [it, fresh] = actual.emplace(t.name, std::make_pair(&f, &t));
      if (!fresh) add("duplicate_tensor", f.name, t.name, "also in " + it->second.first->name);
    }
  }
  for (const auto& n : plan.extra_files)
    add("extra_file", n, "", "a .safetensors file in the folder that the index does not name; not verified", false);

  // The index against the headers.
  if (plan.has_index) {
    for (const auto& [tensor, file] : plan.weight_map) {
      if (missing_files.count(file)) continue;
      auto it = actual.find(tensor);
      const FileResult* fr = nullptr;
      for (const auto& f : rep.files)
        if (f.name == file) fr = &f;
      if (fr && !fr->header_error.empty()) continue;  // reported as bad_header
      if (it == actual.end()) add("missing_tensor", file, tensor, "mapped here by the index, absent from the header");
    }
    for (const auto& [name, ft] : actual) {
      auto it = plan.weight_map.find(name);
      if (it == plan.weight_map.end())
        add("unindexed_tensor", ft.first->name, name, "in the header, absent from the index's weight_map");
      else if (it->second != ft.first->name)
        add("unindexed_tensor", ft.first->name, name, "the index maps it to " + it->second);
    }
  }

  // The adapter's inventory.
  const std::string config_path = (fs::path(o.model_dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(config_path, ec)) {
    rep.inventory = "index only (no config.json)";
  } else if (auto m = model::open_model_folder(config_path, model::WeightsNeeded::kIfPresent); !m.ok()) {
    rep.inventory = "index only (" + m.status().message() + ")";
  } else {
    rep.inventory = "adapter " + m->hp.family;
    std::set<std::string> indexed_in_missing;
    for (const auto& [t, file] : plan.weight_map)
      if (missing_files.count(file)) indexed_in_missing.insert(t);
    std::set<std::string> bad_header_files;
    for (const auto& f : rep.files)
      if (f.present && !f.header_error.empty()) bad_header_files.insert(f.name);
    std::set<std::string> claimed;
    for (const auto& spec : m->specs) {
      if (spec.pack_group > 0) continue;  // a logical INT4 weight: its stored companions are specs of their own
      claimed.insert(spec.name);
      auto it = actual.find(spec.name);
      if (it == actual.end()) {
        if (indexed_in_missing.count(spec.name)) continue;
        auto w = plan.weight_map.find(spec.name);
        if (w != plan.weight_map.end() && bad_header_files.count(w->second)) continue;
        if (w != plan.weight_map.end()) continue;  // missing_tensor already, from the index
        add("missing_tensor", "", spec.name, "expected by the " + m->hp.family + " adapter, shape " + shape_str(spec.shape));
        continue;
      }
      const auto& [fr, tr] = it->second;
      if (tr->shape != spec.shape)
        add("wrong_shape", fr->name, spec.name, "shape " + shape_str(tr->shape) + ", expected " + shape_str(spec.shape));
      if (!dtype_is_float(tr->dtype) && spec.component != model::Component::kQuantScale)
        add("wrong_dtype", fr->name, spec.name, std::string("dtype ") + dtype_name(tr->dtype) + ", expected a float type");
      if (spec.layer >= m->hp.n_layer)
        add("mtp", fr->name, spec.name, "multi-token-prediction layer " + std::to_string(spec.layer) + ": checked, never loaded", false);
    }
    for (const auto& [name, ft] : actual)
      if (!claimed.count(name))
        add("unknown_tensor", ft.first->name, name, "not in the " + m->hp.family + " adapter's inventory");
  }

  // Expected hashes and the manifest.
  const bool expectations = !ex.hashes.empty() || !ex.manifest.empty();
  for (const auto& f : rep.files) {
    if (!f.present) continue;
    auto h = ex.hashes.find(f.name);
    auto m = ex.manifest.find(f.name);
    if (expectations && h == ex.hashes.end() && m == ex.manifest.end())
      add("no_expected_hash", f.name, "", "not listed in the expected hashes", false);
    if (h != ex.hashes.end()) {
      if (h->second.size && *h->second.size != f.bytes)
        add("size_mismatch", f.name, "", std::to_string(f.bytes) + " bytes, expected " + std::to_string(*h->second.size));
      else if (!f.sha256.empty() && f.sha256 != h->second.sha256)
        add("hash_mismatch", f.name, "", "sha256 " + f.sha256 + ", expected " + h->second.sha256);
    }
    if (m != ex.manifest.end()) {
      if (m->second.size != f.bytes)
        add("size_mismatch", f.name, "", std::to_string(f.bytes) + " bytes, the manifest says " + std::to_string(m->second.size));
      else if (!f.sha256.empty() && f.sha256 != m->second.sha256) {
        if (h == ex.hashes.end() || h->second.sha256 == f.sha256)
          add("hash_mismatch", f.name, "", "sha256 " + f.sha256 + ", the manifest says " + m->second.sha256);
        int changed = 0;
        for (const auto& t : f.tensors) {
          auto mt = m->second.tensor_xxh64.find(t.name);
          if (mt != m->second.tensor_xxh64.end() && mt->second != t.xxh64) {
            add("tensor_changed", f.name, t.name, "bytes [" + std::to_string(t.offset) + ", " +
                                                     std::to_string(t.offset + t.nbytes) + ") differ from the manifest");
            ++changed;
          }
        }
        if (changed == 0)
          add("header_changed", f.name, "", "no tensor's bytes changed: the header or the layout differs from the manifest");
      }
    }
  }
  std::set<std::string> in_checkpoint(plan.files.begin(), plan.files.end());
  for (const auto& [name, e] : ex.hashes) {
    if (in_checkpoint.count(name)) continue;
    const bool shard = name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
    if (shard && std::find(plan.extra_files.begin(), plan.extra_files.end(), name) == plan.extra_files.end())
      add("missing_file", name, "", "listed in the expected hashes, not in the checkpoint");
    else
      add("not_a_shard", name, "", "listed in the expected hashes; not a shard of the checkpoint, not verified", false);
  }

  // Values.
  if (o.scan.any())
    for (const auto& f : rep.files)
      for (const auto& t : f.tensors) {
        if (o.scan.nan && t.nan) add("nan", f.name, t.name, std::to_string(t.nan) + " NaN values");
        if (o.scan.inf && t.inf) add("inf", f.name, t.name, std::to_string(t.inf) + " infinite values");
        if (o.scan.range && t.out_of_range) {
          std::ostringstream os;
          os << t.out_of_range << " finite values with |x| > " << o.scan.range_limit;
          add("out_of_range", f.name, t.name, os.str());
        }
        if (o.scan.range && t.all_zero) add("all_zero", f.name, t.name, "every value is zero", false);
      }

  std::sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return std::tie(a.file, a.tensor, a.kind, a.detail) < std::tie(b.file, b.tensor, b.kind, b.detail);
  });
}

}  // namespace

Result<Report> verify_checkpoint(const VerifyOptions& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Expectations ex;
  auto prepare = [&]() -> Result<Plan> {
    DZ_ASSIGN_OR_RETURN(Plan plan, make_plan(o.model_dir));
    if (!o.hashes_path.empty()) {
      DZ_ASSIGN_OR_RETURN(auto list, read_expected_hashes(o.hashes_path));
      for (auto& e : list) ex.hashes[e.name] = std::move(e);
    }
    if (!o.manifest_in.empty()) {
      DZ_ASSIGN_OR_RETURN(ex.manifest, read_manifest(o.manifest_in));
    }
    return plan;
  };
  Result<Plan> planned = prepare();
  DZ_RETURN_IF_ERROR(comm::agree(planned.status()));
  const Plan& plan = *planned;

  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < plan.files.size(); ++i) sizes.push_back(plan.present[i] ? plan.sizes[i] : 0);
  const std::vector<int> owner = assign_by_bytes(sizes, world);

  uint64_t to_read = 0;
  if (!o.structure_only)
    for (uint64_t s : sizes) to_read += s;
  VerifyProgress progress(to_read);
  const int64_t t0 = monotonic_ns();
  json mine = json::array();
  for (size_t i = 0; i < plan.files.size(); ++i) {
    if (owner[i] != rank || !plan.present[i]) continue;
    FileResult f = verify_file(o.model_dir, plan.files[i], o, progress);
    if (!plan.open_errors[i].empty() && f.read_error.empty()) f.read_error = plan.open_errors[i];
    f.rank = rank;
    mine.push_back(file_to_json(f));
  }
  const double my_seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  progress.finish();
  const std::string payload = json{{"seconds", my_seconds}, {"files", std::move(mine)}}.dump();
  const std::vector<std::string> all = comm::all_gather_strings(payload);

  Report rep;
  rep.model_dir = o.model_dir;
  rep.world_size = world;
  rep.sha256_impl = sha256_impl_name();
  rep.structure_only = o.structure_only;
  rep.expected = o.hashes_path;
  if (!o.manifest_in.empty()) rep.expected += (rep.expected.empty() ? "" : ", ") + std::string("manifest ") + o.manifest_in;
  std::map<std::string, FileResult> by_name;
  for (int r = 0; r < world; ++r) {
    auto j = parse_json_limited(all[static_cast<size_t>(r)], "rank " + std::to_string(r) + " results");
    if (!j.ok()) return j.status();
    RankTime rt;
    rt.rank = r;
    rt.seconds = (*j)["seconds"];
    for (const auto& fj : (*j)["files"]) {
      FileResult f = file_from_json(fj);
      ++rt.files;
      rt.bytes += f.bytes;
      by_name[f.name] = std::move(f);
    }
    rep.ranks.push_back(rt);
    rep.wall_seconds = std::max(rep.wall_seconds, rt.seconds);
  }
  size_t readable = 0;
  for (size_t i = 0; i < plan.files.size(); ++i) {
    auto it = by_name.find(plan.files[i]);
    FileResult f;
    if (it != by_name.end()) f = std::move(it->second);
    else {
      f.name = plan.files[i];
      f.present = false;
    }
    rep.total_bytes += f.bytes;
    readable += f.present && f.header_error.empty() && f.read_error.empty();
    rep.files.push_back(std::move(f));
  }
  if (readable == 0)
    return Status::Corrupt(o.model_dir + ": no shard could be read as safetensors" +
                           (rep.files.empty() ? std::string() : ": " + rep.files[0].name + ": " +
                                (!rep.files[0].present ? std::string("absent")
                                 : !rep.files[0].header_error.empty() ? rep.files[0].header_error
                                                                      : rep.files[0].read_error)));
  check(rep, plan, ex, o);
  Status written = Status::Ok();
  if (rank == 0 && !o.manifest_out.empty()) written = write_manifest(o.manifest_out, rep);
  DZ_RETURN_IF_ERROR(comm::agree(written));
  return rep;
}

namespace {
std::string verdict(const Report& r, const FileResult& f) {
  std::string v;
  for (const auto& x : r.findings)
    if (x.error && x.file == f.name && v.find(x.kind) == std::string::npos) v += (v.empty() ? "" : ",") + x.kind;
  if (!v.empty()) return v;
  for (const auto& x : r.findings)
    if (x.file == f.name && x.kind == "no_expected_hash") return "ok (no expected hash)";
  return "ok";
}
}  // namespace

json to_json(const Report& r) {
  json files = json::array();
  for (const auto& f : r.files) {
    json ts = json::array();
    for (const auto& t : f.tensors) {
      json tj = {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"offset", t.offset}, {"nbytes", t.nbytes}};
      if (!r.structure_only) tj["xxh64"] = hex64(t.xxh64);
      ts.push_back(std::move(tj));
    }
    json fj = {{"name", f.name}, {"present", f.present}, {"rank", f.rank}, {"bytes", f.bytes}, {"seconds", f.seconds},
               {"verdict", verdict(r, f)}, {"tensors", std::move(ts)}};
    if (!r.structure_only) fj["sha256"] = f.sha256;
    files.push_back(std::move(fj));
  }
  json findings = json::array();
  for (const auto& x : r.findings)
    findings.push_back({{"kind", x.kind}, {"file", x.file}, {"tensor", x.tensor}, {"detail", x.detail},
                        {"severity", x.error ? "error" : "note"}});
  json ranks = json::array();
  for (const auto& rt : r.ranks)
    ranks.push_back({{"rank", rt.rank}, {"files", rt.files}, {"bytes", rt.bytes}, {"seconds", rt.seconds}});
  return {{"model_dir", r.model_dir},
          {"world_size", r.world_size},
          {"sha256_impl", r.sha256_impl},
          {"inventory", r.inventory},
          {"expected", r.expected},
          {"structure_only", r.structure_only},
          {"files", std::move(files)},
          {"findings", std::move(findings)},
          {"errors", r.errors()},
          {"total_bytes", r.total_bytes},
          {"wall_seconds", r.wall_seconds},
          {"throughput_bytes_per_s", !r.structure_only && r.wall_seconds > 0 ? static_cast<double>(r.total_bytes) / r.wall_seconds : 0.0},
          {"ranks", std::move(ranks)},
          {"exit_code", r.exit_code()}};
}

std::string to_text(const Report& r) {
  std::ostringstream o;
  size_t w = 4;
  for (const auto& f : r.files) w = std::max(w, f.name.size());
  o << "verify      " << r.model_dir << ": " << r.files.size() << " file(s) over " << r.world_size << " rank(s), sha256 "
    << r.sha256_impl << (r.structure_only ? ", structure only (no tensor bytes read)" : "") << "\n"
    << "inventory   " << r.inventory << "\n"
    << "expected    " << (!r.expected.empty() ? r.expected
        : r.structure_only ? "none given (sizes and headers only)"
                           : "none given (hashes computed, not compared)") << "\n";
  o << std::left << std::setw(static_cast<int>(w)) << "file" << std::right << std::setw(16) << "bytes" << std::setw(9)
    << "seconds" << std::setw(6) << "rank" << "  verdict\n";
  for (const auto& f : r.files) {
    o << std::left << std::setw(static_cast<int>(w)) << f.name << std::right << std::setw(16) << f.bytes << std::setw(9)
      << std::fixed << std::setprecision(2) << f.seconds << std::setw(6) << (f.rank < 0 ? std::string("-") : std::to_string(f.rank))
      << "  " << verdict(r, f) << "\n";
  }
  if (!r.findings.empty()) {
    o << "findings    " << r.errors() << " error(s), " << r.findings.size() - static_cast<size_t>(r.errors()) << " note(s)\n";
    for (const auto& x : r.findings)
      o << "  " << (x.error ? "ERROR " : "note  ") << x.kind << "  " << (x.file.empty() ? "" : x.file)
        << (x.tensor.empty() ? "" : (x.file.empty() ? "" : ": ") + x.tensor) << ": " << x.detail << "\n";
  }
  const double gbs = r.wall_seconds > 0 ? static_cast<double>(r.total_bytes) / r.wall_seconds / 1e9 : 0.0;
  if (r.structure_only)
    o << "throughput  structure only: the headers of " << std::fixed << std::setprecision(3)
      << static_cast<double>(r.total_bytes) / 1e9 << " GB of files read in " << r.wall_seconds << " s\n";
  else
    o << "throughput  " << std::fixed << std::setprecision(3) << static_cast<double>(r.total_bytes) / 1e9 << " GB in "
    << r.wall_seconds << " s: " << gbs << " GB/s\n";
  o << "ranks      ";
  for (const auto& rt : r.ranks) o << " " << rt.rank << ":" << rt.files << " files " << rt.seconds << " s;";
  o << "\nresult      " << (r.exit_code() == 0 ? "ok" : "FAILED (" + std::to_string(r.errors()) + " error(s))") << "\n";
  return o.str();
}

}  // namespace dayzero::verify
