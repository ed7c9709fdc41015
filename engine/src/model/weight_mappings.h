#pragma once
// Weight files stay mapped while a model is loaded. One truncated or rewritten in place (a
// model re-downloaded over itself) turns reads past its new end into SIGBUS, which would kill
// the engine. The SIGBUS handler here maps zero pages over the lost part of a registered
// mapping, so the step in flight finishes, and records which file it was: the generator then
// ends the request with model_error and the server unloads the model.
#include <cstddef>
#include <string>

namespace runahead {

// Registers the read-only mapping [begin, begin + size) of `file` and makes sure the handler
// is installed. Returns the slot to pass to unguard_mapping, or -1 when all 64 slots are
// taken (that mapping is then unguarded: a fault in it ends the process as before).
int guard_mapping(const void* begin, size_t size, const std::string& file);
// Before the mapping is unmapped; forgets a fault recorded for it.
void unguard_mapping(int slot);

// Whether `p` lies in a registered mapping (a weight file's bytes, as loaded).
bool in_weight_mapping(const void* p);

// Throws EngineError{"model_error"} naming the file when a registered mapping lost pages.
// Cheap (one atomic load) when none did: called after every decode step.
void check_mappings_intact();

}  // namespace runahead
