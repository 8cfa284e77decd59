//! Test modules and their shared double.

mod host_double;
mod socket;
mod web;
