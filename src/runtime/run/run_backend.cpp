// The backend phase of a run: which backend and comm this rank uses (backend: auto -> CUDA
// when a GPU is visible, else CPU; comm: auto -> NCCL for tp, pp and ep when every rank drives
// a GPU of its own, from the gathered PCI bus ids, else MPI, which stages device buffers
// through host memory: comm/device_comm.h), the device it binds to (local rank modulo the
// visible devices), the compute dtype, and the plan's bytes plus what the backend holds beyond
// them (backend/device_memory.h) checked against the device before anything is allocated. Not
// where tensors are placed (run_load.cpp) nor the dump file's record of it (run_folder.cpp).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <thread>

#include "backend/backend.h"
#include "comm/completion_wait.h"
#include "comm/device_comm.h"
#include "comm/mpi_env.h"
#include "core/log.h"
#include "model/stored_specs.h"
#include "model/tensor_spec.h"
#include "plan/slicing.h"
#include "runtime/device_groups.h"
#include "runtime/gemm_workspace_plan.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {

int default_threads(const comm::MpiEnv& env) {
  if (const char* e = std::getenv("DAYZERO_THREADS")) return std::max(1, std::atoi(e));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, env.local_size()));
}

}  // namespace

Result<bool> Run::uses_cuda() const {
  DZ_ASSIGN_OR_RETURN(const int n_gpu, backend::cuda_device_count());
  return cfg_.backend == config::Backend::kCuda || (cfg_.backend == config::Backend::kAuto && n_gpu > 0);
}

Status Run::create_backend() {
  backend::BackendOptions bo;
  bo.threads = args_.threads > 0 ? args_.threads : cfg_.runtime.threads.value_or(default_threads(env_));
  DZ_ASSIGN_OR_RETURN(const int n_gpu, backend::cuda_device_count());
  DZ_ASSIGN_OR_RETURN(const bool cuda, uses_cuda());
  if (!cuda) {
    bo.kind = "cpu";
    // The CPU keeps 16-bit weights as stored (converting inside its GEMM) unless float32 is asked for.
    bo.cpu_keeps_stored = cfg_.model.weights_on_device != config::WeightsOnDevice::kF32;
    if (cfg_.topology.keys.device_memory_bytes) bo.memory_budget_bytes = *cfg_.topology.keys.device_memory_bytes;
    DZ_ASSIGN_OR_RETURN(be_, backend::make_backend(bo));
    comm_choice_ = "mpi";
  } else {
    // Checked here, with the model open, so that what the plan counted is what is allocated:
    // block-scaled FP8 weights stay FP8 on the device, but a pack-quantized INT4 weight and an
    // FP8 tensor without block scales have no device form as stored.
    if (cfg_.model.weights_on_device == config::WeightsOnDevice::kAsStored) {
      const Status keepable = check_keepable_as_stored(model_);
      if (!keepable.ok()) return keepable.with_context(cfg_.source_name);
    }
    const DType dt = cfg_.model.dtype.value_or(DType::kBF16);
    if (dt != DType::kBF16 && dt != DType::kF32)
      return Status::Unsupported(cfg_.source_name + ": model.dtype: float16 is not built on the CUDA backend; use "
                                 "bfloat16 or float32");
    bo.kind = "cuda";
    bo.compute_dtype = dt;
    bo.device_index = env_.local_rank() % std::max(1, n_gpu);
    bo.required_bytes = plan_.memory.empty() ? 0 : plan_.memory.at(static_cast<size_t>(env_.rank())).total();
    // Collective over the world: every rank's host and GPU (PCI bus id, which names the
    // physical GPU whatever CUDA_VISIBLE_DEVICES renumbers), so that comm: auto takes NCCL when
    // each rank drives its own GPU, also when each sees only that one (Slurm --gpus-per-task=1).
    auto bus = backend::cuda_pci_bus_id(bo.device_index);
    const std::vector<std::string> keys =
        comm::all_gather_strings(comm::gpu_key(env_.hostname(), bus.ok() ? *bus : std::string()));
    const comm::CommRequest request = cfg_.comm == config::CommKind::kNccl  ? comm::CommRequest::kNccl
                                      : cfg_.comm == config::CommKind::kMpi ? comm::CommRequest::kMpi
                                                                            : comm::CommRequest::kAuto;
    // The forward sends through ep only under wide expert parallelism (part_.ep); otherwise its
    // experts' tokens move over tp, and an ep communicator would sit unused.
    const std::array<int, 6> sizes{groups_->mpi_world().size(), groups_->mpi_tp().size(),
                                   groups_->mpi_pp().size(),    groups_->mpi_dp().size(),
                                   plan_.wide_ep() ? groups_->mpi_ep().size() : 1, groups_->mpi_etp().size()};
    const comm::DeviceCommChoice choice = comm::choose_device_comm(request, keys, sizes);
    // What the backend holds beyond the plan: staging, cuBLAS, the NCCL communicators and the
    // GEMM workspaces of the weights this rank will place (the loader's rule, before loading).
    const plan::EdgeNames names = plan::edge_names(*model_.adapter, model_.hp);
    const SliceFn slice_of = [&](const model::TensorSpec& spec) {
      const plan::Slice sl = plan::slice_for(spec, model_.hp, plan_, env_.rank(), names);
      return TensorSlice{sl.held, sl.dim, sl.begin, sl.end, sl.rows};
    };
    const auto stored_of = [&](const model::TensorSpec& spec) { return model::checkpoint_dtype(spec, model_.catalog); };
    const backend::GemmWorkspaceBounds::Bytes gemm =
        planned_gemm_workspaces(model_.specs, slice_of, stored_of, weights_on_device(), dt, plan_tokens_);
    int nccl_comms = 0;
    for (bool b : choice.nccl) nccl_comms += b ? 1 : 0;
    bo.device_overhead = backend::cuda_device_overhead(nccl_comms, gemm.weight, gemm.activation);
    // Every rank learns whether every backend came up before any NCCL bootstrap waits for it.
    auto made = backend::make_backend(bo);
    DZ_RETURN_IF_ERROR(comm::agree(made.ok() ? Status::Ok() : made.status()));
    be_ = std::move(made).value();
    DZ_RETURN_IF_ERROR(wrap_groups_for_device(*groups_, *be_, bo.device_index, choice.nccl, &timeline_,
                                              comm::nccl_wait_timeout_s(cfg_.watchdog.collective_timeout_s)));
    part_.tp = plan_.tp > 1 ? &groups_->tp() : nullptr;
    part_.pp = plan_.pp > 1 ? &groups_->pp() : nullptr;
    part_.ep = plan_.wide_ep() ? &groups_->ep() : nullptr;
    comm_choice_ = choice.record;
    if (env_.rank() == 0)
      DZ_LOG_INFO("cuda: beyond the plan's {} MiB the backend holds {}", bo.required_bytes >> 20,
                  bo.device_overhead.describe());
  }
  if (env_.rank() == 0)
    DZ_LOG_INFO("backend {} ({}{}), comm {}", be_->name(), config::backend_name(cfg_.backend),
                cfg_.backend == config::Backend::kAuto ? ": " + std::to_string(n_gpu) + " GPU(s) visible" : "",
                comm_choice_);
  return Status::Ok();
}

}  // namespace dayzero::runtime
