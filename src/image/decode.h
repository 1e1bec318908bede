// Reading an image file (PNG or JPEG, untrusted input) into 8-bit RGB: a header probe that
// gives the format and the dimensions without decoding (so a limit on pixels is enforced
// before any pixel buffer exists), and a full decode with stb_image. Not preprocessing
// (processor.h): nothing here resizes or normalises.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::image {

// Largest image file read (bytes); a real photograph is a few MiB.
inline constexpr uint64_t kMaxImageFileBytes = 256ull << 20;

enum class ImageFormat { kPng, kJpeg };
const char* image_format_name(ImageFormat f);  // "PNG", "JPEG"

struct ImageHeader {
  ImageFormat format = ImageFormat::kPng;
  int64_t width = 0;
  int64_t height = 0;
};

// Format and dimensions from the first bytes of a file: the PNG IHDR chunk, or the first JPEG
// SOFn marker (walking the markers before it). Reads nothing but the header; dimensions may
// be anything the header claims (up to 2^31 - 1 per side).
// Errors (messages start with source_name): InvalidArgument for an empty file; Unsupported
// for a format other than PNG and JPEG (naming it when it is a common one: GIF, BMP, WebP,
// TIFF); Corrupt for a header cut short or malformed, or a zero width or height.
Result<ImageHeader> read_image_header(const std::string& bytes, const std::string& source_name);

// open + bounded read (kMaxImageFileBytes) + read_image_header + width * height against
// max_pixels (InvalidArgument naming both). NotFound when absent; InvalidArgument when not a
// regular file. What a run config check calls for every image of every prompt.
Result<ImageHeader> check_image_file(const std::string& path, int64_t max_pixels);

// An 8-bit RGB image: [height, width, 3], row-major, channels last.
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> rgb;
};

// Decodes path to RGB as transformers' convert_to_rgb (image_transforms.py) does it for a
// PIL image: grey is replicated to three channels; an image with alpha (grey+alpha, RGBA, a
// palette or grey/RGB with a tRNS transparency) is composited onto opaque white with PIL's
// integer alpha_composite arithmetic, then the alpha is dropped; a palette is expanded;
// 16-bit samples keep their high byte (as PIL does for 16-bit RGB(A); PIL clamps 16-bit grey
// to 255 instead, which this does not copy). The header is checked first (check_image_file),
// so a decompression bomb is refused before a pixel buffer is allocated.
// Errors as check_image_file, plus Corrupt (naming the file and stb's reason) for data that
// does not decode (a truncated file, a bad checksum, a bad Huffman table, ...).
Result<RgbImage> decode_rgb(const std::string& path, int64_t max_pixels);

// The same from bytes already read; source_name names them in messages.
Result<RgbImage> decode_rgb_bytes(const std::string& bytes, const std::string& source_name, int64_t max_pixels);

}  // namespace dayzero::image
