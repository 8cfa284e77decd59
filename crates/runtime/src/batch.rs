//! TODO(runtime issue): batch
