//! TODO(runtime issue): pty
