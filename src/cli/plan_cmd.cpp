// dayzero plan: choose dp x pp x tp for a model on a topology and show why, from config.json
// alone (no MPI, no weights; with --model DIR the safetensors headers give the stored dtypes).
// The model and the request come from model_folder.h and plan_request.h, as in `dayzero run`;
// a model no adapter knows is planned from the generic analysis (generic_request.h).
// Prints the plan, a per-rank memory table, where a vision tower runs and what it holds, and the
// rejected candidates; writes plan.json and an HTML report on request. Exit 2 when nothing fits
// or the input is bad.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "analysis/analysis.h"
#include "cli/commands.h"
#include "model/model_folder.h"
#include "model/registry.h"
#include "plan/generic_request.h"
#include "plan/plan_request.h"
#include "plan/planner.h"
#include "topology/topology.h"
#include "plan/report.h"

namespace fs = std::filesystem;

namespace dayzero::cli {
namespace {

using topology::format_bytes;

struct PlanArgs {
  std::string model_dir, config_path, topology_path;
  std::optional<int> nodes, gpus_per_node, dp, pp, tp, ep, etp;
  std::optional<std::string> gpu_mem;
  std::optional<double> memory_fraction, intra_gbps, inter_gbps, tflops, hbm_gbps;
  int64_t context = 4096;
  int batch = 1;
  std::string headroom = "1GiB";
  std::string weights_dtype = "as_stored";
  std::string backend = "cuda";  // cpu: what the CPU backend keeps as stored (plan::kCpuKeepsQuantized)
  std::string compute_dtype = "bfloat16";
  std::string out, report;
  bool yaml = false;
};

// Table figures in GiB, or MiB when the cap is under 1 GiB (tiny models, CPU budgets).
struct Unit {
  double bytes = 1024.0 * 1024 * 1024;
  const char* name = "GiB";
};
Unit unit_for(int64_t cap) { return cap >= (int64_t{1} << 30) ? Unit{} : Unit{1024.0 * 1024, "MiB"}; }

std::string in_unit(int64_t b, const Unit& u, int decimals = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, static_cast<double>(b) / u.bytes);
  return buf;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms/token", seconds * 1e3);
  return buf;
}

// "0-7, 16-23, 32-39, ... (64 ranks)" for a sorted list of ranks.
std::string rank_ranges(const std::vector<int>& ranks) {
  std::vector<std::pair<int, int>> runs;
  for (int r : ranks) {
    if (!runs.empty() && runs.back().second + 1 == r) runs.back().second = r;
    else runs.push_back({r, r});
  }
  std::string s;
  const size_t shown = std::min<size_t>(runs.size(), 3);
  for (size_t i = 0; i < shown; ++i) {
    if (i) s += ", ";
    s += std::to_string(runs[i].first);
    if (runs[i].second != runs[i].first) s += "-" + std::to_string(runs[i].second);
  }
  if (runs.size() > shown) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string sizes(const plan::Candidate& c) {
  return "dp=" + std::to_string(c.dp) + " pp=" + std::to_string(c.pp) + " tp=" + std::to_string(c.tp) +
         (c.ep_dp > 1 ? " ep=" + std::to_string(c.ep) : "");
}

// A wide expert-parallel candidate's all-to-all figures: "a2a 7.9 KiB/token/layer, 88% inter".
std::string a2a(const plan::Candidate& c) {
  if (c.ep_dp <= 1) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "  a2a %s/token/MoE layer, %.0f%% inter-node",
                format_bytes(c.all_to_all_bytes_per_token).c_str(), 100 * c.inter_node_share);
  return buf;
}

void print_candidates(const std::vector<plan::Candidate>& cands, const plan::Plan* chosen) {
  int fit = 0;
  for (const auto& c : cands) fit += c.feasible;
  std::cout << "candidates  " << cands.size() << " considered, " << fit << " fit\n";
  for (const auto& c : cands) {
    if (!c.feasible) continue;
    const bool is = chosen && c.dp == chosen->dp && c.pp == chosen->pp && c.tp == chosen->tp &&
                    c.ep_dp == chosen->ep_dp && (c.ep_dp == 1 || c.ep == chosen->ep);
    std::cout << "  " << pad(sizes(c), 30) << pad(ms(c.cost), 20) << "max " << pad(format_bytes(c.max_rank_bytes), 12)
              << (is ? "chosen" : c.ep_dp > 1 && !(chosen && chosen->wide_ep()) ? "fits (wide: --ep chooses it)" : "fits")
              << a2a(c) << "\n";
  }
  // Rejections with the same reason for one tp (a layout constraint) are listed once.
  std::map<std::pair<int, std::string>, std::vector<int>> grouped;
  std::vector<std::pair<int, std::string>> order;
  for (const auto& c : cands) {
    if (c.feasible) continue;
    if (c.worst_rank >= 0 || c.ep_dp > 1) {
      std::cout << "  " << pad(sizes(c), 30) << "rejected: " << c.reason << "\n";
      continue;
    }
    const auto key = std::make_pair(c.tp, c.reason);
    if (!grouped.count(key)) order.push_back(key);
    grouped[key].push_back(c.pp);
  }
  for (const auto& key : order) {
    std::string pps;
    for (int pp : grouped[key]) pps += (pps.empty() ? "" : ",") + std::to_string(pp);
    std::cout << "  " << pad("tp=" + std::to_string(key.first) + " pp=" + pps, 22) << "rejected: " << key.second
              << "\n";
  }
}

// The figures a caveat names get a mark in the table header: "weights*".
std::string marked(const plan::Plan& p, const std::string& figure, const std::string& label) {
  for (const auto& c : p.caveats)
    if (c.figure == figure) return label + "*";
  return label;
}

void print_plan(const plan::Plan& p) {
  std::cout << "plan        dp=" << p.dp << " pp=" << p.pp << " tp=" << p.tp << " (ep=" << p.ep << " etp=" << p.etp
            << (p.wide_ep() ? ", wide: each expert group spans " + std::to_string(p.ep_dp) + " attention replicas" : "")
            << "), estimated " << ms(p.cost_per_token_s) << "\n";
  for (const auto& s : p.stages) {
    std::string also = s.has_embedding ? "embedding" : "";
    if (s.has_lm_head) also += std::string(also.empty() ? "" : ", ") + "final norm, lm_head";
    const int r0 = s.pp * p.tp, r1 = r0 + p.tp - 1;
    const std::string n0 = p.nodes[p.coord(r0).node], n1 = p.nodes[p.coord(r1).node];
    std::cout << (s.pp == 0 ? "stages      " : "            ") << pad("pp" + std::to_string(s.pp), 6)
              << pad("layers [" + std::to_string(s.layer_begin) + ", " + std::to_string(s.layer_end) + ")", 18)
              << pad(also.empty() ? "" : "+ " + also, 34) << pad("ranks " + std::to_string(r0) + (r1 > r0 ? "-" + std::to_string(r1) : ""), 16)
              << (n0 == n1 ? n0 : n0 + ".." + n1) << (p.dp > 1 ? " (dp 0)" : "") << "\n";
  }
  const Unit u = unit_for(p.memory_cap_bytes);
  std::cout << "memory      " << u.name << " per rank, identical rows collapsed\n";
  bool any_state = false;
  for (const auto& m : p.memory) any_state = any_state || m.state > 0;
  std::cout << "  " << pad("ranks", 38) << pad(marked(p, "weights", "weights"), 9) << pad(marked(p, "kv_cache", "kv"), 8)
            << (any_state ? pad(marked(p, "state", "state"), 8) : "") << pad(marked(p, "activations", "act"), 8)
            << pad("headroom", 10) << pad("total", 9) << "of cap\n";
  std::vector<plan::RankMemory> rows;
  std::vector<std::vector<int>> who;
  for (int r = 0; r < p.world_size && r < static_cast<int>(p.memory.size()); ++r) {
    auto it = std::find(rows.begin(), rows.end(), p.memory[r]);
    if (it == rows.end()) {
      rows.push_back(p.memory[r]);
      who.push_back({r});
    } else {
      who[it - rows.begin()].push_back(r);
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& m = rows[i];
    char frac[16];
    std::snprintf(frac, sizeof frac, "%.0f%%", 100.0 * static_cast<double>(m.total()) / static_cast<double>(p.memory_cap_bytes));
    std::cout << "  " << pad(rank_ranges(who[i]), 38) << pad(in_unit(m.weights, u), 9) << pad(in_unit(m.kv_cache, u), 8)
              << (any_state ? pad(in_unit(m.state, u), 8) : "") << pad(in_unit(m.activations, u), 8) << pad(in_unit(m.headroom, u), 10) << pad(in_unit(m.total(), u), 9)
              << frac << "\n";
  }
  for (const auto& c : p.caveats) std::cout << "  * " << pad(c.figure, 12) << c.text << "\n";
  if (p.experts.present) {
    const plan::ExpertPlacement& e = p.experts;
    std::cout << "experts     " << e.reason << "\n";
    // Every block is listed up to 8; beyond, the first 4 and the last 2.
    const size_t n = e.blocks.size();
    for (size_t i = 0; i < n; ++i) {
      if (n > 8 && i == 4) std::cout << "            ... " << n - 6 << " more blocks alike\n";
      if (n > 8 && i >= 4 && i < n - 2) continue;
      const plan::ExpertBlock& b = e.blocks[i];
      std::string ranks;
      for (int r : b.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      std::cout << "            " << pad("ep" + std::to_string(b.ep_rank), 8)
                << pad("experts [" + std::to_string(b.expert_begin) + ", " + std::to_string(b.expert_end) + ")", 20)
                << pad(format_bytes(b.bytes), 12) << "rank(s) " << ranks << " of each expert group\n";
    }
  }
  if (p.vision.present)
    std::cout << "vision      tower " << format_bytes(p.vision.tower_bytes) << " + projector "
              << format_bytes(p.vision.projector_bytes) << " per rank of pp" << p.vision.stage
              << "\n            " << p.vision.reason << "\n";
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) return Status::IoError(path + ": cannot open for writing");
  f << text;
  f.close();
  if (!f) return Status::IoError(path + ": write failed");
  return Status::Ok();
}

// Whether the config at `source` (a folder or a config.json) names no registered adapter: the
// plan then comes from the generic analysis. False when the config cannot be read (the
// adapter path reports that).
bool needs_generic(const std::string& source) {
  std::error_code ec;
  const std::string path = fs::is_directory(source, ec) ? (fs::path(source) / "config.json").string() : source;
  auto config = model::read_config_json(path);
  return config.ok() && !model::find_adapter(*config).ok();
}

int run_plan(const PlanArgs& a) {
  const std::string source = a.config_path.empty() ? a.model_dir : a.config_path;
  const bool generic = needs_generic(source);
  std::optional<model::ModelFolder> m;
  std::optional<analysis::Analysis> an;
  if (generic) {
    auto r = analysis::analyze_path(source);
    if (!r.ok()) return report_failure("plan", r.status());
    an = std::move(*r);
  } else {
    auto r = model::open_model_folder(source, model::WeightsNeeded::kIfPresent);
    if (!r.ok()) return report_failure("plan", r.status());
    m = std::move(*r);
  }
  std::error_code ec;
  const std::string config_path =
      generic ? (fs::is_directory(source, ec) ? (fs::path(source) / "config.json").string() : source) : m->config_path;

  plan::RequestInputs in;
  // Topology: the defaults, the file, then the flags, validated (the one path, topology::resolve).
  topology::Overrides o;
  o.nodes = a.nodes;
  o.gpus_per_node = a.gpus_per_node;
  if (a.gpu_mem) {
    auto b = topology::parse_bytes(*a.gpu_mem);
    if (!b.ok()) return report_failure("plan", b.status().with_context("--gpu-mem"));
    o.device_memory_bytes = *b;
  }
  o.memory_fraction = a.memory_fraction;
  o.intra_node_gbps = a.intra_gbps;
  o.inter_node_gbps = a.inter_gbps;
  o.device_tflops = a.tflops;
  o.device_hbm_gbps = a.hbm_gbps;
  std::optional<std::string> topology_file;
  if (!a.topology_path.empty()) topology_file = a.topology_path;
  auto topo = topology::resolve(topology::Topology{}, topology_file, o);
  if (!topo.ok() && topo.status().message().rfind("topology.device_memory:", 0) == 0)
    return report_failure("plan", Status::InvalidArgument("the device memory is not given: --gpu-mem 80GiB (or device_memory in --topology)"));
  if (!topo.ok()) return report_failure("plan", topo.status());
  in.topo = *topo;

  auto weights = plan::parse_weights_on_device(a.weights_dtype, "--weights-dtype");
  if (!weights.ok()) return report_failure("plan", weights.status());
  in.weights = *weights;
  in.keeps_quantized = a.backend == "cuda" ? plan::kCudaKeepsQuantized : plan::kCpuKeepsQuantized;
  if (a.compute_dtype == "bfloat16" || a.compute_dtype == "float16") in.bytes_per_activation = 2;
  else if (a.compute_dtype == "float32") in.bytes_per_activation = 4;
  else return report_failure("plan", Status::InvalidArgument("--compute-dtype " + a.compute_dtype + ": expected bfloat16, float16 or float32"));
  auto headroom = topology::parse_bytes(a.headroom);
  if (!headroom.ok() && a.headroom != "0") return report_failure("plan", headroom.status().with_context("--headroom"));
  in.headroom_bytes = headroom.ok() ? *headroom : 0;
  if (a.context < 1 || a.batch < 1) return report_failure("plan", Status::InvalidArgument("--context and --batch must be >= 1"));
  in.context_tokens = a.context;
  in.batch = a.batch;
  in.dp = a.dp;
  in.pp = a.pp;
  in.tp = a.tp;
  in.ep = a.ep;
  in.etp = a.etp;
  plan::WeightSizes wd;
  auto request = generic ? plan::make_generic_plan_request(*an, in, &wd) : plan::make_plan_request(*m, in, &wd);
  if (!request.ok()) return report_failure("plan", request.status());
  const plan::PlanRequest& req = *request;

  int64_t params = 0;
  if (generic) params = an->total;
  else
    for (const auto& s : req.specs)  // quantization storage (scales, INT4 packed words) holds no parameters
      if (s.component != model::Component::kQuantScale) params += shape_numel(s.shape);
  const auto& h = req.hp;
  const std::string family =
      generic ? "generic analysis of " + h.model_type + " (no adapter; " + analysis::source_name(an->source) + ")" : h.family;
  const auto cache = plan::summarize_cache(req.layer_descs, in.bytes_per_activation);
  std::cout << "model       " << family << " from " << config_path << "\n"
            << "            " << h.n_layer << " layers, hidden " << h.n_embd << ", heads " << h.n_head << "/" << h.n_head_kv
            << ", head_dim " << h.head_dim << ", ffn " << h.n_ff << ", vocab " << h.n_vocab
            << (h.tie_embeddings ? " (tied)" : "") << ", " << params << " parameters\n"
            << "            weights "
            << (wd.stored_bytes.empty() ? std::to_string(wd.bytes_per_weight) + " B/element" : std::string("per tensor as stored"))
            << " (" << wd.label << "), KV cache and activations "
            << a.compute_dtype << ", context " << a.context << " x batch " << a.batch << "\n"
            << "            cache " << cache.kv_bytes_per_token << " KV bytes per token (" << cache.kv_layers << " layers)";
  if (cache.window_layers > 0)
    std::cout << " + " << cache.window_kv_bytes_per_token << " per token up to the window (" << cache.window_layers
              << " sliding-window layers)";
  if (cache.compressed_layers > 0)
    std::cout << " + " << cache.compressed_kv_bytes_per_token << " per token in compressed entries ("
              << cache.compressed_layers << " layers) and " << cache.pending_bytes_per_sequence
              << " bytes per sequence of compressor tails";
  if (cache.state_layers > 0)
    std::cout << ", " << cache.state_bytes_per_sequence << " state bytes per sequence (" << cache.state_layers
              << " linear-attention layers)";
  std::cout << ", tp=1\n";
  for (const std::string& line : model::summarize_layers(req.layer_descs)) std::cout << "            " << line << "\n";
  std::cout << "topology    " << req.topo.nodes << " node(s) x " << req.topo.gpus_per_node << " GPUs = "
            << req.topo.world_size() << " ranks, " << topology::format_bytes(req.topo.device_memory_bytes)
            << " per device, cap " << topology::format_bytes(req.topo.memory_cap_bytes()) << " (memory_fraction "
            << req.topo.memory_fraction << ")\n";

  std::vector<plan::Candidate> cands;
  auto p = plan::choose_plan(req, &cands);
  if (!p.ok()) {
    if (!cands.empty()) print_candidates(cands, nullptr);
    return report_failure("plan", p.status());
  }
  print_plan(*p);
  print_candidates(cands, &*p);

  const auto ends_with = [](const std::string& s, const std::string& x) {
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  const bool as_yaml = a.yaml || ends_with(a.out, ".yaml") || ends_with(a.out, ".yml");
  if (!a.out.empty()) {
    if (Status s = write_file(a.out, as_yaml ? plan::to_yaml(*p) : plan::to_json(*p).dump(2) + "\n"); !s.ok()) return report_failure("plan", s);
    std::cout << "wrote       " << a.out << "\n";
  } else if (a.yaml) {
    std::cout << plan::to_yaml(*p);
  }
  if (!a.report.empty()) {
    plan::ReportOptions ro;
    ro.title = "dayzero plan: " + (a.model_dir.empty() ? config_path : a.model_dir);
    ro.notes.push_back(family + ", " + std::to_string(h.n_layer) + " layers, " + std::to_string(params) +
                       " parameters; weights " + wd.label + "; context " + std::to_string(a.context) + " x batch " +
                       std::to_string(a.batch));
    ro.notes.push_back(std::to_string(req.topo.nodes) + " node(s) x " + std::to_string(req.topo.gpus_per_node) +
                       " GPUs, " + topology::format_bytes(req.topo.device_memory_bytes) + " per device");
    ro.candidates = cands;
    if (Status s = write_file(a.report, plan::render_html_report(*p, req.topo, ro)); !s.ok()) return report_failure("plan", s);
    std::cout << "wrote       " << a.report << "\n";
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Choose dp x pp x tp for a model on a topology (config.json is enough)");
  auto* model = cmd->add_option("--model", a->model_dir, "Model folder (config.json; safetensors headers if present)");
  auto* config = cmd->add_option("--config", a->config_path, "A config.json alone");
  model->excludes(config);
  cmd->add_option("--topology", a->topology_path, "Topology YAML (flags below override it)");
  cmd->add_option("--nodes", a->nodes, "Nodes")->check(CLI::PositiveNumber);
  cmd->add_option("--gpus-per-node", a->gpus_per_node, "GPUs (ranks) per node")->check(CLI::PositiveNumber);
  cmd->add_option("--gpu-mem", a->gpu_mem, "Memory per device, e.g. 80GiB (on CPU: the per-rank budget)");
  cmd->add_option("--memory-fraction", a->memory_fraction, "Share of device memory a plan may use (default 0.9)");
  cmd->add_option("--dp", a->dp, "Fix the data-parallel size");
  cmd->add_option("--pp", a->pp, "Fix the number of pipeline stages");
  cmd->add_option("--tp", a->tp, "Fix the tensor-parallel size");
  cmd->add_option("--ep", a->ep, "Fix the expert-parallel size: ep x etp = tp, or, above tp (or without --tp), wide expert parallelism over ep / tp attention replicas");
  cmd->add_option("--etp", a->etp, "Fix the expert tensor-parallel size");
  cmd->add_option("--context", a->context, "Longest context in tokens (KV cache, prefill)")->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sequences resident at once")->capture_default_str();
  cmd->add_option("--weights-dtype", a->weights_dtype, "as_stored | bfloat16 | float32")->capture_default_str();
  cmd->add_option("--backend", a->backend, "cuda | cpu: what a rank holds of FP8/INT4 weights (cpu: both as stored, FP8 without block scales f32)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--compute-dtype", a->compute_dtype, "KV cache and activations: bfloat16 | float16 | float32")
      ->capture_default_str();
  cmd->add_option("--headroom", a->headroom, "Fixed reserve per rank")->capture_default_str();
  cmd->add_option("--intra-gbps", a->intra_gbps, "GB/s inside a node (default 450)");
  cmd->add_option("--inter-gbps", a->inter_gbps, "GB/s between nodes (default 50)");
  cmd->add_option("--tflops", a->tflops, "TFLOP/s per device (default 400)");
  cmd->add_option("--hbm-gbps", a->hbm_gbps, "Device memory GB/s (default 3350)");
  cmd->add_option("--out", a->out, "Write the plan: JSON, or YAML for .yaml/.yml");
  cmd->add_flag("--yaml", a->yaml, "YAML for --out; without --out, print the plan as YAML");
  cmd->add_option("--report", a->report, "Write an HTML report");
  cmd->callback([&commands, a, model, config] {
    commands.action = [a, model, config] {
      if (model->count() == 0 && config->count() == 0)
        return report_failure("plan", Status::InvalidArgument("give --model DIR or --config config.json"));
      return run_plan(*a);
    };
  });
}

}  // namespace dayzero::cli
