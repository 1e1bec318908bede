// DumpWriter / DumpReader round trips over every part of schema version 1: root attributes,
// activations (whole, appended, stats), outputs, weights, timeline, the complete flag, the
// file a killed writer leaves, and error reporting. Not a test of comparing dumps (diag/).
#include "dump/dump_writer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>

#include "dump/dump_reader.h"
#include "test_dir.h"

namespace dayzero::dump {
namespace {

using testing::TestDir;

RootAttributes sample_attrs() {
  RootAttributes a;
  a.dayzero_version = "0.1.0";
  a.rank = 3;
  a.world_size = 8;
  a.dp = 1;
  a.pp = 2;
  a.tp = 4;
  a.ep = 1;
  a.etp = 1;
  a.hostname = "node-a";
  a.device = "cpu";
  a.backend = "cpu";
  a.model_config = R"({"model_type": "llama", "hidden_size": 64})";
  a.plan = R"({"pp": 2, "tp": 4})";
  a.run_config = "model: /ckpt\nprompts:\n  - id: p0\n";
  a.started_at = "2026-11-29T15:04:05Z";
  a.clock_offset_ns = -12345;
  return a;
}

std::vector<float> iota_floats(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(DumpWriter, RootAttributesAndCompleteFlag) {
  TestDir dir;
  const std::string path = dir.file("rank-00003.h5");
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok()) << w.status().message();
    ASSERT_TRUE((*w)->set_attribute("summary", std::string(R"({"prompts": 2})")).ok());
    ASSERT_TRUE((*w)->set_attribute("n_prompts", 2).ok());
    ASSERT_TRUE((*w)->set_attribute("wall_s", 1.5).ok());
    ASSERT_TRUE((*w)->set_attribute("wall_s", 2.5).ok());  // replaced
    EXPECT_EQ((*w)->set_attribute("complete", 1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ((*w)->set_attribute("schema_version", "2").code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE((*w)->close().ok());
  }
  {
    auto r = DumpReader::open(path);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r->schema_version(), kSchemaVersion);
    EXPECT_FALSE(*r->complete());
    auto a = r->root_attributes();
    ASSERT_TRUE(a.ok()) << a.status().message();
    const RootAttributes want = sample_attrs();
    EXPECT_EQ(a->dayzero_version, want.dayzero_version);
    EXPECT_EQ(a->rank, 3);
    EXPECT_EQ(a->world_size, 8);
    EXPECT_EQ(a->pp, 2);
    EXPECT_EQ(a->tp, 4);
    EXPECT_EQ(a->hostname, "node-a");
    EXPECT_EQ(a->model_config, want.model_config);
    EXPECT_EQ(a->plan, want.plan);
    EXPECT_EQ(a->run_config, want.run_config);
    EXPECT_EQ(a->started_at, want.started_at);
    EXPECT_EQ(a->clock_offset_ns, -12345);
    EXPECT_EQ(*r->attr_string("summary"), R"({"prompts": 2})");
    EXPECT_EQ(*r->attr_int("n_prompts"), 2);
    EXPECT_DOUBLE_EQ(*r->attr_double("wall_s"), 2.5);
    EXPECT_EQ(r->attr_int("missing").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(r->attr_int("hostname").status().code(), StatusCode::kInvalidArgument);
  }
  {
    // Reopening for the last phase is not supported; a second writer marks a fresh file.
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->mark_complete().ok());
    ASSERT_TRUE((*w)->close().ok());
    auto r = DumpReader::open(path);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(*r->complete());
  }
}

TEST(DumpWriter, LargeTextAttributes) {
  // model_config / plan can exceed HDF5's 64 KiB compact attribute limit; variable-length
  // strings live in the global heap, so they must still fit.
  TestDir dir;
  RootAttributes a = sample_attrs();
  a.plan = std::string(300000, 'x');
  auto w = DumpWriter::create(dir.file("big.h5"), a);
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_TRUE((*w)->close().ok());
  auto r = DumpReader::open(dir.file("big.h5"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->attr_string("plan")->size(), 300000u);
}

TEST(DumpWriter, ActivationsRoundTrip) {
  TestDir dir;
  const std::string path = dir.file("act.h5");
  const std::vector<float> embed = iota_floats(5 * 16, 0.5f);      // [5, 16]
  const std::vector<float> attn = iota_floats(5 * 16, -40.0f);     // [5, 16]
  const std::vector<float> logits = iota_floats(5 * 32, 1000.0f);  // [5, 32]
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    DumpWriter& dw = **w;
    ASSERT_TRUE(dw.write_activation("p0", kPhasePrefill, "embed", embed.data(), 5, 16).ok());
    ASSERT_TRUE(
        dw.write_activation("p0", kPhasePrefill, "layers.7.attn_out", attn.data(), 5, 16).ok());
    ASSERT_TRUE(dw.write_activation("p0", kPhasePrefill, "logits", logits.data(), 5, 32).ok());
    ASSERT_TRUE(dw.write_activation("p1", kPhasePrefill, "embed", embed.data(), 5, 16).ok());
    ASSERT_TRUE(dw.flush().ok());

    Status dup = dw.write_activation("p0", kPhasePrefill, "embed", embed.data(), 5, 16);
    EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(dup.message().find("already written"), std::string::npos) << dup.message();
    EXPECT_EQ(dw.write_activation("p0", kPhasePrefill, "a/b", embed.data(), 5, 16).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(dw.write_activation("", kPhasePrefill, "x", embed.data(), 5, 16).code(),
              StatusCode::kInvalidArgument);
    ASSERT_TRUE(dw.close().ok());
    EXPECT_EQ(dw.write_activation("p2", kPhasePrefill, "x", embed.data(), 5, 16).code(),
              StatusCode::kInternal);
  }
  auto r = DumpReader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->list_prompts(), (std::vector<std::string>{"p0", "p1"}));
  EXPECT_EQ(*r->list("/activations/p0"), (std::vector<std::string>{"prefill"}));
  EXPECT_EQ(*r->list_activations("p0", kPhasePrefill),
            (std::vector<std::string>{"embed", "layers.7.attn_out", "logits"}));
  auto a = r->read_activation("p0", kPhasePrefill, "layers.7.attn_out");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{5, 16}));
  EXPECT_EQ(a->data, attn);
  auto l = r->read_float(activation_path("p0", kPhasePrefill, "logits"));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->shape, (std::vector<int64_t>{5, 32}));
  EXPECT_EQ(l->data, logits);
  EXPECT_FALSE(r->is_stats("p0", kPhasePrefill, "embed"));
  EXPECT_EQ(r->read_activation("p0", kPhasePrefill, "nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r->list_activations("p9", kPhasePrefill).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r->read_int32(activation_path("p0", kPhasePrefill, "embed")).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(DumpWriter, AppendRowsGrowTheDataset) {
  TestDir dir;
  const std::string path = dir.file("append.h5");
  const int64_t width = 1024;  // 4 KiB rows: 16 per chunk, so 70 steps span 5 chunks
  std::vector<std::vector<float>> rows;
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    for (int step = 0; step < 70; ++step) {
      rows.push_back(iota_floats(width, float(step * 100)));
      ASSERT_TRUE((*w)->append_activation_row("p0", kPhaseDecode, "layers.0.layer_out",
                                              rows.back().data(), width)
                      .ok());
      if (step == 30) {
        ASSERT_TRUE((*w)->flush().ok());  // closes the dataset; the next append reopens it
      }
    }
    Status bad = (*w)->append_activation_row("p0", kPhaseDecode, "layers.0.layer_out",
                                             rows[0].data(), width - 1);
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.message();
    ASSERT_TRUE(
        (*w)->write_activation("p0", kPhasePrefill, "embed", rows[0].data(), 1, width).ok());
    Status fixed = (*w)->append_activation_row("p0", kPhasePrefill, "embed", rows[0].data(), width);
    EXPECT_EQ(fixed.code(), StatusCode::kInvalidArgument) << fixed.message();
  }
  auto r = DumpReader::open(path);
  ASSERT_TRUE(r.ok());
  auto a = r->read_activation("p0", kPhaseDecode, "layers.0.layer_out");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->shape, (std::vector<int64_t>{70, width}));
  for (size_t s = 0; s < rows.size(); ++s) {
    for (int64_t j = 0; j < width; ++j) {
      ASSERT_EQ(a->data[s * width + j], rows[s][j]) << "step " << s << " col " << j;
    }
  }
}

TEST(DumpWriter, StatsVectorOnKnownData) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> data = {1, 2, nan, 3, inf, 4, -inf};
  const auto s = activation_stats(data.data(), int64_t(data.size()));
  EXPECT_DOUBLE_EQ(s[0], 1.0);              // min
  EXPECT_DOUBLE_EQ(s[1], 4.0);              // max
  EXPECT_DOUBLE_EQ(s[2], 2.5);              // mean
  EXPECT_DOUBLE_EQ(s[3], std::sqrt(1.25));  // population std
  EXPECT_DOUBLE_EQ(s[4], 4.0);              // abs max
  EXPECT_DOUBLE_EQ(s[5], std::sqrt(30.0));  // l2
  EXPECT_DOUBLE_EQ(s[6], 1.0);              // nan count
  EXPECT_DOUBLE_EQ(s[7], 2.0);              // inf count

  const std::vector<float> neg = {-5, 2};
  const auto t = activation_stats(neg.data(), 2);
  EXPECT_DOUBLE_EQ(t[0], -5.0);
  EXPECT_DOUBLE_EQ(t[4], 5.0);

  const std::vector<float> none = {nan, inf};
  const auto u = activation_stats(none.data(), 2);
  EXPECT_TRUE(std::isnan(u[0]) && std::isnan(u[1]) && std::isnan(u[2]) && std::isnan(u[3]));
  EXPECT_EQ(u[4], 0.0);
  EXPECT_EQ(u[5], 0.0);
  EXPECT_EQ(u[6], 1.0);
  EXPECT_EQ(u[7], 1.0);

  TestDir dir;
  const std::string path = dir.file("stats.h5");
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(
        (*w)->write_activation_stats("p0", kPhasePrefill, "layers.1.ffn_out", data.data(), 7).ok());
    ASSERT_TRUE((*w)->write_activation_stats("p0", kPhaseDecode, "logits", data.data(), 7).ok());
    ASSERT_TRUE((*w)->write_activation_stats("p0", kPhaseDecode, "logits", neg.data(), 2).ok());
  }
  auto r = DumpReader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->is_stats("p0", kPhasePrefill, "layers.1.ffn_out"));
  EXPECT_EQ(
      *r->attr_string(kStatsFieldsAttr, activation_path("p0", kPhasePrefill, "layers.1.ffn_out")),
      kStatsFields);
  auto p = r->read_double(activation_path("p0", kPhasePrefill, "layers.1.ffn_out"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->shape, (std::vector<int64_t>{8}));
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(p->data[i], s[i]) << "field " << i;
  EXPECT_TRUE(r->is_stats("p0", kPhaseDecode, "logits"));
  auto d = r->read_double(activation_path("p0", kPhaseDecode, "logits"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->shape, (std::vector<int64_t>{2, 8}));
  for (int i = 0; i < 8; ++i) {
    EXPECT_DOUBLE_EQ(d->data[i], s[i]) << "step 0 field " << i;
    EXPECT_DOUBLE_EQ(d->data[8 + i], t[i]) << "step 1 field " << i;
  }
}

TEST(DumpWriter, OutputsRoundTrip) {
  TestDir dir;
  const std::string path = dir.file("out.h5");
  OutputRecord o;
  o.prompt_id = "p0";
  o.prompt_ids = {1, 15043, 3186, 29991};
  o.generated_ids = {450, 7483, 338, 2};
  o.text = "The capital is ☃";
  o.logits_last = iota_floats(50, -3.0f);
  o.topk = 3;
  o.step_topk_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // [4, 3]
  o.step_topk_logits = iota_floats(12, 0.25f);                // [4, 3]
  o.reference_nll = 2.125;
  o.reference_tokens = 17;
  OutputRecord bare;
  bare.prompt_id = "p1";
  bare.text = "";
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write_output(o).ok());
    ASSERT_TRUE((*w)->write_output(bare).ok());
    EXPECT_EQ((*w)->write_output(o).code(), StatusCode::kInvalidArgument);
    OutputRecord bad = o;
    bad.prompt_id = "p2";
    bad.step_topk_logits.pop_back();
    EXPECT_EQ((*w)->write_output(bad).code(), StatusCode::kInvalidArgument);
  }
  auto r = DumpReader::open(path);
  ASSERT_TRUE(r.ok());
  auto got = r->read_output("p0");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->prompt_ids, o.prompt_ids);
  EXPECT_EQ(got->generated_ids, o.generated_ids);
  EXPECT_EQ(got->text, o.text);
  EXPECT_EQ(got->logits_last, o.logits_last);
  EXPECT_EQ(got->topk, 3);
  EXPECT_EQ(got->step_topk_ids, o.step_topk_ids);
  EXPECT_EQ(got->step_topk_logits, o.step_topk_logits);
  EXPECT_EQ(got->reference_nll, o.reference_nll);
  EXPECT_EQ(got->reference_tokens, o.reference_tokens);
  auto ids = r->read_int32("/outputs/p0/step_topk_ids");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->shape, (std::vector<int64_t>{4, 3}));

  auto b = r->read_output("p1");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_TRUE(b->prompt_ids.empty());
  EXPECT_EQ(b->topk, 0);
  EXPECT_FALSE(b->reference_nll.has_value());
  EXPECT_FALSE(b->reference_tokens.has_value());
  EXPECT_EQ(r->read_output("p2").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*r->list_prompts(), (std::vector<std::string>{"p0", "p1"}));
}

TEST(DumpWriter, WeightsAndTimelineRoundTrip) {
  TestDir dir;
  const std::string path = dir.file("wt.h5");
  std::vector<WeightRow> weights(2);
  weights[0] = {"model.layers.0.mlp.down_proj.weight",
                "model-00001-of-00002.safetensors",
                "BF16",
                {4096, 1024},
                1234567,
                8388608,
                1024,
                0xfedcba9876543210ull,
                0,
                0};
  weights[1] = {
      "model.norm.weight", "model-00002-of-00002.safetensors", "F32", {64}, 8, 256, 1, 42, 1, 2};
  std::vector<TimelineEvent> events = {
      {100, 200, "load", "shard 1", "", -1, 8388608},
      {300, -1, "allreduce", "layers.0.attn_out", "tp0", 7, 65536},
  };
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write_weights(weights).ok());
    ASSERT_TRUE((*w)->write_timeline({events[0]}).ok());
    ASSERT_TRUE((*w)->write_timeline(events).ok());  // replaces the first
    ASSERT_TRUE((*w)->mark_complete().ok());
  }
  auto r = DumpReader::open(path);
  ASSERT_TRUE(r.ok());
  auto wr = r->read_weights();
  ASSERT_TRUE(wr.ok()) << wr.status().message();
  ASSERT_EQ(wr->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const WeightRow& a = (*wr)[i];
    const WeightRow& b = weights[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.file, b.file);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.bytes_read, b.bytes_read);
    EXPECT_EQ(a.ranges, b.ranges);
    EXPECT_EQ(a.checksum, b.checksum);
    EXPECT_EQ(a.nan_count, b.nan_count);
    EXPECT_EQ(a.inf_count, b.inf_count);
  }
  auto tl = r->read_timeline();
  ASSERT_TRUE(tl.ok()) << tl.status().message();
  ASSERT_EQ(tl->size(), 2u);
  EXPECT_EQ((*tl)[1].t_begin_ns, 300);
  EXPECT_EQ((*tl)[1].t_end_ns, -1);
  EXPECT_EQ((*tl)[1].kind, "allreduce");
  EXPECT_EQ((*tl)[1].name, "layers.0.attn_out");
  EXPECT_EQ((*tl)[1].group, "tp0");
  EXPECT_EQ((*tl)[1].seq, 7);
  EXPECT_EQ((*tl)[1].bytes, 65536);
  EXPECT_EQ((*tl)[0].kind, "load");
  EXPECT_TRUE(*r->complete());
}

TEST(DumpWriter, EmptyWeightsAndTimeline) {
  TestDir dir;
  const std::string path = dir.file("empty.h5");
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write_weights({}).ok());
    ASSERT_TRUE((*w)->write_timeline({}).ok());
  }
  auto r = DumpReader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->exists("/weights"));
  EXPECT_TRUE(r->read_weights()->empty());
  EXPECT_TRUE(r->read_timeline()->empty());
}

// A rank killed after a prompt's writes (write_output flushes) leaves a file that opens,
// holds that prompt, and says complete = 0.
TEST(DumpWriter, KilledWriterLeavesReadableFile) {
  TestDir dir;
  const std::string path = dir.file("killed.h5");
  const std::vector<float> embed = iota_floats(3 * 8, 1.0f);  // [3, 8]
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto w = DumpWriter::create(path, sample_attrs());
    if (!w.ok()) _exit(2);
    if (!(*w)->write_activation("p0", kPhasePrefill, "embed", embed.data(), 3, 8).ok()) _exit(3);
    OutputRecord o;
    o.prompt_id = "p0";
    o.generated_ids = {5, 6};
    if (!(*w)->write_output(o).ok()) _exit(4);
    // Unflushed work after the prompt, then death without any close.
    for (int i = 0; i < 5; ++i) {
      (void)(*w)->append_activation_row("p1", kPhaseDecode, "logits", embed.data(), 8);
    }
    raise(SIGKILL);
    _exit(5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exit " << WEXITSTATUS(status);
  auto r = DumpReader::open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(*r->complete());
  auto a = r->read_activation("p0", kPhasePrefill, "embed");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->data, embed);
  EXPECT_EQ(r->read_output("p0")->generated_ids, (std::vector<int32_t>{5, 6}));
}

TEST(DumpWriter, ErrorsNameTheFile) {
  auto w = DumpWriter::create("/nonexistent-dir-dz/rank-00000.h5", sample_attrs());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kIoError);
  EXPECT_NE(w.status().message().find("/nonexistent-dir-dz/rank-00000.h5"), std::string::npos)
      << w.status().message();
  EXPECT_NE(w.status().message().find("H5F"), std::string::npos) << w.status().message();

  EXPECT_EQ(DumpReader::open("/nonexistent-dir-dz/x.h5").status().code(), StatusCode::kNotFound);
  TestDir dir;
  std::ofstream(dir.file("junk.h5")) << "not hdf5";
  auto r = DumpReader::open(dir.file("junk.h5"));
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("junk.h5"), std::string::npos);
}

TEST(DumpWriter, H5dumpReadsTheHeader) {
  if (std::system("command -v h5dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump not installed";
  TestDir dir;
  const std::string path = dir.file("h5dump.h5");
  {
    auto w = DumpWriter::create(path, sample_attrs());
    ASSERT_TRUE(w.ok());
    const std::vector<float> v = iota_floats(16, 0);
    ASSERT_TRUE(
        (*w)->write_activation("p0", kPhasePrefill, "layers.0.attn_out", v.data(), 2, 8).ok());
    ASSERT_TRUE((*w)->append_activation_row("p0", kPhaseDecode, "logits", v.data(), 16).ok());
    ASSERT_TRUE((*w)->write_activation_stats("p0", kPhasePrefill, "embed", v.data(), 16).ok());
    OutputRecord o;
    o.prompt_id = "p0";
    o.text = "hi";
    ASSERT_TRUE((*w)->write_output(o).ok());
    ASSERT_TRUE((*w)->write_weights({WeightRow{"w", "f", "BF16", {2, 2}, 0, 8, 1, 1, 0, 0}}).ok());
    ASSERT_TRUE((*w)->write_timeline({TimelineEvent{1, 2, "k", "n", "g", 0, 0}}).ok());
    ASSERT_TRUE((*w)->mark_complete().ok());
  }
  const std::string cmd = "h5dump -H '" + path + "' >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string full = "h5dump '" + path + "' >/dev/null 2>&1";
  EXPECT_EQ(std::system(full.c_str()), 0) << full;
}

}  // namespace
}  // namespace dayzero::dump
