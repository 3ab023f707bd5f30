//! Model globs matched on every keyed request (a key's `models`, its `model_limits`, prices),
//! without allocating: over bytes when both sides are ASCII (model names are), else through
//! the config's char-wise matcher, so `?` is always one character.

/// `*` any run (also empty), `?` one character, everything else itself.
pub(crate) fn matches(glob: &str, s: &str) -> bool {
    if !glob.is_ascii() || !s.is_ascii() {
        return crate::config::glob_match(glob, s);
    }
    let (g, s) = (glob.as_bytes(), s.as_bytes());
    let (mut gi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if gi < g.len() && (g[gi] == b'?' || g[gi] == s[si]) {
            gi += 1;
            si += 1;
        } else if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, si));
            gi += 1;
        } else if let Some((sg, ss)) = star {
            gi = sg + 1;
            si = ss + 1;
            star = Some((sg, ss + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn agrees_with_the_config_matcher() {
        let globs = [
            "gpt-4o*",
            "*",
            "claude",
            "deepseek-*-v?",
            "*mini*",
            "é?",
            "?",
        ];
        let names = [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4",
            "",
            "claude",
            "claude-3",
            "deepseek-chat-v3",
            "éa",
            "éé",
            "a",
        ];
        for g in globs {
            for n in names {
                assert_eq!(matches(g, n), crate::config::glob_match(g, n), "{g} {n}");
            }
        }
    }
}
