mod binary;
mod faults;
mod invariants;
mod real_clis;
mod scenario_file;
mod sdks;
mod support;
mod wires;
