// Prompts with images through `dayzero run`: on a tiny llava, image files are decoded,
// preprocessed and placed (two different images give different logits, the same image twice
// identical ones, on 1 and 2 ranks); refused with exit 2 and one sentence naming the prompt
// (and the file) when the model is text-only, when a llava lacks preprocessor_config.json, and
// for every bad file: missing, a folder, empty, not PNG/JPEG, a zero-size header, a
// decompression bomb (a 100000x100000 PNG header of 33 bytes) and a real image over
// limits.max_image_pixels at config time; a truncated file at preprocessing. None of the
// refusals reads a weight or leaves a rank file.
#include <chrono>
#include <sstream>

#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

const fs::path kImages = fs::path(DAYZERO_SOURCE_DIR) / "tests" / "data" / "images";

const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("image-prompt-llama") / "model";
    make_model_from_yaml(golden_sizes("llama"), d);
    return d;
  }();
  return dir;
}

// A tiny llava (CLIP tower for 42-px images, its preprocessor_config.json beside it).
const fs::path& llava_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("image-prompt-llava") / "model";
    make_model_from_yaml(golden_sizes("llava"), d, "--dtype float32");
    return d;
  }();
  return dir;
}

// The same llava without preprocessor_config.json: a vision tower, but no processor.
const fs::path& llava_without_processor() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("image-prompt-llava-npp") / "model";
    fs::copy(llava_dir(), d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    fs::remove(d / "preprocessor_config.json");
    return d;
  }();
  return dir;
}

std::string be32(uint32_t v) { return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }
std::string png_header(uint32_t w, uint32_t h) {
  return std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + "IHDR" + be32(w) + be32(h) +
         std::string("\x08\x02\x00\x00\x00", 5) + be32(0);
}

struct Case {
  fs::path dir;
  Outcome out;
  double seconds = 0;
};

// A run of one text prompt and one prompt 'look' with the given image (written as given,
// relative to the config's folder) against model; extra goes into the config's top level.
Case run_image_case(const std::string& name, const fs::path& model, const std::string& image_as_written,
                    const std::string& extra = "") {
  Case c;
  c.dir = scratch_dir("image-prompt-" + name);
  write_file(c.dir / "run.yaml", "model: {path: " + model.string() + "}\n" + extra +
                                     "prompts:\n"
                                     "  - {id: plain, text: \"The capital of France is\"}\n"
                                     "  - {id: look, text: \"<image>\\nWhat is this?\", images: [" +
                                     image_as_written + "]}\n"
                                     "generate: {max_new_tokens: 1}\n"
                                     "dump: {dir: " + (c.dir / "run").string() + "}\n");
  const auto t0 = std::chrono::steady_clock::now();
  c.out = run_dayzero("run " + (c.dir / "run.yaml").string());
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

// Exit 2, one error line naming every one of names, fast, and no run folder.
void expect_refused(const Case& c, const std::vector<std::string>& names) {
  EXPECT_EQ(c.out.exit_code, 2) << c.out.output;
  std::vector<std::string> errors;
  std::istringstream in(c.out.output);
  for (std::string line; std::getline(in, line);)
    if (line.find("error") != std::string::npos) errors.push_back(line);
  ASSERT_EQ(errors.size(), 1u) << c.out.output;
  EXPECT_EQ(errors[0].rfind("dayzero: error: ", 0), 0u) << errors[0];
  for (const auto& n : names) EXPECT_NE(errors[0].find(n), std::string::npos) << "does not name '" << n << "': " << errors[0];
  EXPECT_FALSE(fs::exists(c.dir / "run")) << "a refused run made its folder";
  EXPECT_LT(c.seconds, 5.0) << "refusing took " << c.seconds << " s";
}

TEST(ImagePrompt, TextOnlyModelIsRefused) {
  const Case c = run_image_case("text-only", model_dir(), (kImages / "small.png").string());
  expect_refused(c, {"prompt 'look'", "text-only", "no vision tower"});
}

TEST(ImagePrompt, VisionModelWithoutProcessorIsRefused) {
  const Case c = run_image_case("no-processor", llava_without_processor(), (kImages / "photo.jpg").string());
  expect_refused(c, {"prompt 'look'", "llava", "no preprocessor_config.json"});
}

// Image files through decode, the processor, the tower and placement: the image decides the
// answer (different images differ, the same image twice is identical), and 2 ranks (dp2: each
// prompt on one replica) give what 1 rank gives.
TEST(ImagePrompt, ImageFilesDecideTheLogits) {
  const fs::path dir = scratch_dir("image-prompt-llava-run");
  const std::string cfg = "model: {path: " + llava_dir().string() + "}\n"
      "prompts:\n"
      "  - {id: a, text: \"What is this?\", images: [" + (kImages / "rgb_nonsquare.png").string() + "]}\n"
      "  - {id: b, text: \"What is this?\", images: [" + (kImages / "photo.jpg").string() + "]}\n"
      "  - {id: a2, text: \"What is this?\", images: [" + (kImages / "rgb_nonsquare.png").string() + "]}\n"
      "generate: {max_new_tokens: 2}\n"
      "dump: {dir: DIR, activations: {layers: all, points: [vision_embed, projector_out, merged_embed, layer_out], phase: prefill, mode: full}}\n";
  auto write_cfg = [&](const std::string& name) {
    std::string c = cfg;
    c.replace(c.find("DIR"), 3, (dir / name).string());
    write_file(dir / (name + ".yaml"), c);
  };
  write_cfg("one");
  write_cfg("two");
  const Outcome one = run_dayzero("run " + (dir / "one.yaml").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const Outcome two = run_dayzero_mpi(2, "run " + (dir / "two.yaml").string());
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto r = dump::DumpReader::open(rank0_dump(dir / "one").string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto a = r->read_output("a"), b = r->read_output("b"), a2 = r->read_output("a2");
  ASSERT_TRUE(a.ok() && b.ok() && a2.ok());
  EXPECT_EQ(a->logits_last, a2->logits_last) << "the same image twice gave different logits";
  EXPECT_GT(rel_l2(a->logits_last, b->logits_last), 1e-3) << "two different images gave the same logits";
  // The image rows come first (no placeholder in the text): more ids than the text alone.
  EXPECT_GT(a->prompt_ids.size(), 9u);
  MergedDump m1, m2;
  merge_rank_files(dir / "one", 1, m1);
  merge_rank_files(dir / "two", 2, m2);
  const DumpDiff d = diff_dumps(m1, m2, 2e-6);
  EXPECT_TRUE(d.mismatches.empty()) << first_lines("1 rank vs 2 ranks", d.mismatches);
  EXPECT_TRUE(m1.count("activations/a/prefill/projector_out")) << "no projector_out in the dump";
}

TEST(ImagePrompt, BadFilesAreRefusedAtConfigTime) {
  const fs::path files = scratch_dir("image-prompt-files");
  write_file(files / "empty.png", "");
  write_file(files / "anim.gif", "GIF89a\x01\x00\x01\x00\x00\x00\x00");
  write_file(files / "zero.png", png_header(0, 16));
  write_file(files / "bomb.png", png_header(100000, 100000));
  ASSERT_LT(fs::file_size(files / "bomb.png"), 64u);
  struct Bad {
    std::string file;
    std::vector<std::string> names;
  };
  const std::vector<Bad> cases = {
      {(files / "missing.png").string(), {"missing.png"}},
      {files.string(), {"not a regular file"}},
      {(files / "empty.png").string(), {"empty.png", "empty"}},
      {(files / "anim.gif").string(), {"anim.gif", "GIF", "only PNG and JPEG"}},
      {(files / "zero.png").string(), {"zero.png", "0x16"}},
      {(files / "bomb.png").string(), {"bomb.png", "100000x100000", "limits.max_image_pixels (50000000)"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].file);
    // The text-only model: a bad file must be refused before the model is even looked at.
    const Case c = run_image_case("bad-" + std::to_string(i), model_dir(), cases[i].file);
    std::vector<std::string> names = cases[i].names;
    names.push_back("prompts[1].images[0] (prompt 'look')");
    expect_refused(c, names);
  }
}

TEST(ImagePrompt, PixelLimitFromTheConfig) {
  const fs::path img = kImages / "rgb_nonsquare.png";  // 200x150
  const Case over = run_image_case("limit", model_dir(), img.string(), "limits: {max_image_pixels: 29999}\n");
  expect_refused(over, {"prompt 'look'", "rgb_nonsquare.png", "200x150 = 30000 pixels", "(29999)"});
  // Just within the limit the file passes the config check and the (text-only) model is what refuses.
  const Case within = run_image_case("limit-ok", model_dir(), img.string(), "limits: {max_image_pixels: 30000}\n");
  expect_refused(within, {"prompt 'look'", "text-only"});
}

TEST(ImagePrompt, RelativePathsResolveAgainstTheConfigAndTruncatedDataFailsAtDecode) {
  const fs::path dir = scratch_dir("image-prompt-relative");
  const std::string png = read_file(kImages / "rgb_nonsquare.png");
  fs::create_directories(dir / "pics");
  write_file(dir / "pics" / "half.png", png.substr(0, png.size() / 2));
  Case c;
  c.dir = dir;
  write_file(dir / "run.yaml", "model: {path: " + llava_dir().string() + "}\n"
                               "prompts:\n  - {id: look, text: hi, images: [pics/half.png]}\n"
                               "generate: {max_new_tokens: 1}\ndump: {dir: " + (dir / "run").string() + "}\n");
  const auto t0 = std::chrono::steady_clock::now();
  c.out = run_dayzero("run " + (dir / "run.yaml").string());
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_refused(c, {"prompt 'look'", (dir / "pics" / "half.png").string(), "truncated or corrupt"});
}

}  // namespace
}  // namespace dayzero::e2e
