// The tensor check of a model folder and the weight loading loop.
#include "runtime/model_loader.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "checkpoint/stored.h"
#include "core/clock.h"
#include "kernels/ops.h"
#include "model/stored_specs.h"
#include "model/registry.h"
#include "plan/slicing.h"

namespace dayzero::runtime {
namespace fs = std::filesystem;

Status check_tensors(const ModelInfo& m) {
  std::set<std::string> claimed;
  for (const auto& spec : m.specs) {
    // A compressed-tensors logical weight has nothing under its name: its stored companions are
    // specs of their own. 4-bit codes in place are checked at their packed shape.
    const std::optional<Shape> disk = model::on_disk_shape(spec);
    if (!disk) continue;
    claimed.insert(spec.name);
    const checkpoint::TensorInfo* t = m.catalog.find(spec.name);
    if (!t)
      return Status::NotFound(m.dir + ": tensor " + spec.name + " " + shape_str(*disk) + " expected by the " +
                              m.adapter->family() + " adapter is missing from the checkpoint");
    if (t->shape != *disk)
      return Status::InvalidArgument(t->file + ": tensor " + spec.name + " has shape " + shape_str(t->shape) +
                                     ", expected " + shape_str(*disk));
    if (!model::stored_dtype_fits(spec, t->dtype))
      return Status::Unsupported(t->file + ": tensor " + spec.name + " has dtype " + dtype_name(t->dtype) +
                                 ", expected " + model::expected_dtype(spec));
  }
  std::vector<const checkpoint::TensorInfo*> unclaimed;
  for (const auto& t : m.catalog.tensors())
    if (!claimed.count(t.name)) unclaimed.push_back(&t);
  if (!unclaimed.empty()) {
    std::ostringstream os;
    os << unclaimed[0]->file << ": tensor " << unclaimed[0]->name << " is not claimed by the " << m.adapter->family()
       << " adapter";
    if (unclaimed.size() > 1) os << " (and " << unclaimed.size() - 1 << " more unclaimed tensors)";
    return Status::Corrupt(os.str());
  }
  return Status::Ok();
}

Status check_keepable_as_stored(const ModelInfo& m) {
  for (const auto& spec : m.specs) {
    const checkpoint::TensorInfo* t = m.catalog.find(spec.name);
    const bool fp8 = t && (t->dtype == DType::kF8_E4M3 || t->dtype == DType::kF8_E5M2);
    const bool int4 = model::is_stored_weight(spec, StoredScheme::kInt4Group);
    if (int4 || (fp8 && !model::is_stored_weight(spec)))
      return Status::Unsupported(std::string("model.weights_on_device: as_stored cannot take effect on the device for ") +
                                 spec.name + (int4 ? " (pack-quantized INT4" : " (FP8 without block scales") +
                                 ", dequantised on load); use bfloat16");
  }
  return Status::Ok();
}

namespace {

// Bytes of the tensors the loader hands over for this rank's slices (weights kept as stored
// allocate their own): f32, or 16-bit floats as stored when `stored_float`; each padded as the
// arena places it.
size_t loader_result_bytes(const ModelInfo& m, const SliceFn& slice_of, bool stored_float) {
  size_t total = 0;
  for (const auto& spec : m.specs) {
    if (spec.skip_load || model::is_stored_weight(spec)) continue;
    const TensorSlice s = slice_of ? slice_of(spec) : TensorSlice{};
    if (!s.held) continue;
    const plan::Slice ps{s.held, s.dim, s.begin, s.end, s.rows};
    const checkpoint::TensorInfo* t = m.catalog.find(spec.name);
    const bool half = stored_float && t && (t->dtype == DType::kBF16 || t->dtype == DType::kF16);
    total += HostArena::padded(static_cast<size_t>(plan::slice_bytes(spec, ps, half ? 2 : 4)));
  }
  return total;
}

}  // namespace

Result<LoadStats> load_weights(const ModelInfo& m, backend::Backend& be, model::Weights& weights,
                               std::vector<checkpoint::WeightRecord>& records,
                               const std::function<void(const checkpoint::WeightRecord&)>& on_tensor,
                               const SliceFn& slice_of, size_t staging_bytes, int threads,
                               std::optional<plan::WeightsOnDevice> weights_on_device) {
  LoadStats stats;
  const int64_t t0 = monotonic_ns();
  checkpoint::ByteReader reader;
  // The threads the backend computes with (DAYZERO_THREADS, runtime.threads or cores / ranks
  // per node): they are idle while weights load.
  checkpoint::Loader loader(threads > 0 ? threads : kernels::cpu::gemm_info().threads, staging_bytes);
  // BF16/F16 tensors as stored for a backend that converts them on its device (quantized weights
  // below keep their own forms).
  loader.set_keep_stored_float(be.wants_stored_dtype());
  // The CPU backend keeps the loader's tensors as its weights: one arena holds them all, on
  // huge pages (HostArena). A device backend copies each one away, so they stay separate.
  std::optional<HostArena> arena;
  if (be.device().kind == DeviceKind::kCpu) {
    arena.emplace(loader_result_bytes(m, slice_of, be.wants_stored_dtype()));
    loader.place_results_in(&*arena);
  }
  const auto finite = [](const model::TensorSpec& spec, const checkpoint::WeightRecord& rec) -> Status {
    if (rec.nan_count || rec.inf_count)
      return Status::Corrupt(rec.file + ": tensor " + spec.name + " holds " + std::to_string(rec.nan_count) +
                             " NaN and " + std::to_string(rec.inf_count) + " infinite values");
    return Status::Ok();
  };
  const auto stored = [&](const model::TensorSpec& spec) { return model::checkpoint_dtype(spec, m.catalog); };
  const auto record = [&](checkpoint::WeightRecord rec) {
    stats.bytes_read += rec.bytes_read;
    ++stats.tensors;
    if (on_tensor) on_tensor(rec);
    records.push_back(std::move(rec));
  };
  // What the backend keeps of quantized weights (plan::kept_dtype), by row of the stored-format
  // table; FP8 without block scales only where a device keeps FP8 (the CPU dequantises it).
  plan::KeepsQuantized keeps;
  for (int i = 0; i < kStoredSchemeCount; ++i) keeps.schemes[i] = be.keeps_stored(static_cast<StoredScheme>(i));
  keeps.fp8_unscaled = be.device().kind != DeviceKind::kCpu && be.keeps_stored(StoredScheme::kFp8Block);
  // An index table (DeepSeek-V4's tid2eid: token -> experts) holds whole numbers in [0, index_range).
  const auto in_range = [](const model::TensorSpec& spec, const Tensor& host, const checkpoint::WeightRecord& rec) -> Status {
    if (spec.index_range <= 0) return Status::Ok();
    DZ_CHECK(host.dtype() == DType::kF32, spec.name << ": an index table is loaded as f32");
    for (int64_t i = 0; i < host.numel(); ++i) {
      const float v = host.f32()[i];
      if (v < 0 || v >= static_cast<float>(spec.index_range) || v != static_cast<float>(static_cast<int64_t>(v)))
        return Status::Corrupt(rec.file + ": tensor " + spec.name + " holds " + std::to_string(static_cast<int64_t>(v)) +
                               " at element " + std::to_string(i) + ", outside [0, " + std::to_string(spec.index_range) +
                               ")");
    }
    return Status::Ok();
  };
  const auto place = [&](const model::TensorSpec& spec, Tensor host, checkpoint::WeightRecord rec) -> Status {
    DZ_RETURN_IF_ERROR(finite(spec, rec));
    DZ_RETURN_IF_ERROR(in_range(spec, host, rec));
    if (weights_on_device) {
      const DType kept = plan::kept_dtype(spec, stored(spec), *weights_on_device, keeps);
      // An FP8 weight dequantised on the host (a backend that keeps no FP8) takes the compute dtype's place.
      weights.put(spec.name, be.to_device_weight(host, kept == DType::kF32 ? DType::kF32 : DType::kBF16));
    } else {
      weights.put(spec.name, be.to_device_weight(host));
    }
    record(std::move(rec));
    return Status::Ok();
  };
  // One tensor stays queued: its hashing and conversion finish while the next one is read.
  const model::TensorSpec* queued = nullptr;
  const auto take_queued = [&]() -> Status {
    if (!queued) return Status::Ok();
    checkpoint::WeightRecord rec;
    DZ_ASSIGN_OR_RETURN(Tensor host, loader.next(&rec));
    const model::TensorSpec& spec = *queued;
    queued = nullptr;
    return place(spec, std::move(host), std::move(rec));
  };
  for (const auto& spec : m.specs) {
    if (spec.skip_load) continue;
    const TensorSlice slice = slice_of ? slice_of(spec) : TensorSlice{};
    if (!slice.held) continue;
    if (!slice.rows.empty() && model::is_stored_weight(spec))
      return Status::Unsupported(m.dir + ": tensor " + spec.name +
                                 ": a quantized weight cannot be split in sections over tp yet");
    if (!slice.rows.empty()) {
      DZ_RETURN_IF_ERROR(loader.submit_rows(m.catalog, spec.name, reader, slice.rows));
      DZ_RETURN_IF_ERROR(take_queued());
      queued = &spec;
      continue;
    }
    if (model::is_stored_weight(spec)) {
      // A quantized weight (any row of the stored-format table): only this slice's values and
      // the scales of the blocks covering it are read.
      DZ_RETURN_IF_ERROR(take_queued());
      checkpoint::WeightRecord rec;
      const checkpoint::StoredLayout layout = model::stored_layout(spec);
      const int64_t out = spec.shape[0], in = spec.shape[1];
      if (weights_on_device && be.keeps_stored(spec.stored.format->scheme) &&
          is_stored_weight_dtype(plan::kept_dtype(spec, stored(spec), *weights_on_device, keeps))) {
        // Kept as stored: values and scales go to the backend, converted inside its GEMM.
        DZ_ASSIGN_OR_RETURN(StoredWeightSlice w, checkpoint::load_stored(m.catalog, layout, out, in, reader, &rec,
                                                                         slice.dim, slice.begin, slice.end,
                                                                         staging_bytes));
        DZ_RETURN_IF_ERROR(finite(spec, rec));
        weights.put(spec.name, be.to_device_stored(w));
        record(std::move(rec));
        continue;
      }
      DZ_ASSIGN_OR_RETURN(Tensor host, checkpoint::load_stored_dequant_f32(m.catalog, layout, out, in, reader, &rec,
                                                                           slice.dim, slice.begin, slice.end,
                                                                           staging_bytes));
      DZ_RETURN_IF_ERROR(place(spec, std::move(host), std::move(rec)));
      continue;
    }
    DZ_RETURN_IF_ERROR(loader.submit(m.catalog, spec.name, reader, slice.dim, slice.begin, slice.end));
    DZ_RETURN_IF_ERROR(take_queued());
    queued = &spec;
  }
  DZ_RETURN_IF_ERROR(take_queued());
  stats.seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  return stats;
}

}  // namespace dayzero::runtime
