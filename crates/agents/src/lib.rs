//! External agent CLIs: one profile per CLI, readiness, bounded delegation (spec 003, 004).
//! (Built by the external-agents work.)
