//! Byte sizes such as `1MiB` or `512KB`. Hand-written: it is a dozen lines, and the
//! size crates would add a dependency for two config keys.

/// Parses `<integer>[B|KB|KiB|MB|MiB|GB|GiB]` (case-insensitive, optional space).
pub(super) fn parse(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().ok()?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" => 1024,
        "mb" => 1000 * 1000,
        "mib" => 1024 * 1024,
        "gb" => 1000 * 1000 * 1000,
        "gib" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse("1MiB"), Some(1 << 20));
        assert_eq!(super::parse("512 KiB"), Some(512 << 10));
        assert_eq!(super::parse("100"), Some(100));
        assert_eq!(super::parse("2kb"), Some(2000));
        assert_eq!(super::parse("1.5MiB"), None);
        assert_eq!(super::parse("MiB"), None);
        assert_eq!(super::parse("1TiB"), None);
    }
}
