//! Plain-text columns: each padded to its widest cell, the first left-aligned.

use std::fmt::Write as _;

/// Columns padded to their widest cell: the first left-aligned, the others right-aligned, a
/// rule under the header.
pub fn layout(table: &[Vec<String>]) -> String {
    let mut s = String::new();
    let columns = table.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            table
                .iter()
                .map(|r| r.get(c).map(|x| x.chars().count()).unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, r) in table.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        let _ = writeln!(s, "{}", line.trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            let _ = writeln!(s, "{}", "-".repeat(total));
        }
    }
    s
}
