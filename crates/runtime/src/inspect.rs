//! TODO(runtime issue): inspect
