//! TODO(runtime issue): exec
