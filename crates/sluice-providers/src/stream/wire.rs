//! The upstream event shapes the translators read, borrowed from the event's bytes: strings
//! that are copied to the client stay `&RawValue` (their escaped JSON), enum-like strings are
//! `Cow<str>`. Fields we do not use are skipped by serde without being kept.

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod openai;

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

/// An element of a `choices`/`candidates` array, which names its position.
pub(crate) trait Indexed {
    /// Its `index` (0 when absent).
    fn index(&self) -> u32;
}

/// An array of which only the element with index 0 is translated (`n`/`candidateCount` above
/// 1 has no equivalent in the other families), and how many elements it had. Deserialized
/// without allocating a `Vec`.
pub(crate) struct First<T> {
    /// The element with index 0, if the array had one.
    pub(crate) first: Option<T>,
    /// The array's length.
    pub(crate) len: usize,
}

impl<'de, T: Deserialize<'de> + Indexed> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Elements<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de> + Indexed> Visitor<'de> for Elements<T> {
            type Value = First<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<First<T>, A::Error> {
                let mut first = None;
                let mut len = 0;
                while let Some(item) = seq.next_element::<T>()? {
                    len += 1;
                    if first.is_none() && item.index() == 0 {
                        first = Some(item);
                    }
                }
                Ok(First { first, len })
            }
        }

        d.deserialize_seq(Elements(PhantomData))
    }
}
