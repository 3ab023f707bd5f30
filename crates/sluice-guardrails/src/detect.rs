//! The built-in detectors: a bounded pattern each (so a stream's window can hold its longest
//! match) and, where the format has one, a validation that turns a shape into a finding
//! (a card number passes Luhn, an IBAN its mod-97 checksum, an SSN the SSA's rules).

/// A built-in detector of personal data or a secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Detector {
    /// Payment card numbers: 13 to 19 digits, spaces or dashes between, Luhn-valid.
    Card,
    /// E-mail addresses.
    Email,
    /// Phone numbers: 10 to 15 digits with the usual separators, `+` and area-code brackets.
    Phone,
    /// IBANs: country, check digits, 11 to 30 more characters, mod-97 valid.
    Iban,
    /// US Social Security numbers `AAA-GG-SSSS`, without the never-issued areas, groups and
    /// serials.
    Ssn,
    /// API-key shapes: OpenAI/Anthropic `sk-…`, AWS `AKIA…`, GitHub `ghp_…`, Slack `xox…`,
    /// Google `AIza…`, GitLab `glpat-…`.
    ApiKey,
    /// The header of a PEM private key (`-----BEGIN … PRIVATE KEY-----`).
    PrivateKey,
}

impl Detector {
    /// Every detector, in the order they win an overlap.
    pub const ALL: [Detector; 7] = [
        Detector::PrivateKey,
        Detector::ApiKey,
        Detector::Iban,
        Detector::Card,
        Detector::Ssn,
        Detector::Email,
        Detector::Phone,
    ];

    /// The name used in config and placeholders (`[REDACTED:card]`).
    pub fn name(self) -> &'static str {
        match self {
            Detector::Card => "card",
            Detector::Email => "email",
            Detector::Phone => "phone",
            Detector::Iban => "iban",
            Detector::Ssn => "ssn",
            Detector::ApiKey => "api_key",
            Detector::PrivateKey => "private_key",
        }
    }

    /// The detector named `name` in config.
    pub fn from_name(name: &str) -> Option<Detector> {
        Detector::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Its pattern: ASCII classes and word boundaries (the fast engines run on them), every
    /// repetition bounded.
    pub(crate) fn pattern(self) -> &'static str {
        match self {
            Detector::Card => r"(?-u:\b)[0-9](?:[ -]?[0-9]){12,18}(?-u:\b)",
            Detector::Email => {
                r"(?-u:\b)[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,40}(?:\.[A-Za-z0-9-]{1,40}){0,2}\.[A-Za-z]{2,12}(?-u:\b)"
            }
            Detector::Phone => {
                r"(?:\+[0-9]{1,3}[ .-]?)?(?:\([0-9]{2,4}\)|(?-u:\b)[0-9]{2,4})[ .-]?[0-9]{3,4}[ .-]?[0-9]{3,4}(?-u:\b)"
            }
            Detector::Iban => {
                r"(?-u:\b)[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?-u:\b)"
            }
            Detector::Ssn => r"(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b)",
            Detector::ApiKey => concat!(
                r"(?-u:\b)(?:sk-(?:proj-|ant-api03-|ant-)?[A-Za-z0-9_-]{20,160}",
                r"|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,76}|github_pat_[A-Za-z0-9_]{22,96}",
                r"|xox[abprs]-[A-Za-z0-9-]{10,96}|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20,64})"
            ),
            Detector::PrivateKey => r"-----BEGIN (?:[A-Z0-9]{1,16} ){0,2}PRIVATE KEY-----",
        }
    }

    /// Whether a match of the pattern is a finding.
    pub(crate) fn validate(self, m: &str) -> bool {
        match self {
            Detector::Card => luhn(m),
            Detector::Iban => iban(m),
            Detector::Ssn => ssn(m),
            Detector::Phone => {
                let n = m.bytes().filter(u8::is_ascii_digit).count();
                (10..=15).contains(&n)
            }
            Detector::Email | Detector::ApiKey | Detector::PrivateKey => true,
        }
    }
}

/// The Luhn check of a card number (separators ignored), 13 to 19 digits.
pub fn luhn(s: &str) -> bool {
    let digits = s
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| u32::from(b - b'0'));
    let mut sum = 0;
    let mut n = 0;
    // From the right: every second digit doubled.
    for (i, d) in digits.collect::<Vec<_>>().into_iter().rev().enumerate() {
        n += 1;
        sum += if i % 2 == 1 {
            let x = d * 2;
            if x > 9 {
                x - 9
            } else {
                x
            }
        } else {
            d
        };
    }
    (13..=19).contains(&n) && sum % 10 == 0
}

/// The ISO 13616 check of an IBAN (spaces ignored): moved four characters, letters as
/// numbers, the whole mod 97 is 1.
pub fn iban(s: &str) -> bool {
    let chars: Vec<u8> = s.bytes().filter(|b| *b != b' ').collect();
    if !(15..=34).contains(&chars.len()) {
        return false;
    }
    let mut rem: u32 = 0;
    for &c in chars[4..].iter().chain(&chars[..4]) {
        let v = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'A'..=b'Z' => u32::from(c - b'A') + 10,
            _ => return false,
        };
        rem = if v > 9 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

/// A US SSN as the SSA issues them: no area 000, 666 or 9xx, no group 00, no serial 0000.
pub fn ssn(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 11 {
        return false;
    }
    let area = &s[0..3];
    area != "000" && area != "666" && b[0] != b'9' && &s[4..6] != "00" && &s[7..11] != "0000"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_accepts_test_cards_and_refuses_a_changed_digit() {
        assert!(luhn("4111 1111 1111 1111"));
        assert!(luhn("5500-0000-0000-0004"));
        assert!(luhn("378282246310005"));
        assert!(!luhn("4111 1111 1111 1112"));
        assert!(!luhn("1234"));
    }

    #[test]
    fn iban_checksum() {
        assert!(iban("DE89 3704 0044 0532 0130 00"));
        assert!(iban("GB82WEST12345698765432"));
        assert!(!iban("GB82WEST12345698765433"));
    }

    #[test]
    fn ssn_rules() {
        assert!(ssn("123-45-6789"));
        assert!(!ssn("000-45-6789"));
        assert!(!ssn("666-45-6789"));
        assert!(!ssn("923-45-6789"));
        assert!(!ssn("123-00-6789"));
        assert!(!ssn("123-45-0000"));
    }
}
