//! Text made to fit a width: lines longer than it wrapped at spaces under their own indentation,
//! and tables whose cells wrap to it.

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ColumnConstraint, ContentArrangement, Table};

use crate::width::Width;

/// A bordered table; [`render`] fits it to a width.
pub fn table() -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t
}

/// A bordered [`table`] at most `width` columns wide, its cells wrapped where they must be.
pub fn render(mut t: Table, width: Width) -> String {
    // Each column's padding (one a side) and the space between columns, and the two borders.
    let columns = t.column_iter().count();
    set_width(&mut t, width.tables, 3 * columns + 1);
    t.to_string()
}

/// `t` set to at most `width` columns, its cells wrapping at spaces: columns whose longest word
/// fits are held to it (the shortest first, as far as `width` less `overhead`, the columns of
/// borders and padding, holds them), so that a word is split only where no width holds it.
pub fn set_width(t: &mut Table, width: usize, overhead: usize) {
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_width(u16::try_from(width).unwrap_or(u16::MAX));
    let mut longest: Vec<(usize, usize)> = Vec::new();
    let rows = t.header().into_iter().chain(t.row_iter());
    for row in rows {
        for (i, cell) in row.cell_iter().enumerate() {
            let word = cell
                .content()
                .split_whitespace()
                .map(|w| w.chars().count())
                .max()
                .unwrap_or(0);
            match longest.iter_mut().find(|(c, _)| *c == i) {
                Some((_, w)) => *w = (*w).max(word),
                None => longest.push((i, word)),
            }
        }
    }
    longest.sort_by_key(|&(_, w)| w);
    // Every column not held keeps at least one character.
    let mut room = width.saturating_sub(overhead + longest.len());
    let mut held = Vec::new();
    for (i, w) in longest {
        if w.saturating_sub(1) > room {
            break;
        }
        room -= w.saturating_sub(1);
        held.push((i, w));
    }
    for (i, c) in t.column_iter_mut().enumerate() {
        if let Some(&(_, w)) = held.iter().find(|(h, _)| *h == i) {
            let w = u16::try_from(w).unwrap_or(u16::MAX) + c.padding_width();
            c.set_constraint(ColumnConstraint::LowerBoundary(comfy_table::Width::Fixed(
                w,
            )));
        }
    }
}

/// `text` with each line longer than `width` characters wrapped at spaces. A continuation line
/// hangs two columns in from its line's indentation; a comment line's (`# ...`) repeats the `# `.
/// A word longer than the room left stays whole, on a line of its own.
pub fn fit(text: &str, width: Width) -> String {
    match width.lines {
        Some(w) => fit_to(text, w),
        None => text.to_string(),
    }
}

/// `text` with each line longer than `width` characters wrapped, as [`fit`] says.
fn fit_to(text: &str, width: usize) -> String {
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

/// A line of Python or shell, fitted to `width` so that it still runs: a trailing comment goes
/// on a line of its own above the code, and code longer than the width breaks after the commas
/// inside its brackets (where Python reads on), else at a space outside quotes with a `\` at
/// the end of the line (both languages read on). A word longer than the width stays whole.
pub fn fit_code(line: &str, width: Width) -> String {
    match width.lines {
        Some(w) => fit_code_to(line, w),
        None => format!("{line}\n"),
    }
}

/// A line of code fitted to `width`, as [`fit_code`] says.
fn fit_code_to(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return format!("{line}\n");
    }
    let rest = line.trim_start_matches(' ');
    let lead = &line[..line.len() - rest.len()];
    if rest.starts_with('#') {
        return fit_to(&format!("{line}\n"), width);
    }
    let (code, comment) = split_comment(rest);
    let mut out = String::new();
    if let Some(comment) = comment {
        out.push_str(&fit_to(&format!("{lead}# {comment}\n"), width));
    }
    let code = format!("{lead}{}", code.trim_end());
    let hang = format!("{lead}    ");
    let mut current = String::new();
    let pieces = break_points(&code);
    let last = pieces.len().saturating_sub(1);
    for (i, (piece, backslash)) in pieces.into_iter().enumerate() {
        // Room for a ` \` at the end of the line, unless nothing follows.
        let mark = if i == last { 0 } else { 2 };
        let fits = current.chars().count() + piece.chars().count() + mark <= width;
        if current.is_empty() || fits {
            current.push_str(piece);
            continue;
        }
        out.push_str(current.trim_end());
        out.push_str(if backslash { " \\\n" } else { "\n" });
        current = format!("{hang}{}", piece.trim_start());
    }
    out.push_str(current.trim_end());
    out.push('\n');
    out
}

/// The code of a line and its trailing comment's text (`code  # text`), outside quotes.
fn split_comment(s: &str) -> (&str, Option<&str>) {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if s[..i].ends_with("  ") => {
                let text = s[i + 1..].trim();
                return (&s[..i], (!text.is_empty()).then_some(text));
            }
            _ => {}
        }
    }
    (s, None)
}

/// `code` cut where a line of Python or shell may break: after each `, ` inside brackets, and
/// before each space outside them (`true`: that break needs a `\`); never inside quotes.
fn break_points(code: &str) -> Vec<(&str, bool)> {
    let (mut out, mut start, mut depth, mut quote) = (Vec::new(), 0, 0usize, None);
    // Whether the piece that starts at `start` needs a `\` before it.
    let mut backslash = false;
    let indent = code.len() - code.trim_start_matches(' ').len();
    for (i, c) in code.char_indices().skip(indent) {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth = depth.saturating_sub(1),
            (None, ',') if depth > 0 && code[i + 1..].starts_with(' ') => {
                out.push((&code[start..=i + 1], backslash));
                (start, backslash) = (i + 2, false);
            }
            (None, ' ') if depth == 0 && i > start => {
                out.push((&code[start..i], backslash));
                (start, backslash) = (i, true);
            }
            _ => {}
        }
    }
    out.push((&code[start..], backslash));
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
        let got = fit_to(text, 16);
        assert_eq!(
            got,
            "short\n  - one two\n    three four\n    five six\n# a comment that\n# is long\n"
        );
        assert!(got.lines().all(|l| l.chars().count() <= 16), "{got}");
    }

    #[test]
    fn code_keeps_running_its_comment_above_and_breaks_inside_brackets() {
        let line = "    state = f(process_group=None, rank=4, start=1000)  # plain until then";
        assert_eq!(
            fit_code_to(line, 36),
            "    # plain until then\n    state = f(process_group=None,\n        rank=4, start=1000)\n"
        );
        assert_eq!(
            fit_code_to("    x = 1  # short", 40),
            "    x = 1  # short\n"
        );
        assert_eq!(
            fit_code_to("    from a.b.c import d as e", 24),
            "    from a.b.c import \\\n        d as e\n"
        );
        // A `#` and a comma inside quotes are the string's: neither a comment nor a break.
        assert_eq!(
            fit_code_to("    s = \"a  # b, c\"", 12),
            "    s = \\\n        \"a  # b, c\"\n"
        );
    }

    #[test]
    fn a_word_longer_than_the_width_stays_whole_and_inner_spacing_is_kept() {
        assert_eq!(
            fit_to("a  b abcdefghijklmnop c", 8),
            "a  b\n  abcdefghijklmnop\n  c"
        );
    }
}
