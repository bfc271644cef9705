//! A cursor over the file's bytes: little-endian integers and GGUF strings,
//! every read checked against what is left.

use alloc::string::String;

use crate::error::GgufError;

/// A read past the end: the context is added by the caller, who knows what
/// was being read ([`Short::what`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Short {
    offset: u64,
    needed: u64,
    available: u64,
}

impl Short {
    /// The error, saying what was being read.
    pub(crate) fn what(self, what: String) -> GgufError {
        GgufError::Truncated {
            what,
            offset: self.offset,
            needed: self.needed,
            available: self.available,
        }
    }
}

/// A file position as `u64` (lossless: `usize` has at most 64 bits on every
/// target Rust supports).
pub(crate) const fn to_u64(n: usize) -> u64 {
    n as u64
}

/// A position in a byte slice that only moves forward and never past the end.
#[derive(Clone, Debug)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) const fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }

    /// The current position.
    pub(crate) const fn pos(&self) -> usize {
        self.pos
    }

    /// The bytes from position `start` to the current one.
    pub(crate) fn since(&self, start: usize) -> &'a [u8] {
        self.bytes.get(start..self.pos).unwrap_or_default()
    }

    /// Bytes left after the position.
    pub(crate) fn remaining(&self) -> u64 {
        to_u64(self.bytes.len().saturating_sub(self.pos))
    }

    /// Checks that `n` more bytes are there, without moving.
    pub(crate) fn need(&self, n: u64) -> Result<(), Short> {
        if n <= self.remaining() {
            Ok(())
        } else {
            Err(Short {
                offset: to_u64(self.pos),
                needed: n,
                available: self.remaining(),
            })
        }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: u64) -> Result<&'a [u8], Short> {
        self.need(n)?;
        let short = Short {
            offset: to_u64(self.pos),
            needed: n,
            available: self.remaining(),
        };
        let n = usize::try_from(n).map_err(|_| short)?;
        let end = self.pos.checked_add(n).ok_or(short)?;
        let out = self.bytes.get(self.pos..end).ok_or(short)?;
        self.pos = end;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(to_u64(N))?);
        Ok(out)
    }

    /// A `u8`.
    pub(crate) fn u8(&mut self) -> Result<u8, Short> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    /// A little-endian `u32`.
    pub(crate) fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    pub(crate) fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A GGUF string: a `u64` byte length (at most `max`), then that many
    /// bytes of UTF-8. `what` names it in an error.
    pub(crate) fn str(
        &mut self,
        max: u64,
        what: impl Fn() -> String,
    ) -> Result<&'a str, GgufError> {
        let len = self.u64().map_err(|s| s.what(what()))?;
        if len > max {
            return Err(GgufError::TooMany {
                what: alloc::format!("bytes in {}", what()),
                count: len,
                max,
            });
        }
        let bytes = self.take(len).map_err(|s| s.what(what()))?;
        core::str::from_utf8(bytes).map_err(|_| GgufError::BadUtf8 { what: what() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end() {
        let mut c = Cursor::new(&[1, 0, 0, 0, 9]);
        assert_eq!(c.u32().unwrap(), 1);
        assert!(c.u32().is_err());
        assert_eq!(c.pos(), 4, "a failed read does not move");
        assert_eq!(c.u8().unwrap(), 9);
        assert!(c.take(u64::MAX).is_err());
        assert_eq!(c.take(0).unwrap(), &[] as &[u8]);
    }
}
