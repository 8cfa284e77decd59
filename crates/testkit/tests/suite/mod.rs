mod binary;
mod faults;
mod invariants;
mod real_clis;
mod scenario_file;
mod support;
mod wires;
