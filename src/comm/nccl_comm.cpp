// NcclComm (nccl_comm.h): the bootstrap over MPI, the one-GPU-per-rank check, and each call as
// argument checks, an enqueue on the compute stream and a polled wait for its completion event.
#ifdef DAYZERO_WITH_CUDA

#include "comm/nccl_comm.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "comm/completion_wait.h"
#include "comm/op_watch.h"
#include "core/log.h"
#include "dump/timeline.h"

namespace dayzero::comm {

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
};

namespace {

Status nccl_status(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::Internal("nccl " + what + ": " + ncclGetErrorString(r));
}
Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal("cuda " + what + ": " + cudaGetErrorString(e));
}

// Host tensors go to MPI; device tensors to NCCL; a mix is refused.
enum class Where { kHost, kDevice, kMixed, kUndefined };
Where where(std::initializer_list<const Tensor*> ts) {
  bool host = false, dev = false;
  for (const Tensor* t : ts) {
    if (!t->defined()) return Where::kUndefined;
    (t->device().is_cpu() ? host : dev) = true;
  }
  return host && dev ? Where::kMixed : dev ? Where::kDevice : Where::kHost;
}

Status sum_dtype(const Tensor& t, ncclDataType_t* out, const char* what) {
  if (t.dtype() == DType::kF32) *out = ncclFloat32;
  else if (t.dtype() == DType::kI32) *out = ncclInt32;
  else return Status::Unsupported(std::string(what) + ": NcclComm sums f32 or i32, got " + dtype_shape_str(t));
  return Status::Ok();
}

}  // namespace

// One call as the observer, the timeline and current_op() see it: the whole call (completion),
// and inside it the enqueue.
class NcclComm::Op {
 public:
  Op(NcclComm& c, const char* kind, const char* name, int64_t bytes, int peer = -1) : c_(c), obs_(op_observer()) {
    info_.kind = kind;
    info_.op = name;
    info_.group = c_.name().c_str();
    info_.label = &c_.label();
    info_.seq = c_.seq_;
    info_.bytes = bytes;
    info_.peer = peer;
    info_.members = &c_.world_ranks_;
    if (obs_) obs_->op_begin(info_);
    c_.current_op_.store(name, std::memory_order_release);
    seq_ = c_.seq_++;
    if (c_.timeline_) whole_ = c_.timeline_->begin(kind, name, c_.label(), seq_, bytes);
  }
  void enqueue_begin() {
    if (c_.timeline_) enq_ = c_.timeline_->begin(info_.kind, std::string(info_.op) + " enqueue", c_.label(), seq_, info_.bytes);
  }
  void enqueue_end() {
    if (c_.timeline_ && enq_ >= 0) c_.timeline_->end(enq_);
    enq_ = -1;
  }
  ~Op() {
    enqueue_end();
    if (c_.timeline_) c_.timeline_->end(whole_);
    c_.current_op_.store(nullptr, std::memory_order_release);
    if (obs_) obs_->op_end(info_);
  }
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

 private:
  NcclComm& c_;
  OpObserver* obs_;
  OpInfo info_;
  int64_t seq_ = -1;
  dump::Timeline::Handle whole_ = -1, enq_ = -1;
};

NcclComm::NcclComm(MpiComm& mpi, dump::Timeline* timeline, double timeout_s)
    : ForwardingComm(mpi), mpi_(mpi), timeline_(timeline), timeout_s_(timeout_s), impl_(std::make_unique<Impl>()) {}

NcclComm::~NcclComm() {
  // A destructor cannot return the code; it is logged (the run's outcome is already decided).
  if (impl_->comm && !aborted_) {
    const ncclResult_t r = ncclCommDestroy(impl_->comm);
    if (r != ncclSuccess) DZ_LOG_WARN("nccl {}: ncclCommDestroy: {}", label(), ncclGetErrorString(r));
  }
  if (impl_->done) cudaEventDestroy(impl_->done);
}

const char* NcclComm::current_op() const { return current_op_.load(std::memory_order_acquire); }

Result<std::unique_ptr<NcclComm>> NcclComm::create(MpiComm& mpi, int device, void* stream, dump::Timeline* timeline,
                                                   double timeout_s) {
  const MPI_Comm mc = mpi.handle();
  const int rank = mpi.rank(), size = mpi.size();
  std::unique_ptr<NcclComm> c(new NcclComm(mpi, timeline, timeout_s));
  c->impl_->stream = static_cast<cudaStream_t>(stream);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  c->world_ranks_.resize(static_cast<size_t>(size));
  MPI_Allgather(&world_rank, 1, MPI_INT, c->world_ranks_.data(), 1, MPI_INT, mc);

  // One GPU per rank: host name and PCI bus id of every member, compared on every member.
  constexpr int kKey = 160;
  char key[kKey] = {};
  char bus[32] = "?";
  Status local = cuda_status(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  if (local.ok()) local = cuda_status(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  // The PCI bus id names the physical GPU whatever CUDA_VISIBLE_DEVICES renumbers.
  std::snprintf(key, kKey, "%s GPU %s", host, local.ok() ? bus : std::to_string(device).c_str());
  std::vector<char> keys(static_cast<size_t>(size) * kKey);
  MPI_Allgather(key, kKey, MPI_CHAR, keys.data(), kKey, MPI_CHAR, mc);
  int bad = local.ok() ? 0 : 1, any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, mc);
  if (any_bad) return local.ok() ? Status::Internal("nccl " + mpi.label() + ": another member could not bind its GPU")
                                 : local.with_context("nccl " + mpi.label());
  for (int i = 0; i < size; ++i)
    for (int j = i + 1; j < size; ++j)
      if (std::strcmp(&keys[static_cast<size_t>(i) * kKey], &keys[static_cast<size_t>(j) * kKey]) == 0)
        return Status::InvalidArgument("comm: nccl needs one GPU per rank, but ranks " + std::to_string(i) + " and " +
                                       std::to_string(j) + " of " + mpi.label() + " share " +
                                       std::string(&keys[static_cast<size_t>(i) * kKey]) +
                                       "; use comm: mpi to let ranks share a GPU");

  // The unique id from the group's rank 0, with its status, so a failure there stops every member.
  struct Boot {
    int ok = 0;
    ncclUniqueId id;
  } boot{};
  if (rank == 0) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
  MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, mc);
  if (!boot.ok) return Status::Internal("nccl " + mpi.label() + ": ncclGetUniqueId failed on the group's rank 0");
  DZ_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), "ncclGroupStart"));
  const ncclResult_t init = ncclCommInitRank(&c->impl_->comm, size, boot.id, rank);
  const ncclResult_t end = ncclGroupEnd();
  DZ_RETURN_IF_ERROR(nccl_status(init, "ncclCommInitRank on " + mpi.label()));
  DZ_RETURN_IF_ERROR(nccl_status(end, "ncclGroupEnd (ncclCommInitRank on " + mpi.label() + ")"));
  DZ_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&c->impl_->done, cudaEventDisableTiming), "cudaEventCreate"));
  return c;
}

// The loop itself is completion_wait.h's; each probe below is one CUDA or NCCL call.
Status NcclComm::wait(const char* op) {
  DZ_RETURN_IF_ERROR(cuda_status(cudaEventRecord(impl_->done, impl_->stream), std::string(op) + ": cudaEventRecord"));
  const auto t0 = std::chrono::steady_clock::now();
  CompletionProbe probe;
  probe.query = [this](std::string* error) {
    const cudaError_t q = cudaEventQuery(impl_->done);
    if (q == cudaSuccess) return EventPoll::kDone;
    if (q == cudaErrorNotReady) return EventPoll::kNotReady;
    *error = cudaGetErrorString(q);
    return EventPoll::kFailed;
  };
  probe.take_last_error = [] {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess || e == cudaErrorNotReady ? std::string() : std::string(cudaGetErrorString(e));
  };
  probe.async_error = [this] {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(impl_->comm, &async);
    if (r != ncclSuccess) return nccl_status(r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) return nccl_status(async, "asynchronous error");
    return Status::Ok();
  };
  probe.abort = [this] { ncclCommAbort(impl_->comm); };
  probe.seconds = [t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  // Spin briefly (decode collectives finish in microseconds), then poll gently.
  probe.pause = [](int spins) {
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  };
  bool aborted = false;
  const Status s = wait_for_completion(probe, timeout_s_,
                                       std::string(op) + " #" + std::to_string(seq_ - 1) + " on " + label(), &aborted);
  if (aborted) aborted_ = true;
  return s;
}

#define DZ_NCCL_USABLE()                                                                        \
  do {                                                                                          \
    if (aborted_) return Status::Internal("nccl " + label() + ": the communicator was aborted"); \
  } while (0)

Status NcclComm::all_reduce_sum(Tensor& t) {
  const Where w = where({&t});
  if (w != Where::kDevice) return mpi_.all_reduce_sum(t);
  DZ_NCCL_USABLE();
  ncclDataType_t dt;
  DZ_RETURN_IF_ERROR(sum_dtype(t, &dt, "all_reduce_sum"));
  Op op(*this, "collective", "all_reduce", static_cast<int64_t>(t.bytes()));
  op.enqueue_begin();
  DZ_RETURN_IF_ERROR(nccl_status(ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()), dt, ncclSum,
                                               impl_->comm, impl_->stream),
                                 "ncclAllReduce on " + label()));
  op.enqueue_end();
  return wait("all_reduce");
}

Status NcclComm::all_gather(const Tensor& in, Tensor& out) {
  const Where w = where({&in, &out});
  if (w == Where::kHost || w == Where::kUndefined) return mpi_.all_gather(in, out);
  if (w == Where::kMixed) return Status::InvalidArgument("all_gather: one tensor on the host, one on the device");
  DZ_NCCL_USABLE();
  if (in.rank() < 1 || out.dtype() != in.dtype() || out.numel() != in.numel() * size() ||
      out.dim(0) != in.dim(0) * size())
    return Status::InvalidArgument("all_gather on " + label() + ": in " + dtype_shape_str(in) + ", out " + dtype_shape_str(out) +
                                   " (want dim 0 of " + std::to_string(in.rank() >= 1 ? in.dim(0) * size() : 0) + ")");
  Op op(*this, "collective", "all_gather", static_cast<int64_t>(in.bytes()));
  op.enqueue_begin();
  DZ_RETURN_IF_ERROR(nccl_status(ncclAllGather(in.data(), out.data(), in.bytes(), ncclUint8, impl_->comm, impl_->stream),
                                 "ncclAllGather on " + label()));
  op.enqueue_end();
  return wait("all_gather");
}

Status NcclComm::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  const Where w = where({&in, &out});
  if (w == Where::kHost || w == Where::kUndefined) return mpi_.reduce_scatter_sum(in, out);
  if (w == Where::kMixed) return Status::InvalidArgument("reduce_scatter_sum: one tensor on the host, one on the device");
  DZ_NCCL_USABLE();
  ncclDataType_t dt;
  DZ_RETURN_IF_ERROR(sum_dtype(in, &dt, "reduce_scatter_sum"));
  if (out.dtype() != in.dtype() || in.numel() != out.numel() * size())
    return Status::InvalidArgument("reduce_scatter_sum on " + label() + ": in " + dtype_shape_str(in) + ", out " + dtype_shape_str(out));
  Op op(*this, "collective", "reduce_scatter", static_cast<int64_t>(in.bytes()));
  op.enqueue_begin();
  DZ_RETURN_IF_ERROR(nccl_status(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()), dt, ncclSum,
                                                   impl_->comm, impl_->stream),
                                 "ncclReduceScatter on " + label()));
  op.enqueue_end();
  return wait("reduce_scatter");
}

Status NcclComm::all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                             std::span<const int64_t> recv_rows, const char* op_name) {
  const Where w = where({&in, &out});
  if (w == Where::kHost || w == Where::kUndefined) return mpi_.all_to_allv(in, send_rows, out, recv_rows, op_name);
  if (w == Where::kMixed) return Status::InvalidArgument("all_to_allv: one tensor on the host, one on the device");
  DZ_NCCL_USABLE();
  const int n = size();
  if (in.rank() < 1 || out.dtype() != in.dtype() || out.rank() != in.rank() ||
      static_cast<int>(send_rows.size()) != n || static_cast<int>(recv_rows.size()) != n)
    return Status::InvalidArgument("all_to_allv on " + label() + ": in " + dtype_shape_str(in) + ", out " +
                                   dtype_shape_str(out) + ", " + std::to_string(send_rows.size()) + " counts");
  size_t row = dtype_size(in.dtype());
  for (int i = 1; i < in.rank(); ++i) row *= static_cast<size_t>(in.dim(i));
  int64_t sent = 0, received = 0;
  for (int r = 0; r < n; ++r) sent += send_rows[r], received += recv_rows[r];
  if (sent != in.dim(0) || received != out.dim(0))
    return Status::InvalidArgument("all_to_allv on " + label() + ": counts do not add up to the tensors' rows");
  Op op(*this, "collective", op_name, static_cast<int64_t>(row) * (sent + received));
  op.enqueue_begin();
  const char* src = static_cast<const char*>(in.data());
  char* dst = static_cast<char*>(out.data());
  // The group is closed on every path: a failed send or recv must not leave it open.
  DZ_RETURN_IF_ERROR(run_group(
      [] { return nccl_status(ncclGroupStart(), "ncclGroupStart"); },
      [&]() -> Status {
        size_t s_at = 0, r_at = 0;
        for (int r = 0; r < n; ++r) {
          const size_t sb = static_cast<size_t>(send_rows[r]) * row, rb = static_cast<size_t>(recv_rows[r]) * row;
          if (sb > 0)
            DZ_RETURN_IF_ERROR(nccl_status(ncclSend(src + s_at, sb, ncclUint8, r, impl_->comm, impl_->stream), "ncclSend"));
          if (rb > 0)
            DZ_RETURN_IF_ERROR(nccl_status(ncclRecv(dst + r_at, rb, ncclUint8, r, impl_->comm, impl_->stream), "ncclRecv"));
          s_at += sb;
          r_at += rb;
        }
        return Status::Ok();
      },
      [&] { return nccl_status(ncclGroupEnd(), "ncclGroupEnd (" + std::string(op_name) + " on " + label() + ")"); }));
  op.enqueue_end();
  return wait(op_name);
}

Status NcclComm::broadcast(Tensor& t, int root) {
  const Where w = where({&t});
  if (w != Where::kDevice) return mpi_.broadcast(t, root);
  DZ_NCCL_USABLE();
  if (root < 0 || root >= size())
    return Status::InvalidArgument("broadcast on " + label() + ": root " + std::to_string(root) + " of " +
                                   std::to_string(size()));
  Op op(*this, "collective", "broadcast", static_cast<int64_t>(t.bytes()));
  op.enqueue_begin();
  DZ_RETURN_IF_ERROR(nccl_status(ncclBroadcast(t.data(), t.data(), t.bytes(), ncclUint8, root, impl_->comm, impl_->stream),
                                 "ncclBroadcast on " + label()));
  op.enqueue_end();
  return wait("broadcast");
}

// NCCL has no tags: a pair's sends and recvs match in call order, which the forward pass keeps
// (one transfer per pair at a time); the tag is still checked as comm.h requires.
Status NcclComm::send(const Tensor& t, int peer, int tag) {
  const Where w = where({&t});
  if (w != Where::kDevice) return mpi_.send(t, peer, tag);
  DZ_NCCL_USABLE();
  if (peer < 0 || peer >= size() || peer == rank() || tag < 0 || tag > 32767)
    return Status::InvalidArgument("send on " + label() + ": peer " + std::to_string(peer) + ", tag " +
                                   std::to_string(tag));
  Op op(*this, "p2p", "send", static_cast<int64_t>(t.bytes()), peer);
  op.enqueue_begin();
  DZ_RETURN_IF_ERROR(nccl_status(ncclSend(t.data(), t.bytes(), ncclUint8, peer, impl_->comm, impl_->stream),
                                 "ncclSend on " + label()));
  op.enqueue_end();
  return wait("send");
}

Status NcclComm::recv(Tensor& t, int peer, int tag) {
  const Where w = where({&t});
  if (w != Where::kDevice) return mpi_.recv(t, peer, tag);
  DZ_NCCL_USABLE();
  if (peer < 0 || peer >= size() || peer == rank() || tag < 0 || tag > 32767)
    return Status::InvalidArgument("recv on " + label() + ": peer " + std::to_string(peer) + ", tag " +
                                   std::to_string(tag));
  Op op(*this, "p2p", "recv", static_cast<int64_t>(t.bytes()), peer);
  op.enqueue_begin();
  DZ_RETURN_IF_ERROR(nccl_status(ncclRecv(t.data(), t.bytes(), ncclUint8, peer, impl_->comm, impl_->stream),
                                 "ncclRecv on " + label()));
  op.enqueue_end();
  return wait("recv");
}

}  // namespace dayzero::comm

#endif  // DAYZERO_WITH_CUDA
