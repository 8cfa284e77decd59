//! Test fakes: the fake model server speaking all four wires from a scenario file, with faults.
//! (Built by the providers/fake-server work.)
