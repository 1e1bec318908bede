// Tolerance presets and the YAML override file of `dayzero compare` (compare_tolerance.h).
// The numbers and their reasons are in docs/compare.md; change both together.
#include "diag/compare_tolerance.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

namespace dayzero::diag {
namespace {

int preset_rank(const std::string& p) { return p == "fp8" ? 2 : p == "bf16" ? 1 : 0; }

Status number(const YAML::Node& n, const std::string& where, double* out) {
  try {
    if (!n.IsScalar()) return Status::InvalidArgument(where + ": expected a number");
    *out = n.as<double>();
  } catch (const YAML::Exception&) {
    return Status::InvalidArgument(where + ": expected a number, got \"" + n.Scalar() + "\"");
  }
  if (!(*out >= 0) || !std::isfinite(*out)) return Status::InvalidArgument(where + ": expected a number >= 0");
  return Status::Ok();
}

Status point(const YAML::Node& n, const std::string& where, PointTolerance* t) {
  if (!n.IsMap()) return Status::InvalidArgument(where + ": expected a mapping {rel_l2: ..., id_mismatch: ...}");
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (k == "rel_l2") DZ_RETURN_IF_ERROR(number(it->second, where + ".rel_l2", &t->rel_l2));
    else if (k == "id_mismatch") DZ_RETURN_IF_ERROR(number(it->second, where + ".id_mismatch", &t->id_mismatch));
    else return Status::InvalidArgument(where + "." + k + ": unknown key; expected rel_l2 or id_mismatch");
  }
  return Status::Ok();
}

}  // namespace

PointTolerance TolerancePolicy::for_name(const std::string& name) const {
  if (auto it = by_name.find(name); it != by_name.end()) return it->second;
  std::string p = name;
  if (name.rfind("layers.", 0) == 0 || name.rfind("vision.layers.", 0) == 0) {
    const size_t dot = name.find('.', name.find("layers.") + 7);
    if (dot != std::string::npos) p = name.substr(dot + 1);
  }
  if (auto it = by_point.find(p); it != by_point.end()) return it->second;
  return base;
}

Result<TolerancePolicy> tolerance_preset(const std::string& name) {
  TolerancePolicy t;
  t.name = name;
  if (name == "f32") {
    t.base = {4e-6, 0};
    t.outputs = {1.6e-11, 1e-11, 1e-5, 1e-5};
  } else if (name == "bf16") {
    t.base = {3e-2, 0};
    t.outputs = {1e-3, 1e-2, 2e-2, 2e-2};
  } else if (name == "fp8") {
    t.base = {1e-1, 0};
    t.outputs = {1e-2, 5e-2, 5e-2, 5e-2};
  } else {
    return Status::InvalidArgument("tolerance preset \"" + name + "\": expected f32, bf16, fp8 or a YAML file");
  }
  return t;
}

Result<TolerancePolicy> load_tolerance_file(const std::string& path, const std::string& default_preset) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Status::NotFound(path + ": cannot open the tolerance file");
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
  if (!root.IsMap()) return Status::InvalidArgument(path + ": expected a mapping with preset, points, outputs");
  std::string preset = default_preset;
  if (root["preset"]) preset = root["preset"].Scalar();
  DZ_ASSIGN_OR_RETURN(TolerancePolicy t, tolerance_preset(preset));
  t.name = path + " (from " + preset + ")";
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string k = it->first.Scalar();
    const YAML::Node v = it->second;
    if (k == "preset") continue;
    if (k == "points") {
      if (!v.IsMap()) return Status::InvalidArgument(path + ": points: expected a mapping");
      for (auto p = v.begin(); p != v.end(); ++p) {
        const std::string name = p->first.Scalar();
        const std::string where = path + ": points." + name;
        if (name == "default") {
          DZ_RETURN_IF_ERROR(point(p->second, where, &t.base));
          continue;
        }
        const bool full = name.find('.') != std::string::npos;
        PointTolerance pt = full ? t.for_name(name) : t.base;
        DZ_RETURN_IF_ERROR(point(p->second, where, &pt));
        (full ? t.by_name : t.by_point)[name] = pt;
      }
    } else if (k == "outputs") {
      if (!v.IsMap()) return Status::InvalidArgument(path + ": outputs: expected a mapping");
      for (auto o = v.begin(); o != v.end(); ++o) {
        const std::string name = o->first.Scalar();
        const std::string where = path + ": outputs." + name;
        double* field = name == "logits_nmse" ? &t.outputs.logits_nmse
                        : name == "logits_kl" ? &t.outputs.logits_kl
                        : name == "near_tie"  ? &t.outputs.near_tie
                        : name == "nll"       ? &t.outputs.nll
                                              : nullptr;
        if (!field) return Status::InvalidArgument(where + ": unknown key; expected logits_nmse, logits_kl, near_tie or nll");
        DZ_RETURN_IF_ERROR(number(o->second, where, field));
      }
    } else {
      return Status::InvalidArgument(path + ": " + k + ": unknown key; expected preset, points or outputs");
    }
  }
  return t;
}

std::string preset_for_dtype(const std::string& dtype) {
  std::string d = dtype;
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return std::tolower(c); });
  if (d.find("8") != std::string::npos && (d.find("fp8") != std::string::npos || d.find("float8") != std::string::npos))
    return "fp8";
  if (d == "bfloat16" || d == "bf16" || d == "float16" || d == "fp16" || d == "half") return "bf16";
  return "f32";
}

std::string looser_preset(const std::string& a, const std::string& b) {
  return preset_rank(a) >= preset_rank(b) ? a : b;
}

}  // namespace dayzero::diag
