// Safetensors header parsing and validation: every field is checked before it is trusted.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "checkpoint/reader.h"
#include "core/json.h"

namespace dayzero::checkpoint {
namespace {

using nlohmann::json;

std::string num(uint64_t v) { return std::to_string(v); }

bool is_u64(const json& j) { return j.is_number_unsigned(); }

// The numeric rules of one entry, shared by both parsers below: a known dtype, a shape whose
// element count fits int64, offsets inside the data section spanning numel * dtype size bytes.
Status check_entry(const std::string& where, const std::string& name, const std::string& dtype_str,
                   const std::vector<uint64_t>& dims, uint64_t begin, uint64_t end, const std::string& path,
                   uint64_t data_start, uint64_t data_size, TensorInfo* out) {
  const auto dtype = parse_dtype(dtype_str);
  if (!dtype) return Status::Unsupported(where + ": unsupported dtype '" + dtype_str + "'");
  Shape shape;
  shape.reserve(dims.size());
  uint64_t numel = 1;
  for (const uint64_t v : dims) {
    if (v > uint64_t(std::numeric_limits<int64_t>::max()))
      return Status::Corrupt(where + ": shape must hold non-negative integers, got " + num(v));
    if (__builtin_mul_overflow(numel, v, &numel) || numel > uint64_t(std::numeric_limits<int64_t>::max())) {
      return Status::Corrupt(where + ": shape of " + std::to_string(dims.size()) + " dimensions overflows");
    }
    shape.push_back(static_cast<int64_t>(v));
  }
  if (begin > end) {
    return Status::Corrupt(where + ": data_offsets [" + num(begin) + ", " + num(end) + "] have begin > end");
  }
  if (end > data_size) {
    return Status::Corrupt(where + ": file truncated: data_offsets end at " + num(end) +
                           " but the data section holds only " + num(data_size) + " bytes");
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, uint64_t(dtype_size(*dtype)), &nbytes)) {
    return Status::Corrupt(where + ": byte size of shape " + shape_str(shape) + " overflows");
  }
  if (end - begin != nbytes) {
    return Status::Corrupt(where + ": data_offsets span " + num(end - begin) + " bytes but shape " +
                           shape_str(shape) + " of " + dtype_str + " needs " + num(nbytes));
  }
  *out = TensorInfo{name, *dtype, std::move(shape), path, data_start + begin, nbytes, ""};
  return Status::Ok();
}

// Fills out from one header entry of the tree; data_start is the absolute offset of the data
// section. Type errors name the value's kind; the numeric rules are check_entry's.
Status parse_entry(const std::string& path, const std::string& name, const json& j, uint64_t data_start,
                   uint64_t data_size, TensorInfo* out) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!j.is_object()) return Status::Corrupt(where + ": header entry is not an object");

  auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) return Status::Corrupt(where + ": missing string 'dtype'");
  const std::string dtype_str = dt->get<std::string>();
  if (!parse_dtype(dtype_str)) return Status::Unsupported(where + ": unsupported dtype '" + dtype_str + "'");

  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array()) return Status::Corrupt(where + ": missing array 'shape'");
  std::vector<uint64_t> dims;
  for (const json& d : *sh) {
    if (!is_u64(d)) return Status::Corrupt(where + ": shape must hold non-negative integers, got " + json_excerpt(d));
    dims.push_back(d.get<uint64_t>());
  }

  auto offs = j.find("data_offsets");
  if (offs == j.end() || !offs->is_array() || offs->size() != 2 || !is_u64((*offs)[0]) ||
      !is_u64((*offs)[1])) {
    return Status::Corrupt(where + ": 'data_offsets' must be [begin, end] of non-negative integers");
  }
  return check_entry(where, name, dtype_str, dims, (*offs)[0].get<uint64_t>(), (*offs)[1].get<uint64_t>(), path,
                     data_start, data_size, out);
}

// The fast path for a header as writers produce it: an object of entries, each exactly
// {dtype: string, shape: [uint...], data_offsets: [uint, uint]} in any order, plus an optional
// string-to-string __metadata__. It streams straight into TensorInfo records, building no tree
// (a trillion-parameter checkpoint has ~140k entries over its shards). Anything else at all,
// valid or not, makes it give up (`false`), and the header is parsed again as a tree, whose
// checks give the message: so this path may only ever accept what the tree path accepts
// (fuzz/safetensors_header_fuzz.cpp checks that both give the same tensors).
class FastHeaderSax {
 public:
  FastHeaderSax(const std::string& path, uint64_t data_start, uint64_t data_size, std::vector<TensorInfo>* tensors,
                std::map<std::string, std::string>* metadata)
      : path_(path), data_start_(data_start), data_size_(data_size), tensors_(tensors), metadata_(metadata) {}

  bool null() { return false; }
  bool boolean(bool) { return false; }
  bool number_integer(json::number_integer_t) { return false; }
  bool number_float(json::number_float_t, const json::string_t&) { return false; }
  bool binary(json::binary_t&) { return false; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

  bool number_unsigned(json::number_unsigned_t v) {
    if (depth_ != 3) return false;
    if (field_ == Field::kShape) {
      dims_.push_back(v);
      return true;
    }
    if (field_ == Field::kOffsets && n_offsets_ < 2) {
      offsets_[n_offsets_++] = v;
      return true;
    }
    return false;
  }
  bool string(json::string_t& v) {
    if (depth_ == 2 && in_metadata_) return metadata_->emplace(std::move(key_), std::move(v)).second;
    if (depth_ == 2 && field_ == Field::kDtype) {
      dtype_ = std::move(v);
      return true;
    }
    return false;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) {
      name_ = std::move(k);
      return true;
    }
    if (depth_ != 2) return false;
    if (in_metadata_) {
      key_ = std::move(k);
      return true;
    }
    const uint8_t bit = k == "dtype" ? 1 : k == "shape" ? 2 : k == "data_offsets" ? 4 : 0;
    if (bit == 0 || (seen_ & bit)) return false;
    seen_ |= bit;
    field_ = bit == 1 ? Field::kDtype : bit == 2 ? Field::kShape : Field::kOffsets;
    return true;
  }
  bool start_object(std::size_t) {
    if (depth_ == 0) return ++depth_, true;
    if (depth_ != 1) return false;
    ++depth_;
    in_metadata_ = name_ == "__metadata__";
    if (in_metadata_ && saw_metadata_) return false;
    saw_metadata_ = saw_metadata_ || in_metadata_;
    seen_ = 0;
    dims_.clear();
    n_offsets_ = 0;
    return true;
  }
  bool end_object() {
    --depth_;
    if (depth_ != 1 || in_metadata_) {
      in_metadata_ = false;
      return true;
    }
    if (seen_ != 7 || n_offsets_ != 2) return false;
    TensorInfo info;
    if (!check_entry(std::string(), name_, dtype_, dims_, offsets_[0], offsets_[1], path_, data_start_, data_size_,
                     &info).ok())
      return false;
    tensors_->push_back(std::move(info));
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ != 2 || in_metadata_ || field_ == Field::kDtype) return false;
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }

 private:
  enum class Field { kDtype, kShape, kOffsets };
  const std::string& path_;
  const uint64_t data_start_, data_size_;
  std::vector<TensorInfo>* tensors_;
  std::map<std::string, std::string>* metadata_;
  int depth_ = 0;
  std::string name_, key_, dtype_;
  bool in_metadata_ = false, saw_metadata_ = false;
  uint8_t seen_ = 0;  // dtype 1, shape 2, data_offsets 4
  Field field_ = Field::kDtype;
  std::vector<uint64_t> dims_;
  uint64_t offsets_[2] = {0, 0};
  int n_offsets_ = 0;
};

// The fast path over the whole header: true when it accepted, with tensors sorted by name and
// no name twice; false (out untouched in meaning) otherwise.
bool parse_header_fast(const std::string& text, const std::string& path, uint64_t data_start, uint64_t data_size,
                       std::vector<TensorInfo>* tensors, std::map<std::string, std::string>* metadata) {
  FastHeaderSax sax(path, data_start, data_size, tensors, metadata);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception&) {
    ok = false;
  }
  if (!ok) return false;
  std::sort(tensors->begin(), tensors->end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  for (size_t i = 1; i < tensors->size(); ++i)
    if ((*tensors)[i - 1].name == (*tensors)[i].name) return false;
  return true;
}

Status parse_metadata(const std::string& path, const json& j, std::map<std::string, std::string>* out) {
  if (!j.is_object()) return Status::Corrupt(path + ": __metadata__ is " + json_kind(j) + ", not a string-to-string object");
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string())
      return Status::Corrupt(path + ": __metadata__ value of '" + k.substr(0, 80) + "' is " + json_kind(v) +
                             ", not a string");
    (*out)[k] = v.get<std::string>();
  }
  return Status::Ok();
}

// The tree path: every header, valid or not, with a message naming what is wrong.
Status parse_header_tree(const std::string& text, const std::string& path, uint64_t data_start, uint64_t data_size,
                         std::vector<TensorInfo>* tensors, std::map<std::string, std::string>* metadata) {
  JsonParseOptions options;
  options.reject_duplicate_keys = true;  // nlohmann would keep the last of two same-named tensors
  auto parsed = parse_json_limited(text, path + ": header", options);
  if (!parsed.ok()) return parsed.status();
  try {
    const json& header = *parsed;
    if (!header.is_object()) return Status::Corrupt(path + ": header is " + std::string(json_kind(header)) + ", not a JSON object");
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        DZ_RETURN_IF_ERROR(parse_metadata(path, entry, metadata));
        continue;
      }
      TensorInfo info;
      DZ_RETURN_IF_ERROR(parse_entry(path, name, entry, data_start, data_size, &info));
      tensors->push_back(std::move(info));
    }
  } catch (const json::exception& e) {
    return Status::Corrupt(path + ": malformed header JSON: " + std::string(e.what()).substr(0, 200));
  }
  std::sort(tensors->begin(), tensors->end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return Status::Ok();
}

// REQUIRES: tensors validated in bounds. Zero-byte tensors overlap nothing.
Status check_no_overlap(const std::string& path, const std::vector<TensorInfo>& tensors) {
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  const TensorInfo* furthest = nullptr;  // the tensor reaching furthest so far
  for (const TensorInfo* t : by_offset) {
    if (furthest && t->offset < furthest->offset + furthest->nbytes) {
      return Status::Corrupt(path + ": tensors '" + furthest->name + "' and '" + t->name +
                             "' overlap in the file");
    }
    if (!furthest || t->offset + t->nbytes > furthest->offset + furthest->nbytes) furthest = t;
  }
  return Status::Ok();
}

// REQUIRES: no overlap. The tensors, in file order, must fill the data section exactly: the
// first begins at 0, each begins where the one before ends, the last ends the file (the rule of
// the safetensors library's validate()).
Status check_coverage(const std::string& path, const std::vector<TensorInfo>& tensors, uint64_t data_start,
                      uint64_t data_size) {
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  uint64_t cursor = 0;  // relative to data_start
  for (const TensorInfo* t : by_offset) {
    const uint64_t begin = t->offset - data_start;
    if (begin != cursor) {
      return Status::Corrupt(path + ": tensor '" + t->name + "' begins at data byte " + num(begin) +
                             " but the tensors before it end at " + num(cursor) +
                             " (the tensors must cover the data section without gaps)");
    }
    cursor = begin + t->nbytes;
  }
  if (cursor != data_size) {
    return Status::Corrupt(path + ": the tensors cover " + num(cursor) + " bytes of the " + num(data_size) +
                           "-byte data section (trailing bytes after the last tensor)");
  }
  return Status::Ok();
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path, HeaderParser parser) {
  ByteReader reader;
  DZ_ASSIGN_OR_RETURN(const uint64_t file_size, reader.file_size(path));
  if (file_size < 8) {
    return Status::Corrupt(path + ": file of " + num(file_size) +
                           " bytes is too short for a safetensors header");
  }
  uint8_t len_bytes[8];
  DZ_RETURN_IF_ERROR(reader.read(path, 0, 8, len_bytes));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes) {
    return Status::Corrupt(path + ": header length " + num(header_len) + " exceeds the limit of " +
                           num(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > file_size - 8) {
    return Status::Corrupt(path + ": header length " + num(header_len) + " exceeds the " + num(file_size - 8) +
                           " bytes after the 8-byte length prefix (file size " + num(file_size) + "; truncated?)");
  }
  std::string text(header_len, '\0');
  DZ_RETURN_IF_ERROR(reader.read(path, 8, header_len, text.data()));

  SafetensorsFile f;
  f.path_ = path;
  f.file_size_ = file_size;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  f.parsed_fast_ = parser == HeaderParser::kAuto &&
                  parse_header_fast(text, path, data_start, data_size, &f.tensors_, &f.metadata_);
  if (!f.parsed_fast_) {
    f.tensors_.clear();
    f.metadata_.clear();
    DZ_RETURN_IF_ERROR(parse_header_tree(text, path, data_start, data_size, &f.tensors_, &f.metadata_));
  }
  DZ_RETURN_IF_ERROR(check_no_overlap(path, f.tensors_));
  DZ_RETURN_IF_ERROR(check_coverage(path, f.tensors_, data_start, data_size));
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

}  // namespace dayzero::checkpoint
