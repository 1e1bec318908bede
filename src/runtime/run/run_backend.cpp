// The backend phase of a run: which backend and comm this rank uses (backend: auto -> CUDA
// when a GPU is visible, else CPU; comm: auto -> NCCL with CUDA when every rank has a GPU of
// its own, else MPI, which stages device buffers through host memory), the device it binds to
// (local rank modulo the visible devices), the compute dtype, and the plan's bytes checked
// against the device before anything is allocated. Not where tensors are placed (run_load.cpp)
// nor the dump file's record of it (run_folder.cpp).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>

#include "backend/backend.h"
#include "comm/nccl_comm.h"
#include "comm/staged_comm.h"
#include "core/log.h"
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
    DZ_ASSIGN_OR_RETURN(be_, backend::make_backend(bo));
    // MPI moves host tensors: device tensors are staged through host memory on every call.
    backend::Backend* be = be_.get();
    comm::DeviceStaging staging{[be](const Tensor& t) {
                                  Tensor h = Tensor::host_uninitialized(t.dtype(), t.shape());
                                  be->to_host(t, h);
                                  return h;
                                },
                                [be](const Tensor& h, Tensor& dst) { be->copy(be->to_device(h), dst); }};
    // comm: auto takes NCCL where every rank of the node has a GPU of its own, MPI otherwise.
    const bool own_gpu = env_.local_size() <= n_gpu;
    const bool nccl = cfg_.comm == config::CommKind::kNccl || (cfg_.comm == config::CommKind::kAuto && own_gpu);
    Status first;
    groups_->wrap([&](comm::MpiComm& m) -> std::unique_ptr<comm::Comm> {
      if (!nccl || m.size() == 1) return std::make_unique<comm::StagedComm>(m, staging);
#ifdef DAYZERO_WITH_CUDA
      // Collective over m's group; every rank wraps the groups in the same order.
      auto c = comm::NcclComm::create(m, bo.device_index, be->device_stream(), &timeline_,
                                      cfg_.watchdog.collective_timeout_s);
      if (c.ok()) return std::move(c).value();
      if (first.ok()) first = c.status();
#endif
      return std::make_unique<comm::StagedComm>(m, staging);
    });
    DZ_RETURN_IF_ERROR(first);
    part_.tp = plan_.tp > 1 ? &groups_->tp() : nullptr;
    part_.pp = plan_.pp > 1 ? &groups_->pp() : nullptr;
    part_.ep = plan_.wide_ep() ? &groups_->ep() : nullptr;
    comm_choice_ = nccl ? "nccl (one communicator per group of more than one rank)"
                        : std::string("mpi (device buffers staged through host memory") +
                              (cfg_.comm == config::CommKind::kAuto ? "; ranks share GPUs" : "") + ")";
  }
  if (env_.rank() == 0)
    DZ_LOG_INFO("backend {} ({}{}), comm {}", be_->name(), config::backend_name(cfg_.backend),
                cfg_.backend == config::Backend::kAuto ? ": " + std::to_string(n_gpu) + " GPU(s) visible" : "",
                comm_choice_);
  return Status::Ok();
}

}  // namespace dayzero::runtime
