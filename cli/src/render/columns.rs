//! Plain-text columns: each padded to its widest cell, the first left-aligned, wrapping cells
//! where the columns would pass the width.

use std::fmt::Write as _;

use comfy_table::presets::NOTHING;
use comfy_table::{CellAlignment, Table, TableComponent};

use super::fit::set_width;

/// Columns padded to their widest cell, two spaces apart (one where the columns' longest words
/// would not fit `width` otherwise): the first left-aligned, the others right-aligned, a rule
/// under the header; cells wrap where the columns would pass `width`.
pub fn layout(cells: &[Vec<String>], width: usize) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    // The rule, and one column of it between each two columns (a space in the rows).
    t.set_style(TableComponent::HeaderLines, '-');
    t.set_style(TableComponent::MiddleHeaderIntersections, '-');
    let mut rows = cells.iter();
    if let Some(header) = rows.next() {
        t.set_header(header);
    }
    for r in rows {
        t.add_row(r);
    }
    let columns = cells.first().map_or(0, Vec::len);
    let words: usize = (0..columns)
        .map(|c| {
            cells
                .iter()
                .filter_map(|r| r.get(c))
                .flat_map(|x| x.split_whitespace())
                .map(|w| w.chars().count())
                .max()
                .unwrap_or(0)
        })
        .sum();
    let gap = if words + 2 * columns.saturating_sub(1) <= width {
        2
    } else {
        1
    };
    for (i, c) in t.column_iter_mut().enumerate() {
        if i == 0 {
            c.set_padding((0, 0));
        } else {
            c.set_padding((gap - 1, 0));
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    set_width(&mut t, width, usize::from(gap) * columns.saturating_sub(1));
    let mut s = String::new();
    for line in t.lines() {
        let _ = writeln!(s, "{}", line.trim_end());
    }
    s
}
