// StagedComm (staged_comm.h): host copies around the inner Comm's calls. Results are copied
// back only when the inner call succeeded, so a failed call leaves the device tensor as it was.
#include "comm/staged_comm.h"

namespace dayzero::comm {

Status StagedComm::all_reduce_sum(Tensor& t) {
  Tensor h = host_of(t);
  Status s = inner_.all_reduce_sum(h);
  if (s.ok()) back(h, t);
  return s;
}

Status StagedComm::all_gather(const Tensor& in, Tensor& out) {
  const Tensor hin = host_of(in);
  Tensor hout = host_out(out);
  Status s = inner_.all_gather(hin, hout);
  if (s.ok()) back(hout, out);
  return s;
}

Status StagedComm::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  const Tensor hin = host_of(in);
  Tensor hout = host_out(out);
  Status s = inner_.reduce_scatter_sum(hin, hout);
  if (s.ok()) back(hout, out);
  return s;
}

Status StagedComm::all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                               std::span<const int64_t> recv_rows, const char* op) {
  const Tensor hin = host_of(in);
  Tensor hout = host_out(out);
  Status s = inner_.all_to_allv(hin, send_rows, hout, recv_rows, op);
  if (s.ok()) back(hout, out);
  return s;
}

Status StagedComm::broadcast(Tensor& t, int root) {
  // Every rank stages its tensor: the root's values are needed, the others' are overwritten.
  Tensor h = host_of(t);
  Status s = inner_.broadcast(h, root);
  if (s.ok()) back(h, t);
  return s;
}

Status StagedComm::send(const Tensor& t, int peer, int tag) { return inner_.send(host_of(t), peer, tag); }

Status StagedComm::recv(Tensor& t, int peer, int tag) {
  Tensor h = host_out(t);
  Status s = inner_.recv(h, peer, tag);
  if (s.ok()) back(h, t);
  return s;
}

}  // namespace dayzero::comm
