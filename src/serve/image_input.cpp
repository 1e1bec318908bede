// image_url bytes, base64, and the image path of `dayzero run` (decode, process, expand).
#include "serve/image_input.h"

#include <filesystem>
#include <fstream>
#include <cstring>
#include <sstream>

#include "image/decode.h"
#include "model/blocks/vision.h"

namespace dayzero::serve {

namespace {
constexpr const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kB64[(v >> k) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= uint8_t(bytes[i + 1]) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> base64_decode(const std::string& text) {
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* at = std::strchr(kB64, c);
    if (c == '\0' || at == nullptr) return Status::InvalidArgument("not base64");
    v = (v << 6) | static_cast<uint32_t>(at - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xFF);
    }
  }
  return out;
}

Result<std::string> image_url_bytes(const std::string& url, const std::string& image_dir) {
  if (url.rfind("data:", 0) == 0) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos || url.substr(0, comma).find(";base64") == std::string::npos)
      return Status::InvalidArgument("a data: URI must be data:<type>;base64,<data>");
    return base64_decode(url.substr(comma + 1));
  }
  namespace fs = std::filesystem;
  if (image_dir.empty())
    return Status::InvalidArgument("only data: URIs are taken (local files need serve.image_dir)");
  std::string path = url.rfind("file://", 0) == 0 ? url.substr(7) : url;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(image_dir, ec);
  const fs::path file = fs::weakly_canonical(fs::path(path).is_absolute() ? fs::path(path) : dir / path, ec);
  const std::string d = dir.string() + "/";
  if (ec || file.string().rfind(d, 0) != 0)
    return Status::InvalidArgument("'" + path + "' is not under serve.image_dir (" + image_dir + ")");
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::InvalidArgument("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<image::ProcessedImage> process_image_bytes(const image::ImageProcessor& processor, const model::VisionParams& vp,
                                                  const std::string& bytes, const std::string& source,
                                                  int64_t max_pixels) {
  DZ_ASSIGN_OR_RETURN(image::RgbImage rgb, image::decode_rgb_bytes(bytes, source, max_pixels));
  DZ_ASSIGN_OR_RETURN(image::ProcessedImage img, processor.process(rgb, source));
  if (img.patch_size != vp.patch_size)
    return Status::InvalidArgument("the processor cuts " + std::to_string(img.patch_size) +
                                   "-px patches, the vision tower takes " + std::to_string(vp.patch_size));
  return img;
}

Result<std::vector<int32_t>> expand_images(const std::vector<int32_t>& ids, const model::VisionParams& vp,
                                           const std::vector<image::ProcessedImage>& images) {
  if (images.empty()) return ids;
  std::vector<int64_t> counts;
  for (const image::ProcessedImage& img : images) counts.push_back(model::blocks::image_feature_count(vp, img));
  return model::blocks::expand_image_placeholders(ids, vp.image_token_id, counts);
}

}  // namespace dayzero::serve
