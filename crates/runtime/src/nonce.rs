//! TODO(runtime issue): nonce
