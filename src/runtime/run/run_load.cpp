// The load phases of a run: this rank's slices of the checkpoint, read by byte range with
// progress and checked against the bytes the plan's slices hold, the /weights rows of the
// dump; then the coverage check over the world and the job-wide load figures. Not the reading
// itself (runtime/model_loader.h, checkpoint/).
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/log.h"
#include "dump/schema.h"
#include "plan/slicing.h"
#include "runtime/progress.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace fs = std::filesystem;
namespace {

// Where kernel tuning results are kept between runs: DAYZERO_CACHE_DIR, else the XDG cache.
std::string kernel_cache_dir() {
  if (const char* d = std::getenv("DAYZERO_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/dayzero";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/dayzero";
  return "";
}

}  // namespace

Status Run::load_checkpoint() {
  heartbeat_->set_phase("load");
  if (env_.rank() == 0) DZ_LOG_INFO("backend {}", be_->describe());
  const plan::EdgeNames names = plan::edge_names(*model_.adapter, model_.hp);
  // The bytes this rank will read, from the plan's slices: the progress total and the check below.
  uint64_t expected = 0;
  for (const auto& spec : model_.specs) {
    if (spec.skip_load) continue;
    const plan::Slice s = plan::slice_for(spec, model_.hp, plan_, env_.rank(), names);
    if (!s.held) continue;
    // A quantized weight: its values (the scales are counted apart, as the loader's record does).
    if (model::is_stored_weight(spec)) expected += static_cast<uint64_t>(plan::stored_value_bytes(spec, s));
    else
      expected += static_cast<uint64_t>(
          plan::slice_bytes(spec, s, static_cast<int64_t>(dtype_size(model_.catalog.find(spec.name)->dtype))));
  }
  uint64_t loaded = 0;
  heartbeat_->set_progress(0, static_cast<int64_t>(expected));
  std::optional<ProgressReporter> progress;
  if (env_.rank() == 0) progress.emplace(run_dir_, env_.world_size(), "load");
  const SliceFn slice_of = [&](const model::TensorSpec& spec) {
    const plan::Slice s = plan::slice_for(spec, model_.hp, plan_, env_.rank(), names);
    return TensorSlice{s.held, s.dim, s.begin, s.end, s.rows};
  };
  DZ_ASSIGN_OR_RETURN(load_stats_, load_weights(
                                       model_, *be_, weights_, records_,
                                       [&](const checkpoint::WeightRecord& r) {
                                         loaded += r.bytes_read;
                                         heartbeat_->set_current("load " + r.name);
                                         heartbeat_->set_progress(static_cast<int64_t>(loaded),
                                                                  static_cast<int64_t>(expected));
                                       },
                                       slice_of, static_cast<size_t>(cfg_.runtime.staging_mib.value_or(256)) << 20,
                                       0, weights_on_device()));
  // The loader's own counters against the plan: exactly the bytes of this rank's slices.
  if (expected != load_stats_.bytes_read)
    return Status::Internal("loaded " + std::to_string(load_stats_.bytes_read) + " bytes, the plan's slices hold " +
                            std::to_string(expected));
  DZ_RETURN_IF_ERROR(check_device_weights_and_reserve());
  if (!writer_) return Status::Ok();
  std::vector<dump::WeightRow> rows;
  for (const auto& r : records_) {
    dump::WeightRow w;
    w.name = r.name;
    // The shard's name, or its real path when the folder links it (a Hugging Face cache).
    const checkpoint::TensorInfo* t = model_.catalog.find(r.name);
    w.file = t && !t->resolved.empty() ? t->resolved : fs::path(r.file).filename().string();
    w.dtype = dtype_name(r.dtype);
    w.shape = r.shape;
    w.offset = r.ranges.empty() ? 0 : r.ranges.front().first;
    w.bytes_read = r.bytes_read;
    w.ranges = r.ranges.size();
    w.checksum = r.checksum;
    w.nan_count = r.nan_count;
    w.inf_count = r.inf_count;
    rows.push_back(std::move(w));
  }
  return writer_->write_weights(rows);
}

Status Run::tune_kernels() {
  // The kernels tuned on the weights just placed, cached per CPU model and shapes;
  // DAYZERO_GEMM_TUNE=off keeps the defaults and the fixed rule. The decode GEMM's settings give
  // the same bits whichever is chosen, so every rank times its own. The prefill path changes
  // bits: rank 0 times it and every rank takes rank 0's choice, so each rank's products sum as
  // a single-rank run's on rank 0's machine do.
  const char* tune = std::getenv("DAYZERO_GEMM_TUNE");
  if (tune && std::string(tune) == "off") return Status::Ok();
  const std::string tuned = be_->tune(weights_.tensors(), kernel_cache_dir());
  if (!tuned.empty() && env_.rank() == 0) DZ_LOG_INFO("{}", tuned);
  std::string chosen;
  if (env_.rank() == 0) {
    const std::string timed = be_->tune_prefill(weights_.tensors(), kernel_cache_dir(), &chosen);
    if (!timed.empty()) DZ_LOG_INFO("{}", timed);
  }
  chosen = comm::broadcast_string(chosen);
  return env_.rank() == 0 ? Status::Ok() : be_->use_prefill_path(chosen);
}

std::optional<plan::WeightsOnDevice> Run::weights_on_device() const {
  // Every backend keeps what the plan counted (plan::kept_dtype).
  switch (cfg_.model.weights_on_device) {
    case config::WeightsOnDevice::kAsStored: return plan::WeightsOnDevice::kAsStored;
    case config::WeightsOnDevice::kBF16: return plan::WeightsOnDevice::kBF16;
    case config::WeightsOnDevice::kF32: return plan::WeightsOnDevice::kF32;
  }
  return std::nullopt;
}

Status Run::check_device_weights_and_reserve() {
  if (plan_.memory.empty()) return Status::Ok();
  const plan::RankMemory& planned = plan_.memory.at(static_cast<size_t>(env_.rank()));
  if (planned.total() == 0) return Status::Ok();  // a plan without an estimate
  const bool cpu = be_->name() == "cpu";
  // CPU: the weight tensors' own bytes and the block scales held with its FP8 weights.
  device_weight_bytes_ = cpu ? weights_.bytes() + be_->memory_info().weight_scale_bytes : be_->memory_info().weight_bytes;
  // The allocation and the plan count the same slices by the same rule (plan::kept_dtype,
  // plan::stored_slice's held_bytes): a difference is a defect, not an estimate's slack.
  if (device_weight_bytes_ != planned.weights)
    return Status::Internal("rank " + std::to_string(env_.rank()) + ": the " + (cpu ? "CPU" : "device") + " holds " +
                            std::to_string(device_weight_bytes_) + " bytes of weights, the plan counted " +
                            std::to_string(planned.weights));
  if (cpu) {  // host memory: nothing to pre-size
    if (env_.rank() == 0)
      DZ_LOG_INFO("cpu: weights {} bytes as the plan counted (model.weights_on_device: {})", device_weight_bytes_,
                  config::weights_on_device_name(cfg_.model.weights_on_device));
    return Status::Ok();
  }
  // The KV cache (and linear-attention state), the activations and the GEMM workspaces at the
  // plan's sizes, before the first prompt.
  backend::Reservation r;
  r.max_tokens = plan_tokens_;
  r.cache_bytes = planned.kv_cache + planned.state;
  r.activation_bytes = planned.activations;
  Status st = be_->reserve(r);
  if (!st.ok()) return st.with_context("rank " + std::to_string(env_.rank()));
  if (env_.rank() == 0)
    DZ_LOG_INFO("device: weights {} bytes as the plan counted; KV cache, state and activations pre-sized ({} MiB), "
                "peak {} MiB", device_weight_bytes_, (r.cache_bytes + r.activation_bytes) >> 20,
                be_->memory_info().peak_bytes >> 20);
  return Status::Ok();
}

Status Run::check_coverage() {
  // Collective over the world: every checkpoint tensor (every spec; check_tensors matched
  // them one to one) must be held by at least one rank.
  // A replay covers the tensors of its layers only (the plan's one stage holds nothing else).
  const plan::EdgeNames names = plan::edge_names(*model_.adapter, model_.hp);
  std::vector<int64_t> held(model_.specs.size(), 0);
  for (size_t i = 0; i < model_.specs.size(); ++i)  // skip_load specs are claimed, never held
    held[i] = model_.specs[i].skip_load || weights_.has(model_.specs[i].name) ||
                      (replay_layers_ && !plan::stage_holds(model_.specs[i], model_.hp, plan_.stages.front(), names))
                  ? 1
                  : 0;
  DZ_RETURN_IF_ERROR(groups_->world().all_reduce_max_int(held.data(), static_cast<int>(held.size())));
  tensors_needed_ = tensors_claimed_ = 0;
  for (size_t i = 0; i < held.size(); ++i) {
    if (replay_layers_ && !plan::stage_holds(model_.specs[i], model_.hp, plan_.stages.front(), names)) continue;
    ++tensors_needed_;
    tensors_claimed_ += held[i] ? 1 : 0;
  }
  for (size_t i = 0; i < held.size(); ++i)
    if (!held[i])
      return Status::Internal("coverage: tensor " + model_.specs[i].name + " is held by no rank under the plan");
  // The job-wide load figures: bytes over all ranks, time of the slowest rank.
  int64_t totals[2] = {static_cast<int64_t>(load_stats_.bytes_read), static_cast<int64_t>(load_stats_.seconds * 1e9)};
  int64_t bytes_all = totals[0];
  DZ_RETURN_IF_ERROR(groups_->world().all_reduce_max_int(&totals[1], 1));
  MPI_Allreduce(&totals[0], &bytes_all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  const double secs = static_cast<double>(totals[1]) * 1e-9;
  if (env_.rank() == 0)
    DZ_LOG_INFO("[load] 100% {:.3f} GB of checkpoint {:.3f} GB read by {} rank(s) in {:.3f} s ({:.2f} GB/s)",
                static_cast<double>(bytes_all) * 1e-9, static_cast<double>(model_.catalog.total_bytes()) * 1e-9,
                env_.world_size(), secs, secs > 0 ? static_cast<double>(bytes_all) * 1e-9 / secs : 0.0);
  return Status::Ok();
}

}  // namespace dayzero::runtime
