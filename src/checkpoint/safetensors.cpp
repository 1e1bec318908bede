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

// Fills out from one header entry; data_start is the absolute offset of the data section.
Status parse_entry(const std::string& path, const std::string& name, const json& j, uint64_t data_start,
                   uint64_t data_size, TensorInfo* out) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!j.is_object()) return Status::Corrupt(where + ": header entry is not an object");

  auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) return Status::Corrupt(where + ": missing string 'dtype'");
  const std::string dtype_str = dt->get<std::string>();
  const auto dtype = parse_dtype(dtype_str);
  if (!dtype) return Status::Unsupported(where + ": unsupported dtype '" + dtype_str + "'");

  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array()) return Status::Corrupt(where + ": missing array 'shape'");
  Shape shape;
  uint64_t numel = 1;
  for (const json& d : *sh) {
    if (!is_u64(d) || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      return Status::Corrupt(where + ": shape must hold non-negative integers, got " + json_excerpt(d));
    }
    const uint64_t v = d.get<uint64_t>();
    if (__builtin_mul_overflow(numel, v, &numel) || numel > uint64_t(std::numeric_limits<int64_t>::max())) {
      return Status::Corrupt(where + ": shape of " + std::to_string(sh->size()) + " dimensions overflows");
    }
    shape.push_back(static_cast<int64_t>(v));
  }

  auto offs = j.find("data_offsets");
  if (offs == j.end() || !offs->is_array() || offs->size() != 2 || !is_u64((*offs)[0]) ||
      !is_u64((*offs)[1])) {
    return Status::Corrupt(where + ": 'data_offsets' must be [begin, end] of non-negative integers");
  }
  const uint64_t begin = (*offs)[0].get<uint64_t>();
  const uint64_t end = (*offs)[1].get<uint64_t>();
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

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
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
  JsonParseOptions options;
  options.reject_duplicate_keys = true;  // nlohmann would keep the last of two same-named tensors
  auto parsed = parse_json_limited(text, path + ": header", options);
  if (!parsed.ok()) return parsed.status();
  try {
    const json& header = *parsed;
    if (!header.is_object()) return Status::Corrupt(path + ": header is " + std::string(json_kind(header)) + ", not a JSON object");
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        DZ_RETURN_IF_ERROR(parse_metadata(path, entry, &f.metadata_));
        continue;
      }
      TensorInfo info;
      DZ_RETURN_IF_ERROR(parse_entry(path, name, entry, data_start, data_size, &info));
      f.tensors_.push_back(std::move(info));
    }
  } catch (const json::exception& e) {
    return Status::Corrupt(path + ": malformed header JSON: " + std::string(e.what()).substr(0, 200));
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
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
