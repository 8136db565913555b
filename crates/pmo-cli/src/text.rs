//! Text for terminals: names shown safely and padded by display width, counts with the right
//! plural.

use unicode_width::UnicodeWidthStr;

/// `name` as shown: control characters escaped (`\n`, `\t`, `\u{1b}`), so a name made before
/// they were refused cannot break a listing.
pub fn shown(name: &str) -> String {
    if name.chars().any(char::is_control) {
        name.chars()
            .flat_map(|c| {
                if c.is_control() {
                    c.escape_default().collect::<Vec<_>>()
                } else {
                    vec![c]
                }
            })
            .collect()
    } else {
        name.to_string()
    }
}

/// [`shown`]`(name)` padded with spaces to `width` terminal columns (wide characters count
/// twice); a longer name is left as it is.
pub fn pad(name: &str, width: usize) -> String {
    let s = shown(name);
    let w = UnicodeWidthStr::width(s.as_str());
    format!("{s}{}", " ".repeat(width.saturating_sub(w)))
}

/// `n` and `noun`, plural unless `n` is 1: "1 page", "2 pages".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else if let Some(stem) = noun
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'o', 'u']))
    {
        // "directory" -> "directories", but "day" -> "days".
        format!("{n} {stem}ies")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_by_display_width_and_escapes_controls() {
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(pad("日本", 6), "日本  ");
        assert_eq!(pad("é", 3), "é  ");
        assert_eq!(pad("toolong", 3), "toolong");
        assert_eq!(shown("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(count(1, "page"), "1 page");
        assert_eq!(count(0, "PMO"), "0 PMOs");
        assert_eq!(count(2, "directory"), "2 directories");
        assert_eq!(count(1, "directory"), "1 directory");
        assert_eq!(count(3, "key"), "3 keys");
    }
}
