// What "supported" rests on: one table of proofs, each saying that an adapter runs a feature
// (through a block) and which test compares that adapter, on a model that has the feature,
// against the reference. A feature of a model without an adapter is "supported by block" only
// through an entry here; anything else the analysis sees is "needs review". Not a registry of
// blocks: a block that exists but that no adapter runs under a test proves nothing.
#pragma once

#include <string>
#include <vector>

namespace dayzero::analysis {

struct Proof {
  const char* feature;  // the feature key the analysis emits ("MLA", "scoring_func=sigmoid", ...)
  const char* block;    // the block that computes it
  const char* adapter;  // the family whose adapter runs it
  const char* test;     // the test that compares that adapter on a model with the feature
};

// Every proof (evidence.cpp). A feature key "KEY=VALUE" also makes an enum value of config.json
// known to the key accounting (keys.cpp), so one entry both recognises a value and supports it.
const std::vector<Proof>& proofs();

// The proofs of one feature key (empty: nothing here runs it under a test).
std::vector<const Proof*> proofs_of(const std::string& feature);

// The families whose adapters cover the most of these feature keys: "closest: F (runs a, b), G
// (runs a, c); differs in: d" (ties named together; "differs in": what none of them runs); ""
// when no adapter proves any of them.
std::string closest_families(const std::vector<std::string>& feature_keys);

}  // namespace dayzero::analysis
