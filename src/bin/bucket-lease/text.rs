//! Text that came from elsewhere (a record in the bucket, an error from the
//! service, the library's log) made safe for a terminal.
//!
//! Anyone who can write `{prefix}/LEASE` chooses its `instance_id` and
//! stamps. Printed raw, an escape sequence there could clear the screen,
//! retitle the terminal, hide text or make the next line lie about who
//! holds the lease. [`printable`] escapes every control character (C0, DEL
//! and C1, carriage return and tab included) and the invisible characters
//! that reorder or hide text (bidirectional overrides and isolates,
//! zero-width marks), the way Rust's `{:?}` does: `\x1b`, `\u{202e}`.
//! Everything else, other non-ASCII text included, is left as it is.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every character a terminal could act on escaped; borrowed
/// when there is none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if c.is_ascii() {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    Cow::Owned(out)
}

/// `value` as one line of JSON that a terminal cannot act on either:
/// `serde_json` escapes only C0 controls, so DEL, C1 controls and the
/// invisible reordering characters are written as `\uXXXX` escapes (the
/// same string to any JSON reader).
pub fn json_line(value: &serde_json::Value) -> String {
    let json = value.to_string();
    if !json.chars().any(needs_escape) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if needs_escape(c) {
            // Every such character is in the Basic Multilingual Plane.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// A JSON object of `fields`, as `json!({…})` makes it, from values
/// already made: one loop for every field rather than a serializer call
/// and an insert of its own per field, which the command is smaller
/// without.
pub fn object(fields: Vec<(&str, serde_json::Value)>) -> serde_json::Value {
    serde_json::Value::Object(
        fields
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect(),
    )
}

/// [`printable`], keeping line breaks: for multi-line messages.
pub fn printable_lines(text: &str) -> String {
    text.split('\n')
        .map(printable)
        .collect::<Vec<_>>()
        .join("\n")
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'     // zero-width space/joiners, LRM, RLM
            | '\u{2028}'..='\u{202e}'   // line/paragraph separators, embeddings, overrides
            | '\u{2060}'..='\u{2069}'   // word joiner, invisible operators, isolates
            | '\u{feff}'                // zero-width no-break space
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(printable("4f3c-é-ü ok"), Cow::Borrowed(_)));
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\x1b[2Jb");
        assert_eq!(printable("bell\u{7}\r\n\t"), "bell\\x07\\x0d\\x0a\\x09");
        assert_eq!(printable("del\u{7f}"), "del\\x7f");
        assert_eq!(printable("csi\u{9b}31m"), "csi\\u{9b}31m");
        assert_eq!(printable("rtl\u{202e}txt"), "rtl\\u{202e}txt");
        assert_eq!(printable("iso\u{2066}x\u{2069}"), "iso\\u{2066}x\\u{2069}");
        assert_eq!(printable_lines("one\u{1b}\ntwo"), "one\\x1b\ntwo");
    }

    #[test]
    fn json_lines_escape_what_serde_leaves_raw_and_read_back_the_same() {
        let value = serde_json::json!({"holder": "a\u{7f}b\u{9b}c\u{202e}d\u{1b}e"});
        let line = json_line(&value);
        assert!(!line.chars().any(needs_escape), "{line}");
        assert!(
            line.contains("\\u007f") && line.contains("\\u202e"),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, value);
    }
}
