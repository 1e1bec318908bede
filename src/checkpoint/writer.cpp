// Safetensors serialisation: u64 LE header length, space-padded JSON header, packed data (or,
// for sparse files, a hole of the data's size).
#include "checkpoint/writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "checkpoint/catalog.h"
#include "core/check.h"

namespace dayzero::checkpoint {
namespace {

using nlohmann::json;

// Writes the pieces to path.tmp, then renames it over path so readers never see half a file.
Status write_file(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::IoError(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  bool ok = true;
  // An empty piece (a tensor with no elements) may have a null data pointer, which fwrite may not
  // be given even for zero bytes.
  for (std::string_view p : pieces) ok = ok && (p.empty() || std::fwrite(p.data(), 1, p.size(), f) == p.size());
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Status::IoError(path + ": write failed: " + std::strerror(err));
  }
  return Status::Ok();
}

// The 8-byte length and the space-padded JSON header of tensors laid out in the given order.
struct HeaderEntry {
  const std::string* name;
  DType dtype;
  const Shape* shape;
  uint64_t nbytes;
};
Result<std::string> header_bytes(const std::string& path, const std::vector<HeaderEntry>& entries,
                                 const std::map<std::string, std::string>& metadata, uint64_t* data_bytes) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const HeaderEntry& e : entries) {
    header[*e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", *e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": cannot serialise header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t(text.size()) >> (8 * i));
  *data_bytes = offset;
  return out + text;
}

}  // namespace

void SafetensorsWriter::add(std::string name, DType dtype, Shape shape, std::vector<uint8_t> bytes) {
  DZ_CHECK(bytes.size() == static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype),
           "tensor " << name << ": " << bytes.size() << " bytes for shape " << shape_str(shape) << " of "
                     << dtype_name(dtype));
  DZ_CHECK(name != "__metadata__" && !entries_.contains(name), "tensor " << name << " added twice");
  entries_.emplace(std::move(name), Entry{dtype, std::move(shape), std::move(bytes)});
}

Status SafetensorsWriter::write(const std::string& path) const {
  std::vector<HeaderEntry> entries;
  std::vector<std::string_view> pieces(1);  // the header, then each tensor's bytes
  for (const auto& [name, e] : entries_) {
    entries.push_back({&name, e.dtype, &e.shape, e.bytes.size()});
    pieces.emplace_back(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  }
  uint64_t data_bytes = 0;
  DZ_ASSIGN_OR_RETURN(const std::string head, header_bytes(path, entries, metadata_, &data_bytes));
  pieces[0] = head;
  return write_file(path, pieces);
}

Status write_sparse_safetensors(const std::string& path, std::vector<HoleTensor> tensors,
                                const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const HoleTensor& a, const HoleTensor& b) { return a.name < b.name; });
  std::vector<HeaderEntry> entries;
  for (const HoleTensor& t : tensors) {
    DZ_CHECK(t.name != "__metadata__", path << ": a tensor named __metadata__");
    entries.push_back({&t.name, t.dtype, &t.shape, static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype)});
  }
  for (size_t i = 1; i < tensors.size(); ++i)
    DZ_CHECK(tensors[i].name != tensors[i - 1].name, path << ": tensor " << tensors[i].name << " given twice");
  uint64_t data_bytes = 0;
  DZ_ASSIGN_OR_RETURN(const std::string head, header_bytes(path, entries, metadata, &data_bytes));
  // Extending the file with ftruncate allocates nothing: the data section is one hole.
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::IoError(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() && std::fflush(f) == 0 &&
            ::ftruncate(::fileno(f), static_cast<off_t>(head.size() + data_bytes)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Status::IoError(path + ": cannot write a sparse file of " + std::to_string(head.size() + data_bytes) +
                           " bytes: " + std::strerror(err));
  }
  return Status::Ok();
}

Status write_index(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                   uint64_t total_size) {
  const std::string path = (std::filesystem::path(dir) / kIndexFileName).string();
  std::string text;
  try {
    const json j = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    text = j.dump(2) + "\n";
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": cannot serialise index: " + e.what());
  }
  return write_file(path, {text});
}

}  // namespace dayzero::checkpoint
