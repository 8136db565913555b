//! Error text for people: an OS error as a sentence, without the "(os error N)" suffix.

/// `e` as a short sentence, e.g. "no such file or directory".
pub fn io(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => errno(n),
        None => e.to_string(),
    }
}

/// The text of errno `n`, lower-case, without the number.
pub fn errno(n: i32) -> String {
    let s = std::io::Error::from_raw_os_error(n).to_string();
    let s = match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    };
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}

/// `s` with every " (os error N)" removed and the OS text before it lower-cased, so an error
/// that embeds an OS error reads as words.
pub fn strip_os_error(s: &str) -> String {
    let mut out = s.to_string();
    while let Some(i) = out.find(" (os error ") {
        let Some(end) = out[i..].find(')') else { break };
        let n: Option<i32> = out[i + 11..i + end].parse().ok();
        let tail = out[i + end + 1..].to_string();
        let mut head = out[..i].to_string();
        if let Some(n) = n {
            let plain = std::io::Error::from_raw_os_error(n).to_string();
            let plain = plain
                .trim_end_matches(&format!(" (os error {n})")[..])
                .to_string();
            if head.ends_with(&plain) {
                head.truncate(head.len() - plain.len());
                head.push_str(&errno(n));
            }
        }
        out = head + &tail;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn errno_is_a_sentence() {
        assert_eq!(super::errno(2), "no such file or directory");
        assert_eq!(super::errno(28), "no space left on device");
        let e = std::io::Error::other("custom");
        assert_eq!(super::io(&e), "custom");
        assert_eq!(
            super::strip_os_error("open x: No such file or directory (os error 2), then"),
            "open x: no such file or directory, then"
        );
    }
}
