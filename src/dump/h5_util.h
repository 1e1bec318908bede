// Internal to src/dump: RAII ownership of HDF5 ids, the error-stack text that goes into a
// Status, and the string/compound types shared by the writer and the reader. Not a general
// HDF5 wrapper: only what the dump schema needs.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"

namespace dayzero::dump::h5 {

// Owns one HDF5 id and closes it with the matching H5?close.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns the close's own result (negative on failure, 0 when empty).
  herr_t reset() {
    herr_t r = 0;
    if (id_ >= 0 && closer_ != nullptr) r = closer_(id_);
    id_ = H5I_INVALID_HID;
    return r;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline Id file(hid_t id) { return {id, H5Fclose}; }
inline Id group(hid_t id) { return {id, H5Gclose}; }
inline Id dataset(hid_t id) { return {id, H5Dclose}; }
inline Id space(hid_t id) { return {id, H5Sclose}; }
inline Id type(hid_t id) { return {id, H5Tclose}; }
inline Id attr(hid_t id) { return {id, H5Aclose}; }
inline Id plist(hid_t id) { return {id, H5Pclose}; }

// Turns off HDF5's printing of error stacks (once per process): errors become Status text.
void silence_errors();
// Keeps HDF5's file locks but ignores file systems that do not support them (some Lustre
// and NFS mounts), where a strict lock would fail every open. No-op before HDF5 1.10.7.
void relax_file_locking(hid_t fapl);
// The current default error stack as one line ("H5Dcreate2: unable to create dataset (name
// already exists)"), then clears it. "no HDF5 error detail" when the stack is empty.
std::string take_error_text();
// IoError "<file>: <what>: <stack text>".
Status error(const std::string& file, const std::string& what);

// Variable-length UTF-8 string type (caller owns).
Id vlen_string_type();

// Memory layouts of /weights and /timeline rows; strings point into storage owned elsewhere
// (the caller's when writing, HDF5's until H5Dvlen_reclaim when reading).
struct WeightMem {
  const char* name;
  const char* file;
  const char* dtype;
  const char* shape;
  uint64_t offset;
  uint64_t bytes_read;
  uint64_t ranges;
  uint64_t checksum;
  int64_t nan_count;
  int64_t inf_count;
};

struct TimelineMem {
  int64_t t_begin_ns;
  int64_t t_end_ns;
  const char* kind;
  const char* name;
  const char* group;
  int64_t seq;
  int64_t bytes;
};

// Compound memory types of those rows (field names as in the schema).
Id weight_mem_type();
Id timeline_mem_type();

// True when every link along the absolute path exists ("/a/b/c").
bool path_exists(hid_t loc, const std::string& path);

}  // namespace dayzero::dump::h5
