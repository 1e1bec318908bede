// Tokenizer (see tokenizer.h): loads tokenizer.json and its configs, then runs the pipeline of
// Hugging Face `tokenizers` for one sequence: added-token split and normalization,
// pre-tokenization, BPE, post-processing; and the decoder chain for the way back.
// A folder with tiktoken.model instead hands every call to a TiktokenModel (tiktoken.h).
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {

using nlohmann::json;

// The loaded pipeline; Tokenizer::Impl is this, named at namespace scope for the helpers below.
struct TokenizerParts {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::unique_ptr<TiktokenModel> tiktoken;  // set for a tiktoken.model folder; the rest is then unused
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;
  int32_t vocab_size = 0;
};

struct Tokenizer::Impl : TokenizerParts {};

namespace {

// A model-folder file: regular (a FIFO would block), bounded in size (core/json.h).
Result<std::string> read_file(const std::filesystem::path& path) {
  return read_regular_file(path.string(), kMaxJsonFileBytes);
}

// Parses JSON text with the nesting limit; Corrupt with the parser's message (it names the
// byte offset) otherwise.
Result<json> parse_json(const std::string& text, const std::string& what) {
  return parse_json_limited(text, what);
}

Result<AddedToken> parse_added_token(const json& entry, const std::string& context) {
  if (!entry.is_object()) return Status::Corrupt(context + ": added token is not an object");
  AddedToken token;
  auto content = entry.find("content");
  if (content == entry.end() || !content->is_string()) return Status::Corrupt(context + ": added token has no 'content'");
  token.content = content->get<std::string>();
  token.special = entry.value("special", false);
  token.lstrip = entry.value("lstrip", false);
  token.rstrip = entry.value("rstrip", false);
  token.single_word = entry.value("single_word", false);
  // An added token is normalized unless it says otherwise or is special (AddedToken::from).
  token.normalized = entry.value("normalized", !token.special);
  return token;
}

// A special token named in tokenizer_config.json: a string, an AddedToken object or null.
std::optional<AddedToken> named_special_token(const json& value) {
  AddedToken token;
  token.special = true;
  if (value.is_string()) {
    token.content = value.get<std::string>();
    token.normalized = false;
  } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    token.content = value["content"].get<std::string>();
    token.lstrip = value.value("lstrip", false);
    token.rstrip = value.value("rstrip", false);
    token.single_word = value.value("single_word", false);
    token.normalized = value.value("normalized", false);
  } else {
    return std::nullopt;
  }
  if (token.content.empty()) return std::nullopt;
  return token;
}

Status build_from_json(TokenizerJson parsed, TokenizerParts* impl) {
  const json& root = parsed.document;
  if (!root.is_object()) return Status::Corrupt("tokenizer.json: top level is not an object");
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) return Status::Corrupt("tokenizer.json: missing object 'model'");
  std::string type;
  if (model->contains("type") && (*model)["type"].is_string()) {
    type = (*model)["type"].get<std::string>();
  } else if (model->contains("merges")) {
    type = "BPE";  // files from before the "type" field
  }
  if (type != "BPE") {
    return Status::Unsupported("tokenizer.json: model type '" + (type.empty() ? std::string("unknown") : type) +
                               "' is not supported (only BPE)");
  }
  if (!parsed.has_vocab) return Status::Corrupt("tokenizer.json: BPE model: missing object 'vocab'");
  if (!parsed.has_merges && model->contains("merges") && !(*model)["merges"].is_null()) {
    return Status::Corrupt("tokenizer.json: BPE model: 'merges' is not an array");
  }
  auto bpe = BpeModel::create(*model, std::move(parsed.vocab), parsed.merges);
  if (!bpe.ok()) return bpe.status().with_context("tokenizer.json");
  impl->model = std::move(bpe).value();
  parsed.merges = {};
  auto section = [&](const char* key) -> const json& {
    static const json kNull;
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };
  DZ_ASSIGN_OR_RETURN(impl->normalizer, make_normalizer(section("normalizer")));
  DZ_ASSIGN_OR_RETURN(impl->pre_tokenizer, make_pre_tokenizer(section("pre_tokenizer")));
  DZ_ASSIGN_OR_RETURN(impl->post_processor, make_post_processor(section("post_processor")));
  DZ_ASSIGN_OR_RETURN(impl->decoder, make_decoder(section("decoder")));

  const json& added = section("added_tokens");
  if (!added.is_null()) {
    if (!added.is_array()) return Status::Corrupt("tokenizer.json: 'added_tokens' is not an array");
    for (const auto& entry : added) {
      DZ_ASSIGN_OR_RETURN(AddedToken token, parse_added_token(entry, "tokenizer.json added_tokens"));
      if (token.content.empty()) continue;
      impl->added.add(token, *impl->model);
    }
  }
  return Status::Ok();
}

// Adds the tokens transformers adds on load from tokenizer_config.json: added_tokens_decoder
// entries, then named special tokens, skipping those tokenizer.json already has.
Status add_config_tokens(const json& config, TokenizerParts* impl) {
  auto decoder = config.find("added_tokens_decoder");
  if (decoder != config.end() && decoder->is_object()) {
    std::vector<std::pair<long long, const json*>> entries;
    for (auto it = decoder->begin(); it != decoder->end(); ++it) {
      long long id = 0;
      try {
        id = std::stoll(it.key());
      } catch (const std::exception&) {
        return Status::Corrupt("tokenizer_config.json: added_tokens_decoder key '" + it.key() + "' is not an id");
      }
      entries.emplace_back(id, &it.value());
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [id, entry] : entries) {
      DZ_ASSIGN_OR_RETURN(AddedToken token, parse_added_token(*entry, "tokenizer_config.json added_tokens_decoder"));
      if (!token.content.empty() && !impl->added.contains(token.content)) impl->added.add(token, *impl->model);
    }
  }
  std::vector<AddedToken> named;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (auto token = named_special_token(*it)) named.push_back(*token);
  }
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_array()) {
      for (const auto& value : *it) {
        if (auto token = named_special_token(value)) named.push_back(*token);
      }
    } else if (it->is_object()) {
      for (const auto& value : it->items()) {
        if (auto token = named_special_token(value.value())) named.push_back(*token);
      }
    }
  }
  for (const auto& token : named) {
    if (!impl->added.contains(token.content)) {
      impl->added.add(token, *impl->model);
    } else if (auto id = impl->added.token_to_id(token.content)) {
      // transformers marks every named special token special, whatever tokenizer.json says.
      AddedToken marked = *impl->added.find(*id);
      marked.special = true;
      impl->added.add(marked, *impl->model);
    }
  }
  return Status::Ok();
}

std::optional<std::string> config_token_content(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (auto token = named_special_token(*it)) return token->content;
  return std::nullopt;
}

// Parses the optional config texts (empty = no such file) into objects.
Status parse_configs(const std::string& config_text, const std::string& generation_text, json* config,
                     json* generation) {
  *config = json::object();
  *generation = json::object();
  if (!config_text.empty()) {
    DZ_ASSIGN_OR_RETURN(*config, parse_json(config_text, "tokenizer_config.json"));
    if (!config->is_object()) return Status::Corrupt("tokenizer_config.json: top level is not an object");
  }
  if (!generation_text.empty()) {
    DZ_ASSIGN_OR_RETURN(*generation, parse_json(generation_text, "generation_config.json"));
    if (!generation->is_object()) return Status::Corrupt("generation_config.json: top level is not an object");
  }
  return Status::Ok();
}

// generation_config.json's eos_token_id (an int or a list) into *ids; false when it has none.
Result<bool> generation_eos_ids(const json& generation, std::vector<int32_t>* ids) {
  auto eos_field = generation.find("eos_token_id");
  if (eos_field == generation.end() || eos_field->is_null()) return false;
  if (eos_field->is_number_integer()) {
    ids->push_back(eos_field->get<int32_t>());
  } else if (eos_field->is_array()) {
    for (const auto& id : *eos_field) {
      if (!id.is_number_integer()) return Status::Corrupt("generation_config.json: eos_token_id holds a non-integer");
      ids->push_back(id.get<int32_t>());
    }
  } else {
    return Status::Corrupt("generation_config.json: eos_token_id is neither an int nor a list");
  }
  return true;
}

// The special tokens of a tiktoken folder: tokenizer_config.json's added_tokens_decoder.
Result<std::vector<TiktokenSpecial>> tiktoken_specials(const json& config) {
  std::vector<TiktokenSpecial> specials;
  auto decoder = config.find("added_tokens_decoder");
  if (decoder == config.end() || decoder->is_null()) return specials;
  if (!decoder->is_object()) return Status::Corrupt("tokenizer_config.json: added_tokens_decoder is not an object");
  for (auto it = decoder->begin(); it != decoder->end(); ++it) {
    long long id = 0;
    size_t used = 0;
    try {
      id = std::stoll(it.key(), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != it.key().size() || id < 0 || id > INT32_MAX) {
      return Status::Corrupt("tokenizer_config.json: added_tokens_decoder key '" + it.key() + "' is not an id");
    }
    DZ_ASSIGN_OR_RETURN(AddedToken token,
                        parse_added_token(it.value(), "tokenizer_config.json added_tokens_decoder " + it.key()));
    specials.push_back(TiktokenSpecial{static_cast<int32_t>(id), token.content, token.special});
  }
  return specials;
}

// bos_token / eos_token of a tiktoken folder, with the defaults of Kimi's TikTokenTokenizer
// ("[BOS]", "[EOS]") when the key is absent. A named token must exist, as Kimi's constructor
// requires (it looks the name up in its special tokens); an absent default is no token.
Result<std::optional<int32_t>> tiktoken_named_id(const json& config, const char* key, const char* fallback,
                                                 const TiktokenModel& model) {
  auto it = config.find(key);
  if (it == config.end()) return model.special_id(fallback);
  auto token = named_special_token(*it);
  if (!token) return std::optional<int32_t>();
  auto id = model.special_id(token->content);
  if (!id) {
    return Status::Corrupt(std::string("tokenizer_config.json: ") + key + " '" + token->content +
                           "' is not a special token of tiktoken.model's tokenizer");
  }
  return id;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const fs::path tokenizer_path = dir / "tokenizer.json";
  const fs::path tiktoken_path = dir / "tiktoken.model";
  std::error_code ec;
  // exists, not is_regular_file: a FIFO or device under a tokenizer name is refused by read_file.
  const bool is_json = fs::exists(tokenizer_path, ec);
  if (!is_json && !fs::exists(tiktoken_path, ec)) {
    return Status::NotFound(dir.string() + ": no tokenizer: neither " + tokenizer_path.string() + " nor " +
                            tiktoken_path.string() + " exists");
  }
  DZ_ASSIGN_OR_RETURN(std::string tokenizer_text, read_file(is_json ? tokenizer_path : tiktoken_path));
  std::string config_text, generation_text;
  for (auto [name, target] : {std::pair{"tokenizer_config.json", &config_text},
                              std::pair{"generation_config.json", &generation_text}}) {
    const fs::path path = dir / name;
    if (fs::exists(path, ec)) {
      DZ_ASSIGN_OR_RETURN(*target, read_file(path));
    }
  }
  auto tokenizer = is_json ? from_json(tokenizer_text, config_text, generation_text)
                           : from_tiktoken(tokenizer_text, config_text, generation_text);
  if (!tokenizer.ok()) return tokenizer.status().with_context(dir.string());
  return tokenizer;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(const std::string& tokenizer_json_text,
                                                        const std::string& tokenizer_config_json_text,
                                                        const std::string& generation_config_json_text) {
  auto impl = std::make_unique<Impl>();
  DZ_ASSIGN_OR_RETURN(TokenizerJson parsed, parse_tokenizer_json(tokenizer_json_text));
  json config, generation;
  DZ_RETURN_IF_ERROR(parse_configs(tokenizer_config_json_text, generation_config_json_text, &config, &generation));
  try {
    DZ_RETURN_IF_ERROR(build_from_json(std::move(parsed), impl.get()));
    DZ_RETURN_IF_ERROR(add_config_tokens(config, impl.get()));
    impl->added.build(impl->normalizer.get());

    auto lookup = [&](const std::string& content) -> std::optional<int32_t> {
      if (auto id = impl->added.token_to_id(content)) return id;
      return impl->model->token_to_id(content);
    };
    if (auto bos = config_token_content(config, "bos_token")) impl->bos_id = lookup(*bos);
    DZ_ASSIGN_OR_RETURN(bool has_generation_eos, generation_eos_ids(generation, &impl->eos_ids));
    auto eos = has_generation_eos ? std::nullopt : config_token_content(config, "eos_token");
    if (eos) {
      if (auto id = lookup(*eos)) impl->eos_ids.push_back(*id);
    }
  } catch (const json::exception& e) {
    return Status::Corrupt(std::string("tokenizer files: ") + e.what());
  }
  impl->vocab_size = std::max(impl->model->id_limit(), impl->added.max_id() + 1);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_tiktoken(const std::string& tiktoken_model_text,
                                                            const std::string& tokenizer_config_json_text,
                                                            const std::string& generation_config_json_text) {
  auto impl = std::make_unique<Impl>();
  json config, generation;
  DZ_RETURN_IF_ERROR(parse_configs(tokenizer_config_json_text, generation_config_json_text, &config, &generation));
  try {
    DZ_ASSIGN_OR_RETURN(auto specials, tiktoken_specials(config));
    DZ_ASSIGN_OR_RETURN(impl->tiktoken, TiktokenModel::create(tiktoken_model_text, "tiktoken.model", std::move(specials),
                                                              kKimiReservedSpecialTokens, kimi_pattern_for_pcre2()));
    DZ_ASSIGN_OR_RETURN(impl->bos_id, tiktoken_named_id(config, "bos_token", "[BOS]", *impl->tiktoken));
    DZ_ASSIGN_OR_RETURN(bool has_generation_eos, generation_eos_ids(generation, &impl->eos_ids));
    if (!has_generation_eos) {
      DZ_ASSIGN_OR_RETURN(auto eos, tiktoken_named_id(config, "eos_token", "[EOS]", *impl->tiktoken));
      if (eos) impl->eos_ids.push_back(*eos);
    }
  } catch (const json::exception& e) {
    return Status::Corrupt(std::string("tokenizer files: ") + e.what());
  }
  impl->vocab_size = impl->tiktoken->id_limit();
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const std::string clean = make_valid_utf8(text);
  std::vector<int32_t> ids;
  ids.reserve(clean.size() / 3 + 4);
  if (impl_->tiktoken) {
    impl_->tiktoken->encode(clean, &ids);
    return ids;
  }
  std::vector<Piece> pieces;
  for (auto& segment : impl_->added.split(clean, impl_->normalizer.get())) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    pieces.clear();
    pieces.push_back(std::move(segment.piece));
    if (impl_->pre_tokenizer) impl_->pre_tokenizer->pre_tokenize(&pieces);
    for (const auto& piece : pieces) impl_->model->tokenize(piece.text, &ids);
  }
  if (add_special_tokens && impl_->post_processor) ids = impl_->post_processor->process(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  if (impl_->tiktoken) return impl_->tiktoken->decode(ids, skip_special_tokens);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = nullptr;
    if (const AddedToken* added = impl_->added.find(id)) {
      token = &added->content;
    } else {
      token = impl_->model->id_to_token(id);
    }
    if (token == nullptr) continue;
    if (skip_special_tokens && impl_->added.is_special_content(*token)) continue;
    tokens.push_back(*token);
  }
  std::string text;
  if (impl_->decoder) {
    for (const auto& part : impl_->decoder->decode_chain(std::move(tokens))) text += part;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  }
  return text;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
const std::vector<int32_t>& Tokenizer::eos_ids() const { return impl_->eos_ids; }

bool Tokenizer::is_special(int32_t id) const {
  if (impl_->tiktoken) {
    const TiktokenSpecial* special = impl_->tiktoken->find_special(id);
    return special != nullptr && special->special;
  }
  const AddedToken* added = impl_->added.find(id);
  return added != nullptr && impl_->added.is_special_content(added->content);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (impl_->tiktoken) return impl_->tiktoken->token_to_id(token);
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (impl_->tiktoken) return impl_->tiktoken->id_to_token(id);
  if (const AddedToken* added = impl_->added.find(id)) return added->content;
  const std::string* token = impl_->model->id_to_token(id);
  return token ? *token : std::string();
}

}  // namespace dayzero::tokenizer
