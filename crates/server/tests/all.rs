//! Integration tests of `intendant-server`: the control socket served over a real Unix socket
//! to an in-memory `SessionHost`, driven by `RemoteHost` and by hand-written lines; the web
//! dashboard's router driven request by request against the same host; the MCP server over a
//! scripted host double, driven by an `rmcp` client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
