// Two runtime::load_weights of the same model compared, for the tests that load it twice with
// different hand-overs (as stored vs f32): the records, field by field, and a walk over the
// weights both loads placed. What "the same weight" means (bits on the host, bytes on a
// device) is the caller's.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "model/weights.h"
#include "runtime/model_loader.h"

namespace dayzero::test_util {

// The same tensors in the same order, each read from the same bytes (checksum, ranges,
// bytes_read, reads) into the same shape, with the same non-finite count.
inline void expect_same_records(const std::vector<checkpoint::WeightRecord>& a,
                                const std::vector<checkpoint::WeightRecord>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << what;
    EXPECT_EQ(a[i].checksum, b[i].checksum) << what << ": " << a[i].name;
    EXPECT_EQ(a[i].ranges, b[i].ranges) << what << ": " << a[i].name;
    EXPECT_EQ(a[i].bytes_read, b[i].bytes_read) << what << ": " << a[i].name;
    EXPECT_EQ(a[i].reads, b[i].reads) << what << ": " << a[i].name;
    EXPECT_EQ(a[i].shape, b[i].shape) << what << ": " << a[i].name;
    EXPECT_EQ(a[i].nan_count + a[i].inf_count, b[i].nan_count + b[i].inf_count) << what;
  }
}

// Calls same(name, ta, tb) for every weight of m.specs that load a placed, failing where only
// one of the loads placed it; returns how many weights were compared.
template <class Same>
int each_weight_pair(const runtime::ModelInfo& m, const model::Weights& a, const model::Weights& b,
                     const std::string& what, Same same) {
  int compared = 0;
  for (const auto& spec : m.specs) {
    const Tensor* ta = a.find(spec.name);
    const Tensor* tb = b.find(spec.name);
    EXPECT_EQ(ta == nullptr, tb == nullptr) << what << ": " << spec.name;
    if (!ta || !tb) continue;
    same(spec.name, *ta, *tb);
    ++compared;
  }
  return compared;
}

}  // namespace dayzero::test_util
