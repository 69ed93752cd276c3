//! Key material that must never reach a log line, an error message or `Debug` output.

use std::fmt;

/// Bytes of a credential (an HMAC key, a token, a public key as the provider gives it).
///
/// `Debug` and `Display` print `[redacted]`; the bytes are only reachable through
/// [`Secret::expose`], so every place that reads them is easy to find.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl Secret {
    /// Wraps credential bytes.
    pub fn new(bytes: impl Into<Box<[u8]>>) -> Self {
        Self(bytes.into())
    }

    /// The credential bytes. Call only where the key is used.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_bytes() {
        let s = Secret::new(b"whsec_topsecret".to_vec());
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{s}"), "[redacted]");
        assert_eq!(s.expose(), b"whsec_topsecret");
    }
}
