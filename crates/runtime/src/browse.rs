//! `browse`: SSRF-safe fetch of a public page as text (security issue). Interface fixed; body
//! owned by the security work.

use intendant_protocol::runtime::BrowseResult;
use thiserror::Error;

/// Why a fetch failed.
#[derive(Debug, Error)]
pub enum BrowseError {
    /// Placeholder until the security work lands.
    #[error("browse is not available in this build")]
    NotAvailable,
}

/// Fetches `url` as text.
pub fn browse(url: &str) -> Result<BrowseResult, BrowseError> {
    let _ = url;
    Err(BrowseError::NotAvailable)
}
