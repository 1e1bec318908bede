// The plan as a self-contained HTML page (inline SVG and CSS, no scripts or external files):
// a nodes x GPUs grid coloured by pipeline stage with every rank's coordinates, per-rank
// memory bars (weights, KV cache, activations, headroom) against the cap, the stages and the
// candidates considered. It renders a plan; it does not judge or change one.
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/planner.h"
#include "topology/topology.h"

namespace dayzero::plan {

struct ReportOptions {
  std::string title = "dayzero plan";  // e.g. the model's name
  std::vector<std::string> notes;      // lines shown under the title (model, dtypes, context)
  std::vector<Candidate> candidates;   // shown as a table when not empty
};

// REQUIRES: plan.memory is empty or [world_size]; topo.gpus_per_node is the one the plan used.
std::string render_html_report(const Plan& plan, const topology::Topology& topo, const ReportOptions& options = {});

}  // namespace dayzero::plan
