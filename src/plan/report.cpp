// HTML report of a plan (report.h): string building only.
#include "plan/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "topology/topology.h"

namespace dayzero::plan {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// Stage colours: evenly spaced hues, light enough for dark text.
std::string stage_colour(int s, int pp) {
  const int hue = pp <= 1 ? 210 : (s * 360 / pp + 210) % 360;
  return "hsl(" + std::to_string(hue) + ",70%,78%)";
}

std::string fmt(double v, const char* f = "%.1f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double gib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024 * 1024); }

void grid(std::ostringstream& o, const Plan& p, const topology::Topology& topo) {
  const int g = topo.gpus_per_node;
  const int rows = static_cast<int>(p.nodes.size());
  const int cw = 104, ch = 50, left = 120, top = 24;
  const int width = left + g * cw + 10, height = top + rows * ch + 10;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"monospace\" font-size=\"11\">\n";
  for (int c = 0; c < g; ++c)
    o << "<text x=\"" << left + c * cw + cw / 2 << "\" y=\"16\" text-anchor=\"middle\">GPU " << c << "</text>\n";
  for (int n = 0; n < rows; ++n)
    o << "<text x=\"" << left - 8 << "\" y=\"" << top + n * ch + ch / 2 + 4 << "\" text-anchor=\"end\">"
      << esc(p.nodes[n]) << "</text>\n";
  std::vector<bool> used(static_cast<size_t>(rows) * g, false);
  for (const auto& rc : p.ranks) {
    const int x = left + rc.local_rank * cw, y = top + rc.node * ch;
    used[static_cast<size_t>(rc.node) * g + rc.local_rank] = true;
    std::string tip = "rank " + std::to_string(rc.rank) + ": dp " + std::to_string(rc.dp_rank) + ", pp " +
                      std::to_string(rc.pp_rank) + ", tp " + std::to_string(rc.tp_rank) + ", ep " + std::to_string(rc.ep_rank) +
                      ", etp " + std::to_string(rc.etp_rank);
    if (rc.rank < static_cast<int>(p.memory.size())) tip += ", " + topology::format_bytes(p.memory[rc.rank].total());
    o << "<g><title>" << esc(tip) << "</title><rect x=\"" << x + 1 << "\" y=\"" << y + 1 << "\" width=\"" << cw - 2
      << "\" height=\"" << ch - 2 << "\" rx=\"4\" fill=\"" << stage_colour(rc.pp_rank, p.pp) << "\" stroke=\"#555\"/>\n";
    o << "<text x=\"" << x + 6 << "\" y=\"" << y + 15 << "\">r" << rc.rank << " dp" << rc.dp_rank << "</text>\n";
    o << "<text x=\"" << x + 6 << "\" y=\"" << y + 29 << "\">pp" << rc.pp_rank << " tp" << rc.tp_rank << "</text>\n";
    if (p.ep > 1) o << "<text x=\"" << x + 6 << "\" y=\"" << y + 43 << "\">ep" << rc.ep_rank << " etp" << rc.etp_rank << "</text>\n";
    o << "</g>\n";
  }
  for (int n = 0; n < rows; ++n)
    for (int c = 0; c < g; ++c)
      if (!used[static_cast<size_t>(n) * g + c])
        o << "<rect x=\"" << left + c * cw + 1 << "\" y=\"" << top + n * ch + 1 << "\" width=\"" << cw - 2
          << "\" height=\"" << ch - 2 << "\" rx=\"4\" fill=\"#eee\" stroke=\"#bbb\"/>\n";
  o << "</svg>\n";
}

void memory_bars(std::ostringstream& o, const Plan& p) {
  if (p.memory.empty()) return;
  // dp replicas are identical: replica 0 stands for all of them.
  const int n = std::min<int>(p.pp * p.tp, static_cast<int>(p.memory.size()));
  int64_t top_bytes = p.memory_cap_bytes;
  for (int r = 0; r < n; ++r) top_bytes = std::max(top_bytes, p.memory[r].total());
  // Round ticks: a step of 1, 2 or 5 x 10^k giving at most 6 intervals.
  const double raw_max = std::max(gib(top_bytes) * 1.05, 1e-9);
  double step = std::pow(10.0, std::floor(std::log10(raw_max / 6)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (raw_max / (step * f) <= 6) {
      step *= f;
      break;
    }
  const int ticks = static_cast<int>(std::ceil(raw_max / step));
  const double scale_max = ticks * step;
  const int plot_h = 260, left = 60, top = 10;
  const double bw = std::clamp(900.0 / n, 1.0, 28.0);
  const int width = std::max(left + static_cast<int>(std::ceil(bw * n)) + 20, left + 5 * 120 + 20), height = top + plot_h + 40;
  auto y_of = [&](double g) { return top + plot_h - g / scale_max * plot_h; };
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"monospace\" font-size=\"11\">\n";
  for (int i = 0; i <= ticks; ++i) {
    const double g = step * i;
    o << "<line x1=\"" << left << "\" x2=\"" << width - 10 << "\" y1=\"" << fmt(y_of(g)) << "\" y2=\"" << fmt(y_of(g))
      << "\" stroke=\"#ddd\"/><text x=\"" << left - 4 << "\" y=\"" << fmt(y_of(g) + 4)
      << "\" text-anchor=\"end\">" << fmt(g, step < 1 ? "%.2g" : "%.0f") << "</text>\n";
  }
  const char* colours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#bab0ac", "#b07aa1"};
  for (int r = 0; r < n; ++r) {
    const RankMemory& m = p.memory[r];
    const int64_t parts[] = {m.weights, m.kv_cache, m.activations, m.headroom, m.state};
    double base = 0;
    const double x = left + r * bw;
    o << "<g><title>rank " << r << ": weights " << topology::format_bytes(m.weights) << ", kv " << topology::format_bytes(m.kv_cache)
      << ", activations " << topology::format_bytes(m.activations) << ", headroom " << topology::format_bytes(m.headroom)
      << (m.state > 0 ? ", state " + topology::format_bytes(m.state) : std::string()) << ", total "
      << topology::format_bytes(m.total()) << "</title>\n";
    for (int k = 0; k < 5; ++k) {
      const double h = gib(parts[k]);
      o << "<rect x=\"" << fmt(x + (bw > 3 ? 1 : 0)) << "\" y=\"" << fmt(y_of(base + h)) << "\" width=\""
        << fmt(bw > 3 ? bw - 2 : bw) << "\" height=\"" << fmt(h / scale_max * plot_h, "%.2f") << "\" fill=\""
        << colours[k] << "\"/>\n";
      base += h;
    }
    o << "</g>\n";
    if (bw >= 14) o << "<text x=\"" << fmt(x + bw / 2) << "\" y=\"" << top + plot_h + 14 << "\" text-anchor=\"middle\">" << r << "</text>\n";
  }
  const double cy = y_of(gib(p.memory_cap_bytes));
  o << "<line x1=\"" << left << "\" x2=\"" << width - 10 << "\" y1=\"" << fmt(cy) << "\" y2=\"" << fmt(cy)
    << "\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6,3\"/>\n"
    << "<text x=\"" << width - 12 << "\" y=\"" << fmt(cy - 4) << "\" text-anchor=\"end\" fill=\"#d62728\">cap "
    << esc(topology::format_bytes(p.memory_cap_bytes)) << "</text>\n";
  bool any_state = false;
  for (int r = 0; r < n; ++r) any_state = any_state || p.memory[r].state > 0;
  // A figure resting on a caveat is marked in the legend ("kv cache*"); the caveats follow.
  const char* figures[] = {"weights", "kv_cache", "activations", "headroom", "state"};
  const char* names[] = {"weights", "kv cache", "activations", "headroom", "state"};
  for (int k = 0; k < (any_state ? 5 : 4); ++k)
    o << "<rect x=\"" << left + k * 120 << "\" y=\"" << top + plot_h + 22 << "\" width=\"10\" height=\"10\" fill=\""
      << colours[k] << "\"/><text x=\"" << left + k * 120 + 14 << "\" y=\"" << top + plot_h + 31 << "\">" << names[k]
      << (std::any_of(p.caveats.begin(), p.caveats.end(), [&](const Caveat& c) { return c.figure == figures[k]; }) ? "*" : "")
      << "</text>\n";
  o << "</svg>\n";
}

}  // namespace

std::string render_html_report(const Plan& p, const topology::Topology& topo, const ReportOptions& opt) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << esc(opt.title) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}"
       "td,th{border:1px solid #ccc;padding:3px 8px;font-family:monospace;font-size:12px;text-align:left}"
       "th{background:#f4f4f4}.bad{color:#a00}.ok{color:#070}h2{margin-top:28px}</style></head><body>\n";
  o << "<h1>" << esc(opt.title) << "</h1>\n";
  for (const auto& n : opt.notes) o << "<div>" << esc(n) << "</div>\n";
  o << "<p><b>dp=" << p.dp << " pp=" << p.pp << " tp=" << p.tp << "</b> (ep=" << p.ep << " etp=" << p.etp << ") on "
    << p.world_size << " ranks, " << p.nodes.size() << " node(s) x " << topo.gpus_per_node
    << " GPUs; memory cap per rank " << esc(topology::format_bytes(p.memory_cap_bytes)) << "; estimated "
    << fmt(p.cost_per_token_s * 1e3, "%.3f") << " ms per token</p>\n";

  o << "<h2>Placement</h2>\n<p>Colour: pipeline stage. Each cell: rank, dp replica, stage, tp rank"
    << (p.ep > 1 ? ", ep and etp ranks" : "") << ".</p>\n";
  grid(o, p, topo);

  o << "<h2>Stages</h2>\n<table><tr><th>stage</th><th>layers</th><th>also</th><th>ranks (dp 0)</th></tr>\n";
  for (const auto& s : p.stages) {
    std::string also = s.has_embedding ? "embedding" : "";
    if (s.has_lm_head) also += std::string(also.empty() ? "" : ", ") + "final norm, lm_head";
    o << "<tr><td style=\"background:" << stage_colour(s.pp, p.pp) << "\">pp" << s.pp << "</td><td>[" << s.layer_begin
      << ", " << s.layer_end << ") " << s.layer_end - s.layer_begin << " layers</td><td>" << also << "</td><td>"
      << s.pp * p.tp << "-" << s.pp * p.tp + p.tp - 1 << "</td></tr>\n";
  }
  o << "</table>\n";

  o << "<h2>Memory per rank</h2>\n<p>GiB per rank, stacked: weights, KV cache, activations, headroom (and the linear-attention state); dashed: the cap" << (p.dp > 1 ? "; dp replica 0 shown, the other replicas are identical" : "")
    << ".</p>\n";
  memory_bars(o, p);
  if (!p.caveats.empty()) {
    o << "<p>* Figures resting on an estimate or on a feature dayzero cannot run yet:</p>\n<table><tr><th>figure</th><th>caveat</th></tr>\n";
    for (const auto& c : p.caveats) o << "<tr><td>" << esc(c.figure) << "*</td><td>" << esc(c.text) << "</td></tr>\n";
    o << "</table>\n";
  }

  if (p.experts.present) {
    const ExpertPlacement& e = p.experts;
    o << "<h2>Expert placement</h2>\n<p>" << esc(e.reason) << ".</p>\n"
      << "<table><tr><th>ep rank</th><th>experts (every MoE layer)</th><th>bytes</th><th>ranks of the first expert group</th></tr>\n";
    for (const ExpertBlock& b : e.blocks) {
      std::string ranks;
      for (int r : b.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      o << "<tr><td>ep" << b.ep_rank << "</td><td>[" << b.expert_begin << ", " << b.expert_end << ")</td><td>"
        << esc(topology::format_bytes(b.bytes)) << "</td><td>" << ranks << "</td></tr>\n";
    }
    o << "</table>\n";
  }

  if (!opt.candidates.empty()) {
    o << "<h2>Candidates</h2>\n<table><tr><th>dp</th><th>pp</th><th>tp</th><th>ep (wide)</th><th>max per rank</th>"
         "<th>ms/token</th><th>all-to-all per token and MoE layer</th><th>verdict</th></tr>\n";
    for (const auto& c : opt.candidates) {
      const bool chosen = c.dp == p.dp && c.pp == p.pp && c.tp == p.tp && c.ep_dp == p.ep_dp &&
                          (c.ep_dp == 1 || c.ep == p.ep);
      o << "<tr" << (chosen ? " style=\"font-weight:bold\"" : "") << "><td>" << c.dp << "</td><td>" << c.pp
        << "</td><td>" << c.tp << "</td><td>" << (c.ep_dp > 1 ? std::to_string(c.ep) : "") << "</td><td>" << (c.worst_rank >= 0 ? esc(topology::format_bytes(c.max_rank_bytes)) : "")
        << "</td><td>" << (std::isfinite(c.cost) ? fmt(c.cost * 1e3, "%.3f") : "") << "</td><td>"
        << (c.ep_dp > 1 ? esc(topology::format_bytes(c.all_to_all_bytes_per_token)) + ", " +
                              fmt(100 * c.inter_node_share, "%.0f") + "% inter-node"
                        : "")
        << "</td><td class=\""
        << (c.feasible ? "ok" : "bad") << "\">" << (chosen ? "chosen" : c.feasible ? "fits" : esc(c.reason))
        << "</td></tr>\n";
    }
    o << "</table>\n";
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace dayzero::plan
