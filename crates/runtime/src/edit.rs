//! TODO(runtime issue): edit
