// DumpReader: HDF5 C API reads for the version 1 dump schema.
#include "dump/dump_reader.h"

#include <unistd.h>

#include <algorithm>
#include <set>

namespace dayzero::dump {
namespace {

// "[4096, 1024]" -> {4096, 1024}; "[]" -> {}. Corrupt text gives nullopt.
std::optional<std::vector<int64_t>> parse_shape(const std::string& s) {
  if (s.size() < 2 || s.front() != '[' || s.back() != ']') return std::nullopt;
  std::vector<int64_t> out;
  size_t i = 1;
  const size_t end = s.size() - 1;
  while (i < end) {
    while (i < end && (s[i] == ' ' || s[i] == ',')) ++i;
    if (i >= end) break;
    size_t used = 0;
    try {
      out.push_back(std::stoll(s.substr(i, end - i), &used));
    } catch (const std::exception&) {
      return std::nullopt;
    }
    i += used;
  }
  return out;
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* client) {
  static_cast<std::vector<std::string>*>(client)->push_back(name);
  return 0;
}

std::string str_or_empty(const char* p) { return p ? std::string(p) : std::string(); }

}  // namespace

Result<DumpReader> DumpReader::open(const std::string& path) {
  h5::silence_errors();
  if (access(path.c_str(), F_OK) != 0) return Status::NotFound(path + ": no such dump file");
  h5::Id fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  h5::relax_file_locking(fapl.get());
  h5::Id f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!f.valid()) {
    return Status::Corrupt(path + ": not a readable HDF5 file: " + h5::take_error_text());
  }
  return DumpReader(path, std::move(f));
}

bool DumpReader::exists(const std::string& object_path) const {
  return h5::path_exists(file_.get(), object_path);
}

bool DumpReader::has_attr(const std::string& name, const std::string& object_path) const {
  if (object_path != "/" && !exists(object_path)) return false;
  const htri_t e = H5Aexists_by_name(file_.get(), object_path.c_str(), name.c_str(), H5P_DEFAULT);
  if (e < 0) h5::take_error_text();
  return e > 0;
}

Result<h5::Id> DumpReader::open_attr(const std::string& name,
                                     const std::string& object_path) const {
  if (!has_attr(name, object_path)) {
    return Status::NotFound(path_ + ": " + object_path + ": no attribute " + name);
  }
  h5::Id a = h5::attr(
      H5Aopen_by_name(file_.get(), object_path.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid()) return h5::error(path_, object_path + ": cannot open attribute " + name);
  return a;
}

Result<int64_t> DumpReader::attr_int(const std::string& name,
                                     const std::string& object_path) const {
  DZ_ASSIGN_OR_RETURN(h5::Id a, open_attr(name, object_path));
  h5::Id t = h5::type(H5Aget_type(a.get()));
  if (H5Tget_class(t.get()) != H5T_INTEGER) {
    return Status::InvalidArgument(path_ + ": " + object_path + ": attribute " + name +
                                   " is not an integer");
  }
  int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) {
    return h5::error(path_, object_path + ": cannot read attribute " + name);
  }
  return v;
}

Result<double> DumpReader::attr_double(const std::string& name,
                                       const std::string& object_path) const {
  DZ_ASSIGN_OR_RETURN(h5::Id a, open_attr(name, object_path));
  h5::Id t = h5::type(H5Aget_type(a.get()));
  const H5T_class_t c = H5Tget_class(t.get());
  if (c != H5T_FLOAT && c != H5T_INTEGER) {
    return Status::InvalidArgument(path_ + ": " + object_path + ": attribute " + name +
                                   " is not a number");
  }
  double v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) {
    return h5::error(path_, object_path + ": cannot read attribute " + name);
  }
  return v;
}

Result<std::string> DumpReader::attr_string(const std::string& name,
                                            const std::string& object_path) const {
  DZ_ASSIGN_OR_RETURN(h5::Id a, open_attr(name, object_path));
  h5::Id t = h5::type(H5Aget_type(a.get()));
  if (H5Tget_class(t.get()) != H5T_STRING) {
    return Status::InvalidArgument(path_ + ": " + object_path + ": attribute " + name +
                                   " is not a string");
  }
  if (H5Tis_variable_str(t.get()) > 0) {
    h5::Id mem = h5::vlen_string_type();
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0) {
      return h5::error(path_, object_path + ": cannot read attribute " + name);
    }
    std::string out = str_or_empty(p);
    H5free_memory(p);
    return out;
  }
  // Fixed-length (as other tools may write): read the bytes, stop at the first NUL.
  const size_t n = H5Tget_size(t.get());
  std::string buf(n, '\0');
  h5::Id mem = h5::type(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem.get(), n);
  if (H5Aread(a.get(), mem.get(), buf.data()) < 0) {
    return h5::error(path_, object_path + ": cannot read attribute " + name);
  }
  buf.resize(std::min(buf.find('\0'), n));
  return buf;
}

Result<RootAttributes> DumpReader::root_attributes() const {
  RootAttributes a;
  const std::pair<const char*, int64_t*> ints[] = {
      {"rank", &a.rank}, {"world_size", &a.world_size},
      {"dp", &a.dp},     {"pp", &a.pp},
      {"tp", &a.tp},     {"ep", &a.ep},
      {"etp", &a.etp},   {"clock_offset_ns", &a.clock_offset_ns}};
  for (const auto& [name, dst] : ints) {
    DZ_ASSIGN_OR_RETURN(*dst, attr_int(name));
  }
  const std::pair<const char*, std::string*> strs[] = {{"dayzero_version", &a.dayzero_version},
                                                       {"hostname", &a.hostname},
                                                       {"device", &a.device},
                                                       {"backend", &a.backend},
                                                       {"model_config", &a.model_config},
                                                       {"plan", &a.plan},
                                                       {"run_config", &a.run_config},
                                                       {"started_at", &a.started_at}};
  for (const auto& [name, dst] : strs) {
    DZ_ASSIGN_OR_RETURN(*dst, attr_string(name));
  }
  return a;
}

Result<bool> DumpReader::complete() const {
  DZ_ASSIGN_OR_RETURN(int64_t c, attr_int("complete"));
  return c != 0;
}

Result<std::vector<std::string>> DumpReader::list(const std::string& group_path) const {
  if (!exists(group_path)) return Status::NotFound(path_ + ": no group " + group_path);
  h5::Id g = h5::group(H5Gopen2(file_.get(), group_path.c_str(), H5P_DEFAULT));
  if (!g.valid()) return h5::error(path_, group_path + ": cannot open group");
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Literate(g.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names) < 0) {
    return h5::error(path_, group_path + ": cannot list group");
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::vector<std::string>> DumpReader::list_prompts() const {
  std::set<std::string> ids;
  for (const char* g : {"/activations", "/outputs"}) {
    if (!exists(g)) continue;
    DZ_ASSIGN_OR_RETURN(std::vector<std::string> names, list(g));
    ids.insert(names.begin(), names.end());
  }
  return std::vector<std::string>(ids.begin(), ids.end());
}

Result<std::vector<std::string>> DumpReader::list_activations(const std::string& prompt_id,
                                                              const std::string& phase) const {
  return list("/activations/" + prompt_id + "/" + phase);
}

bool DumpReader::is_stats(const std::string& prompt_id, const std::string& phase,
                          const std::string& name) const {
  return has_attr(kStatsFieldsAttr, activation_path(prompt_id, phase, name));
}

template <class T>
Result<Array<T>> DumpReader::read_array(const std::string& dataset_path, hid_t mem_type,
                                        H5T_class_t want) const {
  Array<T> out;
  DZ_RETURN_IF_ERROR(read_array_into(dataset_path, mem_type, want, out));
  return out;
}

template <class T>
Status DumpReader::read_array_into(const std::string& dataset_path, hid_t mem_type,
                                   H5T_class_t want, Array<T>& out) const {
  if (!exists(dataset_path)) return Status::NotFound(path_ + ": no dataset " + dataset_path);
  h5::Id ds = h5::dataset(H5Dopen2(file_.get(), dataset_path.c_str(), H5P_DEFAULT));
  if (!ds.valid()) return h5::error(path_, dataset_path + ": cannot open dataset");
  h5::Id t = h5::type(H5Dget_type(ds.get()));
  if (H5Tget_class(t.get()) != want) {
    return Status::InvalidArgument(path_ + ": " + dataset_path + ": element type is not " +
                                   (want == H5T_FLOAT ? "floating point" : "integer"));
  }
  h5::Id space = h5::space(H5Dget_space(ds.get()));
  const int ndims = H5Sget_simple_extent_ndims(space.get());
  if (ndims < 0) return h5::error(path_, dataset_path + ": cannot read shape");
  std::vector<hsize_t> dims(static_cast<size_t>(ndims));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  out.shape.clear();
  size_t numel = 1;
  for (hsize_t d : dims) {
    out.shape.push_back(static_cast<int64_t>(d));
    numel *= static_cast<size_t>(d);
  }
  out.data.resize(numel);
  if (numel > 0 &&
      H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data.data()) < 0) {
    return h5::error(path_, dataset_path + ": cannot read dataset");
  }
  return Status::Ok();
}

Result<FloatArray> DumpReader::read_float(const std::string& dataset_path) const {
  return read_array<float>(dataset_path, H5T_NATIVE_FLOAT, H5T_FLOAT);
}

Status DumpReader::read_float_into(const std::string& dataset_path, FloatArray& out) const {
  return read_array_into<float>(dataset_path, H5T_NATIVE_FLOAT, H5T_FLOAT, out);
}

Result<DoubleArray> DumpReader::read_double(const std::string& dataset_path) const {
  return read_array<double>(dataset_path, H5T_NATIVE_DOUBLE, H5T_FLOAT);
}

Result<Int32Array> DumpReader::read_int32(const std::string& dataset_path) const {
  return read_array<int32_t>(dataset_path, H5T_NATIVE_INT32, H5T_INTEGER);
}

Result<FloatArray> DumpReader::read_activation(const std::string& prompt_id,
                                               const std::string& phase,
                                               const std::string& name) const {
  return read_float(activation_path(prompt_id, phase, name));
}

Result<OutputRecord> DumpReader::read_output(const std::string& prompt_id) const {
  const std::string g = output_path(prompt_id);
  if (!exists(g)) return Status::NotFound(path_ + ": no outputs for prompt " + prompt_id);
  OutputRecord out;
  out.prompt_id = prompt_id;
  DZ_ASSIGN_OR_RETURN(Int32Array prompt_ids, read_int32(g + "/prompt_ids"));
  DZ_ASSIGN_OR_RETURN(Int32Array generated, read_int32(g + "/generated_ids"));
  DZ_ASSIGN_OR_RETURN(FloatArray logits_last, read_float(g + "/logits_last"));
  DZ_ASSIGN_OR_RETURN(Int32Array topk_ids, read_int32(g + "/step_topk_ids"));
  DZ_ASSIGN_OR_RETURN(FloatArray topk_logits, read_float(g + "/step_topk_logits"));
  DZ_ASSIGN_OR_RETURN(out.text, attr_string("text", g));
  if (topk_ids.shape.size() != 2 || topk_logits.shape != topk_ids.shape) {
    return Status::Corrupt(path_ + ": " + g + ": step_topk_ids and step_topk_logits are not " +
                           "both [n_steps, k]");
  }
  out.prompt_ids = std::move(prompt_ids.data);
  out.generated_ids = std::move(generated.data);
  out.logits_last = std::move(logits_last.data);
  out.topk = topk_ids.shape[1];
  out.step_topk_ids = std::move(topk_ids.data);
  out.step_topk_logits = std::move(topk_logits.data);
  if (has_attr("reference_nll", g)) {
    DZ_ASSIGN_OR_RETURN(double nll, attr_double("reference_nll", g));
    out.reference_nll = nll;
  }
  if (has_attr("reference_tokens", g)) {
    DZ_ASSIGN_OR_RETURN(int64_t n, attr_int("reference_tokens", g));
    out.reference_tokens = n;
  }
  return out;
}

namespace {

// Reads a whole 1-D compound dataset into rows of Mem (vlen strings owned by HDF5 until
// reclaim), hands them to convert, then frees the strings.
template <class Mem, class Convert>
Status read_compound(hid_t file, const std::string& file_path, const std::string& path,
                     hid_t mem_type, Convert convert) {
  h5::Id ds = h5::dataset(H5Dopen2(file, path.c_str(), H5P_DEFAULT));
  if (!ds.valid()) return h5::error(file_path, path + ": cannot open dataset");
  h5::Id space = h5::space(H5Dget_space(ds.get()));
  if (H5Sget_simple_extent_ndims(space.get()) != 1) {
    return Status::Corrupt(file_path + ": " + path + ": not one-dimensional");
  }
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  std::vector<Mem> rows(static_cast<size_t>(n));
  if (n == 0) return Status::Ok();
  if (H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0) {
    return h5::error(file_path, path + ": cannot read dataset");
  }
  Status s = convert(rows);
#if H5_VERSION_GE(1, 12, 0)
  H5Treclaim(mem_type, space.get(), H5P_DEFAULT, rows.data());
#else
  H5Dvlen_reclaim(mem_type, space.get(), H5P_DEFAULT, rows.data());
#endif
  return s;
}

}  // namespace

Result<std::vector<WeightRow>> DumpReader::read_weights() const {
  std::vector<WeightRow> out;
  if (!exists("/weights")) return out;
  h5::Id t = h5::weight_mem_type();
  Status s = read_compound<h5::WeightMem>(
      file_.get(), path_, "/weights", t.get(), [&](const std::vector<h5::WeightMem>& rows) {
        for (const h5::WeightMem& m : rows) {
          WeightRow r;
          r.name = str_or_empty(m.name);
          r.file = str_or_empty(m.file);
          r.dtype = str_or_empty(m.dtype);
          auto shape = parse_shape(str_or_empty(m.shape));
          if (!shape) {
            return Status::Corrupt(path_ + ": /weights: " + r.name + ": bad shape '" +
                                   str_or_empty(m.shape) + "'");
          }
          r.shape = std::move(*shape);
          r.offset = m.offset;
          r.bytes_read = m.bytes_read;
          r.ranges = m.ranges;
          r.checksum = m.checksum;
          r.nan_count = m.nan_count;
          r.inf_count = m.inf_count;
          out.push_back(std::move(r));
        }
        return Status::Ok();
      });
  if (!s.ok()) return s;
  return out;
}

Result<std::vector<TimelineEvent>> DumpReader::read_timeline() const {
  std::vector<TimelineEvent> out;
  if (!exists("/timeline")) return out;
  h5::Id t = h5::timeline_mem_type();
  Status s = read_compound<h5::TimelineMem>(
      file_.get(), path_, "/timeline", t.get(), [&](const std::vector<h5::TimelineMem>& rows) {
        for (const h5::TimelineMem& m : rows) {
          out.push_back({m.t_begin_ns, m.t_end_ns, str_or_empty(m.kind), str_or_empty(m.name),
                         str_or_empty(m.group), m.seq, m.bytes});
        }
        return Status::Ok();
      });
  if (!s.ok()) return s;
  return out;
}

}  // namespace dayzero::dump
