// HDF5 helpers shared by dump_writer.cpp and dump_reader.cpp.
#include "dump/h5_util.h"

#include <cstddef>
#include <mutex>
#include <vector>

namespace dayzero::dump::h5 {

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

void relax_file_locking(hid_t fapl) {
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl, /*use_file_locking=*/true, /*ignore_when_disabled=*/true);
#else
  (void)fapl;
#endif
}

namespace {
herr_t collect_error(unsigned n, const H5E_error2_t* err, void* client) {
  auto* parts = static_cast<std::vector<std::string>*>(client);
  std::string part = err->func_name ? err->func_name : "?";
  part += ": ";
  part += err->desc ? err->desc : "";
  char minor[128] = {};
  if (H5Eget_msg(err->min_num, nullptr, minor, sizeof minor) > 0) {
    part += " (";
    part += minor;
    part += ")";
  }
  parts->push_back(std::move(part));
  return 0;
}
}  // namespace

std::string take_error_text() {
  std::vector<std::string> parts;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &parts);
  H5Eclear2(H5E_DEFAULT);
  if (parts.empty()) return "no HDF5 error detail";
  // The API frame says what was attempted, the innermost two say why; the middle frames
  // are library internals.
  std::string out = parts.front();
  const size_t from = parts.size() > 3 ? parts.size() - 2 : 1;
  for (size_t i = from; i < parts.size(); ++i) out += "; " + parts[i];
  return out;
}

Status error(const std::string& file, const std::string& what) {
  return Status::IoError(file + ": " + what + ": " + take_error_text());
}

Id vlen_string_type() {
  Id t = type(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

Id weight_mem_type() {
  Id str = vlen_string_type();
  Id t = type(H5Tcreate(H5T_COMPOUND, sizeof(WeightMem)));
  H5Tinsert(t.get(), "name", offsetof(WeightMem, name), str.get());
  H5Tinsert(t.get(), "file", offsetof(WeightMem, file), str.get());
  H5Tinsert(t.get(), "dtype", offsetof(WeightMem, dtype), str.get());
  H5Tinsert(t.get(), "shape", offsetof(WeightMem, shape), str.get());
  H5Tinsert(t.get(), "offset", offsetof(WeightMem, offset), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "bytes_read", offsetof(WeightMem, bytes_read), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "ranges", offsetof(WeightMem, ranges), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "checksum", offsetof(WeightMem, checksum), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "nan_count", offsetof(WeightMem, nan_count), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "inf_count", offsetof(WeightMem, inf_count), H5T_NATIVE_INT64);
  return t;
}

Id timeline_mem_type() {
  Id str = vlen_string_type();
  Id t = type(H5Tcreate(H5T_COMPOUND, sizeof(TimelineMem)));
  H5Tinsert(t.get(), "t_begin_ns", offsetof(TimelineMem, t_begin_ns), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "t_end_ns", offsetof(TimelineMem, t_end_ns), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "kind", offsetof(TimelineMem, kind), str.get());
  H5Tinsert(t.get(), "name", offsetof(TimelineMem, name), str.get());
  H5Tinsert(t.get(), "group", offsetof(TimelineMem, group), str.get());
  H5Tinsert(t.get(), "seq", offsetof(TimelineMem, seq), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "bytes", offsetof(TimelineMem, bytes), H5T_NATIVE_INT64);
  return t;
}

bool path_exists(hid_t loc, const std::string& path) {
  // H5Lexists needs every intermediate link to exist, so walk the path one link at a time.
  size_t pos = 0;
  while (pos < path.size()) {
    if (path[pos] == '/') {
      ++pos;
      continue;
    }
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    const std::string prefix = path.substr(0, next);
    const htri_t e = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    pos = next;
  }
  return true;
}

}  // namespace dayzero::dump::h5
