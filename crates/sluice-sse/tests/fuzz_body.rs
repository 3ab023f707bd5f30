//! Runs the fuzz target's body over a few thousand pseudo-random, SSE-flavoured inputs, so CI
//! exercises it without cargo-fuzz.

mod fuzz_check;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&[u8]] = &[
    b"data:",
    b"data: ",
    b"event:",
    b"id:",
    b"retry:",
    b":",
    b" ",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"x",
    b"12",
    b"\0",
    b"\xEF\xBB\xBF",
    b"\xEF",
    b"\xFF",
    b"{\"a\":1}",
    b"foo",
];

#[test]
fn fuzz_body_on_pseudo_random_inputs() {
    let mut rng = Rng(0x0005_EED0_F55E);
    for case in 0..4000 {
        let mut data = Vec::new();
        for _ in 0..4 {
            data.push(rng.next() as u8);
        }
        let pieces = rng.below(60);
        for _ in 0..pieces {
            if rng.below(10) == 0 {
                data.push(rng.next() as u8);
            } else {
                data.extend_from_slice(PIECES[rng.below(PIECES.len())]);
            }
        }
        // Make a quarter of the cases exercise the size limit with long lines.
        if case % 4 == 0 {
            data.extend(std::iter::repeat_n(b'y', rng.below(3000)));
        }
        fuzz_check::check(&data);
    }
}
