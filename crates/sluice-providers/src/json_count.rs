//! A JSON whole number read as serde reads a `u64`, for the one-pass scanners that stand in for
//! serde on the hot path (the usage object here, the request's routing fields in the gateway):
//! each must accept exactly what serde accepts, so they share this reading.

/// The number starting at `b[start]`, and where it ends: digits only, no sign, fraction or
/// exponent (serde refuses those for a `u64`), no leading zero, no overflow. `None` for
/// anything else, which the caller leaves to serde.
#[inline]
pub fn read_count(b: &[u8], start: usize) -> Option<(u64, usize)> {
    let mut i = start;
    let mut n: u64 = 0;
    while let Some(&d @ b'0'..=b'9') = b.get(i) {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        i += 1;
    }
    let digits = i - start;
    // A leading zero is not JSON; what follows a number must not continue it.
    let leading_zero = digits > 1 && b[start] == b'0';
    if digits == 0 || leading_zero || matches!(b.get(i), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((n, i))
}

#[cfg(test)]
mod tests {
    use super::read_count;

    #[test]
    fn whole_numbers_only_as_serde_reads_a_u64() {
        assert_eq!(read_count(b"12,", 0), Some((12, 2)));
        assert_eq!(read_count(b"x0}", 1), Some((0, 2)));
        assert_eq!(read_count(b"18446744073709551615", 0), Some((u64::MAX, 20)));
        for bad in [
            &b"18446744073709551616"[..],
            b"012",
            b"1.0",
            b"1e3",
            b"-1",
            b"",
            b"a",
        ] {
            assert_eq!(read_count(bad, 0), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
