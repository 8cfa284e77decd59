//! Fuzzes the runtime's stdin parser: any byte string is either an `AgentInput` that survives
//! a serde round trip, or an error whose message is one bounded, printable line.
#![no_main]

use intendant_protocol::runtime::AgentInput;
use intendant_runtime::input::{InputError, PARSE_MESSAGE_BYTES, PARSE_PREVIEW_BYTES, read_input};
use libfuzzer_sys::fuzz_target;

/// A small limit so the oversized path is exercised too.
const LIMIT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    match read_input(data, LIMIT) {
        Ok(input) => {
            assert!(data.len() <= LIMIT);
            let again: AgentInput =
                serde_json::from_slice(&serde_json::to_vec(&input).unwrap()).unwrap();
            assert_eq!(again, input);
        }
        Err(InputError::TooLarge { limit }) => assert!(data.len() > limit),
        Err(e @ InputError::Parse { .. }) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line parse error: {msg:?}");
            // Both the parser's message and the escaped preview are capped in bytes.
            assert!(
                msg.len() <= PARSE_MESSAGE_BYTES + PARSE_PREVIEW_BYTES + 100,
                "unbounded parse error: {} bytes",
                msg.len()
            );
        }
        Err(InputError::Read(e)) => panic!("reading a slice cannot fail: {e}"),
    }
});
