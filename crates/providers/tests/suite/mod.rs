//! One file per area; `support` holds the scripted loopback server and helpers.

mod accumulator;
mod anthropic;
mod common;
mod config;
mod credentials;
mod gemini;
mod limits;
mod openai_chat;
mod openai_responses;
mod recorded;
mod scripted;
mod sse;
mod support;
mod testkit;
