//! The address policy of `browse` (security issue).
