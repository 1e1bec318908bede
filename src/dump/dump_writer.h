// DumpWriter: writes one rank's HDF5 dump (rank-00003.h5) in schema version 1: root
// attributes, /activations, /outputs, /weights, /timeline. Every HDF5 failure comes back as
// a Status naming the file, the object and the HDF5 error stack. Not a reader (dump_reader.h)
// and not collective: each rank writes its own file, and which rank writes which logical
// tensor is the caller's decision. Not thread-safe (the HDF5 library here is a serial build).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "dump/h5_util.h"
#include "dump/schema.h"
#include "dump/timeline.h"

namespace dayzero::dump {

class DumpWriter {
 public:
  // Creates (truncating) the file and writes every root attribute with complete = 0, then
  // flushes. IoError naming the path when the file cannot be created.
  static Result<std::unique_ptr<DumpWriter>> create(const std::string& path,
                                                    const RootAttributes& attrs);
  // Closes without marking complete: a run that ends early leaves complete = 0.
  ~DumpWriter();
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;

  // Writes /activations/<prompt_id>/<phase>/<name> as float32 [rows, width].
  // data: [rows, width] row-major host memory, copied before return.
  // InvalidArgument when a name is empty, ".", ".." or holds '/', or the dataset exists.
  Status write_activation(const std::string& prompt_id, const std::string& phase,
                          const std::string& name, const float* data, int64_t rows, int64_t width);
  // Appends one row to the extendible float32 [n_steps, width] dataset at the same path,
  // creating it on the first call. row: [width]. InvalidArgument when the dataset exists
  // with another width or was written by write_activation().
  Status append_activation_row(const std::string& prompt_id, const std::string& phase,
                               const std::string& name, const float* row, int64_t width);
  // Stats mode: instead of the values, writes activation_stats(data, n) (schema.h) as a
  // float64 [8] dataset with attribute "fields" naming the columns; in the decode phase
  // (kPhaseDecode) appends that vector as one row of a float64 [n_steps, 8] dataset.
  // data: [n] (any shape, flattened).
  Status write_activation_stats(const std::string& prompt_id, const std::string& phase,
                                const std::string& name, const float* data, int64_t n);
  // Stats vectors already computed (another dump's, copied): rows [n_rows, 8] in the field
  // order of activation_stats; prefill takes exactly one row, decode appends each.
  Status write_activation_stats_rows(const std::string& prompt_id, const std::string& phase,
                                     const std::string& name, const double* rows, int64_t n_rows);

  // Writes /outputs/<prompt_id>/ (see OutputRecord) and flushes the file: this is a prompt's
  // last write. InvalidArgument when the group exists or the step_topk sizes are not
  // [n_steps, topk].
  Status write_output(const OutputRecord& out);
  // Writes /weights as a compound dataset [n_rows] with fields name, file, dtype, shape
  // (variable-length strings), offset, bytes_read, ranges, checksum (uint64), nan_count,
  // inf_count (int64). Replaces an earlier /weights.
  Status write_weights(const std::vector<WeightRow>& rows);
  // Writes /timeline as a compound dataset [n_events] with fields t_begin_ns, t_end_ns
  // (int64), kind, name, group (variable-length strings), seq, bytes (int64). Open events
  // keep t_end_ns = -1. Replaces an earlier /timeline, so it may be written after every prompt.
  Status write_timeline(const std::vector<TimelineEvent>& events);

  // Extra root attributes (a run summary as JSON text, ...); an existing one is replaced.
  // InvalidArgument for "complete" and "schema_version", which only this class writes.
  Status set_attribute(const std::string& name, const std::string& value);
  Status set_attribute(const std::string& name, const char* value);
  Status set_attribute(const std::string& name, int64_t value);
  Status set_attribute(const std::string& name, int value);
  Status set_attribute(const std::string& name, double value);

  // Writes everything buffered to disk (H5Fflush) so a rank killed later leaves a file that
  // opens with what was written up to here.
  Status flush();
  // Sets complete = 1 and flushes. Call after the run's last phase is written.
  Status mark_complete();
  // Closes the file; later writes return Internal. Idempotent.
  Status close();

  const std::string& path() const { return path_; }

 private:
  explicit DumpWriter(std::string path) : path_(std::move(path)) {}

  Status check_open() const;
  Status write_attribute(const std::string& name, hid_t mem_type, hid_t file_type,
                         const void* value);
  // A new fixed-shape dataset at path (parents created) holding data in mem_type.
  Status write_dataset(const std::string& path, hid_t mem_type, hid_t file_type,
                       const std::vector<hsize_t>& dims, const void* data);
  // Appends one row to the [n, width] extendible dataset at path; on creation adds the stats
  // "fields" attribute when stats is true.
  Status append_row(const std::string& path, hid_t mem_type, hid_t file_type, size_t elem_size,
                    const void* row, int64_t width, bool stats);
  Status replace_compound(const std::string& path, hid_t mem_type, size_t n_rows, const void* data);
  Status close_appends();

  std::string path_;
  h5::Id file_;
  h5::Id lcpl_;  // link creation: make missing parent groups
  // Extendible datasets kept open between appends, so each decode step does not re-read and
  // re-write its partly filled chunk. Closed by flush() and close().
  std::map<std::string, h5::Id> appends_;
};

}  // namespace dayzero::dump
