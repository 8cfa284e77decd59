//! Test modules and their shared doubles.

mod fake_host;
mod host_double;
mod mcp_client;
mod mcp_http;
mod mcp_policy;
mod mcp_tools;
mod socket;
mod web;
