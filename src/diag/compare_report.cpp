// Table, JSON and HTML/SVG presentation of a comparison (compare_report.h).
#include "diag/compare_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace fs = std::filesystem;

namespace dayzero::diag {
namespace {

std::string num(double x, const char* fmt = "%.3g") {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

nlohmann::json jnum(double x) {
  if (std::isfinite(x)) return x;
  return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

struct UnitRow {
  std::string unit;
  const TensorResult* worst = nullptr;  // the tensor whose error/tolerance is largest
  Verdict verdict = Verdict::kOk;
};

std::vector<UnitRow> unit_rows(const GroupResult& g) {
  std::vector<UnitRow> rows;
  for (const TensorResult& t : g.tensors) {
    const std::string u = unit_of(t.name);
    if (rows.empty() || rows.back().unit != u) rows.push_back({u, &t, Verdict::kOk});
    UnitRow& r = rows.back();
    const auto ratio = [](const TensorResult* x) { return x->tolerance > 0 ? x->error / x->tolerance : x->error; };
    if (ratio(&t) > ratio(r.worst)) r.worst = &t;
    if (t.verdict == Verdict::kBlamed || (t.verdict != Verdict::kOk && r.verdict == Verdict::kOk)) r.verdict = t.verdict;
  }
  return rows;
}

// The unit error plotted: the largest relative L2 (or stats error) of its tensors.
double unit_error(const GroupResult& g, const std::string& unit) {
  double e = 0;
  for (const TensorResult& t : g.tensors)
    if (unit_of(t.name) == unit && std::string(t.measure) != "id_mismatch") e = std::max(e, t.error);
  return e;
}

std::string ids(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

std::string format_compare_table(const CompareResult& r) {
  std::ostringstream os;
  os << "compare " << r.run_a << " (a) vs " << r.run_b << " (b), tolerance " << r.tolerance.name
     << " (relative L2 " << num(r.tolerance.base.rel_l2) << ")\n";
  if (r.replay_layers)
    os << "replay of layers " << r.replay_layers->first << ".." << r.replay_layers->second - 1
       << " on recorded inputs: only their prefill points are compared, outputs are not\n";
  for (const std::string& k : r.only_in_a) os << "  only in a: " << k << "\n";
  for (const std::string& k : r.only_in_b) os << "  only in b: " << k << "\n";
  for (const GroupResult& g : r.groups) {
    os << "\n" << g.prompt << " / " << g.phase << ": ";
    if (!g.first_break) {
      os << "agree (" << g.tensors.size() << " tensors)\n";
    } else {
      const TensorResult& t = g.tensors[*g.first_break];
      os << "first divergence " << t.name << " (" << t.measure << " " << num(t.error) << " > " << num(t.tolerance)
         << ")";
      if (!g.blamed_unit.empty()) os << "; blamed " << g.blamed_unit << " at " << g.blamed_point;
      if (!g.inherited_units.empty())
        os << "; inherited by " << g.inherited_units.front()
           << (g.inherited_units.size() > 1 ? " .. " + g.inherited_units.back() : "") << " ("
           << g.inherited_units.size() << ")";
      os << "\n";
    }
    if (!g.note.empty()) os << "  " << g.note << "\n";
    os << "  " << pad("unit (worst tensor)", 30) << pad("rel_l2", 10) << pad("cosine", 12) << pad("max_abs", 10)
       << pad("mean_abs", 10) << pad("max_rel", 10) << pad(">1e-3", 8) << pad(">5e-3", 8) << pad("worst at", 12)
       << "verdict\n";
    for (const UnitRow& u : unit_rows(g)) {
      const TensorResult& t = *u.worst;
      const TensorMetrics& m = t.metrics;
      std::string label = u.unit == t.name ? t.name : u.unit + " (" + t.name.substr(u.unit.size() + 1) + ")";
      std::string err = num(t.error);
      if (std::string(t.measure) != "rel_l2") err += t.stats ? " s" : " id";
      os << "  " << pad(label, 30) << pad(err, 10) << pad(t.stats ? "-" : num(m.cosine, "%.9f"), 12)
         << pad(t.stats ? "-" : num(m.max_abs), 10) << pad(t.stats ? "-" : num(m.mean_abs), 10)
         << pad(t.stats ? "-" : num(m.max_rel), 10) << pad(t.stats ? "-" : num(m.frac_rel_1e3, "%.4f"), 8)
         << pad(t.stats ? "-" : num(m.frac_rel_5e3, "%.4f"), 8)
         << pad(t.stats ? "-" : "[" + std::to_string(m.worst_row) + "," + std::to_string(m.worst_col) + "]", 12)
         << verdict_name(u.verdict);
      if (m.nan_a + m.nan_b + m.inf_a + m.inf_b > 0)
        os << "  nan " << m.nan_a << "/" << m.nan_b << " inf " << m.inf_a << "/" << m.inf_b;
      os << "\n";
    }
  }
  if (!r.outputs.empty()) {
    os << "\noutputs\n  " << pad("prompt", 14) << pad("tokens", 10) << pad("first diff", 12) << pad("nmse", 10)
       << pad("kl", 10) << pad("top1", 6) << pad("top5", 6) << pad("d_nll", 10) << "verdict\n";
    for (const OutputResult& o : r.outputs) {
      const size_t n = std::min(o.generated_a.size(), o.generated_b.size());
      const size_t same = o.first_diff < 0 ? n : static_cast<size_t>(o.first_diff);
      std::string fd = o.first_diff < 0 ? "-" : std::to_string(o.first_diff) + (o.near_tie ? " tie" : "");
      os << "  " << pad(o.prompt, 14) << pad(std::to_string(same) + "/" + std::to_string(o.generated_a.size()), 10)
         << pad(fd, 12) << pad(num(o.logits.nmse), 10) << pad(num(o.logits.kl), 10)
         << pad(o.logits.top1_agree ? "yes" : "no", 6) << pad(num(o.logits.top5_overlap, "%.2f"), 6)
         << pad(o.nll_a && o.nll_b ? num(*o.nll_b - *o.nll_a) : "-", 10) << (o.pass ? "ok" : "FAIL") << "\n";
      for (const std::string& why : o.reasons) os << "    " << why << "\n";
    }
  }
  os << "\n" << (r.pass ? "PASS" : "FAIL: the runs differ beyond the tolerance") << "\n";
  return os.str();
}

nlohmann::json compare_to_json(const CompareResult& r) {
  using nlohmann::json;
  json j;
  j["run_a"] = r.run_a;
  j["run_b"] = r.run_b;
  j["pass"] = r.pass;
  j["tolerance"] = {{"name", r.tolerance.name},
                    {"rel_l2", r.tolerance.base.rel_l2},
                    {"id_mismatch", r.tolerance.base.id_mismatch},
                    {"logits_nmse", r.tolerance.outputs.logits_nmse},
                    {"logits_kl", r.tolerance.outputs.logits_kl},
                    {"near_tie", r.tolerance.outputs.near_tie},
                    {"nll", r.tolerance.outputs.nll}};
  j["only_in_a"] = r.only_in_a;
  j["only_in_b"] = r.only_in_b;
  if (r.replay_layers) j["replay_layers"] = {r.replay_layers->first, r.replay_layers->second};
  j["groups"] = json::array();
  for (const GroupResult& g : r.groups) {
    json jg = {{"prompt", g.prompt}, {"phase", g.phase}, {"blamed_unit", g.blamed_unit},
               {"blamed_point", g.blamed_point}, {"inherited_units", g.inherited_units}, {"note", g.note}};
    jg["first_divergence"] = g.first_break ? json(g.tensors[*g.first_break].name) : json(nullptr);
    jg["tensors"] = json::array();
    for (const TensorResult& t : g.tensors) {
      const TensorMetrics& m = t.metrics;
      json jt = {{"name", t.name}, {"shape", t.shape}, {"rows_compared", t.rows_compared}, {"stats", t.stats},
                 {"measure", t.measure}, {"error", jnum(t.error)}, {"tolerance", t.tolerance},
                 {"broken", t.broken}, {"verdict", verdict_name(t.verdict)}};
      if (!t.stats)
        jt["metrics"] = {{"n", m.n}, {"cosine", jnum(m.cosine)}, {"rel_diff", jnum(m.rel_diff)},
                         {"max_abs", jnum(m.max_abs)}, {"mean_abs", jnum(m.mean_abs)}, {"max_rel", jnum(m.max_rel)},
                         {"rel_l2", jnum(m.rel_l2)}, {"frac_rel_above_1e-3", m.frac_rel_1e3},
                         {"frac_rel_above_5e-3", m.frac_rel_5e3}, {"nan_a", m.nan_a}, {"nan_b", m.nan_b},
                         {"inf_a", m.inf_a}, {"inf_b", m.inf_b},
                         {"worst", {{"position", m.worst_row}, {"channel", m.worst_col}, {"a", m.worst_a}, {"b", m.worst_b}}}};
      jg["tensors"].push_back(jt);
    }
    j["groups"].push_back(jg);
  }
  j["outputs"] = json::array();
  for (const OutputResult& o : r.outputs) {
    json jo = {{"prompt", o.prompt}, {"generated_a", o.generated_a}, {"generated_b", o.generated_b},
               {"first_diff", o.first_diff}, {"near_tie", o.near_tie}, {"tie_gap", jnum(o.tie_gap)},
               {"logits_nmse", jnum(o.logits.nmse)}, {"logits_kl", jnum(o.logits.kl)},
               {"top1_agree", o.logits.top1_agree}, {"top5_overlap", o.logits.top5_overlap},
               {"pass", o.pass}, {"reasons", o.reasons}};
    jo["reference_nll_a"] = o.nll_a ? json(*o.nll_a) : json(nullptr);
    jo["reference_nll_b"] = o.nll_b ? json(*o.nll_b) : json(nullptr);
    j["outputs"].push_back(jo);
  }
  return j;
}

std::string compare_svg(const CompareResult& r, const std::string& phase) {
  // Units in forward order over every prompt of this phase.
  std::vector<std::string> units;
  std::vector<const GroupResult*> groups;
  for (const GroupResult& g : r.groups) {
    if (g.phase != phase) continue;
    groups.push_back(&g);
    for (const UnitRow& u : unit_rows(g))
      if (std::find(units.begin(), units.end(), u.unit) == units.end()) units.push_back(u.unit);
  }
  std::stable_sort(units.begin(), units.end(), forward_before);
  const double tol = r.tolerance.base.rel_l2;
  constexpr double kFloor = 1e-12;  // an exact match is drawn here
  double top = std::max(tol * 10, 1e-6);
  for (const GroupResult* g : groups)
    for (const std::string& u : units) {
      const double e = unit_error(*g, u);
      if (std::isfinite(e)) top = std::max(top, e * 2);
    }
  const double lo = std::log10(kFloor), hi = std::ceil(std::log10(top));
  const double W = 760, H = 320, L = 60, R = 150, T = 20, B = 60;
  const auto x_of = [&](size_t i) { return L + (units.size() > 1 ? (W - L - R) * i / (units.size() - 1.0) : 0); };
  const auto y_of = [&](double e) {
    const double v = std::isfinite(e) ? std::log10(std::max(e, kFloor)) : hi;
    return T + (H - T - B) * (hi - std::min(v, hi)) / (hi - lo);
  };
  static const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" data-phase=\"" << xml_escape(phase) << "\">\n";
  s << "<title>" << xml_escape(phase) << ": worst relative L2 per layer</title>\n";
  s << "<rect class=\"tolerance-band\" x=\"" << L << "\" y=\"" << y_of(tol) << "\" width=\"" << W - L - R
    << "\" height=\"" << y_of(kFloor) - y_of(tol) << "\" fill=\"#2ca02c\" fill-opacity=\"0.12\"/>\n";
  s << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << y_of(tol) << "\" y2=\"" << y_of(tol)
    << "\" stroke=\"#2ca02c\" stroke-dasharray=\"4 3\"/>\n";
  s << "<text x=\"" << W - R + 4 << "\" y=\"" << y_of(tol) + 4 << "\" font-size=\"10\">tolerance " << num(tol)
    << "</text>\n";
  for (double d = lo; d <= hi; d += 2)
    s << "<text x=\"" << L - 6 << "\" y=\"" << y_of(std::pow(10, d)) + 3
      << "\" font-size=\"10\" text-anchor=\"end\">1e" << static_cast<int>(d) << "</text>\n";
  for (size_t i = 0; i < units.size(); ++i) {
    std::string label = units[i].rfind("layers.", 0) == 0 ? units[i].substr(7) : units[i];
    s << "<text x=\"" << x_of(i) << "\" y=\"" << H - B + 14 << "\" font-size=\"9\" text-anchor=\"end\" transform=\"rotate(-45 "
      << x_of(i) << " " << H - B + 14 << ")\">" << xml_escape(label) << "</text>\n";
  }
  for (size_t p = 0; p < groups.size(); ++p) {
    const GroupResult& g = *groups[p];
    const char* color = kColors[p % std::size(kColors)];
    s << "<polyline class=\"curve\" data-prompt=\"" << xml_escape(g.prompt) << "\" fill=\"none\" stroke=\"" << color
      << "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < units.size(); ++i) s << (i ? " " : "") << x_of(i) << "," << y_of(unit_error(g, units[i]));
    s << "\"/>\n";
    s << "<text x=\"" << W - R + 4 << "\" y=\"" << T + 14 * (p + 2) << "\" font-size=\"10\" fill=\"" << color << "\">"
      << xml_escape(g.prompt) << "</text>\n";
    if (!g.blamed_unit.empty()) {
      const size_t i = std::find(units.begin(), units.end(), g.blamed_unit) - units.begin();
      if (i < units.size())
        s << "<circle class=\"blamed\" data-prompt=\"" << xml_escape(g.prompt) << "\" cx=\"" << x_of(i) << "\" cy=\""
          << y_of(unit_error(g, g.blamed_unit)) << "\" r=\"5\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"><title>blamed: "
          << xml_escape(g.blamed_point) << "</title></circle>\n";
    }
  }
  s << "</svg>\n";
  return s.str();
}

Status write_compare_report(const CompareResult& r, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError(dir + ": cannot create the report folder: " + ec.message());
  std::vector<std::string> phases;
  for (const GroupResult& g : r.groups)
    if (std::find(phases.begin(), phases.end(), g.phase) == phases.end()) phases.push_back(g.phase);
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dayzero compare</title>\n"
    << "<style>body{font-family:sans-serif;margin:2em}pre{font-size:12px}</style></head><body>\n"
    << "<h1>dayzero compare: " << (r.pass ? "PASS" : "FAIL") << "</h1>\n<p>a: " << xml_escape(r.run_a)
    << "<br>b: " << xml_escape(r.run_b) << "<br>tolerance: " << xml_escape(r.tolerance.name) << "</p>\n";
  for (const std::string& p : phases) h << "<h2>" << xml_escape(p) << "</h2>\n" << compare_svg(r, p);
  h << "<h2>Outputs</h2>\n<table border=\"1\" cellspacing=\"0\" cellpadding=\"3\"><tr><th>prompt</th><th>generated a</th>"
    << "<th>generated b</th><th>first diff</th><th>NMSE</th><th>KL</th><th>verdict</th></tr>\n";
  for (const OutputResult& o : r.outputs)
    h << "<tr><td>" << xml_escape(o.prompt) << "</td><td>" << ids(o.generated_a) << "</td><td>" << ids(o.generated_b)
      << "</td><td>" << (o.first_diff < 0 ? "-" : std::to_string(o.first_diff) + (o.near_tie ? " (near-tie)" : ""))
      << "</td><td>" << num(o.logits.nmse) << "</td><td>" << num(o.logits.kl) << "</td><td>" << (o.pass ? "ok" : "FAIL")
      << "</td></tr>\n";
  h << "</table>\n<h2>Table</h2>\n<pre>" << xml_escape(format_compare_table(r)) << "</pre>\n</body></html>\n";
  const auto write = [](const fs::path& p, const std::string& text) -> Status {
    std::ofstream f(p, std::ios::binary);
    f << text;
    f.close();
    if (!f) return Status::IoError(p.string() + ": write failed");
    return Status::Ok();
  };
  DZ_RETURN_IF_ERROR(write(fs::path(dir) / "compare.html", h.str()));
  return write(fs::path(dir) / "compare.json", compare_to_json(r).dump(1) + "\n");
}

}  // namespace dayzero::diag
