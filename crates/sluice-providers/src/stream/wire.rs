//! The upstream event shapes the translators read, borrowed from the event's bytes: strings
//! that are copied to the client stay `&RawValue` (their escaped JSON), enum-like strings are
//! `Cow<str>`. Fields we do not use are skipped by serde without being kept.
//!
//! NOTE: these are kept apart from the owned shapes of [`crate::shape`], which whole request
//! and response bodies are read into and written from. Most of them have no whole-body
//! counterpart (OpenAI chunk deltas and tool call fragments, Anthropic's events); where one
//! exists (a Gemini chunk is a whole `GenerateContentResponse`), reading each event into the
//! owned type would unescape and copy every text into a `String`, the arguments into a
//! `serde_json::Value` and the parts into a `Vec`, per event on the translator's hot path
//! (`benches/stream.rs`), only for the writer to escape the text again. What the two kinds
//! of shape mean is shared: finish reasons ([`crate::finish`]) and usage ([`crate::usage`],
//! which reads the usage objects these leave as raw JSON into the owned usage shapes).

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

/// An array that usually has one element (a chunk's tool call fragments, a Gemini chunk's
/// parts): the first is kept inline, so the common case allocates nothing.
pub(crate) struct Few<T> {
    first: Option<T>,
    rest: Vec<T>,
}

impl<T> Few<T> {
    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'a, T> IntoIterator for &'a Few<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Chain<std::option::Iter<'a, T>, std::slice::Iter<'a, T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.iter().chain(self.rest.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Few<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Elements<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Elements<T> {
            type Value = Few<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Few<T>, A::Error> {
                let first = seq.next_element::<T>()?;
                let mut rest = Vec::new();
                if first.is_some() {
                    while let Some(item) = seq.next_element::<T>()? {
                        rest.push(item);
                    }
                }
                Ok(Few { first, rest })
            }
        }

        d.deserialize_seq(Elements(PhantomData))
    }
}
