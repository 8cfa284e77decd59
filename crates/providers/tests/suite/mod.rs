//! One file per area; `support` holds the scripted loopback server and helpers.

mod accumulator;
mod common;
mod openai_responses;
mod sse;
mod support;
