// The two resamplers of resample.h, each replicated operation for operation: PIL's (double
// taps, 22-bit fixed point, clip8 between passes; CLIP's PIL processor is llava's reference)
// and torch's uint8 kernel (int16 taps of adaptive precision, rounding between passes;
// Kimi-K2.5's processor is torchvision-only). Both passes go horizontal first.
#include "image/resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dayzero::image {
namespace {

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
double triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

struct Taps {
  int ksize = 0;
  std::vector<int> xmin, xcount;  // [out]
  std::vector<double> k;          // [out, ksize], normalised to sum 1
};

// PIL's precompute_coeffs (and torch's _compute_indices_weights_aa, the same rule).
Taps taps(int64_t in_size, int64_t out_size, Filter f) {
  const double filter_support = f == Filter::kBicubic ? 2.0 : 1.0;
  double (*fn)(double) = f == Filter::kBicubic ? bicubic : triangle;
  const double scale = double(in_size) / double(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support * filterscale;
  Taps t;
  t.ksize = int(std::ceil(support)) * 2 + 1;
  t.xmin.resize(out_size);
  t.xcount.resize(out_size);
  t.k.assign(size_t(out_size) * t.ksize, 0.0);
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = int(in_size);
    xmax -= xmin;
    double* k = &t.k[size_t(xx) * t.ksize];
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = fn((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x)
      if (ww != 0.0) k[x] /= ww;
    t.xmin[xx] = xmin;
    t.xcount[xx] = xmax;
  }
  return t;
}

constexpr int kPrecisionBits = 32 - 8 - 2;

std::vector<int32_t> fixed_point(const Taps& t) {
  std::vector<int32_t> kk(t.k.size());
  for (size_t i = 0; i < t.k.size(); ++i)
    kk[i] = t.k[i] < 0 ? int32_t(-0.5 + t.k[i] * (1 << kPrecisionBits)) : int32_t(0.5 + t.k[i] * (1 << kPrecisionBits));
  return kk;
}

uint8_t clip8(int32_t v) {
  const int32_t s = v >> kPrecisionBits;
  return uint8_t(s < 0 ? 0 : s > 255 ? 255 : s);
}

// One PIL pass along x (horizontal) or y (vertical) of an image in_w x in_h -> out_w x out_h.
RgbImage pil_pass(const RgbImage& in, int64_t out_w, int64_t out_h, bool horizontal, const Taps& t) {
  const std::vector<int32_t> kk = fixed_point(t);
  RgbImage out;
  out.width = out_w;
  out.height = out_h;
  out.rgb.resize(size_t(out_w) * out_h * 3);
  for (int64_t y = 0; y < out_h; ++y)
    for (int64_t x = 0; x < out_w; ++x) {
      const int64_t o = horizontal ? x : y;
      const int32_t* k = &kk[size_t(o) * t.ksize];
      int32_t ss[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      for (int j = 0; j < t.xcount[o]; ++j) {
        const int64_t sx = horizontal ? t.xmin[o] + j : x;
        const int64_t sy = horizontal ? y : t.xmin[o] + j;
        const uint8_t* p = &in.rgb[(size_t(sy) * in.width + sx) * 3];
        for (int c = 0; c < 3; ++c) ss[c] += int32_t(p[c]) * k[j];
      }
      uint8_t* d = &out.rgb[(size_t(y) * out_w + x) * 3];
      for (int c = 0; c < 3; ++c) d[c] = clip8(ss[c]);
    }
  return out;
}

// torch's _compute_indices_int16_weights_aa: the float taps scaled to int16 with the largest
// precision (at most 22 bits) at which the biggest tap still fits in 15 bits.
int torch_precision(const Taps& t) {
  double w_max = 0;
  for (double w : t.k) w_max = std::max(w_max, w);
  int p = 0;
  for (p = 0; p < 22; ++p)
    if (int(0.5 + w_max * (1 << (p + 1))) >= (1 << 15)) break;
  return p;
}

// One pass of torch's uint8 antialiased kernel (aten UpSampleKernel.cpp, the generic
// separable path): int16 taps, accumulation from 1 << (precision - 1), >> precision, clamp.
RgbImage torch_pass(const RgbImage& in, int64_t out_w, int64_t out_h, bool horizontal, const Taps& t) {
  const int p = torch_precision(t);
  std::vector<int32_t> kk(t.k.size());
  for (size_t i = 0; i < t.k.size(); ++i) {
    const double v = t.k[i] * double(1 << p);
    kk[i] = v < 0 ? int32_t(-0.5 + v) : int32_t(0.5 + v);
  }
  RgbImage out;
  out.width = out_w;
  out.height = out_h;
  out.rgb.resize(size_t(out_w) * out_h * 3);
  for (int64_t y = 0; y < out_h; ++y)
    for (int64_t x = 0; x < out_w; ++x) {
      const int64_t o = horizontal ? x : y;
      const int32_t* k = &kk[size_t(o) * t.ksize];
      int64_t ss[3] = {int64_t(1) << (p - 1), int64_t(1) << (p - 1), int64_t(1) << (p - 1)};
      for (int j = 0; j < t.xcount[o]; ++j) {
        const int64_t sx = horizontal ? t.xmin[o] + j : x;
        const int64_t sy = horizontal ? y : t.xmin[o] + j;
        const uint8_t* px = &in.rgb[(size_t(sy) * in.width + sx) * 3];
        for (int c = 0; c < 3; ++c) ss[c] += int64_t(px[c]) * k[j];
      }
      uint8_t* d = &out.rgb[(size_t(y) * out_w + x) * 3];
      for (int c = 0; c < 3; ++c) {
        const int64_t v = ss[c] >> p;
        d[c] = uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  return out;
}

}  // namespace

bool filter_from_pil_code(int code, Filter* out) {
  if (code == 2) *out = Filter::kBilinear;
  else if (code == 3) *out = Filter::kBicubic;
  else return false;
  return true;
}

RgbImage resize_pil(const RgbImage& in, int64_t out_w, int64_t out_h, Filter f) {
  if (out_w == in.width && out_h == in.height) return in;
  RgbImage cur = in;
  if (out_w != in.width) cur = pil_pass(cur, out_w, cur.height, true, taps(in.width, out_w, f));
  if (out_h != in.height) cur = pil_pass(cur, out_w, out_h, false, taps(in.height, out_h, f));
  return cur;
}

RgbImage resize_torch_aa(const RgbImage& in, int64_t out_w, int64_t out_h, Filter f) {
  if (out_w == in.width && out_h == in.height) return in;
  RgbImage cur = in;
  if (out_w != in.width) cur = torch_pass(cur, out_w, cur.height, true, taps(in.width, out_w, f));
  if (out_h != in.height) cur = torch_pass(cur, out_w, out_h, false, taps(in.height, out_h, f));
  return cur;
}

}  // namespace dayzero::image
