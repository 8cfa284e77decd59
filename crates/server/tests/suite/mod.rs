//! Test modules (the host they run against is `intendant_core::host::double::HostDouble`).

mod mcp_client;
mod mcp_http;
mod mcp_policy;
mod mcp_schedule;
mod mcp_supervised;
mod mcp_tools;
mod socket;
mod web;
