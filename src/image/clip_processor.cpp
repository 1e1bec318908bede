// CLIPImageProcessor (llava's): transformers' PIL backend (CLIPImageProcessorPil, the one
// AutoImageProcessor gives where torchvision is absent and the historical "slow" processor):
// resize the shortest edge with PIL's resampler, center crop (zero-padding a side shorter than
// the crop), rescale, normalise. Not the torchvision backend (CLIPImageProcessorFast), whose
// float resampling differs from PIL's by up to a few 1/255: the PIL one is matched for all names.
#include <cmath>
#include <memory>

#include "image/processor.h"
#include "image/processor_config.h"

namespace dayzero::image {
namespace {

// Largest intermediate image of the resize (before the crop); transformers has no such bound.
constexpr int64_t kMaxResizedPixels = int64_t(1) << 26;

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

class ClipProcessor final : public ImageProcessor {
 public:
  std::string kind_;
  bool do_resize = true, do_center_crop = true;
  int64_t shortest_edge = 224, size_h = 0, size_w = 0;  // size: shortest_edge, or height and width
  int64_t crop_h = 224, crop_w = 224;
  PixelSteps pixel = PixelSteps::with({0.48145466, 0.4578275, 0.40821073},    // OPENAI_CLIP_MEAN
                                      {0.26862954, 0.26130258, 0.27577711});  // OPENAI_CLIP_STD
  int64_t patch_size = 0;

  const std::string& kind() const override { return kind_; }

  Result<RgbImage> geometry(const RgbImage& in, const std::string& source) const override {
    RgbImage img = in;
    if (do_resize) {
      int64_t h = size_h, w = size_w;
      if (size_h == 0) {
        // get_resize_output_image_size(default_to_square=False): int() truncation of the long side.
        const bool portrait = in.width <= in.height;
        const int64_t short_side = portrait ? in.width : in.height, long_side = portrait ? in.height : in.width;
        const int64_t new_long = static_cast<int64_t>(double(shortest_edge) * double(long_side) / double(short_side));
        h = portrait ? new_long : shortest_edge;
        w = portrait ? shortest_edge : new_long;
      }
      if (h < 1 || w < 1)
        return Status::InvalidArgument(source + ": a " + std::to_string(in.width) + "x" + std::to_string(in.height) +
                                       " image resizes to nothing");
      // A sliver (1 x 10000) scaled to a 336-pixel short side would be 3.4 gigapixels.
      if (h * w > kMaxResizedPixels)
        return Status::InvalidArgument(source + ": a " + std::to_string(in.width) + "x" + std::to_string(in.height) +
                                       " image would resize to " + std::to_string(w) + "x" + std::to_string(h) +
                                       ", more than " + std::to_string(kMaxResizedPixels) + " pixels");
      img = resize_pil(img, w, h, pixel.resample);
    }
    if (do_center_crop) img = center_crop(img);
    return img;
  }

  Result<ProcessedImage> process(const RgbImage& in, const std::string& source) const override {
    DZ_ASSIGN_OR_RETURN(const RgbImage img, geometry(in, source));
    return to_processed_image(img, source, patch_size, pixel);
  }

 private:
  // image_transforms.center_crop: floor offsets; a side shorter than the crop is zero-padded
  // (ceil of half the shortfall before it) and then cut.
  RgbImage center_crop(const RgbImage& in) const {
    const int64_t oh = in.height, ow = in.width;
    int64_t top = floor_div(oh - crop_h, 2), left = floor_div(ow - crop_w, 2);
    const int64_t nh = std::max(crop_h, oh), nw = std::max(crop_w, ow);
    const int64_t top_pad = (nh - oh + 1) / 2, left_pad = (nw - ow + 1) / 2;
    top += top_pad;
    left += left_pad;
    const int64_t y0 = std::max<int64_t>(0, top), y1 = std::min(nh, top + crop_h);
    const int64_t x0 = std::max<int64_t>(0, left), x1 = std::min(nw, left + crop_w);
    RgbImage out;
    out.height = y1 - y0;
    out.width = x1 - x0;
    out.rgb.assign(size_t(out.height) * out.width * 3, 0);
    for (int64_t y = y0; y < y1; ++y)
      for (int64_t x = x0; x < x1; ++x) {
        const int64_t sy = y - top_pad, sx = x - left_pad;  // position in the unpadded image
        if (sy < 0 || sy >= oh || sx < 0 || sx >= ow) continue;
        for (int c = 0; c < 3; ++c)
          out.rgb[(size_t(y - y0) * out.width + (x - x0)) * 3 + c] = in.rgb[(size_t(sy) * ow + sx) * 3 + c];
      }
    return out;
  }
};

}  // namespace

Result<std::unique_ptr<ImageProcessor>> make_clip_processor(const ProcessorConfig& c, const std::string& kind,
                                                            const ProcessorContext& ctx) {
  auto p = std::make_unique<ClipProcessor>();
  p->kind_ = kind;
  DZ_RETURN_IF_ERROR(c.check_keys({"do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale",
                                   "rescale_factor", "do_normalize", "image_mean", "image_std", "do_convert_rgb",
                                   "patch_size"}));
  DZ_RETURN_IF_ERROR(read_pixel_steps(c, &p->pixel));
  DZ_RETURN_IF_ERROR(c.get_bool("do_resize", &p->do_resize));
  DZ_RETURN_IF_ERROR(c.get_bool("do_center_crop", &p->do_center_crop));
  bool has_short = false, has_h = false, has_w = false, present = false;
  DZ_RETURN_IF_ERROR(c.get_member("size", "shortest_edge", 1, &p->shortest_edge, &has_short));
  DZ_RETURN_IF_ERROR(c.get_member("size", "height", 1, &p->size_h, &has_h));
  DZ_RETURN_IF_ERROR(c.get_member("size", "width", 1, &p->size_w, &has_w));
  int64_t unused = 0;
  DZ_RETURN_IF_ERROR(c.get_member("size", "longest_edge", 1, &unused, &present));
  if (present) return c.error("size.longest_edge", "is not built for CLIPImageProcessor");
  if (has_h != has_w) return c.error("size", "height and width must be given together");
  if (has_h && has_short) return c.error("size", "give shortest_edge or height and width, not both");
  if (!has_h) p->size_h = p->size_w = 0;
  DZ_RETURN_IF_ERROR(c.get_member("crop_size", "height", 1, &p->crop_h, &present));
  DZ_RETURN_IF_ERROR(c.get_member("crop_size", "width", 1, &p->crop_w, &present));
  p->patch_size = ctx.vision_patch_size;
  DZ_RETURN_IF_ERROR(c.get_int("patch_size", 1, &p->patch_size));
  return std::unique_ptr<ImageProcessor>(std::move(p));
}

}  // namespace dayzero::image
