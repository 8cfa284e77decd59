//! `intendant doctor`'s look at the fleet of a state root: can the server be reached with its
//! credentials, does it run JetStream, are the fleet's buckets and streams there, and is this
//! state root's daemon a live member. Read only: it never joins, writes or makes anything.

use std::time::Duration;

use async_nats::jetstream;
use intendant_protocol::utc::age_seconds;

use crate::{
    FleetConfig, FleetError, MEMBERS_BUCKET, PLACEMENTS_BUCKET, RECORDS_STREAM, SESSIONS_BUCKET,
    WORK_STREAM, member,
};

/// How long each question to the server may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// One line of the fleet's report: its key and what was found (an error when it is not right).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetCheck {
    /// Stable key: `fleet_server`, `fleet_jetstream`, `fleet_streams` or `fleet_member`.
    pub id: &'static str,
    /// What was found.
    pub found: Result<String, String>,
}

fn check(id: &'static str, found: Result<String, String>) -> FleetCheck {
    FleetCheck { id, found }
}

/// The fleet `config` names, as far as it can be asked; a check that cannot be asked because an
/// earlier one failed is left out.
pub async fn doctor(config: &FleetConfig) -> Vec<FleetCheck> {
    let client = match tokio::time::timeout(TIMEOUT, member::connect(config)).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return vec![check("fleet_server", Err(e.to_string()))],
        Err(_) => {
            let e = FleetError::Unreachable {
                server: config.server.clone(),
                detail: "no answer".to_owned(),
            };
            return vec![check("fleet_server", Err(e.to_string()))];
        }
    };
    let mut checks = vec![check(
        "fleet_server",
        Ok(format!("{} reached, credentials accepted", config.server)),
    )];
    // The account's JetStream info, asked raw: async-nats cannot read a 2.9 server's answer.
    let info = tokio::time::timeout(TIMEOUT, client.request("$JS.API.INFO", "".into())).await;
    let jetstream_on = match info {
        Ok(Ok(reply)) if !String::from_utf8_lossy(&reply.payload).contains("\"error\"") => {
            checks.push(check("fleet_jetstream", Ok("JetStream is on".to_owned())));
            true
        }
        Ok(Ok(reply)) => {
            let said: String = String::from_utf8_lossy(&reply.payload)
                .chars()
                .take(200)
                .collect();
            checks.push(check(
                "fleet_jetstream",
                Err(format!("JetStream refused: {said}")),
            ));
            false
        }
        Ok(Err(e)) => {
            checks.push(check(
                "fleet_jetstream",
                Err(format!(
                    "JetStream is off ({e}): start nats-server with -js"
                )),
            ));
            false
        }
        Err(_) => {
            checks.push(check(
                "fleet_jetstream",
                Err("JetStream does not answer".to_owned()),
            ));
            false
        }
    };
    if !jetstream_on {
        return checks;
    }
    let js = jetstream::new(client);
    checks.push(check("fleet_streams", streams(&js).await));
    checks.push(check("fleet_member", this_member(&js, &config.name).await));
    checks
}

/// Whether every stream of the fleet is there, with how many messages each holds.
async fn streams(js: &jetstream::Context) -> Result<String, String> {
    let names = [
        format!("KV_{MEMBERS_BUCKET}"),
        format!("KV_{SESSIONS_BUCKET}"),
        format!("KV_{PLACEMENTS_BUCKET}"),
        WORK_STREAM.to_owned(),
        RECORDS_STREAM.to_owned(),
    ];
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for name in names {
        match tokio::time::timeout(TIMEOUT, js.get_stream(&name)).await {
            Ok(Ok(mut stream)) => {
                let messages = stream.info().await.map(|i| i.state.messages).unwrap_or(0);
                found.push(format!("{name} ({messages} messages)"));
            }
            _ => missing.push(name),
        }
    }
    if missing.is_empty() {
        Ok(found.join(", "))
    } else {
        Err(format!(
            "missing: {} (the first daemon that joins makes them)",
            missing.join(", ")
        ))
    }
}

/// Whether the daemon named `name` is a live member: its record is fresh.
async fn this_member(js: &jetstream::Context, name: &str) -> Result<String, String> {
    let store = tokio::time::timeout(TIMEOUT, js.get_key_value(MEMBERS_BUCKET))
        .await
        .map_err(|_| "the members' bucket does not answer".to_owned())?
        .map_err(|e| format!("the members' bucket cannot be opened: {e}"))?;
    let record = tokio::time::timeout(TIMEOUT, member::read(&store, name))
        .await
        .map_err(|_| "the members' bucket does not answer".to_owned())??;
    let Some(record) = record else {
        return Err(format!(
            "no record of member {name:?}: this state root's daemon is not serving in the fleet"
        ));
    };
    let age = age_seconds(&record.seen).unwrap_or(i64::MAX);
    if member::alive(&record) {
        Ok(format!(
            "member {name:?} (pid {} on {}) reported {age} s ago",
            record.pid, record.host
        ))
    } else {
        Err(format!(
            "member {name:?} last reported {age} s ago: gone (not serving, or cut off from the server)"
        ))
    }
}
