// PNG/JPEG header probe and stb_image decode to RGB, with PIL's alpha compositing onto white.
// Not preprocessing (the processors in this folder) and not the run config check (its caller).
#include "image/decode.h"

#include <stb/stb_image.h>

#include <cstring>
#include <limits>

#include "core/json.h"

namespace dayzero::image {
namespace {

uint32_t be32(const std::string& b, size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) |
         (uint32_t(uint8_t(b[at + 2])) << 8) | uint32_t(uint8_t(b[at + 3]));
}
uint32_t be16(const std::string& b, size_t at) { return (uint32_t(uint8_t(b[at])) << 8) | uint32_t(uint8_t(b[at + 1])); }

constexpr char kPngMagic[] = "\x89PNG\r\n\x1a\n";

bool starts_with(const std::string& b, const char* magic, size_t n) {
  return b.size() >= n && std::memcmp(b.data(), magic, n) == 0;
}

// A common format that is not decoded, for the message.
const char* other_format(const std::string& b) {
  if (starts_with(b, "GIF8", 4)) return "GIF";
  if (starts_with(b, "BM", 2)) return "BMP";
  if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0)
    return "WebP";
  if (starts_with(b, "II*\0", 4) || starts_with(b, "MM\0*", 4)) return "TIFF";
  return nullptr;
}

Result<ImageHeader> png_header(const std::string& b, const std::string& name) {
  // signature (8), IHDR length (4), "IHDR" (4), width (4), height (4)
  if (b.size() < 24) return Status::Corrupt(name + ": the PNG file ends inside its header (" + std::to_string(b.size()) + " bytes)");
  if (std::memcmp(b.data() + 12, "IHDR", 4) != 0)
    return Status::Corrupt(name + ": the PNG file does not start with an IHDR chunk");
  ImageHeader h;
  h.format = ImageFormat::kPng;
  h.width = be32(b, 16);
  h.height = be32(b, 20);
  return h;
}

// SOFn markers carrying frame dimensions: C0-CF except DHT (C4), JPG (C8) and DAC (CC).
bool is_sof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

// Walks the marker segments from SOI; *sos gets the offset of the first SOS when seen before
// the frame header (it never is in a valid file, but the walk stops there).
Result<ImageHeader> jpeg_header(const std::string& b, const std::string& name) {
  size_t at = 2;
  while (true) {
    while (at < b.size() && uint8_t(b[at]) != 0xFF) ++at;  // tolerate fill bytes between segments
    while (at < b.size() && uint8_t(b[at]) == 0xFF) ++at;
    if (at >= b.size()) return Status::Corrupt(name + ": the JPEG file ends before its frame header (SOF)");
    const uint8_t m = uint8_t(b[at++]);
    if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) continue;  // no length field
    if (m == 0xD9 || m == 0xDA) return Status::Corrupt(name + ": the JPEG file has no frame header (SOF) before its data");
    if (at + 2 > b.size()) return Status::Corrupt(name + ": the JPEG file ends inside a marker segment");
    const uint32_t len = be16(b, at);
    if (len < 2) return Status::Corrupt(name + ": the JPEG file has a marker segment of length " + std::to_string(len));
    if (is_sof(m)) {
      if (len < 8 || at + 7 > b.size()) return Status::Corrupt(name + ": the JPEG file ends inside its frame header");
      ImageHeader h;
      h.format = ImageFormat::kJpeg;
      h.height = be16(b, at + 3);
      h.width = be16(b, at + 5);
      return h;
    }
    at += len;
  }
}

// PIL's ImagingAlphaComposite (libImaging/AlphaComposite.c) of src over an opaque white dst.
uint8_t over_white(uint8_t c, uint8_t a) {
  if (a == 0) return 255;
  constexpr uint32_t kPrecision = 7;
  const auto div255 = [](uint32_t v) { return ((v >> 8) + v) >> 8; };
  const uint32_t blend = 255u * (255u - a);
  const uint32_t outa255 = a * 255u + blend;
  const uint32_t coef1 = a * 255u * 255u * (1u << kPrecision) / outa255;
  const uint32_t coef2 = 255u * (1u << kPrecision) - coef1;
  const uint32_t tmp = c * coef1 + 255u * coef2;
  return static_cast<uint8_t>(div255(tmp + (0x80u << kPrecision)) >> kPrecision);
}

}  // namespace

const char* image_format_name(ImageFormat f) { return f == ImageFormat::kPng ? "PNG" : "JPEG"; }

Result<ImageHeader> read_image_header(const std::string& b, const std::string& name) {
  if (b.empty()) return Status::InvalidArgument(name + ": the image file is empty");
  Result<ImageHeader> h = Status::Internal("");
  if (starts_with(b, kPngMagic, 8)) {
    h = png_header(b, name);
  } else if (b.size() >= 3 && uint8_t(b[0]) == 0xFF && uint8_t(b[1]) == 0xD8 && uint8_t(b[2]) == 0xFF) {
    h = jpeg_header(b, name);
  } else if (const char* other = other_format(b)) {
    return Status::Unsupported(name + ": a " + std::string(other) + " image; only PNG and JPEG are decoded");
  } else {
    return Status::Unsupported(name + ": not a PNG or JPEG file (unknown signature); only PNG and JPEG are decoded");
  }
  if (!h.ok()) return h;
  if (h->width <= 0 || h->height <= 0 || h->width > std::numeric_limits<int32_t>::max() ||
      h->height > std::numeric_limits<int32_t>::max())
    return Status::Corrupt(name + ": the " + image_format_name(h->format) + " header gives a size of " +
                           std::to_string(h->width) + "x" + std::to_string(h->height));
  return h;
}

namespace {

Result<ImageHeader> check_header(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  DZ_ASSIGN_OR_RETURN(ImageHeader h, read_image_header(bytes, name));
  if (h.width * h.height > max_pixels)
    return Status::InvalidArgument(name + ": the " + std::string(image_format_name(h.format)) + " header gives " +
                                   std::to_string(h.width) + "x" + std::to_string(h.height) + " = " +
                                   std::to_string(h.width * h.height) + " pixels, more than limits.max_image_pixels (" +
                                   std::to_string(max_pixels) + ")");
  return h;
}

// A JPEG whose entropy-coded data stops early decodes without complaint in stb (the missing
// data reads as zeros), where PIL refuses it as truncated: require the EOI marker after the
// first SOS (FF D9 cannot occur inside entropy-coded data, where FF is stuffed as FF 00).
bool jpeg_has_eoi(const std::string& b) {
  const size_t sos = b.find("\xFF\xDA", 2);
  return sos != std::string::npos && b.find("\xFF\xD9", sos) != std::string::npos;
}

}  // namespace

Result<ImageHeader> check_image_file(const std::string& path, int64_t max_pixels) {
  DZ_ASSIGN_OR_RETURN(const std::string bytes, read_regular_file(path, kMaxImageFileBytes));
  return check_header(bytes, path, max_pixels);
}

Result<RgbImage> decode_rgb(const std::string& path, int64_t max_pixels) {
  DZ_ASSIGN_OR_RETURN(const std::string bytes, read_regular_file(path, kMaxImageFileBytes));
  return decode_rgb_bytes(bytes, path, max_pixels);
}

Result<RgbImage> decode_rgb_bytes(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  DZ_ASSIGN_OR_RETURN(const ImageHeader h, check_header(bytes, name, max_pixels));
  if (h.format == ImageFormat::kJpeg && !jpeg_has_eoi(bytes))
    return Status::Corrupt(name + ": the JPEG file is truncated (no end-of-image marker after its data)");
  int w = 0, ht = 0, n = 0;
  stbi_uc* px = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()),
                                      &w, &ht, &n, 0);
  if (px == nullptr)
    return Status::Corrupt(name + ": the " + std::string(image_format_name(h.format)) +
                           " data does not decode (" + stbi_failure_reason() + "; truncated or corrupt)");
  if (w != h.width || ht != h.height || n < 1 || n > 4) {
    stbi_image_free(px);
    return Status::Corrupt(name + ": decoded to " + std::to_string(w) + "x" + std::to_string(ht) + "x" +
                           std::to_string(n) + ", not the header's " + std::to_string(h.width) + "x" +
                           std::to_string(h.height));
  }
  RgbImage img;
  img.width = w;
  img.height = ht;
  const size_t npx = size_t(w) * size_t(ht);
  img.rgb.resize(npx * 3);
  for (size_t i = 0; i < npx; ++i) {
    const stbi_uc* s = px + i * n;
    uint8_t* d = img.rgb.data() + i * 3;
    switch (n) {
      case 1: d[0] = d[1] = d[2] = s[0]; break;
      case 2: d[0] = d[1] = d[2] = over_white(s[0], s[1]); break;
      case 3: d[0] = s[0]; d[1] = s[1]; d[2] = s[2]; break;
      default:
        for (int c = 0; c < 3; ++c) d[c] = over_white(s[c], s[3]);
    }
  }
  stbi_image_free(px);
  return img;
}

}  // namespace dayzero::image
