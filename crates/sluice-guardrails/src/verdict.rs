//! What a check decided, from least to most severe.

/// What a guardrail decided about a text. Ordered by severity, so the verdict of several
/// findings is their maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Verdict {
    /// Nothing found.
    #[default]
    Allow,
    /// Found and recorded; the text goes on unchanged.
    Flag,
    /// Found and replaced with a placeholder.
    Redact,
    /// The text was modified by an external checker.
    Modify,
    /// The check could not be made (a checker slow, down or answering nonsense) and its
    /// `on_error` let the text through.
    Error,
    /// Refused: the request (or the rest of the answer) does not go on.
    Deny,
}

impl Verdict {
    /// The label used in the `x-sluice-guardrails` header, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Flag => "flag",
            Verdict::Redact => "redact",
            Verdict::Modify => "modify",
            Verdict::Deny => "deny",
            Verdict::Error => "error",
        }
    }

    /// Every verdict, for metrics that list them all.
    pub const ALL: [Verdict; 6] = [
        Verdict::Allow,
        Verdict::Flag,
        Verdict::Redact,
        Verdict::Modify,
        Verdict::Deny,
        Verdict::Error,
    ];
}
