// The seam between `dayzero run`'s phases and `dayzero serve` (src/serve/): a run given ServeHooks
// (RunArgs::serve) reports each phase as it begins, lets the first rank of every data-parallel
// replica bind its listening socket in the config phase, and runs a "serve" phase between "prompts"
// (the warm-up) and "dump". The runtime knows nothing of HTTP; src/serve knows nothing of the
// phases' insides.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "backend/backend.h"
#include "dump/dump_writer.h"
#include "dump/heartbeat.h"
#include "model/hparams.h"
#include "runtime/forward.h"
#include "runtime/generate.h"
#include "runtime/watchdog.h"
#include "tokenizer/tokenizer.h"

namespace dayzero::runtime {

// What the serve phase works with; every reference outlives the phase.
struct ServeContext {
  const config::RunConfig& cfg;
  Forward& fwd;
  const tokenizer::Tokenizer& tok;
  const model::HParams& hp;
  GenerateOptions go;              // the run's options (generate.*, EOS ids), step_end empty
  Watchdog& watchdog;              // the serve loop arms the phase deadline per batch, none while idle
  dump::Heartbeat* heartbeat;      // may be null
  std::string model_dir;           // the model folder (its tokenizer_config.json / chat_template.jinja)
  std::string run_dir;
  int world_rank = 0;
  std::vector<double> load_seconds;  // rank 0: every rank's checkpoint load time, by world rank
  std::vector<std::pair<std::string, double>> phase_seconds;  // the start-up phases done so far, in order
  // serve.dump_requests: where a request's outputs and activations go, as a prompt's do.
  dump::DumpWriter* writer = nullptr;  // null when dump.enabled is false
  backend::Backend* be = nullptr;
  bool writes_outputs = false;      // last stage, tp rank 0
  bool writes_activations = false;  // tp rank 0 of its stage
  // This rank's data-parallel replica (its dp index), the plan's dp, and the world ranks of the
  // replica: replica_size consecutive ranks from replica * replica_size, the first of which listens.
  int replica = 0, replicas = 1, replica_size = 1;
};

class ServeHooks {
 public:
  virtual ~ServeHooks() = default;
  // Every rank, main thread, as each phase begins: "config", ..., "prompts", "serve", "dump".
  virtual void on_phase(const std::string& phase) = 0;
  // Every rank, at the end of a successful config phase: the first rank of each replica binds its
  // listening socket (and starts answering /health with 503), the others do nothing. An error
  // fails the config phase on every rank (exit 2).
  virtual Status listen(const config::RunConfig& cfg, int world_rank, int world_size) = 0;
  // Collective over the world: the serve phase; returns when a drain (SIGTERM) is over.
  virtual Status serve(ServeContext& ctx) = 0;
  // From the watchdog thread, before the job ends on a timeout or a fault: answer 503 from now on.
  virtual void on_abort() = 0;
};

}  // namespace dayzero::runtime
