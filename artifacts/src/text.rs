//! Text as users paste it: terminal escapes, carriage returns, and the per-line prefixes of
//! launchers (`[1,0]<stdout>:` of Open MPI, timestamps of log collectors) taken off.

/// The text without ANSI escapes (`nvidia-smi topo -m` underlines its header) and `\r`.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    // CSI: parameters, then one final byte in @..~.
                    for f in chars.by_ref() {
                        if ('@'..='~').contains(&f) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            _ => out.push(c),
        }
    }
    out
}

/// A line without an Open MPI tag (`[1,0]<stdout>:`) in front.
pub fn strip_launcher(line: &str) -> &str {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('[') {
        if let Some((tag, after)) = rest.split_once("]<std") {
            if tag.chars().all(|c| c.is_ascii_digit() || c == ',') {
                if let Some((_, body)) = after.split_once(">:") {
                    return body;
                }
            }
        }
    }
    line
}

/// `key : value` of `nvidia-smi -q`, trimmed; `None` for a section header.
pub fn key_value(line: &str) -> Option<(&str, &str)> {
    let (k, v) = line
        .split_once(" : ")
        .or_else(|| line.trim_end().strip_suffix(" :").map(|k| (k, "")))?;
    Some((k.trim(), v.trim()))
}

/// True where the text has a byte no text output has (NUL, most C0 controls).
pub fn looks_binary(text: &str) -> bool {
    let bad = text
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r' | '\u{1b}' | '\u{c}'))
        .count();
    text.contains('\0') || bad * 100 > text.len().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_launcher_tags_go() {
        assert_eq!(clean("\u{1b}[4mGPU0\tCPU\u{1b}[0m\r\n"), "GPU0\tCPU\n");
        assert_eq!(strip_launcher("[1,0]<stdout>:# nThread 1"), "# nThread 1");
        assert_eq!(strip_launcher("[a] x"), "[a] x");
        assert_eq!(
            key_value("    Product Name   : NVIDIA H100"),
            Some(("Product Name", "NVIDIA H100"))
        );
        assert_eq!(key_value("    GPU Link Info"), None);
    }
}
