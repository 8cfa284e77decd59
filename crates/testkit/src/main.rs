//! `intendant-fake-model`: serve a scenario on 127.0.0.1. (Built by the fake-server work.)

fn main() -> anyhow::Result<()> {
    Ok(())
}
