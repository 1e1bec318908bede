// Images of a chat request: an image_url part's bytes (a data: URI in base64, or a file under
// serve.image_dir), decoded and preprocessed by the model's own image processor, with the
// placeholder ids expanded to each image's feature rows as `dayzero run` does for a prompt's
// images. Rank 0 does it first to answer bad images with 400; every rank then does the same to
// the same bytes (the batch carries them), which gives the same pixels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/processed_image.h"
#include "image/processor.h"
#include "model/hparams.h"

namespace dayzero::serve {

// The bytes an image_url names. image_dir: serve.image_dir (empty: only data: URIs are taken).
// InvalidArgument with the reason (not base64, not under image_dir, unreadable).
Result<std::string> image_url_bytes(const std::string& url, const std::string& image_dir);

// Decoded (refused over max_pixels, or when not a PNG/JPEG) and preprocessed.
Result<image::ProcessedImage> process_image_bytes(const image::ImageProcessor& processor, const model::VisionParams& vp,
                                                  const std::string& bytes, const std::string& source,
                                                  int64_t max_pixels);

// ids with each image placeholder expanded to its image's feature rows.
Result<std::vector<int32_t>> expand_images(const std::vector<int32_t>& ids, const model::VisionParams& vp,
                                           const std::vector<image::ProcessedImage>& images);

std::string base64_encode(const std::string& bytes);
Result<std::string> base64_decode(const std::string& text);

}  // namespace dayzero::serve
