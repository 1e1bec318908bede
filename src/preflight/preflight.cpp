// `dayzero preflight` (preflight.h): the order of the checks, the watchdog around them, the
// backend and Comms the tests run on (chosen by transport.h, made here as the run makes them),
// the table on rank 0 and preflight.json. The inventory, the comparison and the tests are the
// other files of this folder.
#include "preflight/preflight.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "backend/backend.h"
#include "comm/completion_wait.h"
#include "comm/groups.h"
#include "comm/mpi_comm.h"
#include "comm/op_watch.h"
#include "core/clock.h"
#include "kernels/ops.h"
#include "plan/plan.h"
#include "preflight/classes.h"
#include "preflight/inventory.h"
#include "preflight/nvml.h"
#include "preflight/probes.h"
#include "preflight/transport.h"
#include "runtime/device_groups.h"
#include "runtime/hang_watch.h"
#include "runtime/runner.h"
#include "runtime/watchdog.h"

namespace dayzero::preflight {
namespace fs = std::filesystem;
namespace {

using json = nlohmann::ordered_json;

constexpr int kReps = 3;
constexpr int kPairReps = 5;              // round trips per pair, the fastest counts
constexpr int64_t kGemmN = 1024;           // 2.1 GFLOP a call: tens of ms on a CPU core
constexpr int64_t kCopyBytes = 64 << 20;   // per host-device copy: a few ms over PCIe
constexpr int kCopyReps = 5;               // copies each way, the fastest counts
constexpr double kDefaultTimeoutS = 60;    // per op, without a run config
constexpr double kPhaseTimeoutS = 600;     // the tests together
constexpr double kAbortGraceS = 5;
constexpr const char* kSchema = "dayzero.preflight/2";

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string gib(double b) { return fmt("%.1f GiB", b / (1024.0 * 1024 * 1024)); }

// This rank's view when its watchdog gives up, next to preflight.json (preflight-hang-rank-N.json).
void write_hang(const std::string& dir, int rank, const std::string& host, const std::string& why,
                const diag::HangSelf& self) {
  if (dir.empty()) return;
  json j;
  j["schema"] = kSchema;
  j["rank"] = rank;
  j["host"] = host;
  j["reason"] = why;
  j["op"] = self.op;
  j["group"] = self.group;
  j["label"] = self.label;
  j["seq"] = self.seq;
  j["members"] = self.members;
  j["stalled_before"] = self.stalled_before;
  j["exit_code"] = 3;
  char name[64];
  std::snprintf(name, sizeof name, "preflight-hang-rank-%05d.json", rank);
  std::ofstream(fs::path(dir) / name) << j.dump(2) << "\n";
}

// The safetensors files of a checkpoint folder, sorted by name.
std::vector<std::string> shard_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

json figure_json(const CollectiveFigure& f) {
  return json{{"algbw_bytes_per_s", f.algbw}, {"busbw_bytes_per_s", f.busbw}, {"seconds", f.seconds}};
}

struct Test {
  std::string name;    // "gemm", "h2d copy", "read", "tp all_reduce", "pairwise nodes", "pairwise links"
  std::string what;    // a line for the table: "f32 GEMM 1024^3 per rank"
  std::string unit;    // "GFLOP/s" or "GB/s"
  double scale = 1;    // value / scale in the unit
  std::vector<Figure> figures;
  std::string transport;  // what carried a communication test (transport_name); empty otherwise
};

// A test that did not run here, and why (the host-device copy without a GPU).
struct NotRun {
  std::string name, reason;
};

}  // namespace

int run_preflight(const comm::MpiEnv& env, const PreflightArgs& a) {
  const bool root = env.rank() == 0;
  auto bad = [&](const Status& s) {
    if (root) std::cerr << "dayzero preflight: error: " << s.message() << std::endl;
    return s.exit_code();
  };
  runtime::Watchdog::install_sigterm_handler();
  std::string run_dir;  // known after the config; the watchdog's report goes there
  runtime::HangWatch* watch = nullptr;
  runtime::Watchdog watchdog(env.rank(), [&](const std::string& why) {
    if (watch) write_hang(run_dir, env.rank(), env.hostname(), why, watch->view());
  });
  watchdog.set_abort_mode(env.thread_level() == MPI_THREAD_MULTIPLE, kAbortGraceS);
  runtime::HangWatch hang_watch(watchdog, env.rank());
  watch = &hang_watch;
  hang_watch.set_timeout(a.timeout_s.value_or(kDefaultTimeoutS));
  hang_watch.set_phase("preflight");
  comm::set_op_observer(&hang_watch);
  struct Uninstall {
    ~Uninstall() { comm::set_op_observer(nullptr); }
  } uninstall;

  // The job's plan and config, through the run's own phases: the groups tested are the job's.
  std::optional<runtime::JobPlan> job;
  if (!a.config_path.empty()) {
    runtime::RunArgs ra;
    ra.config_path = a.config_path;
    ra.dump_dir_override = a.dump_dir;
    ra.threads = a.threads;
    auto jp = runtime::plan_job(env, ra);
    if (!jp.ok()) return bad(jp.status());
    job = std::move(jp).value();
  }
  config::PreflightConfig pc = job ? job->cfg.preflight : config::PreflightConfig{};
  if (a.outlier_fraction) pc.outlier_fraction = *a.outlier_fraction;
  if (a.read_mib) pc.read_mib = *a.read_mib;
  if (a.collective_mib) pc.collective_mib = *a.collective_mib;
  if (!(pc.outlier_fraction > 0 && pc.outlier_fraction <= 1))
    return bad(Status::InvalidArgument("--outlier-fraction: must be in (0, 1], got " + fmt("%g", pc.outlier_fraction)));
  if (pc.read_mib < 1) return bad(Status::InvalidArgument("--read-mib: must be >= 1"));
  if (pc.collective_mib < 1) return bad(Status::InvalidArgument("--collective-mib: must be >= 1"));
  const double timeout = a.timeout_s.value_or(job ? job->cfg.watchdog.collective_timeout_s : kDefaultTimeoutS);
  if (timeout < 0) return bad(Status::InvalidArgument("--timeout: must be >= 0 (0 disables the op deadline)"));
  hang_watch.set_timeout(timeout);

  // The run folder: every node's first rank makes it (a node-local filesystem needs its own).
  const std::string stamp = comm::broadcast_string(utc_stamp(realtime_ns()));
  run_dir = a.dump_dir.empty() ? "runs/preflight-" + stamp : a.dump_dir;
  {
    Status local;
    std::error_code ec;
    if (env.local_rank() == 0) fs::create_directories(run_dir, ec);
    if (ec) local = Status::IoError(run_dir + ": cannot create the run folder: " + ec.message());
    const Status agreed = comm::agree(local);
    if (!agreed.ok()) return bad(agreed);
  }
  // debug.stall (tests only) applies to the checks, not to the planning before them.
  if (job) hang_watch.set_stall(job->cfg.debug.stall);

  // Inventory.
  InventoryInputs ii;
  ii.rank = env.rank();
  ii.local_rank = env.local_rank();
  ii.host = env.hostname();
  ii.version = a.version;
  ii.run_dir = run_dir;
  if (job) ii.checkpoint_dir = job->cfg.model.path;
  json inv = local_inventory(ii);
  inv["clock_offset_ns"] = comm::measure_clock_offset_ns();
  const std::vector<std::string> inv_texts = comm::all_gather_strings(inv.dump());
  const std::vector<std::string> hosts = comm::all_gather_strings(env.hostname());

  // The groups: the job's plan, or every rank a replica (the world all-reduce only).
  plan::Plan plan = job ? job->plan : plan::data_parallel_plan(env.world_size(), 1, hosts);
  // Declared before the groups, whose Comms stage through it: it outlives them.
  std::unique_ptr<backend::Backend> be;
  auto made = comm::ProcessGroups::create(plan, env.rank(), nullptr);
  if (!made.ok()) return bad(made.status());
  comm::ProcessGroups groups = std::move(made).value();

  // The backend and each group's Comm, by the run's rule (transport.h) on facts gathered from
  // every rank: the GPUs each sees and the one it binds (local rank modulo the visible ones).
  int n_gpu = 0;
  {
    auto n = backend::cuda_device_count();
    const Status agreed = comm::agree(n.ok() ? Status::Ok() : n.status().with_context(env.hostname()));
    if (!agreed.ok()) return bad(agreed);
    n_gpu = *n;
  }
  const int device = env.local_rank() % std::max(1, n_gpu);
  std::string bus;
  if (n_gpu > 0)
    if (auto b = backend::cuda_pci_bus_id(device); b.ok()) bus = *b;
  TransportInputs ti;
  if (job) {
    ti.backend = job->cfg.backend;
    ti.comm = job->cfg.comm;
  }
  ti.cuda_built = backend::cuda_built();
  for (const auto& t : comm::all_gather_strings(std::to_string(n_gpu))) ti.visible_gpus.push_back(std::stoi(t));
  ti.hosts = hosts;
  ti.gpu_keys = comm::all_gather_strings(comm::gpu_key(env.hostname(), bus));
  ti.group_sizes = {groups.mpi_world().size(), groups.mpi_tp().size(), groups.mpi_pp().size(),
                    groups.mpi_dp().size(),    plan.wide_ep() ? groups.mpi_ep().size() : 1,
                    groups.mpi_etp().size()};
  ti.world_moves_device_tensors = !job;
  auto chosen = choose_transports(ti);
  if (!chosen.ok()) return bad(chosen.status());
  const TransportChoice tc = std::move(chosen).value();
  if (tc.cuda) {
    // The NCCL bootstrap waits on every member: a peer that never comes is a hang like any other.
    runtime::WatchdogScope setup(watchdog, "the preflight's backend and NCCL communicators", kPhaseTimeoutS);
    backend::BackendOptions bo;
    bo.kind = "cuda";
    bo.device_index = device;
    bo.compute_dtype = DType::kF32;
    auto made_be = backend::make_backend(bo);
    const Status agreed = comm::agree(made_be.ok() ? Status::Ok() : made_be.status().with_context(env.hostname()));
    if (!agreed.ok()) return bad(agreed);
    be = std::move(made_be).value();
    // The run's own wrapping of the groups (runtime/device_groups.h).
    std::array<bool, 6> nccl{};
    for (size_t k = 0; k < nccl.size(); ++k) nccl[k] = tc.transport[k] == Transport::kNccl;
    const Status agreed_comms =
        comm::agree(runtime::wrap_groups_for_device(groups, *be, device, nccl, nullptr, comm::nccl_wait_timeout_s(timeout)));
    if (!agreed_comms.ok()) return bad(agreed_comms);
  }
  // One rank per node, in node order (the first rank of each node).
  MPI_Comm leaders_mpi = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, env.local_rank() == 0 ? 0 : MPI_UNDEFINED, env.rank(), &leaders_mpi);
  std::unique_ptr<comm::MpiComm> leaders;
  if (leaders_mpi != MPI_COMM_NULL)
    leaders = std::make_unique<comm::MpiComm>(leaders_mpi, true, "nodes", "nodes", nullptr);

  // The tests; each rank's figures in `mine`, gathered to rank 0 after.
  const int64_t coll_bytes = pc.collective_mib << 20;
  json mine;
  Status local;
  bool read_failed = false;  // the copy or the read failed somewhere: the same on every rank (agreed)
  {
    runtime::WatchdogScope phase(watchdog, "preflight tests", kPhaseTimeoutS);
    const int threads = a.threads > 0 ? a.threads
                                      : std::max<int>(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) /
                                                             std::max(1, env.local_size()));
    kernels::cpu::gemm_set_threads(threads);
    local = groups.world().barrier();
    if (local.ok()) mine["gemm_gflops"] = gemm_gflops(kGemmN, kReps);
    if (local.ok()) local = groups.world().barrier();
    // Every rank at once, as the job's ranks load their weights.
    if (local.ok() && be) {
      auto c = host_device_copy(device, kCopyBytes, kCopyReps);
      if (c.ok())
        mine["copy"] = json{{"h2d_bytes_per_s", c->h2d}, {"d2h_bytes_per_s", c->d2h}, {"bytes", c->bytes}};
      else
        local = c.status().with_context(env.hostname() + " rank " + std::to_string(env.rank()));
    }
    if (local.ok() && leaders) {
      auto r = read_rate(job ? shard_files(job->cfg.model.path) : std::vector<std::string>{}, run_dir,
                         env.hostname(), pc.read_mib << 20);
      if (r.ok())
        mine["read"] = json{{"bytes_per_s", r->bytes_per_s}, {"bytes", r->bytes}, {"source", r->source}};
      else
        local = r.status().with_context(env.hostname());
    }
    // A copy or a read fails on some ranks only: agreed here, before any rank enters a collective
    // the failed ones would skip.
    local = comm::agree(local);
    read_failed = !local.ok();
    json colls = json::array();
    auto record = [&](const char* axis, const char* op, comm::Comm& g, comm::GroupKind kind,
                      const std::string& subject, const CollectiveFigure& f) {
      if (g.rank() != 0) return;
      json c = figure_json(f);
      c["axis"] = axis;
      c["op"] = op;
      c["group"] = subject;
      c["size"] = g.size();
      c["transport"] = transport_name(tc.transport[static_cast<size_t>(kind)]);
      colls.push_back(c);
    };
    backend::Backend* dev = be.get();  // the buffers' device: null on the CPU
    // Errors of these depend only on arguments every rank computes alike: the ranks stop together.
    if (local.ok()) local = groups.world().barrier();
    if (job) {
      if (local.ok() && plan.tp > 1) {
        auto f = all_reduce_figure(groups.tp(), dev, coll_bytes, kReps);
        if (f.ok()) record("tp", "all_reduce", groups.tp(), comm::GroupKind::kTp, groups.tp().label(), *f);
        else local = f.status();
      }
      if (local.ok() && plan.pp > 1) {
        auto f = send_recv_hops(groups.pp(), dev, coll_bytes, kReps);
        if (f.ok())
          for (size_t h = 0; h < f->size(); ++h)
            record("pp", "send_recv", groups.pp(), comm::GroupKind::kPp,
                   groups.pp().label() + " stage " + std::to_string(h) + "->" + std::to_string(h + 1), (*f)[h]);
        else local = f.status();
      }
      if (local.ok() && plan.ep > 1) {
        auto f = all_to_all_figure(groups.ep(), dev, coll_bytes, kReps);
        if (f.ok()) record("ep", "all_to_all", groups.ep(), comm::GroupKind::kEp, groups.ep().label(), *f);
        else local = f.status();
      }
    } else if (local.ok() && env.world_size() > 1) {
      auto f = all_reduce_figure(groups.world(), dev, coll_bytes, kReps);
      if (f.ok()) record("world", "all_reduce", groups.world(), comm::GroupKind::kWorld, "world", *f);
      else local = f.status();
    }
    mine["collectives"] = colls;
    if (local.ok() && leaders && leaders->size() > 1) {
      auto f = pairwise_exchange(*leaders, coll_bytes, kPairReps);
      if (f.ok() && leaders->rank() == 0) {
        json pairs = json::array();
        for (const auto& p : *f) pairs.push_back(figure_json(p));
        mine["pairs"] = pairs;
      } else if (!f.ok()) {
        local = f.status();
      }
    }
  }
  {
    runtime::WatchdogScope w(watchdog, "the agreement after the preflight tests", timeout);
    const Status agreed = read_failed ? local : comm::agree(local);
    if (!agreed.ok()) return bad(agreed);
  }
  const std::vector<std::string> figure_texts = comm::all_gather_strings(mine.dump());

  Status verdict;
  if (root) {
    std::vector<json> invs, figs;
    for (const auto& t : inv_texts) invs.push_back(json::parse(t));
    for (const auto& t : figure_texts) figs.push_back(json::parse(t));
    std::vector<std::string> node_names;  // in order of first rank: the leaders' order
    std::vector<int> leader_ranks;
    for (int r = 0; r < env.world_size(); ++r)
      if (std::find(node_names.begin(), node_names.end(), hosts[r]) == node_names.end()) {
        node_names.push_back(hosts[r]);
        leader_ranks.push_back(r);
      }
    const std::vector<Mismatch> mismatches = find_mismatches(invs);

    std::vector<Test> tests;
    {
      Test t{"gemm", "f32 GEMM " + std::to_string(kGemmN) + "^3, per rank", "GFLOP/s", 1, {}, ""};
      for (int r = 0; r < env.world_size(); ++r)
        t.figures.push_back({"rank " + std::to_string(r) + " (" + hosts[r] + ")", figs[r].value("gemm_gflops", 0.0)});
      tests.push_back(t);
    }
    std::vector<NotRun> not_run;
    if (tc.cuda) {
      const std::string what = fmt("%.0f MiB", static_cast<double>(kCopyBytes) / (1 << 20)) +
                               " between pinned host memory and the rank's GPU, every rank at once";
      Test h2d{"h2d copy", "host to device copy per rank, " + what, "GB/s", 1e9, {}, ""};
      Test d2h{"d2h copy", "device to host copy per rank, " + what, "GB/s", 1e9, {}, ""};
      for (int r = 0; r < env.world_size(); ++r) {
        const std::string who = "rank " + std::to_string(r) + " (" + hosts[r] + ")";
        h2d.figures.push_back({who, figs[r]["copy"].value("h2d_bytes_per_s", 0.0)});
        d2h.figures.push_back({who, figs[r]["copy"].value("d2h_bytes_per_s", 0.0)});
      }
      tests.push_back(h2d);
      tests.push_back(d2h);
    } else {
      const std::string why = "no GPU: backend " + tc.backend + " (" + tc.backend_reason + ")";
      not_run.push_back({"h2d copy", why});
      not_run.push_back({"d2h copy", why});
    }
    {
      std::string source;
      Test t{"read", "", "GB/s", 1e9, {}, ""};
      for (size_t n = 0; n < node_names.size(); ++n) {
        const json& rd = figs[leader_ranks[n]]["read"];
        t.figures.push_back({node_names[n], rd.value("bytes_per_s", 0.0)});
        source = rd.value("source", "") + ", " + fmt("%.0f MiB", rd.value("bytes", 0.0) / (1 << 20));
      }
      t.what = "read per node (" + source + ")";
      tests.push_back(t);
    }
    std::map<std::string, size_t> by_axis;
    for (const json& f : figs)
      for (const json& c : f["collectives"]) {
        const std::string key = c.value("axis", "") + " " + c.value("op", "");
        if (!by_axis.count(key)) {
          by_axis[key] = tests.size();
          const std::string transport = c.value("transport", "");
          tests.push_back({key,
                           key + " bus bandwidth, " + std::to_string(c.value("size", 0)) + " ranks, " +
                               std::to_string(pc.collective_mib) + " MiB, " + transport,
                           "GB/s", 1e9, {}, transport});
        }
        tests[by_axis[key]].figures.push_back({c.value("group", ""), c.value("busbw_bytes_per_s", 0.0)});
      }
    if (figs[0].contains("pairs")) {
      const std::string host_mpi = transport_name(Transport::kMpiHost);
      Test links{"pairwise links",
                 "exchange between nodes, " + std::to_string(pc.collective_mib) + " MiB each way, " + host_mpi,
                 "GB/s", 1e9, {}, host_mpi};
      std::vector<std::vector<double>> per_node(node_names.size());
      size_t k = 0;
      for (size_t i = 0; i < node_names.size(); ++i)
        for (size_t j = i + 1; j < node_names.size(); ++j, ++k) {
          const double v = figs[0]["pairs"][k].value("algbw_bytes_per_s", 0.0);
          links.figures.push_back({node_names[i] + "-" + node_names[j], v});
          per_node[i].push_back(v);
          per_node[j].push_back(v);
        }
      Test nodes{"pairwise nodes", "each node's median over its links", "GB/s", 1e9, {}, host_mpi};
      for (size_t n = 0; n < node_names.size(); ++n) nodes.figures.push_back({node_names[n], median(per_node[n])});
      tests.push_back(nodes);
      tests.push_back(links);
    }
    std::vector<std::string> outliers;
    for (auto& t : tests) {
      rate_against_median(t.figures, pc.outlier_fraction);
      std::vector<double> v;
      for (const auto& f : t.figures) v.push_back(f.value);
      for (const auto& f : t.figures)
        if (f.outlier)
          outliers.push_back(t.name + ": " + f.subject + ": " + fmt("%.3g ", f.value / t.scale) + t.unit + ", " +
                             fmt("%.2f", f.ratio) + " of the median " + fmt("%.3g ", median(v) / t.scale) + t.unit);
    }
    int64_t worst_offset = 0;
    int worst_rank = 0;
    for (const json& i : invs) {
      const int64_t o = i.value("clock_offset_ns", int64_t{0});
      if (std::llabs(o) > std::llabs(worst_offset)) worst_offset = o, worst_rank = i.value("rank", 0);
    }
    const int code = mismatches.empty() && outliers.empty() ? 0 : 1;

    // The table.
    const json& r0 = invs[0];
    std::ostringstream out;
    out << "dayzero preflight: " << env.world_size() << " rank(s) on " << node_names.size() << " node(s)";
    if (job)
      out << ", plan dp=" << plan.dp << " pp=" << plan.pp << " tp=" << plan.tp << " ep=" << plan.ep;
    out << "\nbackend      " << tc.backend << " (" << tc.backend_reason << "); comm " << tc.comm;
    out << "\ninventory (rank 0; what differs is under mismatches)\n";
    std::string isa;
    for (const auto& f : r0["cpu"]["isa"]) isa += (isa.empty() ? "" : " ") + f.get<std::string>();
    out << "  cpu          " << r0["cpu"].value("model", "") << " (" << isa << "), " << r0["cpu"].value("cores", 0)
        << " cores, " << gib(r0.value("memory_bytes", 0.0)) << "\n";
    out << "  gpus         " << r0["gpus"].value("count", 0);
    if (!r0["gpus"]["devices"].empty()) {
      const json& d = r0["gpus"]["devices"][0];
      out << " x " << d.value("name", "") << " (sm_" << d.value("compute_capability", "") << ", "
          << gib(d.value("memory_bytes", 0.0)) << ", ECC " << (d.value("ecc", false) ? "on" : "off") << "; MIG "
          << d.value("mig_mode", "") << ", ECC mode " << d.value("ecc_mode", "") << ")";
    }
    out << (r0["gpus"].value("cuda_built", false) ? "" : " (built without CUDA)") << "; "
        << r0["gpus"].value("nvml", std::string(kNoNvml)) << "\n";
    out << "  versions    ";
    for (const auto& [k, v] : r0["versions"].items()) out << " " << k << " " << v.get<std::string>() << ";";
    out << "\n  interfaces  ";
    for (const auto& i : r0["interfaces"]) out << " " << i.value("name", "") << " (" << i.value("state", "") << ")";
    out << "; InfiniBand: " << (r0["ib_devices"].empty() ? std::string("none") : r0["ib_devices"].dump()) << "\n";
    out << "  env          " << r0["env"].size() << " variable(s) that change communication or placement\n";
    auto folder = [&](const char* label, const json& f) {
      if (f.is_null()) return;
      out << "  " << pad(label, 13) << f.value("path", "") << " (" << f.value("filesystem", "") << ", "
          << (f["free_bytes"].is_number() ? gib(f["free_bytes"].get<double>()) : std::string("?")) << " free)\n";
    };
    folder("run folder", r0["run_dir"]);
    folder("checkpoint", r0["checkpoint"]);
    out << "  clock        largest offset to rank 0: " << fmt("%.3f ms", static_cast<double>(worst_offset) * 1e-6)
        << " (rank " << worst_rank << ")\n";
    out << "mismatches   " << (mismatches.empty() ? "none" : std::to_string(mismatches.size())) << "\n";
    for (const auto& m : mismatches) out << "  " << m.message << "\n";
    out << "tests (ratio to the median of the peers; an outlier is below " << fmt("%.2f", pc.outlier_fraction) << ")\n";
    for (const auto& t : tests) {
      out << "  " << t.what << "\n";
      for (const auto& f : t.figures)
        out << "    " << pad(f.subject, 34) << pad(fmt("%.3g ", f.value / t.scale) + t.unit, 16) << fmt("%.2f", f.ratio)
            << (f.outlier ? "  OUTLIER" : "") << "\n";
    }
    for (const auto& n : not_run) out << "  " << n.name << ": not run: " << n.reason << "\n";
    out << "outliers     " << (outliers.empty() ? "none" : std::to_string(outliers.size())) << "\n";
    for (const auto& o : outliers) out << "  " << o << "\n";
    out << "verdict      "
        << (code == 0 ? std::string("consistent")
                      : std::to_string(mismatches.size()) + " mismatch(es), " + std::to_string(outliers.size()) +
                            " outlier(s)")
        << " (exit " << code << "); " << (fs::path(run_dir) / "preflight.json").string() << "\n";
    std::cout << out.str() << std::flush;

    json doc;
    doc["schema"] = kSchema;
    doc["dayzero_version"] = a.version;
    doc["created_at"] = utc_iso8601(realtime_ns());
    doc["world_size"] = env.world_size();
    doc["nodes"] = node_names;
    doc["config"] = a.config_path.empty() ? json(nullptr) : json(a.config_path);
    doc["plan"] = job ? json{{"dp", plan.dp}, {"pp", plan.pp}, {"tp", plan.tp}, {"ep", plan.ep}, {"etp", plan.etp}}
                      : json(nullptr);
    doc["outlier_fraction"] = pc.outlier_fraction;
    doc["backend"] = json{{"name", tc.backend}, {"reason", tc.backend_reason}};
    doc["comm"] = tc.comm;
    doc["ranks"] = invs;
    json mm = json::array();
    for (const auto& m : mismatches) mm.push_back(json{{"field", m.field}, {"message", m.message}, {"classes", m.classes}});
    doc["mismatches"] = mm;
    json tj = json::array();
    for (const auto& t : tests) {
      json fj = json::array();
      std::vector<double> v;
      for (const auto& f : t.figures) {
        v.push_back(f.value);
        fj.push_back(json{{"subject", f.subject}, {"value", f.value / t.scale}, {"ratio", f.ratio}, {"outlier", f.outlier}});
      }
      json tt{{"name", t.name}, {"what", t.what}, {"unit", t.unit}, {"median", median(v) / t.scale}};
      if (!t.transport.empty()) tt["transport"] = t.transport;
      tt["figures"] = fj;
      tj.push_back(tt);
    }
    doc["tests"] = tj;
    json nr = json::array();
    for (const auto& n : not_run) nr.push_back(json{{"name", n.name}, {"reason", n.reason}});
    doc["not_run"] = nr;
    doc["outliers"] = outliers;
    doc["clock_offset_max_ns"] = worst_offset;
    doc["exit_code"] = code;
    std::ofstream f(fs::path(run_dir) / "preflight.json");
    f << doc.dump(2) << "\n";
    if (!f) verdict = Status::IoError((fs::path(run_dir) / "preflight.json").string() + ": cannot write");
    else if (code == 1)
      verdict = Status::CheckFailed(std::to_string(mismatches.size()) + " mismatch(es) and " +
                                    std::to_string(outliers.size()) + " outlier(s) between the ranks");
  }
  const Status s = comm::agree(verdict);
  if (!s.ok()) {
    if (root) std::cerr << "dayzero preflight: " << s.message() << std::endl;
    return s.exit_code();
  }
  return 0;
}

}  // namespace dayzero::preflight
