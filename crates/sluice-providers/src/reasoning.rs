//! Reasoning settings across families: what a client asked for (an OpenAI effort level, an
//! Anthropic thinking budget, adaptive thinking, or none), and how each upstream is told.
//!
//! One table turns effort levels into token budgets and back ([`BudgetTable`]; the README's
//! "Reasoning" section prints it). A route may replace it (`[route.reasoning_budgets]`).
//!
//! | effort | budget (Anthropic `budget_tokens`, Gemini 2.5 `thinkingBudget`) | Gemini 3 `thinkingLevel` |
//! |---|---|---|
//! | `none` | thinking off (Anthropic: no `thinking`; Gemini 2.5: 0) | `low` (Gemini 3 always thinks) |
//! | `minimal` | 1024 | `low` |
//! | `low` | 2048 | `low` |
//! | `medium` | 8192 | `high` |
//! | `high` | 16384 | `high` |
//! | `xhigh` | 32768 | `high` |
//!
//! A budget goes to OpenAI as the smallest level whose budget holds it (`low` up to 2048,
//! `medium` up to 8192, `high` above): never `minimal` or `xhigh`, which only some OpenAI
//! models take. Anthropic's minimum budget is 1024 (smaller budgets are raised to it), and
//! `max_tokens` must exceed the budget: see [`anthropic_max_tokens`].

use crate::api::Family;

/// Anthropic refuses a `budget_tokens` below this.
pub const ANTHROPIC_MIN_BUDGET: u64 = 1024;

/// An OpenAI reasoning effort level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effort {
    /// `minimal` (GPT-5).
    Minimal,
    /// `low`.
    Low,
    /// `medium` (OpenAI's default).
    Medium,
    /// `high`.
    High,
    /// `xhigh` (the newest GPT-5 models).
    XHigh,
}

impl Effort {
    /// From OpenAI's spelling (`none` is not an effort: see [`Reasoning::Off`]).
    pub fn parse(s: &str) -> Option<Effort> {
        Some(match s {
            "minimal" => Effort::Minimal,
            "low" => Effort::Low,
            "medium" => Effort::Medium,
            "high" => Effort::High,
            "xhigh" => Effort::XHigh,
            _ => return None,
        })
    }

    /// OpenAI's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::XHigh => "xhigh",
        }
    }

    /// Gemini 3's `thinkingLevel`: Gemini 3 Pro takes only `low` and `high`, so the levels
    /// below `medium` are `low` and the rest `high`.
    pub fn gemini_level(self) -> &'static str {
        match self {
            Effort::Minimal | Effort::Low => "low",
            Effort::Medium | Effort::High | Effort::XHigh => "high",
        }
    }
}

/// Budgets per effort level (tokens of thinking). [`BudgetTable::DEFAULT`] is the README's
/// table; a route may set its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BudgetTable {
    /// `minimal`.
    pub minimal: u64,
    /// `low`.
    pub low: u64,
    /// `medium`.
    pub medium: u64,
    /// `high`.
    pub high: u64,
    /// `xhigh`.
    pub xhigh: u64,
}

impl BudgetTable {
    /// 1024 / 2048 / 8192 / 16384 / 32768: `minimal` at Anthropic's minimum, each level a few
    /// times the one below, `xhigh` at Gemini 2.5 Pro's largest budget.
    pub const DEFAULT: BudgetTable = BudgetTable {
        minimal: 1024,
        low: 2048,
        medium: 8192,
        high: 16384,
        xhigh: 32768,
    };

    /// The budget for an effort level.
    pub fn budget(&self, e: Effort) -> u64 {
        match e {
            Effort::Minimal => self.minimal,
            Effort::Low => self.low,
            Effort::Medium => self.medium,
            Effort::High => self.high,
            Effort::XHigh => self.xhigh,
        }
    }

    /// The level for a budget, as OpenAI models take it: the smallest of `low`, `medium` and
    /// `high` whose budget holds it (`high` above).
    pub fn effort(&self, budget: u64) -> Effort {
        if budget <= self.low {
            Effort::Low
        } else if budget <= self.medium {
            Effort::Medium
        } else {
            Effort::High
        }
    }
}

impl Default for BudgetTable {
    fn default() -> Self {
        BudgetTable::DEFAULT
    }
}

/// What the client asked about reasoning, neutral.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reasoning {
    /// OpenAI `reasoning_effort: "none"`.
    Off,
    /// OpenAI `reasoning_effort`; Anthropic `output_config.effort`.
    Effort(Effort),
    /// Anthropic `thinking: {type: "enabled", budget_tokens}`.
    Budget(u64),
    /// Anthropic `thinking: {type: "adaptive"}`: the model decides how much.
    Adaptive,
}

impl Reasoning {
    /// The budget to send a provider that takes budgets; `None`: thinking off, or the model
    /// decides.
    pub(crate) fn budget(self, table: &BudgetTable) -> Option<u64> {
        match self {
            Reasoning::Off | Reasoning::Adaptive => None,
            Reasoning::Effort(e) => Some(table.budget(e)),
            Reasoning::Budget(b) => Some(b),
        }
    }

    /// The effort level to send a provider that takes levels; `None`: the model's default.
    pub(crate) fn effort(self, table: &BudgetTable) -> Option<Effort> {
        match self {
            Reasoning::Off | Reasoning::Adaptive => None,
            Reasoning::Effort(e) => Some(e),
            Reasoning::Budget(b) => Some(table.effort(b)),
        }
    }

    /// The client's name for the setting, for errors and the dropped-parameters header.
    pub(crate) fn param(source: Family) -> &'static str {
        match source {
            Family::Anthropic => "thinking",
            _ => "reasoning_effort",
        }
    }
}

/// Anthropic's `max_tokens` with thinking on: its limit covers thinking and answer, and the
/// budget must be below it. Without a client limit, the budget plus `default_answer` (room
/// for the answer); with one that leaves the budget no room, the budget plus the client's
/// limit (the client's limit then bounds the answer after the thinking, as it bounds
/// an OpenAI reasoning model's visible output).
pub fn anthropic_max_tokens(budget: u64, client: Option<u64>, default_answer: u64) -> u64 {
    match client {
        None => budget + default_answer,
        Some(m) if m > budget => m,
        Some(m) => budget + m.max(1),
    }
}

/// Whether a Gemini model takes `thinkingLevel` (Gemini 3 and later) rather than
/// `thinkingBudget` (Gemini 2.5).
pub fn gemini_takes_level(model: &str) -> bool {
    let m = model.strip_prefix("models/").unwrap_or(model);
    let Some(rest) = m.strip_prefix("gemini-") else {
        return false;
    };
    let major: String = rest.chars().take_while(char::is_ascii_digit).collect();
    major.parse::<u32>().is_ok_and(|v| v >= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_goes_both_ways() {
        let t = BudgetTable::DEFAULT;
        for e in [Effort::Low, Effort::Medium, Effort::High] {
            assert_eq!(t.effort(t.budget(e)), e, "{e:?}");
        }
        // The levels only some OpenAI models take are never produced from a budget.
        assert_eq!(t.effort(t.budget(Effort::Minimal)), Effort::Low);
        assert_eq!(t.effort(t.budget(Effort::XHigh)), Effort::High);
        assert_eq!(t.effort(1), Effort::Low);
        assert_eq!(t.effort(2049), Effort::Medium);
        assert_eq!(t.effort(100_000), Effort::High);
    }

    #[test]
    fn max_tokens_make_room_for_the_budget() {
        assert_eq!(anthropic_max_tokens(2048, None, 4096), 6144);
        assert_eq!(anthropic_max_tokens(2048, Some(10_000), 4096), 10_000);
        assert_eq!(anthropic_max_tokens(8192, Some(500), 4096), 8692);
        assert_eq!(anthropic_max_tokens(2048, Some(2048), 4096), 4096);
    }

    #[test]
    fn gemini_levels_from_three_on() {
        assert!(gemini_takes_level("gemini-3-pro-preview"));
        assert!(gemini_takes_level("models/gemini-3.1-flash"));
        assert!(!gemini_takes_level("gemini-2.5-flash"));
        assert!(!gemini_takes_level("gemma-3"));
    }
}
