// The run folder and this rank's files in it: rank 0 makes the folder and writes config.yaml
// and plan.json; every rank opens its event log and heartbeat, then (after the backend) its
// HDF5 file with the root attributes. Not the backend (run_backend.cpp).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "checkpoint/xxhash.h"
#include "core/file.h"

#include "comm/groups.h"
#include "dump/run_folder.h"
#include "dump/schema.h"
#include "runtime/run/run.h"

#ifndef DAYZERO_VERSION
#define DAYZERO_VERSION "0.1.0"
#endif

namespace dayzero::runtime {
namespace fs = std::filesystem;
namespace {

Status write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();
  return f ? Status::Ok() : Status::IoError("cannot write " + p.string());
}

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// XXH64 of the first `limit` bytes of path (all of it when limit is 0).
Result<std::string> file_xxh64(const std::string& path, uint64_t limit, uint64_t* size) {
  DZ_ASSIGN_OR_RETURN(RegularFile f, open_regular_file(path));
  *size = f.size;
  const uint64_t n = limit ? std::min(limit, f.size) : f.size;
  std::string bytes(n, '\0');
  uint64_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(f.fd, bytes.data() + got, n - got, static_cast<off_t>(got));
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  ::close(f.fd);
  if (got != n) return Status::IoError(path + ": cannot read " + std::to_string(n) + " bytes");
  return hex64(checkpoint::xxh64(bytes.data(), bytes.size()));
}

// The safetensors header of a shard: its 8-byte length and the JSON after it (names, dtypes,
// shapes, offsets), hashed; with the file size this names the checkpoint without reading it.
Result<std::string> header_xxh64(const std::string& path, uint64_t* size) {
  DZ_ASSIGN_OR_RETURN(RegularFile f, open_regular_file(path));
  unsigned char len8[8] = {};
  const ssize_t r = ::pread(f.fd, len8, 8, 0);
  ::close(f.fd);
  if (r != 8) return Status::IoError(path + ": cannot read the safetensors header length");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len8[i];
  if (len > f.size) return Status::Corrupt(path + ": safetensors header longer than the file");
  return file_xxh64(path, 8 + len, size);
}

}  // namespace

Status Run::write_identity() const {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  static const std::regex kSha256(R"([0-9a-f]{64})");
  for (const std::string& shard : model_.catalog.files()) {
    uint64_t size = 0;
    DZ_ASSIGN_OR_RETURN(std::string header, header_xxh64(shard, &size));
    nlohmann::ordered_json f = {{"name", fs::path(shard).filename().string()}, {"bytes", size}, {"header_xxh64", header}};
    // A Hugging Face cache links each shard to a blob named by its SHA-256.
    std::error_code ec;
    const std::string blob = fs::canonical(shard, ec).filename().string();
    if (!ec && std::regex_match(blob, kSha256)) f["sha256"] = blob;
    files.push_back(std::move(f));
  }
  uint64_t config_size = 0;
  DZ_ASSIGN_OR_RETURN(std::string config_hash, file_xxh64(model_.config_path, 0, &config_size));
  const auto& sel = cfg_.dump.activations;
  nlohmann::ordered_json layers = sel.all_layers ? nlohmann::ordered_json("all") : nlohmann::ordered_json(sel.layers);
  nlohmann::ordered_json points = sel.all_points ? nlohmann::ordered_json("all") : nlohmann::ordered_json(sel.points);
  nlohmann::ordered_json prompts = nlohmann::ordered_json::array();
  for (const config::Prompt& p : cfg_.prompts) {
    nlohmann::ordered_json images = nlohmann::ordered_json::array();
    for (const std::string& img : p.images) {
      uint64_t size = 0;
      DZ_ASSIGN_OR_RETURN(std::string h, file_xxh64(img, 0, &size));
      images.push_back(h);
    }
    for (const config::ImagePatternConfig& ip : cfg_.debug.image_patterns)
      if (ip.prompt == p.id) images.push_back("pattern seed " + std::to_string(ip.seed));
    prompts.push_back({{"id", p.id}, {"images", images}});
  }
  const nlohmann::ordered_json j = {
      {"schema_version", 1},
      {"model",
       {{"config_xxh64", config_hash}, {"tensors", static_cast<int64_t>(model_.specs.size())}, {"files", files}}},
      // The compute dtype as the run config spells it; the CPU backend computes in float32.
      {"dtype", !cfg_.model.dtype || *cfg_.model.dtype == DType::kF32 ? "float32"
                : *cfg_.model.dtype == DType::kBF16                   ? "bfloat16"
                                                                      : "float16"},
      {"dump",
       {{"enabled", sel.enabled}, {"layers", layers}, {"points", points}, {"phase", config::dump_phase_name(sel.phase)},
        {"mode", config::dump_mode_name(sel.mode)}}},
      {"generate",
       {{"max_new_tokens", cfg_.generate.max_new_tokens},
        {"stop_at_eos", cfg_.generate.stop_at_eos},
        {"top_k_record", cfg_.generate.top_k_record}}},
      {"prompts", prompts},
      {"recorded",
       {{"dayzero_version", DAYZERO_VERSION},
        {"world_size", env_.world_size()},
        {"plan", {{"dp", plan_.dp}, {"pp", plan_.pp}, {"tp", plan_.tp}, {"ep", plan_.ep}, {"etp", plan_.etp}}},
        {"nodes", plan_.nodes},
        {"repeat", args_.repeat}}}};
  return write_file(fs::path(run_dir_) / "identity.json", j.dump(2) + "\n");
}

Status Run::make_run_folder() {
  std::string dir;
  Status s;
  if (env_.rank() == 0) {
    auto expanded = args_.dump_dir_override.empty()
                        ? config::expand_dump_dir(cfg_.dump.dir, cfg_.config_stem, started_ns_)
                        : Result<std::string>(args_.dump_dir_override);
    if (!expanded.ok()) s = expanded.status();
    else dir = *expanded;
    if (s.ok()) s = dump::make_run_folder(dir, cfg_.dump.event_log == config::EventLogMode::kFull);
    if (s.ok()) s = write_file(fs::path(dir) / dump::kConfigFileName, cfg_.source_text);
    if (s.ok())
      s = write_file(fs::path(dir) / dump::kPlanFileName, plan::to_json(plan_).dump(2));
  }
  DZ_RETURN_IF_ERROR(comm::agree(s));
  run_dir_ = comm::broadcast_string(dir);
  if (env_.rank() == 0) DZ_RETURN_IF_ERROR(write_identity());
  if (cfg_.dump.event_log == config::EventLogMode::kFull) {
    DZ_ASSIGN_OR_RETURN(events_, dump::EventLog::open(dump::event_log_path(run_dir_, env_.rank())));
    timeline_.attach(events_.get());
  }
  DZ_ASSIGN_OR_RETURN(heartbeat_, dump::Heartbeat::start(dump::heartbeat_path(run_dir_, env_.rank()), env_.rank()));
  return Status::Ok();
}

Status Run::open_dump_file() {
  // Collective over the world: every rank measures, whether or not it writes a file.
  const int64_t offset = comm::measure_clock_offset_ns();
  // The event log carries the offset too, so `dayzero timeline` needs no HDF5 file; the hang
  // report carries it as well, the only place it reaches with dump.event_log: off and no HDF5.
  const plan::RankCoord& c = groups_->coord();
  nlohmann::ordered_json meta = {{"rank", env_.rank()},       {"world_size", env_.world_size()},
                                 {"host", env_.hostname()},   {"dp", c.dp_rank},
                                 {"pp", c.pp_rank},           {"tp", c.tp_rank},
                                 {"ep", c.ep_rank},           {"etp", c.etp_rank},
                                 {"local_rank", env_.local_rank()}, {"local_size", env_.local_size()},
                                 {"clock_offset_ns", offset}};
  hang_watch_.set_placement(meta);
  if (events_) DZ_RETURN_IF_ERROR(events_->append_meta(realtime_ns(), meta));
  if (!cfg_.dump.enabled) return Status::Ok();
  dump::RootAttributes a;
  a.dayzero_version = DAYZERO_VERSION;
  a.rank = env_.rank();
  a.world_size = env_.world_size();
  a.dp = plan_.dp;
  a.pp = plan_.pp;
  a.tp = plan_.tp;
  a.ep = plan_.ep;
  a.etp = plan_.etp;
  a.hostname = env_.hostname();
  a.device = be_->device().to_string();
  a.backend = be_->name();
  a.model_config = model_.config.dump();
  a.plan = plan::to_json(plan_).dump();
  a.run_config = cfg_.source_text;
  a.started_at = utc_iso8601(started_ns_);
  a.clock_offset_ns = offset;
  DZ_ASSIGN_OR_RETURN(writer_, dump::DumpWriter::create(dump::dump_path(run_dir_, env_.rank()), a));
  if (replay_layers_) {  // docs/dump-schema.md: what `dayzero compare` restricts itself to
    DZ_RETURN_IF_ERROR(writer_->set_attribute(dump::kAttrReplaySource, args_.replay_from));
    DZ_RETURN_IF_ERROR(writer_->set_attribute(dump::kAttrReplayLayerBegin, replay_layers_->first));
    DZ_RETURN_IF_ERROR(writer_->set_attribute(dump::kAttrReplayLayerEnd, replay_layers_->second));
  }
  return Status::Ok();
}

}  // namespace dayzero::runtime
