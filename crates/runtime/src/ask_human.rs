//! TODO(runtime issue): ask_human
