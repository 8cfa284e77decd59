//! Token usage and cost: per turn and per session, priced from a small table of known models,
//! and the session token budget.

use intendant_protocol::events::AppEvent;
pub use intendant_providers::Usage;

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Cached input.
    pub cached_input: f64,
    /// Output (reasoning included).
    pub output: f64,
}

/// Known model prices by name prefix; the longest matching prefix wins.
const PRICES: &[(&str, Price)] = &[
    (
        "gpt-5-nano",
        Price {
            input: 0.05,
            cached_input: 0.005,
            output: 0.40,
        },
    ),
    (
        "gpt-5-mini",
        Price {
            input: 0.25,
            cached_input: 0.025,
            output: 2.00,
        },
    ),
    (
        "gpt-5",
        Price {
            input: 1.25,
            cached_input: 0.125,
            output: 10.00,
        },
    ),
    (
        "gpt-4.1-mini",
        Price {
            input: 0.40,
            cached_input: 0.10,
            output: 1.60,
        },
    ),
    (
        "gpt-4.1",
        Price {
            input: 2.00,
            cached_input: 0.50,
            output: 8.00,
        },
    ),
    (
        "gpt-4o-mini",
        Price {
            input: 0.15,
            cached_input: 0.075,
            output: 0.60,
        },
    ),
    (
        "gpt-4o",
        Price {
            input: 2.50,
            cached_input: 1.25,
            output: 10.00,
        },
    ),
    (
        "o4-mini",
        Price {
            input: 1.10,
            cached_input: 0.275,
            output: 4.40,
        },
    ),
    (
        "o3",
        Price {
            input: 2.00,
            cached_input: 0.50,
            output: 8.00,
        },
    ),
    (
        "claude-opus-4",
        Price {
            input: 15.00,
            cached_input: 1.50,
            output: 75.00,
        },
    ),
    (
        "claude-sonnet-4",
        Price {
            input: 3.00,
            cached_input: 0.30,
            output: 15.00,
        },
    ),
    (
        "claude-haiku-4",
        Price {
            input: 1.00,
            cached_input: 0.10,
            output: 5.00,
        },
    ),
    (
        "claude-3-5-haiku",
        Price {
            input: 0.80,
            cached_input: 0.08,
            output: 4.00,
        },
    ),
    (
        "gemini-2.5-pro",
        Price {
            input: 1.25,
            cached_input: 0.31,
            output: 10.00,
        },
    ),
    (
        "gemini-2.5-flash-lite",
        Price {
            input: 0.10,
            cached_input: 0.025,
            output: 0.40,
        },
    ),
    (
        "gemini-2.5-flash",
        Price {
            input: 0.30,
            cached_input: 0.075,
            output: 2.50,
        },
    ),
];

/// The price of `model`, if known.
pub fn price_for(model: &str) -> Option<Price> {
    let model = model.to_ascii_lowercase();
    let model = model.rsplit('/').next().unwrap_or(&model);
    PRICES
        .iter()
        .filter(|(prefix, _)| model.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, p)| *p)
}

/// Cost of `usage` at `price`.
pub fn cost(usage: &Usage, price: Option<Price>) -> f64 {
    let Some(p) = price else { return 0.0 };
    let cached = usage.cached_input_tokens.min(usage.input_tokens);
    let uncached = usage.input_tokens - cached;
    (uncached as f64 * p.input
        + cached as f64 * p.cached_input
        + usage.output_tokens as f64 * p.output)
        / 1_000_000.0
}

/// The event reporting turn `turn`'s `usage`, which cost `cost_usd`.
pub fn usage_event(turn: u32, usage: &Usage, cost_usd: f64) -> AppEvent {
    AppEvent::Usage {
        turn,
        input_tokens: usage.input_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.reasoning_tokens,
        cost_usd,
    }
}

/// The usage and cost an [`AppEvent::Usage`] reports (the inverse of [`usage_event`]); `None`
/// for any other event.
pub fn reported_usage(event: &AppEvent) -> Option<(Usage, f64)> {
    let AppEvent::Usage {
        input_tokens,
        cached_input_tokens,
        output_tokens,
        reasoning_tokens,
        cost_usd,
        ..
    } = event
    else {
        return None;
    };
    let usage = Usage {
        input_tokens: *input_tokens,
        cached_input_tokens: *cached_input_tokens,
        output_tokens: *output_tokens,
        reasoning_tokens: *reasoning_tokens,
    };
    Some((usage, *cost_usd))
}

/// Fraction of the budget at which a budget warning is emitted.
pub const BUDGET_WARNING_FRACTION: f64 = 0.8;

/// Session totals and the budget.
#[derive(Debug, Clone)]
pub struct UsageTracker {
    price: Option<Price>,
    total: Usage,
    cost_usd: f64,
    budget_tokens: Option<u64>,
    warned: bool,
}

/// What recording one turn's usage means for the budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetState {
    /// Comfortably within the budget (or no budget).
    Ok,
    /// Crossed the warning fraction just now (reported once).
    Warn {
        /// Tokens used.
        used: u64,
        /// The budget.
        budget: u64,
    },
    /// At or over the budget.
    Exhausted,
}

impl UsageTracker {
    /// A tracker pricing `model`, with an optional token budget (input + output tokens).
    pub fn new(model: &str, budget_tokens: Option<u64>) -> UsageTracker {
        UsageTracker {
            price: price_for(model),
            total: Usage::default(),
            cost_usd: 0.0,
            budget_tokens,
            warned: false,
        }
    }

    /// Adds one turn's usage; returns its cost.
    pub fn record(&mut self, usage: &Usage) -> f64 {
        let c = cost(usage, self.price);
        self.total.add(usage);
        self.cost_usd += c;
        c
    }

    /// Where the session stands against the budget.
    pub fn budget_state(&mut self) -> BudgetState {
        let Some(budget) = self.budget_tokens else {
            return BudgetState::Ok;
        };
        let used = self.used_tokens();
        if used >= budget {
            BudgetState::Exhausted
        } else if !self.warned && used as f64 >= budget as f64 * BUDGET_WARNING_FRACTION {
            self.warned = true;
            BudgetState::Warn { used, budget }
        } else {
            BudgetState::Ok
        }
    }

    /// Input + output tokens so far.
    pub fn used_tokens(&self) -> u64 {
        self.total.input_tokens + self.total.output_tokens
    }

    /// Session totals.
    pub fn total(&self) -> Usage {
        self.total
    }

    /// Session cost in USD.
    pub fn cost_usd(&self) -> f64 {
        self.cost_usd
    }

    /// The budget, if any.
    pub fn budget_tokens(&self) -> Option<u64> {
        self.budget_tokens
    }

    /// Tokens left of the budget (`None`: no budget).
    pub fn remaining(&self) -> Option<u64> {
        self.budget_tokens
            .map(|b| b.saturating_sub(self.used_tokens()))
    }

    /// Gives `tokens` of the budget away (to a sub-agent): the budget shrinks by that much.
    pub fn carve(&mut self, tokens: u64) {
        if let Some(budget) = &mut self.budget_tokens {
            *budget = budget.saturating_sub(tokens);
        }
    }

    /// The line appended to tool results so the model knows its budget.
    pub fn budget_line(&self, context_tokens: u64, context_window: u64) -> String {
        let pct = context_tokens
            .saturating_mul(100)
            .checked_div(context_window)
            .unwrap_or(0);
        match self.budget_tokens {
            Some(budget) => format!(
                "[budget: {} of {} tokens used ({} left); context {}% of {}]",
                self.used_tokens(),
                budget,
                budget.saturating_sub(self.used_tokens()),
                pct,
                context_window
            ),
            None => format!(
                "[budget: {} tokens used, no limit; context {}% of {}]",
                self.used_tokens(),
                pct,
                context_window
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_event_reports_what_it_was_made_from() {
        let usage = Usage {
            input_tokens: 10,
            cached_input_tokens: 4,
            output_tokens: 7,
            reasoning_tokens: 2,
        };
        assert_eq!(
            reported_usage(&usage_event(3, &usage, 0.5)),
            Some((usage, 0.5))
        );
        assert_eq!(
            reported_usage(&AppEvent::Done {
                message: "x".into()
            }),
            None
        );
    }

    #[test]
    fn prices_use_longest_prefix() {
        assert_eq!(price_for("gpt-5-mini-2025-08-07").unwrap().input, 0.25);
        assert_eq!(price_for("gpt-5").unwrap().input, 1.25);
        assert_eq!(price_for("models/gemini-2.5-flash").unwrap().output, 2.5);
        assert!(price_for("fake-model").is_none());
    }

    #[test]
    fn cost_splits_cached_input() {
        let u = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            output_tokens: 100_000,
            reasoning_tokens: 0,
        };
        let c = cost(&u, price_for("gpt-5"));
        assert!(
            (c - (0.6 * 1.25 + 0.4 * 0.125 + 0.1 * 10.0)).abs() < 1e-9,
            "{c}"
        );
        assert_eq!(cost(&u, None), 0.0);
    }

    #[test]
    fn budget_warns_once_then_exhausts() {
        let mut t = UsageTracker::new("gpt-5", Some(100));
        t.record(&Usage {
            input_tokens: 50,
            output_tokens: 10,
            ..Usage::default()
        });
        assert_eq!(t.budget_state(), BudgetState::Ok);
        t.record(&Usage {
            input_tokens: 20,
            output_tokens: 5,
            ..Usage::default()
        });
        assert_eq!(
            t.budget_state(),
            BudgetState::Warn {
                used: 85,
                budget: 100
            }
        );
        assert_eq!(t.budget_state(), BudgetState::Ok);
        t.record(&Usage {
            input_tokens: 15,
            ..Usage::default()
        });
        assert_eq!(t.budget_state(), BudgetState::Exhausted);
        assert!(
            t.budget_line(10, 100)
                .contains("100 of 100 tokens used (0 left)")
        );
    }
}
