// The image processor of a model folder, chosen by preprocessor_config.json's
// image_processor_type through an explicit table (processor.cpp), one file per processor
// (clip_processor.cpp, kimi_k25_processor.cpp): the next family adds a file and a table row.
// Each replicates what the Hugging Face processor of that name does to a decoded RGB image.
// Not decoding (decode.h) and not the vision tower (src/model/).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/decode.h"
#include "image/processed_image.h"

namespace dayzero::image {

class ImageProcessor {
 public:
  virtual ~ImageProcessor() = default;
  // The image_processor_type it was made from, e.g. "CLIPImageProcessor".
  virtual const std::string& kind() const = 0;
  // Resize / crop / pad, rescale and normalise as the HF processor does; pixels [3, H, W].
  // Errors: InvalidArgument naming source for an image the processor cannot take.
  virtual Result<ProcessedImage> process(const RgbImage& img, const std::string& source) const = 0;
  // The same, before rescale and normalisation: the uint8 RGB image the HF processor would
  // rescale ([H, W, 3]); what the comparison against transformers measures in 1/255 steps.
  virtual Result<RgbImage> geometry(const RgbImage& img, const std::string& source) const = 0;
};

// What a processor needs from outside preprocessor_config.json.
struct ProcessorContext {
  // The vision tower's patch size (config.json vision_config.patch_size), used by processors
  // whose own config does not carry one (CLIP); 0 when the model config has none.
  int64_t vision_patch_size = 0;
};

// The processor for a parsed preprocessor_config.json; source_name (its path) starts every
// message. InvalidArgument for a missing or unknown image_processor_type (listing the known
// ones), a key of wrong type or out of range, or a key the processor does not honour.
Result<std::unique_ptr<ImageProcessor>> make_image_processor(const nlohmann::json& config,
                                                            const std::string& source_name,
                                                            const ProcessorContext& ctx = {});

// <model_dir>/preprocessor_config.json (bounded JSON reader) with the context from
// <model_dir>/config.json when present. NotFound when the folder has no
// preprocessor_config.json (a text-only model); other errors as make_image_processor.
Result<std::unique_ptr<ImageProcessor>> load_image_processor(const std::string& model_dir);

// image_processor_type values with a processor, in table order.
std::vector<std::string> image_processor_kinds();

// decode_rgb(path, max_pixels) then processor.process(...); source is the path as the prompt
// wrote it (kept in ProcessedImage::source).
Result<ProcessedImage> load_and_process(const ImageProcessor& processor, const std::string& path,
                                        const std::string& source, int64_t max_pixels);

}  // namespace dayzero::image
