//! Tensor names as file names, for callers that write one file per tensor.

use crate::error::GgufError;

/// Longest name accepted: leaves room for a suffix (`.x.npy`, …) within the
/// 255-byte name limit of common file systems.
const MAX_LEN: usize = 200;

/// Device names Windows reserves in every directory, whatever the extension.
const WINDOWS_DEVICES: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// `name` when it is safe to use as one file name inside a directory the
/// caller chose (`dir.join(format!("{stem}.npy"))`), or
/// [`GgufError::UnsafeName`] saying which rule it breaks.
///
/// Tensor names come from the file, so a hostile file can pick them to
/// escape the directory or to clobber something in it. The rule refuses:
///
/// - the empty name (no file at all, or the directory itself);
/// - a name starting with `.`: `.` and `..` (the directory and its parent),
///   and hidden files (`.bashrc`, `.ssh`) a caller never means to write;
/// - `/` and `\`, the path separators of Unix and Windows (`../../x`,
///   `/abs/path`, `a\b`);
/// - control characters: NUL ends a path at the C API, and a newline or an
///   escape forges lines in listings and logs;
/// - `:` (a drive on Windows, `C:x`; an alternate data stream on NTFS,
///   `a:b`) and the other characters Windows forbids in names, `< > " | ? *`;
/// - a trailing `.` or space, which Windows strips, so two names would
///   map to one file;
/// - a Windows device name before the first `.` (`CON`, `nul.weight`,
///   `COM1`, …, any case), which opens the device, not a file;
/// - more than 200 bytes.
///
/// Everything else passes, dots inside the name included, so GGML's names
/// (`blk.0.ffn_gate.weight`, `token_embd.weight`) are used as they are.
/// Names differing only in case are not refused here; on a case-insensitive
/// file system they name one file, which a caller writing many files should
/// check against the names already written.
pub fn safe_file_stem(name: &str) -> Result<&str, GgufError> {
    let refuse = |reason: &'static str| {
        Err(GgufError::UnsafeName {
            name: name.into(),
            reason,
        })
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.starts_with('.') {
        return refuse("it starts with `.` (`.`, `..`, or a hidden file)");
    }
    if name.len() > MAX_LEN {
        return refuse("it is longer than 200 bytes");
    }
    if name.contains(['/', '\\']) {
        return refuse("it contains a path separator");
    }
    if name.chars().any(char::is_control) {
        return refuse("it contains a control character");
    }
    if name.contains([':', '<', '>', '"', '|', '?', '*']) {
        return refuse("it contains a character Windows forbids in file names");
    }
    if name.ends_with(['.', ' ']) {
        return refuse("it ends with `.` or a space, which Windows strips");
    }
    let stem = name.split('.').next().unwrap_or(name).trim_end();
    if WINDOWS_DEVICES.iter().any(|d| d.eq_ignore_ascii_case(stem)) {
        return refuse("it is a Windows device name");
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_devices_are_refused_with_any_extension() {
        for bad in ["CON", "nul.weight", "Com1.x", "lpt9"] {
            assert!(safe_file_stem(bad).is_err(), "{bad}");
        }
        for good in ["console.weight", "com10", "nullable"] {
            assert_eq!(safe_file_stem(good), Ok(good));
        }
    }
}
