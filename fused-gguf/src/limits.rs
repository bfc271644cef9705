//! How much a file may ask of the parser.

/// Upper bounds on what a file may declare, checked before anything is
/// allocated or walked.
///
/// Every count is also bounded by the bytes left in the file (a count of
/// elements that cannot fit in what remains is refused as truncated), so
/// these limits bound the work and memory of a parse on large files; the
/// defaults are far above any published model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most tensors a file may declare.
    pub max_tensors: u64,
    /// Most metadata entries a file may declare.
    pub max_metadata: u64,
    /// Most elements in one array (at any depth).
    pub max_array_len: u64,
    /// Deepest nesting of arrays: 1 allows arrays of scalars or strings, 2
    /// arrays of those, and so on; 0 refuses every array.
    pub max_depth: usize,
    /// Most bytes in one string: a key, a tensor name or a string value.
    pub max_string_len: u64,
}

impl Limits {
    /// No limit beyond the bytes of the file (for re-walking what a parse
    /// has already checked).
    pub(crate) const NONE: Limits = Limits {
        max_tensors: u64::MAX,
        max_metadata: u64::MAX,
        max_array_len: u64::MAX,
        max_depth: usize::MAX,
        max_string_len: u64::MAX,
    };
}

impl Default for Limits {
    /// 65,536 tensors, 65,536 metadata entries, 16 Mi elements an array,
    /// arrays 8 deep, 16 MiB a string.
    fn default() -> Limits {
        Limits {
            max_tensors: 1 << 16,
            max_metadata: 1 << 16,
            max_array_len: 1 << 24,
            max_depth: 8,
            max_string_len: 1 << 24,
        }
    }
}
