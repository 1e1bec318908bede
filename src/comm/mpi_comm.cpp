// MpiComm: host-tensor collectives over one MPI communicator, each call recorded on the
// timeline before MPI is entered. Reductions sum in group-rank order (see mpi_comm.h).
#include "comm/mpi_comm.h"

#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/op_watch.h"
#include "dump/timeline.h"

namespace dayzero::comm {
namespace {

constexpr int kMaxTag = 32767;  // the least MPI_TAG_UB the standard guarantees

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

Status mpi_ok(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(call) + " failed: " + mpi_error_text(rc));
}

// A tensor MPI can read or write in place: defined and in host memory.
Status check_host(const Tensor& t, const char* what) {
  if (!t.defined()) return Status::InvalidArgument(std::string(what) + " is an undefined tensor");
  if (!t.device().is_cpu())
    return Status::Unsupported(std::string(what) + " is on " + t.device().to_string() +
                               "; MpiComm moves host tensors only");
  return Status::Ok();
}

// One MPI call moves at most INT_MAX elements of one datatype.
Status check_count(int64_t n, const char* what) {
  if (n > INT_MAX)
    return Status::Unsupported(std::string(what) + " has " + std::to_string(n) +
                               " elements, more than one MPI call moves (" +
                               std::to_string(INT_MAX) + ")");
  return Status::Ok();
}

// A tensor all_reduce_sum / reduce_scatter_sum can add: host, f32 or i32.
Status check_summable(const Tensor& t, const char* what) {
  DZ_RETURN_IF_ERROR(check_host(t, what));
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kI32)
    return Status::Unsupported(std::string(what) + " is " + dtype_name(t.dtype()) +
                               "; sums are over F32 or I32 tensors");
  return check_count(t.numel(), what);
}

MPI_Datatype mpi_type(DType t) { return t == DType::kF32 ? MPI_FLOAT : MPI_INT32_T; }

// acc[0..n) += x[0..n), element by element. i32 wraps modulo 2^32 (unsigned arithmetic, so
// overflow is defined).
void add_into(DType dtype, void* acc, const void* x, int64_t n) {
  if (dtype == DType::kF32) {
    float* a = static_cast<float*>(acc);
    const float* b = static_cast<const float*>(x);
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  } else {
    uint32_t* a = static_cast<uint32_t*>(acc);
    const uint32_t* b = static_cast<const uint32_t*>(x);
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
}

// out = parts[0] + parts[1] + ... + parts[p-1], left to right (rank order). parts holds p
// consecutive runs of n 4-byte elements (f32 or i32 bits).
void sum_in_rank_order(DType dtype, const uint32_t* parts, int p, int64_t n, void* out) {
  if (n == 0) return;
  std::memcpy(out, parts, static_cast<size_t>(n) * 4);
  for (int s = 1; s < p; ++s) add_into(dtype, out, parts + s * n, n);
}

// Every dimension but the first equal.
bool same_row_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 1; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

// Records one call: reports it to the op observer (op_watch.h: the watchdog, and a debug
// stall, which must come before the begin is logged so a stalled rank never appears to have
// entered), sets current_op_, takes the next seq, logs the begin (before the caller enters
// MPI) and, at scope exit, the end.
class MpiComm::Op {
 public:
  Op(MpiComm& comm, const char* kind, const char* name, int64_t bytes, int peer = -1)
      : comm_(comm), obs_(op_observer()) {
    info_.kind = kind;
    info_.op = name;
    info_.group = comm_.name_.c_str();
    info_.label = &comm_.label_;
    info_.seq = comm_.seq_;
    info_.bytes = bytes;
    info_.peer = peer;
    info_.members = &comm_.world_ranks_;
    if (obs_ != nullptr) obs_->op_begin(info_);
    comm_.current_op_.store(name, std::memory_order_release);
    const int64_t seq = comm_.seq_++;
    if (comm_.timeline_ != nullptr)
      handle_ = comm_.timeline_->begin(kind, name, comm_.label_, seq, bytes);
  }
  ~Op() {
    if (comm_.timeline_ != nullptr) comm_.timeline_->end(handle_);
    comm_.current_op_.store(nullptr, std::memory_order_release);
    if (obs_ != nullptr) obs_->op_end(info_);
  }
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

 private:
  MpiComm& comm_;
  OpObserver* obs_;
  OpInfo info_;
  dump::Timeline::Handle handle_ = -1;
};

MpiComm::MpiComm(MPI_Comm comm, bool owns, std::string name, std::string label,
                 dump::Timeline* timeline)
    : comm_(comm), owns_(owns), name_(std::move(name)), label_(std::move(label)),
      timeline_(timeline) {
  DZ_CHECK(comm_ != MPI_COMM_NULL, "MpiComm over MPI_COMM_NULL for group " << label_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  {
    MPI_Group mine, world;
    MPI_Comm_group(comm_, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> ranks(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) ranks[static_cast<size_t>(r)] = r;
    world_ranks_.resize(static_cast<size_t>(size_));
    MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks_.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
  }
  // Errors come back as a Status naming the op and the group (the caller fails together at
  // the next agreement) rather than aborting inside MPI. Only on communicators this object
  // owns: a borrowed one keeps its owner's handler.
  if (owns_) MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Comm_free(&comm_);
}

Status MpiComm::all_reduce_sum(Tensor& t) {
  const std::string ctx = "all_reduce over " + label_;
  DZ_RETURN_IF_ERROR_CTX(check_summable(t, "t"), ctx);
  const int64_t n = t.numel();
  Op op(*this, "collective", "all_reduce", static_cast<int64_t>(t.bytes()));
  if (size_ == 1) return Status::Ok();

  // Chunk r (counts[r] elements at displs[r]) is summed by rank r.
  std::vector<int> counts(size_), displs(size_);
  const int64_t base = n / size_, extra = n % size_;
  int64_t at = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = static_cast<int>(base + (r < extra ? 1 : 0));
    displs[r] = static_cast<int>(at);
    at += counts[r];
  }
  const int mine = counts[rank_];
  std::vector<int> recv_counts(size_, mine), recv_displs(size_);
  for (int s = 0; s < size_; ++s) recv_displs[s] = s * mine;
  // [size_, mine]: every rank's copy of this rank's chunk, in rank order.
  auto parts = std::make_unique_for_overwrite<uint32_t[]>(static_cast<size_t>(size_) * mine + 1);
  const MPI_Datatype type = mpi_type(t.dtype());
  DZ_RETURN_IF_ERROR_CTX(mpi_ok(MPI_Alltoallv(t.data(), counts.data(), displs.data(), type,
                                              parts.get(), recv_counts.data(),
                                              recv_displs.data(), type, comm_),
                                "MPI_Alltoallv"),
                         ctx);
  char* chunk = static_cast<char*>(t.data()) + static_cast<size_t>(displs[rank_]) * 4;
  sum_in_rank_order(t.dtype(), parts.get(), size_, mine, chunk);
  DZ_RETURN_IF_ERROR_CTX(mpi_ok(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.data(),
                                               counts.data(), displs.data(), type, comm_),
                                "MPI_Allgatherv"),
                         ctx);
  return Status::Ok();
}

Status MpiComm::all_gather(const Tensor& in, Tensor& out) {
  const std::string ctx = "all_gather over " + label_;
  DZ_RETURN_IF_ERROR_CTX(check_host(in, "in"), ctx);
  DZ_RETURN_IF_ERROR_CTX(check_host(out, "out"), ctx);
  if (in.dtype() != out.dtype() || !same_row_shape(in.shape(), out.shape()) ||
      out.dim(0) != size_ * in.dim(0))
    return Status::InvalidArgument(ctx + ": in " + dtype_shape_str(in) + " and out " + dtype_shape_str(out) +
                                   " do not match; out must be [" + std::to_string(size_) +
                                   " x in.dim(0), ...] of in's dtype");
  DZ_RETURN_IF_ERROR_CTX(check_count(static_cast<int64_t>(in.bytes()), "in (bytes)"), ctx);
  const int bytes = static_cast<int>(in.bytes());
  Op op(*this, "collective", "all_gather", static_cast<int64_t>(out.bytes()));
  return mpi_ok(MPI_Allgather(in.data(), bytes, MPI_BYTE, out.data(), bytes, MPI_BYTE, comm_),
                "MPI_Allgather")
      .with_context(ctx);
}

Status MpiComm::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  const std::string ctx = "reduce_scatter over " + label_;
  DZ_RETURN_IF_ERROR_CTX(check_summable(in, "in"), ctx);
  DZ_RETURN_IF_ERROR_CTX(check_host(out, "out"), ctx);
  if (in.dtype() != out.dtype() || !same_row_shape(in.shape(), out.shape()) ||
      in.dim(0) != size_ * out.dim(0))
    return Status::InvalidArgument(ctx + ": in " + dtype_shape_str(in) + " and out " + dtype_shape_str(out) +
                                   " do not match; in must be [" + std::to_string(size_) +
                                   " x out.dim(0), ...] of out's dtype");
  const int64_t n = out.numel();
  Op op(*this, "collective", "reduce_scatter", static_cast<int64_t>(in.bytes()));
  // [size_, n]: every rank's block number rank_, in rank order.
  auto parts = std::make_unique_for_overwrite<uint32_t[]>(static_cast<size_t>(size_) * n + 1);
  const MPI_Datatype type = mpi_type(in.dtype());
  DZ_RETURN_IF_ERROR_CTX(mpi_ok(MPI_Alltoall(in.data(), static_cast<int>(n), type, parts.get(),
                                             static_cast<int>(n), type, comm_),
                                "MPI_Alltoall"),
                         ctx);
  sum_in_rank_order(in.dtype(), parts.get(), size_, n, out.data());
  return Status::Ok();
}

// Bytes of one dim-0 row of t (the product of the other dims times the element size).
static int64_t row_bytes(const Tensor& t) {
  int64_t n = static_cast<int64_t>(dtype_size(t.dtype()));
  for (int i = 1; i < t.rank(); ++i) n *= t.dim(i);
  return n;
}

static Status check_all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, const Tensor& out,
                         std::span<const int64_t> recv_rows, int size) {
  DZ_RETURN_IF_ERROR(check_host(in, "in"));
  DZ_RETURN_IF_ERROR(check_host(out, "out"));
  if (in.dtype() != out.dtype() || !same_row_shape(in.shape(), out.shape()))
    return Status::InvalidArgument("in " + dtype_shape_str(in) + " and out " + dtype_shape_str(out) +
                                   " differ in dtype or row shape");
  if (static_cast<int>(send_rows.size()) != size || static_cast<int>(recv_rows.size()) != size)
    return Status::InvalidArgument(std::to_string(send_rows.size()) + " send and " + std::to_string(recv_rows.size()) +
                                   " receive counts for a group of " + std::to_string(size));
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size; ++r) {
    if (send_rows[r] < 0 || recv_rows[r] < 0) return Status::InvalidArgument("a negative row count");
    sent += send_rows[r];
    received += recv_rows[r];
  }
  if (sent != in.dim(0) || received != out.dim(0))
    return Status::InvalidArgument("counts send " + std::to_string(sent) + " and receive " + std::to_string(received) +
                                   " rows, but in has " + std::to_string(in.dim(0)) + " and out " +
                                   std::to_string(out.dim(0)));
  const int64_t rb = row_bytes(in);
  DZ_RETURN_IF_ERROR(check_count(sent * rb, "in (bytes)"));
  return check_count(received * rb, "out (bytes)");
}

Status MpiComm::all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                            std::span<const int64_t> recv_rows, const char* op_name) {
  const std::string ctx = std::string(op_name) + " (all_to_allv) over " + label_;
  DZ_RETURN_IF_ERROR_CTX(check_all_to_allv(in, send_rows, out, recv_rows, size_), ctx);
  const int64_t rb = row_bytes(in);
  std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
  int64_t s_at = 0, r_at = 0;
  for (int r = 0; r < size_; ++r) {
    sc[r] = static_cast<int>(send_rows[r] * rb);
    sd[r] = static_cast<int>(s_at);
    s_at += sc[r];
    rc[r] = static_cast<int>(recv_rows[r] * rb);
    rd[r] = static_cast<int>(r_at);
    r_at += rc[r];
  }
  Op op(*this, "collective", op_name, s_at + r_at);
  // A 0-row tensor may have no storage; MPI still needs a valid pointer.
  char dummy = 0;
  void* send = in.dim(0) > 0 ? const_cast<void*>(in.data()) : &dummy;
  void* recv = out.dim(0) > 0 ? out.data() : &dummy;
  return mpi_ok(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_),
                "MPI_Alltoallv")
      .with_context(ctx);
}

Status MpiComm::broadcast(Tensor& t, int root) {
  const std::string ctx = "broadcast over " + label_;
  DZ_RETURN_IF_ERROR_CTX(check_host(t, "t"), ctx);
  if (root < 0 || root >= size_)
    return Status::InvalidArgument(ctx + ": root " + std::to_string(root) +
                                   " is not a rank of a group of " + std::to_string(size_));
  DZ_RETURN_IF_ERROR_CTX(check_count(static_cast<int64_t>(t.bytes()), "t (bytes)"), ctx);
  Op op(*this, "collective", "broadcast", static_cast<int64_t>(t.bytes()));
  const int bytes = static_cast<int>(t.bytes());
  return mpi_ok(MPI_Bcast(t.data(), bytes, MPI_BYTE, root, comm_), "MPI_Bcast").with_context(ctx);
}

namespace {
Status check_peer(int peer, int tag, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank)
    return Status::InvalidArgument("peer " + std::to_string(peer) +
                                   " is not another rank of a group of " + std::to_string(size) +
                                   " (this rank is " + std::to_string(rank) + ")");
  if (tag < 0 || tag > kMaxTag)
    return Status::InvalidArgument("tag " + std::to_string(tag) + " is outside [0, " +
                                   std::to_string(kMaxTag) + "]");
  return Status::Ok();
}
}  // namespace

Status MpiComm::send(const Tensor& t, int peer, int tag) {
  const std::string ctx = "send over " + label_ + " to " + std::to_string(peer);
  DZ_RETURN_IF_ERROR_CTX(check_host(t, "t"), ctx);
  DZ_RETURN_IF_ERROR_CTX(check_peer(peer, tag, rank_, size_), ctx);
  DZ_RETURN_IF_ERROR_CTX(check_count(static_cast<int64_t>(t.bytes()), "t (bytes)"), ctx);
  Op op(*this, "p2p", "send", static_cast<int64_t>(t.bytes()), peer);
  const int bytes = static_cast<int>(t.bytes());
  return mpi_ok(MPI_Send(t.data(), bytes, MPI_BYTE, peer, tag, comm_), "MPI_Send")
      .with_context(ctx);
}

Status MpiComm::recv(Tensor& t, int peer, int tag) {
  const std::string ctx = "recv over " + label_ + " from " + std::to_string(peer);
  DZ_RETURN_IF_ERROR_CTX(check_host(t, "t"), ctx);
  DZ_RETURN_IF_ERROR_CTX(check_peer(peer, tag, rank_, size_), ctx);
  DZ_RETURN_IF_ERROR_CTX(check_count(static_cast<int64_t>(t.bytes()), "t (bytes)"), ctx);
  Op op(*this, "p2p", "recv", static_cast<int64_t>(t.bytes()), peer);
  // Probe first so a message of the wrong size is drained and reported, never truncated
  // into t.
  MPI_Status st;
  DZ_RETURN_IF_ERROR_CTX(mpi_ok(MPI_Probe(peer, tag, comm_, &st), "MPI_Probe"), ctx);
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  if (got != static_cast<int>(t.bytes())) {
    std::vector<char> drain(static_cast<size_t>(got) + 1);
    DZ_RETURN_IF_ERROR_CTX(mpi_ok(MPI_Recv(drain.data(), got, MPI_BYTE, peer, tag, comm_,
                                           MPI_STATUS_IGNORE),
                                  "MPI_Recv"),
                           ctx);
    return Status::InvalidArgument(ctx + " (tag " + std::to_string(tag) + "): expected " +
                                   std::to_string(t.bytes()) + " bytes for " + dtype_shape_str(t) +
                                   ", the message has " + std::to_string(got));
  }
  return mpi_ok(MPI_Recv(t.data(), got, MPI_BYTE, peer, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv")
      .with_context(ctx);
}

Status MpiComm::barrier() {
  Op op(*this, "collective", "barrier", 0);
  return mpi_ok(MPI_Barrier(comm_), "MPI_Barrier").with_context("barrier over " + label_);
}

Status MpiComm::all_reduce_max_int(int64_t* v, int n) {
  const std::string ctx = "all_reduce_max over " + label_;
  if (n < 0 || (n > 0 && v == nullptr))
    return Status::InvalidArgument(ctx + ": " + std::to_string(n) + " values at " +
                                   (v == nullptr ? "null" : "v"));
  Op op(*this, "collective", "all_reduce_max", int64_t{8} * n);
  return mpi_ok(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, comm_), "MPI_Allreduce")
      .with_context(ctx);
}

Status MpiComm::argmax_across(float value, int64_t index, float* best_value, int64_t* best_index) {
  const std::string ctx = "argmax over " + label_;
  if (best_value == nullptr || best_index == nullptr)
    return Status::InvalidArgument(ctx + ": null output pointer");
  struct Candidate {
    float value;
    int32_t pad;
    int64_t index;
  };
  static_assert(sizeof(Candidate) == 16);
  const Candidate mine{value, 0, index};
  std::vector<Candidate> all(static_cast<size_t>(size_));
  Op op(*this, "collective", "argmax", static_cast<int64_t>(sizeof(Candidate)) * size_);
  DZ_RETURN_IF_ERROR_CTX(mpi_ok(MPI_Allgather(&mine, sizeof(Candidate), MPI_BYTE, all.data(),
                                              sizeof(Candidate), MPI_BYTE, comm_),
                                "MPI_Allgather"),
                         ctx);
  Candidate best = all[0];
  for (int r = 1; r < size_; ++r)
    if (argmax_prefers(all[r].value, all[r].index, best.value, best.index)) best = all[r];
  *best_value = best.value;
  *best_index = best.index;
  return Status::Ok();
}

}  // namespace dayzero::comm
