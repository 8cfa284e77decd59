//! TODO(runtime issue): screen
