//! TODO(runtime issue): artifact
