mod faults;
mod support;
mod wires;
