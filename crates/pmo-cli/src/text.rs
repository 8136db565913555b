//! Text for terminals: names shown safely and padded by display width, counts with the right
//! plural.

use unicode_width::UnicodeWidthStr;

/// `name` as shown: control characters escaped (`\n`, `\t`, `\u{1b}`), so a name made before
/// they were refused cannot break a listing; and the invisible formatting characters (bidi
/// overrides and isolates, zero-width spaces and joiners, the soft hyphen, the BOM) escaped
/// too (`\u{202e}`), so that no name can pass for another one ("evil\u{202e}fdp.txt" showing
/// as "eviltxt.pdf", "a\u{200b}" as "a").
pub fn shown(name: &str) -> String {
    if name.chars().any(hidden) {
        name.chars()
            .flat_map(|c| {
                if hidden(c) {
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

/// A character a terminal does not show as itself: controls, and Unicode's invisible
/// formatting characters that reorder or hide text.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
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
        // Bidi overrides and zero-width characters cannot disguise a name.
        assert_eq!(shown("evil\u{202e}fdp.txt"), "evil\\u{202e}fdp.txt");
        assert_eq!(shown("a\u{200b}"), "a\\u{200b}");
        assert_eq!(shown("\u{feff}x\u{2066}y"), "\\u{feff}x\\u{2066}y");
        // Visible non-ASCII stays as it is (the file store's names use U+2215).
        assert_eq!(shown("F\u{2215}a 日本"), "F\u{2215}a 日本");
        assert_eq!(count(1, "page"), "1 page");
        assert_eq!(count(0, "PMO"), "0 PMOs");
        assert_eq!(count(2, "directory"), "2 directories");
        assert_eq!(count(1, "directory"), "1 directory");
        assert_eq!(count(3, "key"), "3 keys");
    }
}
