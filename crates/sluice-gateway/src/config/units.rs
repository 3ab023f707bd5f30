//! Human units in config: durations like `"30s"`, sizes like `"16MiB"`.

use std::time::Duration;

/// Parses `500ms`, `30s`, `10m`, `1h` (a whole number and a unit; `0` alone is zero).
///
/// # Errors
/// A message saying what form is expected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| {
        format!("`{s}` has no unit; write e.g. \"500ms\", \"30s\", \"10m\", \"1h\"")
    })?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` must start with a whole number, e.g. \"30s\""))?;
    let ms = match unit.trim() {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{s}`; use ms, s, m or h"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("`{s}` is too long"))
}

/// Parses `512`, `64KiB`, `16MiB`, `1GiB` (also `KB`/`MB`/`GB` as powers of 1000).
///
/// # Errors
/// A message saying what form is expected.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` must start with a whole number, e.g. \"16MiB\""))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{s}`; use B, KiB, MiB, GiB (or KB, MB, GB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert!(parse_size("16mb").unwrap_err().contains("unknown unit"));
        assert!(parse_size("lots").is_err());
    }
}
