//! TODO(runtime issue): logdir
