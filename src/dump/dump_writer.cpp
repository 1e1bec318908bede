// DumpWriter: HDF5 C API calls for the version 1 dump schema.
#include "dump/dump_writer.h"

#include <algorithm>
#include <cstddef>

#include "core/tensor.h"

namespace dayzero::dump {
namespace {

// A prompt id, phase or activation name becomes one HDF5 link name.
Status check_component(const std::string& file, const char* what, const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos) {
    return Status::InvalidArgument(file + ": bad " + what + " '" + s +
                                   "' (empty, '.', '..' or containing '/')");
  }
  return Status::Ok();
}

Status check_names(const std::string& file, const std::string& prompt_id, const std::string& phase,
                   const std::string& name) {
  DZ_RETURN_IF_ERROR(check_component(file, "prompt id", prompt_id));
  DZ_RETURN_IF_ERROR(check_component(file, "phase", phase));
  return check_component(file, "activation name", name);
}

// Rows per chunk of an extendible [n, width] dataset: about 64 KiB, at least one row.
hsize_t chunk_rows(int64_t width, size_t elem_size) {
  const int64_t row_bytes = width * static_cast<int64_t>(elem_size);
  return static_cast<hsize_t>(
      std::clamp<int64_t>(65536 / std::max<int64_t>(row_bytes, 1), 1, 1024));
}

}  // namespace

Result<std::unique_ptr<DumpWriter>> DumpWriter::create(const std::string& path,
                                                       const RootAttributes& a) {
  h5::silence_errors();
  std::unique_ptr<DumpWriter> w(new DumpWriter(path));
  h5::Id fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  // Strong close: H5Fclose really closes even if an id leaked, so the file is never held open.
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  h5::relax_file_locking(fapl.get());
  w->file_ = h5::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!w->file_.valid()) return h5::error(path, "cannot create dump file");
  w->lcpl_ = h5::plist(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(w->lcpl_.get(), 1);

  const std::pair<const char*, int64_t> ints[] = {{"schema_version", kSchemaVersion},
                                                  {"rank", a.rank},
                                                  {"world_size", a.world_size},
                                                  {"dp", a.dp},
                                                  {"pp", a.pp},
                                                  {"tp", a.tp},
                                                  {"ep", a.ep},
                                                  {"etp", a.etp},
                                                  {"clock_offset_ns", a.clock_offset_ns},
                                                  {"complete", 0}};
  for (const auto& [name, v] : ints) {
    DZ_RETURN_IF_ERROR(w->write_attribute(name, H5T_NATIVE_INT64, H5T_STD_I64LE, &v));
  }
  const std::pair<const char*, const std::string*> strs[] = {
      {"dayzero_version", &a.dayzero_version},
      {"hostname", &a.hostname},
      {"device", &a.device},
      {"backend", &a.backend},
      {"model_config", &a.model_config},
      {"plan", &a.plan},
      {"run_config", &a.run_config},
      {"started_at", &a.started_at}};
  for (const auto& [name, v] : strs) DZ_RETURN_IF_ERROR(w->set_attribute(name, *v));
  DZ_RETURN_IF_ERROR(w->flush());
  return w;
}

DumpWriter::~DumpWriter() { (void)close(); }

Status DumpWriter::check_open() const {
  if (!file_.valid()) return Status::Internal(path_ + ": dump file already closed");
  return Status::Ok();
}

Status DumpWriter::write_attribute(const std::string& name, hid_t mem_type, hid_t file_type,
                                   const void* value) {
  DZ_RETURN_IF_ERROR(check_open());
  const hid_t root = file_.get();
  const htri_t exists = H5Aexists(root, name.c_str());
  if (exists < 0) return h5::error(path_, "attribute " + name);
  // Delete and recreate: the type may change (and vlen strings have no fixed size to reuse).
  if (exists > 0 && H5Adelete(root, name.c_str()) < 0) {
    return h5::error(path_, "cannot replace attribute " + name);
  }
  h5::Id space = h5::space(H5Screate(H5S_SCALAR));
  h5::Id attr =
      h5::attr(H5Acreate2(root, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid()) return h5::error(path_, "cannot create attribute " + name);
  if (H5Awrite(attr.get(), mem_type, value) < 0) {
    return h5::error(path_, "cannot write attribute " + name);
  }
  return Status::Ok();
}

Status DumpWriter::set_attribute(const std::string& name, const std::string& value) {
  if (name == "complete" || name == "schema_version") {
    return Status::InvalidArgument(path_ + ": attribute " + name +
                                   " is written by the dump writer");
  }
  h5::Id str = h5::vlen_string_type();
  const char* p = value.c_str();
  return write_attribute(name, str.get(), str.get(), &p);
}

Status DumpWriter::set_attribute(const std::string& name, const char* value) {
  return set_attribute(name, std::string(value ? value : ""));
}

Status DumpWriter::set_attribute(const std::string& name, int64_t value) {
  if (name == "complete" || name == "schema_version") {
    return Status::InvalidArgument(path_ + ": attribute " + name +
                                   " is written by the dump writer");
  }
  return write_attribute(name, H5T_NATIVE_INT64, H5T_STD_I64LE, &value);
}

Status DumpWriter::set_attribute(const std::string& name, int value) {
  return set_attribute(name, static_cast<int64_t>(value));
}

Status DumpWriter::set_attribute(const std::string& name, double value) {
  if (name == "complete" || name == "schema_version") {
    return Status::InvalidArgument(path_ + ": attribute " + name +
                                   " is written by the dump writer");
  }
  return write_attribute(name, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, &value);
}

Status DumpWriter::write_dataset(const std::string& path, hid_t mem_type, hid_t file_type,
                                 const std::vector<hsize_t>& dims, const void* data) {
  DZ_RETURN_IF_ERROR(check_open());
  if (h5::path_exists(file_.get(), path)) {
    return Status::InvalidArgument(path_ + ": " + path + ": already written");
  }
  h5::Id space = h5::space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  if (!space.valid()) return h5::error(path_, path + ": dataspace");
  h5::Id ds = h5::dataset(H5Dcreate2(file_.get(), path.c_str(), file_type, space.get(), lcpl_.get(),
                                     H5P_DEFAULT, H5P_DEFAULT));
  if (!ds.valid()) return h5::error(path_, path + ": cannot create dataset");
  hsize_t numel = 1;
  for (hsize_t d : dims) numel *= d;
  // HDF5 rejects a null buffer even for zero elements; an empty dataset needs no write.
  if (numel > 0) {
    if (data == nullptr) return Status::InvalidArgument(path_ + ": " + path + ": null data");
    if (H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
      return h5::error(path_, path + ": cannot write dataset");
    }
  }
  if (ds.reset() < 0) return h5::error(path_, path + ": cannot close dataset");
  return Status::Ok();
}

Status DumpWriter::append_row(const std::string& path, hid_t mem_type, hid_t file_type,
                              size_t elem_size, const void* row, int64_t width, bool stats) {
  DZ_RETURN_IF_ERROR(check_open());
  if (width <= 0 || row == nullptr) {
    return Status::InvalidArgument(path_ + ": " + path + ": append needs width > 0 and data");
  }
  const hsize_t w = static_cast<hsize_t>(width);
  auto it = appends_.find(path);
  if (it == appends_.end()) {
    h5::Id ds;
    if (h5::path_exists(file_.get(), path)) {
      ds = h5::dataset(H5Dopen2(file_.get(), path.c_str(), H5P_DEFAULT));
      if (!ds.valid()) return h5::error(path_, path + ": cannot open dataset");
      h5::Id space = h5::space(H5Dget_space(ds.get()));
      hsize_t dims[2] = {0, 0}, maxdims[2] = {0, 0};
      if (H5Sget_simple_extent_ndims(space.get()) != 2 ||
          H5Sget_simple_extent_dims(space.get(), dims, maxdims) != 2 ||
          maxdims[0] != H5S_UNLIMITED || dims[1] != w) {
        return Status::InvalidArgument(path_ + ": " + path +
                                       ": exists and is not an extendible [n, " +
                                       std::to_string(width) + "] dataset");
      }
    } else {
      const hsize_t dims[2] = {0, w};
      const hsize_t maxdims[2] = {H5S_UNLIMITED, w};
      h5::Id space = h5::space(H5Screate_simple(2, dims, maxdims));
      h5::Id dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
      const hsize_t chunk[2] = {chunk_rows(width, elem_size), w};
      H5Pset_chunk(dcpl.get(), 2, chunk);
      ds = h5::dataset(H5Dcreate2(file_.get(), path.c_str(), file_type, space.get(), lcpl_.get(),
                                  dcpl.get(), H5P_DEFAULT));
      if (!ds.valid()) return h5::error(path_, path + ": cannot create dataset");
      if (stats) {
        h5::Id str = h5::vlen_string_type();
        h5::Id aspace = h5::space(H5Screate(H5S_SCALAR));
        h5::Id attr = h5::attr(H5Acreate2(ds.get(), kStatsFieldsAttr, str.get(), aspace.get(),
                                          H5P_DEFAULT, H5P_DEFAULT));
        const char* fields = kStatsFields;
        if (!attr.valid() || H5Awrite(attr.get(), str.get(), &fields) < 0) {
          return h5::error(path_, path + ": cannot write attribute fields");
        }
      }
    }
    it = appends_.emplace(path, std::move(ds)).first;
  }
  const hid_t ds = it->second.get();
  h5::Id space = h5::space(H5Dget_space(ds));
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  if (dims[1] != w) {
    return Status::InvalidArgument(path_ + ": " + path + ": row width " + std::to_string(width) +
                                   " but the dataset has " + std::to_string(dims[1]));
  }
  const hsize_t new_dims[2] = {dims[0] + 1, w};
  if (H5Dset_extent(ds, new_dims) < 0) return h5::error(path_, path + ": cannot extend dataset");
  h5::Id fspace = h5::space(H5Dget_space(ds));
  const hsize_t start[2] = {dims[0], 0};
  const hsize_t count[2] = {1, w};
  H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  h5::Id mspace = h5::space(H5Screate_simple(2, count, nullptr));
  if (H5Dwrite(ds, mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, row) < 0) {
    return h5::error(path_, path + ": cannot write row " + std::to_string(dims[0]));
  }
  return Status::Ok();
}

Status DumpWriter::write_activation(const std::string& prompt_id, const std::string& phase,
                                    const std::string& name, const float* data, int64_t rows,
                                    int64_t width) {
  DZ_RETURN_IF_ERROR(check_names(path_, prompt_id, phase, name));
  const std::string path = activation_path(prompt_id, phase, name);
  if (rows < 0 || width < 0) {
    return Status::InvalidArgument(path_ + ": " + path + ": negative shape");
  }
  // [rows, width]
  return write_dataset(path, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE,
                       {static_cast<hsize_t>(rows), static_cast<hsize_t>(width)}, data);
}

Status DumpWriter::append_activation_row(const std::string& prompt_id, const std::string& phase,
                                         const std::string& name, const float* row, int64_t width) {
  DZ_RETURN_IF_ERROR(check_names(path_, prompt_id, phase, name));
  return append_row(activation_path(prompt_id, phase, name), H5T_NATIVE_FLOAT, H5T_IEEE_F32LE,
                    sizeof(float), row, width, false);
}

Status DumpWriter::write_activation_stats(const std::string& prompt_id, const std::string& phase,
                                          const std::string& name, const float* data, int64_t n) {
  if (n < 0 || (n > 0 && data == nullptr)) {
    return Status::InvalidArgument(path_ + ": " + activation_path(prompt_id, phase, name) + ": bad stats input");
  }
  const std::array<double, 8> stats = activation_stats(data, n);  // [8]
  return write_activation_stats_rows(prompt_id, phase, name, stats.data(), 1);
}

Status DumpWriter::write_activation_stats_rows(const std::string& prompt_id, const std::string& phase,
                                               const std::string& name, const double* rows, int64_t n_rows) {
  DZ_RETURN_IF_ERROR(check_names(path_, prompt_id, phase, name));
  const std::string path = activation_path(prompt_id, phase, name);
  if (n_rows < 1 || rows == nullptr || (phase != kPhaseDecode && n_rows != 1)) {
    return Status::InvalidArgument(path_ + ": " + path + ": bad stats rows (prefill takes one)");
  }
  if (phase == kPhaseDecode) {
    for (int64_t i = 0; i < n_rows; ++i)
      DZ_RETURN_IF_ERROR(append_row(path, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, sizeof(double), rows + i * kStatsWidth,
                                    kStatsWidth, true));
    return Status::Ok();
  }
  DZ_RETURN_IF_ERROR(write_dataset(path, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE,
                                   {static_cast<hsize_t>(kStatsWidth)}, rows));
  h5::Id ds = h5::dataset(H5Dopen2(file_.get(), path.c_str(), H5P_DEFAULT));
  h5::Id str = h5::vlen_string_type();
  h5::Id space = h5::space(H5Screate(H5S_SCALAR));
  h5::Id attr = h5::attr(
      H5Acreate2(ds.get(), kStatsFieldsAttr, str.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const char* fields = kStatsFields;
  if (!attr.valid() || H5Awrite(attr.get(), str.get(), &fields) < 0) {
    return h5::error(path_, path + ": cannot write attribute fields");
  }
  return Status::Ok();
}

Status DumpWriter::write_output(const OutputRecord& out) {
  DZ_RETURN_IF_ERROR(check_component(path_, "prompt id", out.prompt_id));
  DZ_RETURN_IF_ERROR(check_open());
  const std::string group = output_path(out.prompt_id);
  if (out.topk < 0 || out.step_topk_ids.size() != out.step_topk_logits.size() ||
      (out.topk == 0 && !out.step_topk_ids.empty()) ||
      (out.topk > 0 && out.step_topk_ids.size() % static_cast<size_t>(out.topk) != 0)) {
    return Status::InvalidArgument(
        path_ + ": " + group + ": step_topk_ids (" + std::to_string(out.step_topk_ids.size()) +
        ") and step_topk_logits (" + std::to_string(out.step_topk_logits.size()) +
        ") are not both [n_steps, " + std::to_string(out.topk) + "]");
  }
  if (h5::path_exists(file_.get(), group)) {
    return Status::InvalidArgument(path_ + ": " + group + ": already written");
  }
  h5::Id g =
      h5::group(H5Gcreate2(file_.get(), group.c_str(), lcpl_.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!g.valid()) return h5::error(path_, group + ": cannot create group");

  const hsize_t n_steps =
      out.topk > 0 ? out.step_topk_ids.size() / static_cast<size_t>(out.topk) : 0;
  const hsize_t k = static_cast<hsize_t>(out.topk);
  DZ_RETURN_IF_ERROR(write_dataset(group + "/prompt_ids", H5T_NATIVE_INT32, H5T_STD_I32LE,
                                   {out.prompt_ids.size()}, out.prompt_ids.data()));
  DZ_RETURN_IF_ERROR(write_dataset(group + "/generated_ids", H5T_NATIVE_INT32, H5T_STD_I32LE,
                                   {out.generated_ids.size()}, out.generated_ids.data()));
  DZ_RETURN_IF_ERROR(write_dataset(group + "/logits_last", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE,
                                   {out.logits_last.size()}, out.logits_last.data()));
  DZ_RETURN_IF_ERROR(write_dataset(group + "/step_topk_ids", H5T_NATIVE_INT32, H5T_STD_I32LE,
                                   {n_steps, k}, out.step_topk_ids.data()));
  DZ_RETURN_IF_ERROR(write_dataset(group + "/step_topk_logits", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE,
                                   {n_steps, k}, out.step_topk_logits.data()));

  auto group_attr = [&](const char* name, hid_t mem_type, hid_t file_type,
                        const void* value) -> Status {
    h5::Id space = h5::space(H5Screate(H5S_SCALAR));
    h5::Id attr =
        h5::attr(H5Acreate2(g.get(), name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (!attr.valid() || H5Awrite(attr.get(), mem_type, value) < 0) {
      return h5::error(path_, group + ": cannot write attribute " + name);
    }
    return Status::Ok();
  };
  h5::Id str = h5::vlen_string_type();
  const char* text = out.text.c_str();
  DZ_RETURN_IF_ERROR(group_attr("text", str.get(), str.get(), &text));
  if (out.reference_nll) {
    DZ_RETURN_IF_ERROR(
        group_attr("reference_nll", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, &*out.reference_nll));
  }
  if (out.reference_tokens) {
    DZ_RETURN_IF_ERROR(
        group_attr("reference_tokens", H5T_NATIVE_INT64, H5T_STD_I64LE, &*out.reference_tokens));
  }
  g.reset();
  return flush();
}

Status DumpWriter::replace_compound(const std::string& path, hid_t mem_type, size_t n_rows,
                                    const void* data) {
  DZ_RETURN_IF_ERROR(check_open());
  if (h5::path_exists(file_.get(), path) && H5Ldelete(file_.get(), path.c_str(), H5P_DEFAULT) < 0) {
    return h5::error(path_, path + ": cannot replace dataset");
  }
  // The file type is the memory type packed: same fields, no padding.
  h5::Id file_type = h5::type(H5Tcopy(mem_type));
  H5Tpack(file_type.get());
  return write_dataset(path, mem_type, file_type.get(), {n_rows}, data);
}

Status DumpWriter::write_weights(const std::vector<WeightRow>& rows) {
  std::vector<std::string> shapes;
  shapes.reserve(rows.size());
  std::vector<h5::WeightMem> mem;
  mem.reserve(rows.size());
  for (const WeightRow& r : rows) {
    shapes.push_back(shape_str(r.shape));
    mem.push_back({r.name.c_str(), r.file.c_str(), r.dtype.c_str(), shapes.back().c_str(), r.offset,
                   r.bytes_read, r.ranges, r.checksum, r.nan_count, r.inf_count});
  }
  h5::Id t = h5::weight_mem_type();
  return replace_compound("/weights", t.get(), mem.size(), mem.data());
}

Status DumpWriter::write_timeline(const std::vector<TimelineEvent>& events) {
  std::vector<h5::TimelineMem> mem;
  mem.reserve(events.size());
  for (const TimelineEvent& e : events) {
    mem.push_back({e.t_begin_ns, e.t_end_ns, e.kind.c_str(), e.name.c_str(), e.group.c_str(), e.seq,
                   e.bytes});
  }
  h5::Id t = h5::timeline_mem_type();
  return replace_compound("/timeline", t.get(), mem.size(), mem.data());
}

Status DumpWriter::close_appends() {
  Status first;
  for (auto& [path, ds] : appends_) {
    if (ds.reset() < 0 && first.ok()) first = h5::error(path_, path + ": cannot close dataset");
  }
  appends_.clear();
  return first;
}

Status DumpWriter::flush() {
  DZ_RETURN_IF_ERROR(check_open());
  DZ_RETURN_IF_ERROR(close_appends());
  if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0) return h5::error(path_, "cannot flush");
  return Status::Ok();
}

Status DumpWriter::mark_complete() {
  DZ_RETURN_IF_ERROR(check_open());
  const int64_t one = 1;
  DZ_RETURN_IF_ERROR(write_attribute("complete", H5T_NATIVE_INT64, H5T_STD_I64LE, &one));
  return flush();
}

Status DumpWriter::close() {
  if (!file_.valid()) return Status::Ok();
  Status s = close_appends();
  lcpl_.reset();
  if (file_.reset() < 0 && s.ok()) s = h5::error(path_, "cannot close dump file");
  return s;
}

}  // namespace dayzero::dump
