// Safetensors serialisation: u64 LE header length, space-padded JSON header, packed data.
#include "checkpoint/writer.h"

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
  for (std::string_view p : pieces) ok = ok && std::fwrite(p.data(), 1, p.size(), f) == p.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Status::IoError(path + ": write failed: " + std::strerror(err));
  }
  return Status::Ok();
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
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::vector<std::string_view> pieces(2);  // length, header, then each tensor's bytes
  uint64_t offset = 0;
  for (const auto& [name, e] : entries_) {
    header[name] = {{"dtype", dtype_name(e.dtype)},
                    {"shape", e.shape},
                    {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
    pieces.emplace_back(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": cannot serialise header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(uint64_t(text.size()) >> (8 * i));
  pieces[0] = std::string_view(len, 8);
  pieces[1] = text;
  return write_file(path, pieces);
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
