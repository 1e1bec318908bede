// Typed reads of preprocessor_config.json keys for the processors of this folder, with the
// one rule they share: a key the processor does not know is refused by name (never ignored).
// Internal to src/image/.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <set>
#include <string>

#include "core/status.h"
#include "image/processed_image.h"
#include "image/resample.h"

namespace dayzero::image {

class ProcessorConfig {
 public:
  ProcessorConfig(const nlohmann::json& j, std::string source) : j_(j), source_(std::move(source)) {}

  // Every key of the file must be in known (plus the bookkeeping keys every HF file has).
  Status check_keys(const std::set<std::string>& known) const;
  Status get_bool(const char* key, bool* out) const;                 // unchanged when absent
  Status get_int(const char* key, int64_t min, int64_t* out) const;  // >= min
  Status get_double(const char* key, double* out) const;             // finite
  Status get_triple(const char* key, std::array<double, 3>* out) const;  // a number or 3 numbers
  Status get_filter(const char* key, Filter* out) const;             // PIL code 2 or 3
  // An object key's integer member: size.shortest_edge, crop_size.height, ...
  Status get_member(const char* key, const char* member, int64_t min, int64_t* out, bool* present) const;
  Status error(const std::string& key, const std::string& what) const {
    return Status::InvalidArgument(source_ + ": " + key + ": " + what);
  }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& j_;
  std::string source_;
};

// The steps every processor of this folder shares after its own resizing: the resampling filter
// its resize uses, then rescale and normalise; each family gives its own defaults.
struct PixelSteps {
  Filter resample = Filter::kBicubic;
  bool do_rescale = true, do_normalize = true;
  double rescale_factor = 1.0 / 255.0;
  std::array<double, 3> mean{}, std{};

  // The defaults of a family: its mean and standard deviation, the rest as above.
  static PixelSteps with(const std::array<double, 3>& mean, const std::array<double, 3>& std) {
    PixelSteps s;
    s.mean = mean;
    s.std = std;
    return s;
  }
};
// Reads the keys of those steps (resample, do_rescale, do_normalize, rescale_factor, image_mean,
// image_std) over `steps`' defaults, and do_convert_rgb, which must not be false (images are
// always converted to RGB). A standard deviation of 0 is refused.
Status read_pixel_steps(const ProcessorConfig& c, PixelSteps* steps);

// (x / 255 - mean) / std per channel of a [H, W, 3] uint8 image as float32 [3, H, W], in the
// order HF applies them (rescale, then normalise), in float32 as numpy does for float32 input.
void rescale_normalize(const RgbImage& img, double rescale_factor, bool do_rescale, bool do_normalize,
                       const std::array<double, 3>& mean, const std::array<double, 3>& std,
                       std::vector<float>* out);
inline void rescale_normalize(const RgbImage& img, const PixelSteps& s, std::vector<float>* out) {
  rescale_normalize(img, s.rescale_factor, s.do_rescale, s.do_normalize, s.mean, s.std, out);
}

// The last step every processor shares: img (already resized, cropped or padded) as a
// ProcessedImage of its patch grid (patch_size 0: no grid) with rescale_normalize's pixels.
// InvalidArgument naming source when the image is not a whole number of patches.
Result<ProcessedImage> to_processed_image(const RgbImage& img, const std::string& source, int64_t patch_size,
                                          const PixelSteps& steps);

}  // namespace dayzero::image
