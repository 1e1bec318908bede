// The table of image processors keyed by image_processor_type, the shared key reads and the
// rescale/normalise step. The processors themselves are one file each in this folder.
#include "image/processor.h"

#include <cmath>
#include <filesystem>

#include "core/json.h"
#include "image/processor_config.h"

namespace dayzero::image {

// Defined in clip_processor.cpp and kimi_k25_processor.cpp.
Result<std::unique_ptr<ImageProcessor>> make_clip_processor(const ProcessorConfig& c, const std::string& kind,
                                                            const ProcessorContext& ctx);
Result<std::unique_ptr<ImageProcessor>> make_kimi_k25_processor(const ProcessorConfig& c, const std::string& kind,
                                                                const ProcessorContext& ctx);

namespace {

using Maker = Result<std::unique_ptr<ImageProcessor>> (*)(const ProcessorConfig&, const std::string&,
                                                          const ProcessorContext&);
struct Entry {
  const char* kind;
  Maker make;
};
// transformers 5 names the PIL and torchvision backends of one processor *Pil / *Fast; the
// file names the processor without a suffix.
const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      {"CLIPImageProcessor", make_clip_processor},
      {"CLIPImageProcessorPil", make_clip_processor},
      {"CLIPImageProcessorFast", make_clip_processor},
      {"Kimi_K25ImageProcessor", make_kimi_k25_processor},
  };
  return t;
}

}  // namespace

Status ProcessorConfig::check_keys(const std::set<std::string>& known) const {
  static const std::set<std::string> bookkeeping = {"image_processor_type", "processor_class", "feature_extractor_type",
                                                    "auto_map", "transformers_version"};
  for (auto it = j_.begin(); it != j_.end(); ++it)
    if (!known.count(it.key()) && !bookkeeping.count(it.key()))
      return error(it.key(), "a key this build's " + j_.value("image_processor_type", std::string("processor")) +
                                 " does not honour (refused rather than ignored)");
  return Status::Ok();
}

Status ProcessorConfig::get_bool(const char* key, bool* out) const {
  if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
  if (!j_[key].is_boolean()) return error(key, std::string("expected a boolean, got ") + json_kind(j_[key]));
  *out = j_[key].get<bool>();
  return Status::Ok();
}

Status ProcessorConfig::get_int(const char* key, int64_t min, int64_t* out) const {
  if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
  if (!j_[key].is_number_integer()) return error(key, std::string("expected an integer, got ") + json_excerpt(j_[key]));
  const int64_t v = j_[key].get<int64_t>();
  if (v < min) return error(key, std::to_string(v) + " is below " + std::to_string(min));
  *out = v;
  return Status::Ok();
}

Status ProcessorConfig::get_double(const char* key, double* out) const {
  if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
  if (!j_[key].is_number() || !std::isfinite(j_[key].get<double>()))
    return error(key, std::string("expected a number, got ") + json_excerpt(j_[key]));
  *out = j_[key].get<double>();
  return Status::Ok();
}

Status ProcessorConfig::get_triple(const char* key, std::array<double, 3>* out) const {
  if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
  const nlohmann::json& v = j_[key];
  if (v.is_number()) {
    out->fill(v.get<double>());
    return Status::Ok();
  }
  if (!v.is_array() || v.size() != 3) return error(key, "expected a number or a list of 3 numbers, got " + json_excerpt(v));
  for (size_t i = 0; i < 3; ++i) {
    if (!v[i].is_number()) return error(key, "expected a list of 3 numbers, got " + json_excerpt(v));
    (*out)[i] = v[i].get<double>();
  }
  return Status::Ok();
}

Status ProcessorConfig::get_filter(const char* key, Filter* out) const {
  int64_t code = -1;
  if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
  DZ_RETURN_IF_ERROR(get_int(key, 0, &code));
  if (!filter_from_pil_code(int(code), out))
    return error(key, "PIL resample code " + std::to_string(code) + " is not built (2 bilinear and 3 bicubic are)");
  return Status::Ok();
}

Status ProcessorConfig::get_member(const char* key, const char* member, int64_t min, int64_t* out,
                                   bool* present) const {
  *present = false;
  if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
  if (!j_[key].is_object()) return error(key, std::string("expected an object, got ") + json_excerpt(j_[key]));
  const nlohmann::json& o = j_[key];
  if (!o.contains(member) || o[member].is_null()) return Status::Ok();
  const std::string path = std::string(key) + "." + member;
  if (!o[member].is_number_integer()) return error(path, "expected an integer, got " + json_excerpt(o[member]));
  const int64_t v = o[member].get<int64_t>();
  if (v < min) return error(path, std::to_string(v) + " is below " + std::to_string(min));
  *out = v;
  *present = true;
  return Status::Ok();
}

Status read_pixel_steps(const ProcessorConfig& c, PixelSteps* steps) {
  bool convert_rgb = true;
  DZ_RETURN_IF_ERROR(c.get_bool("do_convert_rgb", &convert_rgb));
  if (!convert_rgb) return c.error("do_convert_rgb", "false is not built (images are always converted to RGB)");
  DZ_RETURN_IF_ERROR(c.get_bool("do_rescale", &steps->do_rescale));
  DZ_RETURN_IF_ERROR(c.get_bool("do_normalize", &steps->do_normalize));
  DZ_RETURN_IF_ERROR(c.get_filter("resample", &steps->resample));
  DZ_RETURN_IF_ERROR(c.get_double("rescale_factor", &steps->rescale_factor));
  DZ_RETURN_IF_ERROR(c.get_triple("image_mean", &steps->mean));
  DZ_RETURN_IF_ERROR(c.get_triple("image_std", &steps->std));
  for (double s : steps->std)
    if (s == 0.0) return c.error("image_std", "a standard deviation of 0");
  return Status::Ok();
}

void rescale_normalize(const RgbImage& img, double rescale_factor, bool do_rescale, bool do_normalize,
                       const std::array<double, 3>& mean, const std::array<double, 3>& std,
                       std::vector<float>* out) {
  const size_t hw = size_t(img.width) * size_t(img.height);
  out->resize(3 * hw);
  for (int c = 0; c < 3; ++c) {
    // numpy: (u8 -> float64) * scale -> float32, then (x - float32 mean) / float32 std.
    const float m = float(mean[c]), s = float(std[c]);
    float* o = out->data() + size_t(c) * hw;
    for (size_t i = 0; i < hw; ++i) {
      const uint8_t u = img.rgb[i * 3 + c];
      float x = do_rescale ? float(double(u) * rescale_factor) : float(u);
      if (do_normalize) x = (x - m) / s;
      o[i] = x;
    }
  }
}

Result<ProcessedImage> to_processed_image(const RgbImage& img, const std::string& source, int64_t patch_size,
                                          const PixelSteps& steps) {
  ProcessedImage p;
  p.source = source;
  p.height = img.height;
  p.width = img.width;
  p.patch_size = patch_size;
  if (patch_size > 0) {
    if (img.height % patch_size != 0 || img.width % patch_size != 0)
      return Status::InvalidArgument(source + ": the processed " + std::to_string(img.width) + "x" +
                                     std::to_string(img.height) + " image is not a whole number of " +
                                     std::to_string(patch_size) + "-pixel patches");
    p.grid_h = img.height / patch_size;
    p.grid_w = img.width / patch_size;
  }
  rescale_normalize(img, steps, &p.pixels);
  return p;
}

Result<std::unique_ptr<ImageProcessor>> make_image_processor(const nlohmann::json& config,
                                                            const std::string& source_name,
                                                            const ProcessorContext& ctx) {
  std::string known;
  for (const Entry& e : table()) known += std::string(known.empty() ? "" : ", ") + e.kind;
  if (!config.is_object()) return Status::InvalidArgument(source_name + ": expected a JSON object");
  if (!config.contains("image_processor_type") || !config["image_processor_type"].is_string())
    return Status::InvalidArgument(source_name + ": image_processor_type: missing or not a string (known: " + known + ")");
  const std::string kind = config["image_processor_type"].get<std::string>();
  for (const Entry& e : table())
    if (kind == e.kind) return e.make(ProcessorConfig(config, source_name), kind, ctx);
  return Status::Unsupported(source_name + ": image_processor_type: \"" + kind + "\" has no image processor here (known: " +
                             known + ")");
}

Result<std::unique_ptr<ImageProcessor>> load_image_processor(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(model_dir) / "preprocessor_config.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Status::NotFound(model_dir + ": no preprocessor_config.json (the model has no image processor)");
  DZ_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(path));
  ProcessorContext ctx;
  const std::string cfg_path = (fs::path(model_dir) / "config.json").string();
  if (fs::exists(cfg_path, ec)) {
    DZ_ASSIGN_OR_RETURN(const nlohmann::json cfg, read_json_file(cfg_path));
    if (cfg.is_object() && cfg.contains("vision_config") && cfg["vision_config"].is_object()) {
      const nlohmann::json& v = cfg["vision_config"];
      if (v.contains("patch_size") && v["patch_size"].is_number_integer()) ctx.vision_patch_size = v["patch_size"].get<int64_t>();
    }
  }
  return make_image_processor(j, path, ctx);
}

std::vector<std::string> image_processor_kinds() {
  std::vector<std::string> out;
  for (const Entry& e : table()) out.push_back(e.kind);
  return out;
}

Result<ProcessedImage> load_and_process(const ImageProcessor& processor, const std::string& path,
                                        const std::string& source, int64_t max_pixels) {
  DZ_ASSIGN_OR_RETURN(const RgbImage img, decode_rgb(path, max_pixels));
  DZ_ASSIGN_OR_RETURN(ProcessedImage p, processor.process(img, path));
  p.source = source;
  return p;
}

}  // namespace dayzero::image
