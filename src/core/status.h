// Status and Result<T>: how recoverable errors travel (bad input, I/O, unsupported formats).
// Not for invariants: those are DZ_CHECK (check.h) and stop the job.
// Context is prepended on the way up: "shard 3 of 163: tensor x.weight: truncated".
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace dayzero {

// Process exit codes (docs/design.md "Errors").
enum class ExitCode : int {
  kOk = 0,
  kCheckFailed = 1,  // a check found a difference (compare, verify, a prompt's expect)
  kBadInput = 2,     // usage, config, checkpoint, image, a plan that cannot fit
  kRuntime = 3,      // out of memory, watchdog timeout, lost peer, internal fault
};

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // bad config / usage / malformed input                 -> exit 2
  kNotFound,         // missing file, tensor, key                             -> exit 2
  kCorrupt,          // malformed or truncated file contents                  -> exit 2
  kUnsupported,      // unknown dtype, architecture, feature                  -> exit 2
  kCheckFailed,      // expectation not met                                   -> exit 1
  kIoError,          // read/write failure of the environment                 -> exit 3
  kOutOfMemory,      //                                                       -> exit 3
  kTimeout,          // watchdog                                              -> exit 3
  kInternal,         //                                                       -> exit 3
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status CheckFailed(std::string m) { return {StatusCode::kCheckFailed, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status OutOfMemory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message reads "<context>: <message>"; Ok stays Ok.
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return {code_, context + ": " + message_};
  }
  // The process exit code this status maps to (0 when ok).
  int exit_code() const;
  std::string to_string() const { return ok() ? "OK" : message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* status_code_name(StatusCode code);
int exit_code_for(StatusCode code);

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                          // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}                   // NOLINT: must not be Ok
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dayzero

#define DZ_CONCAT_INNER(a, b) a##b
#define DZ_CONCAT(a, b) DZ_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when expr is not ok.
#define DZ_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::dayzero::Status dz_status_ = (expr);            \
    if (!dz_status_.ok()) return dz_status_;          \
  } while (0)

// Like DZ_RETURN_IF_ERROR, adding context to the message.
#define DZ_RETURN_IF_ERROR_CTX(expr, ctx)                          \
  do {                                                             \
    ::dayzero::Status dz_status_ = (expr);                         \
    if (!dz_status_.ok()) return dz_status_.with_context(ctx);     \
  } while (0)

// DZ_ASSIGN_OR_RETURN(auto x, make_x()); returns the error status when the Result is not ok.
#define DZ_ASSIGN_OR_RETURN(lhs, expr) DZ_ASSIGN_OR_RETURN_IMPL(DZ_CONCAT(dz_result_, __LINE__), lhs, expr)
#define DZ_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
