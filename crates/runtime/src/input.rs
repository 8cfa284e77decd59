//! TODO(runtime issue): input
