// The Day-0 checklist's evaluation (diag/checklist.h) on figures written out here: the memory
// line names the worst rank, the latency lines the slowest prompt and those over the limit, the
// reproducibility line fails on any differing bit (the negative control the e2e test's
// perturbation gives end to end) and is "not run" without --repeat, and checklist.json holds
// every line. Not the gathering over ranks (tests/e2e/checklist_test.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "diag/checklist.h"

namespace dayzero::diag {
namespace {

ChecklistInputs inputs() {
  ChecklistInputs in;
  in.tensors_total = in.tensors_claimed = 20;
  for (int r = 0; r < 4; ++r)
    in.ranks.push_back({r, r < 2 ? "node-a" : "node-b", (40 + r) << 20, 100 << 20, 90 << 20, 5, 1 << 20, 0, 0});
  in.prompts = {{"capital", false, 0.5, false, "", ""}, {"cat", true, 2.0, true, "", ""}};
  return in;
}

const ChecklistLine& line(const Checklist& c, const std::string& key) {
  for (const ChecklistLine& l : c.lines)
    if (l.key == key) return l;
  static const ChecklistLine none;
  ADD_FAILURE() << "no line " << key;
  return none;
}

TEST(DiagChecklist, ExpertLoadIsAnInformationLineNeverAFailure) {
  ChecklistInputs in = inputs();
  in.expert_load = {{0, 1.5, 1.2, 1, 3, 0, 9}, {2, 4.0, 2.86, 1, 5, 2, 14}};
  const Checklist c = evaluate_checklist(in);
  ASSERT_EQ(c.lines.size(), 8u);
  EXPECT_TRUE(c.pass());
  const ChecklistLine& l = line(c, "expert_load");
  EXPECT_EQ(l.status, CheckStatus::kInfo);
  EXPECT_EQ(l.detail, "tokens per expert max/mean <= 4.00, per ep rank <= 2.86; hottest: layer 1 expert 5, 14 tokens, on rank 2");
  EXPECT_EQ(checklist_to_json(c, 0, 1).at("lines")[7].at("status"), "info");
  EXPECT_NE(format_checklist(c).find("  info     expert load (information): "), std::string::npos) << format_checklist(c);
}

TEST(DiagChecklist, AllPassAndRepeatNotRunWithoutIt) {
  const Checklist c = evaluate_checklist(inputs());
  ASSERT_EQ(c.lines.size(), 7u);
  EXPECT_TRUE(c.pass());
  EXPECT_EQ(line(c, "repeat").status, CheckStatus::kNotRun);
  EXPECT_EQ(line(c, "image_prompts").status, CheckStatus::kPass);
  EXPECT_EQ(line(c, "expect").status, CheckStatus::kPass);
  const nlohmann::ordered_json j = checklist_to_json(c, 0, 1);
  EXPECT_EQ(j.at("lines").size(), 7u);
  EXPECT_EQ(j.at("lines")[5].at("status"), "not run");
  EXPECT_NE(format_checklist(c).find("not run  repeated runs give identical outputs"), std::string::npos)
      << format_checklist(c);
}

TEST(DiagChecklist, MemoryOverTheCapNamesTheWorstRank) {
  ChecklistInputs in = inputs();
  in.ranks[2].peak_bytes = 95 << 20;  // over its 90 MiB cap
  in.ranks[3].cap_bytes = 50 << 20;   // 43 of 50 MiB: under it, and a larger share than the others
  const Checklist c = evaluate_checklist(in);
  EXPECT_FALSE(c.pass());
  const ChecklistLine& l = line(c, "peak_memory");
  EXPECT_EQ(l.status, CheckStatus::kFail);
  EXPECT_NE(l.detail.find("worst rank 2 (node-b) peaked at 95.0 MiB, 106% of its cap 90.0 MiB"), std::string::npos)
      << l.detail;
  in.ranks[2].peak_bytes = 90 << 20;  // exactly the cap passes
  EXPECT_EQ(line(evaluate_checklist(in), "peak_memory").status, CheckStatus::kPass);
}

TEST(DiagChecklist, LatencyLimitsPerKind) {
  ChecklistInputs in = inputs();
  in.prompts.push_back({"slow", false, 31, false, "", ""});
  Checklist c = evaluate_checklist(in);
  EXPECT_EQ(line(c, "first_token_text").status, CheckStatus::kFail);
  EXPECT_NE(line(c, "first_token_text").detail.find("over the limit: 'slow' 31 s"), std::string::npos);
  EXPECT_EQ(line(c, "first_token_image").status, CheckStatus::kPass);
  in.first_token_text_s = 40;
  in.first_token_image_s = 1;  // 'cat' took 2 s
  c = evaluate_checklist(in);
  EXPECT_EQ(line(c, "first_token_text").status, CheckStatus::kPass);
  EXPECT_EQ(line(c, "first_token_image").status, CheckStatus::kFail);
  in.prompts = {{"capital", false, 0.5, false, "", ""}};
  c = evaluate_checklist(in);
  EXPECT_EQ(line(c, "first_token_image").status, CheckStatus::kNotRun);
  EXPECT_EQ(line(c, "image_prompts").status, CheckStatus::kNotRun);
}

TEST(DiagChecklist, DifferingRepetitionsFailReproducibility) {
  const std::vector<int32_t> ids = {5, 9, 2}, topk = {5, 1, 9, 3, 2, 7};
  std::vector<float> logits = {0.25f, -1.5f, 3.0f}, topl = {3.0f, 1.0f, 2.5f, 2.0f, 1.5f, 1.25f};
  const RepeatOutputs first{ids, logits, topk, topl};
  EXPECT_EQ(repeat_difference(first, first, 2), "");
  // One bit of one logit.
  std::vector<float> bumped = logits;
  uint32_t bits;
  std::memcpy(&bits, &bumped[1], 4);
  ++bits;
  std::memcpy(&bumped[1], &bits, 4);
  EXPECT_NE(repeat_difference(first, {ids, bumped, topk, topl}, 3).find("repetition 3: logits_last[1] is"),
            std::string::npos);
  const std::vector<int32_t> other_ids = {5, 8, 2};
  EXPECT_EQ(repeat_difference(first, {other_ids, logits, topk, topl}, 2), "repetition 2: generated token 1 is 8, not 9");
  const std::vector<int32_t> shorter = {5, 9};
  EXPECT_EQ(repeat_difference(first, {shorter, logits, topk, topl}, 2), "repetition 2: 2 generated tokens, not 3");
  std::vector<float> other_topl = topl;
  other_topl[4] = 1.4f;
  EXPECT_EQ(repeat_difference(first, {ids, logits, topk, other_topl}, 2), "repetition 2: step top-k logit 4 differs");

  ChecklistInputs in = inputs();
  in.repeat = 3;
  EXPECT_EQ(line(evaluate_checklist(in), "repeat").status, CheckStatus::kPass);
  in.prompts[1].repeat_diff = repeat_difference(first, {other_ids, logits, topk, topl}, 2);
  const Checklist c = evaluate_checklist(in);
  EXPECT_FALSE(c.pass());
  EXPECT_EQ(line(c, "repeat").status, CheckStatus::kFail);
  EXPECT_NE(line(c, "repeat").detail.find("1 of 2 prompt(s) differ: 'cat' repetition 2: generated token 1"),
            std::string::npos)
      << line(c, "repeat").detail;
}

TEST(DiagChecklist, WeightsAndExpectLines) {
  ChecklistInputs in = inputs();
  in.ranks[1].nan = 3;
  Checklist c = evaluate_checklist(in);
  EXPECT_EQ(line(c, "weights").status, CheckStatus::kFail);
  EXPECT_NE(line(c, "weights").detail.find("rank 1 (3 NaN, 0 Inf)"), std::string::npos) << line(c, "weights").detail;
  in = inputs();
  in.tensors_claimed = 19;
  EXPECT_EQ(line(evaluate_checklist(in), "weights").status, CheckStatus::kFail);
  in = inputs();
  in.prompts[1].failed_expect = "expected the output to contain \"cat\"";
  c = evaluate_checklist(in);
  EXPECT_EQ(line(c, "expect").status, CheckStatus::kFail);
  EXPECT_NE(line(c, "expect").detail.find("'cat': expected"), std::string::npos);
}

}  // namespace
}  // namespace dayzero::diag
