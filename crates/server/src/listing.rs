//! A page of the session listing answered in one reply, the same on every surface that answers
//! one (the socket's `sessions` and `fleet_sessions`, the dashboard's `/api/sessions`): at most
//! [`SessionsPage::SIZE`] sessions, a larger page or a listing longer than that with no limit
//! refused as `invalid_request`, never cut ([`SessionsPage::asked`], [`SessionsPage::answered`]).

use std::future::Future;

use intendant_protocol::daemon::{HostError, HostErrorCode, SessionsPage};

/// `page` as one reply: `read` reads the page to read (one past a reply's most when `page`
/// names no limit), `count` says how many sessions what it read holds.
pub(crate) async fn in_one_reply<T, F>(
    page: &SessionsPage,
    read: impl FnOnce(SessionsPage) -> F,
    count: impl FnOnce(&T) -> usize,
) -> Result<T, HostError>
where
    F: Future<Output = Result<T, HostError>>,
{
    let invalid = |why| HostError::new(HostErrorCode::InvalidRequest, why);
    let got = read(page.asked().map_err(invalid)?).await?;
    page.answered(count(&got)).map_err(invalid)?;
    Ok(got)
}
