//! TODO(runtime issue): display
