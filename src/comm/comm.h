// Comm: the one interface every collective and point-to-point transfer of tensors goes
// through, one object per group (world, tp, pp, dp, ep, etp) of this rank. Buffer-agnostic:
// the MPI implementation (mpi_comm.h) moves host tensors; a device-buffer implementation
// (NCCL) plugs in behind the same calls. Not the group construction (groups.h) and not the
// fail-together agreement of phases (mpi_env.h agree()).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace dayzero::comm {

// Contract shared by every method below:
// - Collective over <group>: every rank of the group must call, in the same order, with
//   tensors of the same dtype and shape (except where a method says otherwise). A rank that
//   skips a call leaves the others blocked: every call reports to the op observer
//   (op_watch.h) before it is entered, whose watchdog catches that; current_op() and the
//   timeline say where each rank is.
// - Argument errors (undefined tensor, a buffer kind or dtype the implementation cannot
//   move, wrong output shape, root/peer out of range) are found before any communication and
//   returned as InvalidArgument / Unsupported; no data moved. They depend only on arguments
//   every rank computes alike, so the ranks of a group return them together.
// - A failure of the transport itself (lost peer) stops the job (the transport's own fatal
//   error handling); a Status for it is returned only where the transport hands one back.
// - Reductions are deterministic: every element is summed in group-rank order,
//   ((x_0 + x_1) + x_2) + ..., so results are bit-identical on every rank of the group and
//   from run to run with the same plan.
// - One thread drives a Comm at a time; current_op() may be read from any thread.
class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;  // this rank's index in the group, 0 <= rank() < size()
  virtual int size() const = 0;
  // The group kind: "world", "tp", "pp", "dp", "ep" or "etp".
  virtual const std::string& name() const = 0;
  // The group kind and the coordinates that identify this instance of it among the others of
  // its kind, e.g. "tp@pp1.dp0"; "world" for the world. Timeline events carry it as group.
  virtual const std::string& label() const = 0;

  // Collective over the group: t becomes the element-wise sum of every rank's t.
  // t: f32 or i32, any shape (e.g. [n_tokens, n_embd] partial outputs of a row-split matmul).
  // i32 sums wrap modulo 2^32.
  virtual Status all_reduce_sum(Tensor& t) = 0;

  // Collective over the group: out = every rank's in, concatenated on dim 0 in group-rank
  // order. in: [m, ...] (same shape on every rank); out: [size() * m, ...], any dtype equal to
  // in's. REQUIRES: in.rank() >= 1.
  virtual Status all_gather(const Tensor& in, Tensor& out) = 0;

  // Collective over the group: out = block rank() (on dim 0) of the element-wise sum of every
  // rank's in, with the same summation order as all_reduce_sum (so reduce_scatter then
  // all_gather equals all_reduce_sum bit for bit).
  // in: [size() * m, ...] f32 or i32; out: [m, ...] of the same dtype.
  virtual Status reduce_scatter_sum(const Tensor& in, Tensor& out) = 0;

  // Collective over the group: an all-to-all of rows (expert-parallel dispatch and combine).
  // in: [sum(send_rows), ...]; its first send_rows[0] rows go to group rank 0, the next
  // send_rows[1] to rank 1, and so on. out: [sum(recv_rows), ...] of in's dtype and row shape,
  // filled with recv_rows[0] rows from rank 0, then recv_rows[1] from rank 1, ... . send_rows and
  // recv_rows have size() entries; rank s's send_rows[r] must equal rank r's recv_rows[s] (the
  // caller exchanges the counts first, e.g. with all_gather). Either tensor may have 0 rows.
  // op: the name the timeline and the watchdog record ("dispatch", "combine").
  virtual Status all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                             std::span<const int64_t> recv_rows, const char* op) = 0;

  // Collective over the group: t on every rank becomes root's t. 0 <= root < size().
  virtual Status broadcast(Tensor& t, int root) = 0;

  // Point-to-point within the group: the send to peer with tag matches peer's recv from this
  // rank with the same tag; shapes and dtypes must agree (a size mismatch is an error on the
  // receiver). peer is a group rank != rank(); 0 <= tag <= 32767. send may block until the
  // matching recv starts.
  virtual Status send(const Tensor& t, int peer, int tag) = 0;
  virtual Status recv(Tensor& t, int peer, int tag) = 0;

  // Collective over the group: returns once every rank of the group has entered it.
  virtual Status barrier() = 0;

  // Collective over the group: v[0..n) becomes the element-wise maximum over the ranks.
  // A host helper (counts, lengths, flags), whatever buffers the implementation moves.
  virtual Status all_reduce_max_int(int64_t* v, int n) = 0;

  // Collective over the group: the best (value, index) pair over the ranks' candidates, by
  // argmax_prefers below, in *best_value / *best_index on every rank. Each rank passes the
  // argmax of its own slice with its index in the whole row (vocab-split logits), so the
  // result equals kernels::cpu::argmax over the whole row: the lowest index wins ties and a
  // NaN never wins against a number. A host helper like all_reduce_max_int.
  virtual Status argmax_across(float value, int64_t index, float* best_value,
                               int64_t* best_index) = 0;

  // The operation this rank is inside on this group right now ("all_reduce", "recv", ...),
  // nullptr when none. For the watchdog and hang reports: readable from any thread.
  virtual const char* current_op() const = 0;
  // Calls started on this group so far; the next call records this number as its seq.
  virtual int64_t next_seq() const = 0;
};

// True when candidate (value a, index ia) beats (b, ib) for argmax_across: a number beats a
// NaN, a larger value beats a smaller one, and on equal values (or two NaNs) the lower
// index wins.
bool argmax_prefers(float a, int64_t ia, float b, int64_t ib);

}  // namespace dayzero::comm
