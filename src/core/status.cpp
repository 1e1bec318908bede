// Status helpers: names and the mapping from status codes to process exit codes.
#include "core/status.h"

namespace dayzero {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kCheckFailed: return "check failed";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

int exit_code_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return static_cast<int>(ExitCode::kOk);
    case StatusCode::kCheckFailed: return static_cast<int>(ExitCode::kCheckFailed);
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kCorrupt:
    case StatusCode::kUnsupported: return static_cast<int>(ExitCode::kBadInput);
    case StatusCode::kIoError:
    case StatusCode::kOutOfMemory:
    case StatusCode::kTimeout:
    case StatusCode::kInternal: return static_cast<int>(ExitCode::kRuntime);
  }
  return static_cast<int>(ExitCode::kRuntime);
}

int Status::exit_code() const { return exit_code_for(code_); }

}  // namespace dayzero
