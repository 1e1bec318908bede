// Separable antialiased resampling of an 8-bit RGB image, in the two fixed-point arithmetics
// the Hugging Face processors end up using: PIL's Image.resize (22-bit taps) and torch's
// uint8 interpolate(antialias=True) kernel, which torchvision's resize runs on CPU for bicubic
// (int16 taps); both round to uint8 after the horizontal and again after the vertical pass.
// Both compute the same float taps: support scaled by the downscale factor, centre (i + 0.5) * scale.
// Not a general image library: RGB, three channels, no box argument, no reducing_gap.
#pragma once

#include <cstdint>

#include "image/decode.h"

namespace dayzero::image {

// The PIL filters the processors name by PIL's resample codes (0 nearest is not offered).
enum class Filter { kBilinear, kBicubic };  // support 1 (triangle), 2 (Keys cubic, a = -0.5)

// PIL resample code (2 bilinear, 3 bicubic) -> Filter; false for a code not supported here.
bool filter_from_pil_code(int code, Filter* out);

// PIL's ImagingResample for an 8-bit image (libImaging/Resample.c): coefficients normalised to
// 22-bit fixed point, horizontal pass first, each pass rounded and clipped to uint8.
// REQUIRES: out_w, out_h >= 1. An unchanged size returns a copy, as Image.resize does.
RgbImage resize_pil(const RgbImage& in, int64_t out_w, int64_t out_h, Filter f);

// torchvision's resize of a uint8 image with antialias=True on CPU (torch's native uint8
// antialiased kernel, which tvF.resize uses for bicubic; for bilinear it does so on AVX2 and
// ARM CPUs only). An unchanged size returns a copy, as tvF.resize does.
RgbImage resize_torch_aa(const RgbImage& in, int64_t out_w, int64_t out_h, Filter f);

}  // namespace dayzero::image
