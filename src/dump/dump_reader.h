// DumpReader: reads back a rank's HDF5 dump (schema version 1, dump_writer.h): root and
// object attributes, the activation keys of a prompt and phase, float/int32/float64 datasets,
// and the /outputs, /weights and /timeline records. Not a comparer (diag/ does that) and
// not thread-safe (the HDF5 library here is a serial build). Opens read-only.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dump/h5_util.h"
#include "dump/schema.h"
#include "dump/timeline.h"

namespace dayzero::dump {

class DumpReader {
 public:
  // NotFound when path does not exist; Corrupt when it is not a readable HDF5 file (also a
  // file whose writer was killed between flushes).
  static Result<DumpReader> open(const std::string& path);
  DumpReader(DumpReader&&) noexcept = default;
  DumpReader& operator=(DumpReader&&) noexcept = default;

  const std::string& path() const { return path_; }
  // True when every link of the absolute path ("/outputs/p0/text" is not a link) exists.
  bool exists(const std::string& object_path) const;

  // Attributes of object_path ("/" for the root). NotFound when missing; InvalidArgument
  // when it holds another kind (attr_double also takes an integer).
  bool has_attr(const std::string& name, const std::string& object_path = "/") const;
  Result<int64_t> attr_int(const std::string& name, const std::string& object_path = "/") const;
  Result<double> attr_double(const std::string& name, const std::string& object_path = "/") const;
  Result<std::string> attr_string(const std::string& name,
                                  const std::string& object_path = "/") const;

  Result<RootAttributes> root_attributes() const;
  Result<int64_t> schema_version() const { return attr_int("schema_version"); }
  // The root attribute complete: false until the writer's mark_complete().
  Result<bool> complete() const;

  // Names of the links in a group, sorted by name (byte order: "layers.10" before "layers.2").
  Result<std::vector<std::string>> list(const std::string& group_path) const;
  // Prompt ids under /activations and /outputs, sorted, without repeats; empty when neither.
  Result<std::vector<std::string>> list_prompts() const;
  // Activation names of /activations/<prompt_id>/<phase>; NotFound when that group is missing.
  Result<std::vector<std::string>> list_activations(const std::string& prompt_id,
                                                    const std::string& phase) const;
  // True when the activation holds stats (it has the "fields" attribute), not values.
  bool is_stats(const std::string& prompt_id, const std::string& phase,
                const std::string& name) const;

  // A whole dataset, converted to the requested element type. read_float and read_double
  // need a floating-point dataset, read_int32 an integer one (InvalidArgument otherwise).
  Result<FloatArray> read_float(const std::string& dataset_path) const;
  Result<DoubleArray> read_double(const std::string& dataset_path) const;
  Result<Int32Array> read_int32(const std::string& dataset_path) const;
  // read_float into out, reusing out.data's memory (no allocation or page faults when it is
  // already large enough: compare reads hundreds of same-sized tensors). On error out is
  // left in an unspecified state.
  Status read_float_into(const std::string& dataset_path, FloatArray& out) const;
  // read_float(activation_path(...)): [rows, width], or [8] / [n_steps, 8] for stats (as float).
  Result<FloatArray> read_activation(const std::string& prompt_id, const std::string& phase,
                                     const std::string& name) const;

  Result<OutputRecord> read_output(const std::string& prompt_id) const;
  // Empty when the dataset is absent.
  Result<std::vector<WeightRow>> read_weights() const;
  Result<std::vector<TimelineEvent>> read_timeline() const;

 private:
  DumpReader(std::string path, h5::Id file) : path_(std::move(path)), file_(std::move(file)) {}

  Result<h5::Id> open_attr(const std::string& name, const std::string& object_path) const;
  template <class T>
  Result<Array<T>> read_array(const std::string& dataset_path, hid_t mem_type,
                              H5T_class_t want) const;
  template <class T>
  Status read_array_into(const std::string& dataset_path, hid_t mem_type, H5T_class_t want,
                         Array<T>& out) const;

  std::string path_;
  h5::Id file_;
};

}  // namespace dayzero::dump
