// Hang report: this rank's view plus the others' heartbeats, as one JSON file.
#include "diag/hang_report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "dump/heartbeat.h"
#include "dump/run_folder.h"

namespace dayzero::diag {

nlohmann::ordered_json make_hang_report(const std::string& run_dir, int world_size, const HangSelf& self,
                                int64_t now_ns) {
  nlohmann::ordered_json j;
  j["rank"] = self.rank;
  j["host"] = self.host;
  j["reason"] = self.reason;
  j["t_ns"] = now_ns;
  j["phase"] = self.phase;
  if (self.op.empty()) {
    j["op"] = nullptr;
  } else {
    j["op"] = {{"op", self.op},       {"group", self.group}, {"label", self.label}, {"seq", self.seq},
               {"bytes", self.bytes}, {"peer", self.peer},   {"waited_s", self.waited_s}};
  }
  std::vector<int> members = self.members;
  if (members.empty())
    for (int r = 0; r < world_size; ++r) members.push_back(r);
  const std::string inside = self.op + " #" + std::to_string(self.seq) + " of " + self.label;
  nlohmann::ordered_json suspects = nlohmann::ordered_json::array();
  if (!self.op.empty() && self.peer >= 0 && self.peer < static_cast<int>(members.size()))
    suspects.push_back(members[static_cast<size_t>(self.peer)]);
  if (!self.stalled_before.empty()) j["stalled_before"] = self.stalled_before;
  if (!self.placement.is_null()) j["placement"] = self.placement;
  j["last_events"] = self.last_events;
  j["events_total"] = self.events_total;
  nlohmann::ordered_json peers = nlohmann::ordered_json::array();
  for (int r = 0; r < world_size; ++r) {
    nlohmann::ordered_json p;
    p["rank"] = r;
    auto hb = dump::read_heartbeat(dump::heartbeat_path(run_dir, r));
    if (!hb.ok()) {
      p["error"] = hb.status().message();
    } else {
      p["phase"] = hb->phase;
      p["current"] = hb->current;
      p["host"] = hb->host;
      p["heartbeat_age_s"] = static_cast<double>(now_ns - hb->t_ns) * 1e-9;
      p["stopped"] = hb->stopped;
      if (hb->pid >= 0) p["pid"] = hb->pid;
    }
    const bool member = std::find(members.begin(), members.end(), r) != members.end();
    if (!self.op.empty() && self.peer < 0 && member && r != self.rank) {
      const std::string cur = p.contains("current") ? p["current"].get<std::string>() : "";
      if (cur.rfind(inside, 0) != 0) suspects.push_back(r);
    }
    peers.push_back(std::move(p));
  }
  j["peers"] = std::move(peers);
  j["suspects"] = std::move(suspects);
  return j;
}

Status write_hang_report(const std::string& run_dir, const nlohmann::ordered_json& report, int rank) {
  const std::string path = dump::hang_report_path(run_dir, rank);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  f.close();
  return f ? Status::Ok() : Status::IoError("hang report " + path + ": cannot write");
}

}  // namespace dayzero::diag
