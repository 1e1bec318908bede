// Kimi_K25ImageProcessor (transformers models/kimi_k25, a torchvision-only processor):
// navit_resize — shrink (never enlarge) so the image fits max_patches patches of patch_size
// and size.max_height patches a side, keeping the aspect ratio; torchvision's antialiased
// bicubic resize; zero padding at the bottom and right to a multiple of merge_size * patch_size;
// rescale and normalise (ImageNet standard mean/std 0.5). The grid is the padded size in
// patches. Not the patchify into [n_patches, 3, 14, 14]: the vision tower unfolds [3, H, W].
#include <algorithm>
#include <cmath>
#include <memory>

#include "image/processor.h"
#include "image/processor_config.h"

namespace dayzero::image {
namespace {

class KimiK25Processor final : public ImageProcessor {
 public:
  std::string kind_;
  bool do_resize = true;
  int64_t max_side = 512;  // size.max_height == size.max_width, in patches
  int64_t max_patches = 16384, patch_size = 14, merge_size = 2;
  PixelSteps pixel = PixelSteps::with({0.5, 0.5, 0.5}, {0.5, 0.5, 0.5});

  const std::string& kind() const override { return kind_; }

  Result<RgbImage> geometry(const RgbImage& in, const std::string& source) const override {
    if (!do_resize) {
      if (in.width % patch_size != 0 || in.height % patch_size != 0)
        return Status::InvalidArgument(source + ": with do_resize false the " + std::to_string(in.width) + "x" +
                                       std::to_string(in.height) + " image must be a whole number of " +
                                       std::to_string(patch_size) + "-pixel patches");
      return in;
    }
    // navit_resize, with Python's float arithmetic.
    const double nph = std::max<double>(1.0, double(in.height / patch_size));
    const double npw = std::max<double>(1.0, double(in.width / patch_size));
    const double s_total = std::sqrt(double(max_patches) / (nph * npw));
    const double s_h = double(max_side * patch_size) / double(in.height);
    const double s_w = double(max_side * patch_size) / double(in.width);
    const double scale = std::min({1.0, s_total, s_h, s_w});
    int64_t nh = std::max<int64_t>(1, static_cast<int64_t>(double(in.height) * scale));
    int64_t nw = std::max<int64_t>(1, static_cast<int64_t>(double(in.width) * scale));
    nh = std::min(nh, max_side * patch_size);
    nw = std::min(nw, max_side * patch_size);
    const int64_t factor = merge_size * patch_size;
    const int64_t ph = (factor - nh % factor) % factor + nh, pw = (factor - nw % factor) % factor + nw;
    const RgbImage r = resize_torch_aa(in, nw, nh, pixel.resample);
    RgbImage out;
    out.width = pw;
    out.height = ph;
    out.rgb.assign(size_t(pw) * ph * 3, 0);
    for (int64_t y = 0; y < nh; ++y)
      std::copy_n(&r.rgb[size_t(y) * nw * 3], nw * 3, &out.rgb[size_t(y) * pw * 3]);
    return out;
  }

  Result<ProcessedImage> process(const RgbImage& in, const std::string& source) const override {
    DZ_ASSIGN_OR_RETURN(const RgbImage img, geometry(in, source));
    return to_processed_image(img, source, patch_size, pixel);
  }
};

}  // namespace

Result<std::unique_ptr<ImageProcessor>> make_kimi_k25_processor(const ProcessorConfig& c, const std::string& kind,
                                                                const ProcessorContext&) {
  auto p = std::make_unique<KimiK25Processor>();
  p->kind_ = kind;
  DZ_RETURN_IF_ERROR(c.check_keys({"do_resize", "size", "resample", "max_patches", "patch_size", "merge_size",
                                   "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std",
                                   "do_convert_rgb"}));
  DZ_RETURN_IF_ERROR(read_pixel_steps(c, &p->pixel));
  DZ_RETURN_IF_ERROR(c.get_bool("do_resize", &p->do_resize));
  bool has_h = false, has_w = false;
  int64_t mh = p->max_side, mw = p->max_side;
  DZ_RETURN_IF_ERROR(c.get_member("size", "max_height", 1, &mh, &has_h));
  DZ_RETURN_IF_ERROR(c.get_member("size", "max_width", 1, &mw, &has_w));
  if (has_h != has_w || mh != mw)
    return c.error("size", "max_height and max_width must be given together and be equal (as the processor requires)");
  p->max_side = mh;
  DZ_RETURN_IF_ERROR(c.get_int("max_patches", 1, &p->max_patches));
  DZ_RETURN_IF_ERROR(c.get_int("patch_size", 1, &p->patch_size));
  DZ_RETURN_IF_ERROR(c.get_int("merge_size", 1, &p->merge_size));
  return std::unique_ptr<ImageProcessor>(std::move(p));
}

}  // namespace dayzero::image
