//! What the server has issued (tool call ids, reasoning signatures) and the invariant checks that
//! compare each later request against it: every tool result answers an issued call, every echoed
//! call and every echoed reasoning token is byte-identical to what was sent, and reasoning that
//! accompanied a call is echoed with it.

use std::collections::HashMap;

use serde_json::Value;

use crate::wire::{IssuedCall, IssuedReasoning, RequestFacts, Wire};

/// One clean turn as it went out.
#[derive(Debug, Clone)]
struct IssuedTurn {
    wire: Wire,
    turn: usize,
    calls: Vec<IssuedCall>,
    /// Present only when the signature actually reached the client.
    reasoning: Option<IssuedReasoning>,
}

/// Everything issued so far, across wires, with the first turn to issue each call id and each
/// reasoning signature (a benchmark's server sees thousands of turns, and every request echoes
/// its whole history: a scan of every turn per echoed id made the fixture's time grow with the
/// square of the turns).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    turns: Vec<IssuedTurn>,
    /// Call id: (index in `turns`, index in its `calls`).
    by_id: HashMap<String, (usize, usize)>,
    /// Reasoning signature: index in `turns`.
    by_signature: HashMap<String, usize>,
}

impl Ledger {
    pub fn record(
        &mut self,
        wire: Wire,
        turn: usize,
        calls: &[IssuedCall],
        reasoning: Option<&IssuedReasoning>,
    ) {
        let index = self.turns.len();
        for (at, call) in calls.iter().enumerate() {
            self.by_id.entry(call.id.clone()).or_insert((index, at));
        }
        if let Some(reasoning) = reasoning {
            self.by_signature
                .entry(reasoning.signature.clone())
                .or_insert(index);
        }
        self.turns.push(IssuedTurn {
            wire,
            turn,
            calls: calls.to_vec(),
            reasoning: reasoning.cloned(),
        });
    }

    /// Call ids (Gemini: names) of the clean turn `turn`, for `expect.tool_results_for_previous`.
    pub fn calls_of_turn(&self, turn: usize) -> Vec<(Wire, IssuedCall)> {
        self.turns
            .iter()
            .filter(|issued| issued.turn == turn)
            .flat_map(|issued| issued.calls.iter().map(|call| (issued.wire, call.clone())))
            .collect()
    }

    fn find_by_id(&self, id: &str) -> Option<(&IssuedTurn, &IssuedCall)> {
        let &(turn, call) = self.by_id.get(id)?;
        let turn = &self.turns[turn];
        Some((turn, &turn.calls[call]))
    }

    fn find_gemini(&self, name: &str, arguments: &Value) -> Option<(&IssuedTurn, &IssuedCall)> {
        self.turns
            .iter()
            .filter(|turn| turn.wire == Wire::Gemini)
            .flat_map(|turn| turn.calls.iter().map(move |call| (turn, call)))
            .find(|(_, call)| call.name == name && parse(&call.arguments) == *arguments)
    }

    fn find_signature(&self, signature: &str) -> Option<&IssuedTurn> {
        self.by_signature
            .get(signature)
            .map(|&turn| &self.turns[turn])
    }

    /// Checks one request against everything issued before it; returns the violations.
    pub fn check(&self, wire: Wire, facts: &RequestFacts) -> Vec<String> {
        let mut violations = Vec::new();
        for result in &facts.tool_results {
            let answered = match wire {
                // Gemini issues no ids; a functionResponse answers a call by name.
                Wire::Gemini => result.name.as_deref().is_some_and(|name| {
                    self.turns
                        .iter()
                        .filter(|turn| turn.wire == Wire::Gemini)
                        .any(|turn| turn.calls.iter().any(|call| call.name == name))
                }),
                Wire::OpenAiResponses | Wire::OpenAiChat | Wire::Anthropic => result
                    .id
                    .as_deref()
                    .is_some_and(|id| self.find_by_id(id).is_some()),
            };
            if !answered {
                violations.push(format!(
                    "{wire}: tool result (id {:?}, name {:?}) answers no tool call this server issued",
                    result.id, result.name
                ));
            }
        }
        for echoed in &facts.echoed_calls {
            let found = match wire {
                Wire::Gemini => self.find_gemini(&echoed.name, &echoed.arguments),
                Wire::OpenAiResponses | Wire::OpenAiChat | Wire::Anthropic => {
                    echoed.id.as_deref().and_then(|id| self.find_by_id(id))
                }
            };
            let Some((turn, call)) = found else {
                violations.push(format!(
                    "{wire}: echoed tool call {:?} (id {:?}) was never issued with these arguments",
                    echoed.name, echoed.id
                ));
                continue;
            };
            if echoed.name != call.name || echoed.arguments != parse(&call.arguments) {
                violations.push(format!(
                    "{wire}: echoed tool call {} differs from the issued one ({} {})",
                    call.id, call.name, call.arguments
                ));
            }
            let Some(reasoning) = &turn.reasoning else {
                continue;
            };
            let echoed_with_call = match wire {
                // Gemini wants the signature on the first call part itself.
                Wire::Gemini => {
                    let first = turn.calls.first().is_some_and(|first| first.id == call.id);
                    !first
                        || echoed.attached_signature.as_deref()
                            == Some(reasoning.signature.as_str())
                }
                Wire::OpenAiResponses | Wire::OpenAiChat | Wire::Anthropic => facts
                    .echoed_reasoning
                    .iter()
                    .any(|r| r.signature == reasoning.signature),
            };
            if !echoed_with_call {
                violations.push(format!(
                    "{wire}: tool call {} of turn {} is echoed without the reasoning signature issued with it",
                    call.id, turn.turn
                ));
            }
        }
        for echoed in &facts.echoed_reasoning {
            let Some(turn) = self.find_signature(&echoed.signature) else {
                violations.push(format!(
                    "{wire}: echoed reasoning signature {} was never issued (or was altered)",
                    abbreviate(&echoed.signature)
                ));
                continue;
            };
            let Some(issued) = &turn.reasoning else {
                continue;
            };
            if echoed
                .text
                .as_ref()
                .is_some_and(|text| *text != issued.text)
            {
                violations.push(format!(
                    "{wire}: reasoning text echoed with signature {} differs from the issued text",
                    abbreviate(&echoed.signature)
                ));
            }
            if echoed
                .item_id
                .as_ref()
                .is_some_and(|id| *id != issued.item_id)
            {
                violations.push(format!(
                    "{wire}: reasoning item id {:?} does not match the issued {}",
                    echoed.item_id, issued.item_id
                ));
            }
        }
        violations
    }
}

fn parse(arguments: &str) -> Value {
    crate::wire::parse_arguments(arguments)
}

fn abbreviate(text: &str) -> String {
    let prefix: String = text.chars().take(16).collect();
    if prefix.len() < text.len() {
        format!("{prefix}…")
    } else {
        prefix
    }
}
