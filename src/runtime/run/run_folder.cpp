// The run folder and this rank's files in it: rank 0 makes the folder and writes config.yaml
// and plan.json; every rank opens its event log and heartbeat, then (after the backend) its
// HDF5 file with the root attributes. Not the backend (run_backend.cpp).
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace

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
