//! Text made to fit a width: lines longer than it wrapped at spaces under their own indentation,
//! and tables whose cells wrap to it.

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ContentArrangement, Table};

/// A bordered table whose cells wrap so that it is at most `width` columns wide.
pub fn table(width: usize) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_width(u16::try_from(width).unwrap_or(u16::MAX));
    t
}

/// `text` with each line longer than `width` characters wrapped at spaces. A continuation line
/// hangs two columns in from its line's indentation; a comment line's (`# ...`) repeats the `# `.
/// A word longer than the room left stays whole, on a line of its own.
pub fn fit(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        wrap_line(body, width, &mut out);
        out.push_str(newline);
    }
    out
}

/// One line wrapped into `out`, without its final newline.
fn wrap_line(line: &str, width: usize, out: &mut String) {
    let rest = line.trim_start_matches(' ');
    let lead = &line[..line.len() - rest.len()];
    let mut hang = if rest.starts_with("# ") {
        format!("{lead}# ")
    } else {
        format!("{lead}  ")
    };
    if hang.chars().count() > width / 2 {
        hang = "  ".into();
    }
    let hang_len = hang.chars().count();
    let mut current = lead.to_string();
    let mut len = lead.chars().count();
    let mut empty = true;
    for (spaces, word) in words(rest) {
        let word_len = word.chars().count();
        if !empty && len + spaces + word_len > width {
            out.push_str(&current);
            out.push('\n');
            current.clone_from(&hang);
            len = hang_len;
            empty = true;
        }
        if !empty {
            current.push_str(&" ".repeat(spaces));
            len += spaces;
        }
        current.push_str(word);
        len += word_len;
        empty = false;
    }
    out.push_str(&current);
}

/// The words of `s`, each with the count of spaces before it (kept within a line, dropped
/// where the line breaks).
fn words(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut spaces, mut start) = (0, None);
    for (i, c) in s.char_indices() {
        if c == ' ' {
            if let Some(st) = start.take() {
                out.push((spaces, &s[st..i]));
                spaces = 0;
            }
            spaces += 1;
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(st) = start {
        out.push((spaces, &s[st..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_under_their_indentation_and_short_ones_stay() {
        let text = "short\n  - one two three four five six\n# a comment that is long\n";
        let got = fit(text, 16);
        assert_eq!(
            got,
            "short\n  - one two\n    three four\n    five six\n# a comment\n# that is long\n"
        );
        assert!(got.lines().all(|l| l.chars().count() <= 16), "{got}");
    }

    #[test]
    fn a_word_longer_than_the_width_stays_whole_and_inner_spacing_is_kept() {
        assert_eq!(
            fit("a  b abcdefghijklmnop c", 8),
            "a  b\n  abcdefghijklmnop\n  c"
        );
    }
}
