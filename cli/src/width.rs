//! How wide text output may be, read once where a command starts: `--width`, else `COLUMNS`,
//! else the terminal's width where stdout is one, else [`UNKNOWN_WIDTH`].

/// The width of text output when nothing says it (a pipe, a file, no `COLUMNS`).
pub const UNKNOWN_WIDTH: usize = 100;

/// The narrowest width honoured: below it a table cannot hold its columns' words.
pub const MIN_WIDTH: usize = 40;

/// The columns text output fits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Width {
    /// Tables' width: the width where it is known, else [`UNKNOWN_WIDTH`].
    pub tables: usize,
    /// Other lines' width where it is known; unknown (a pipe, a file), they stay whole, so that
    /// what reads them (`grep`, a log) finds each sentence on one line.
    pub lines: Option<usize>,
}

impl Width {
    /// Everything wrapped to `columns`.
    pub fn fixed(columns: usize) -> Self {
        Width {
            tables: columns,
            lines: Some(columns),
        }
    }
}

/// The width text output fits in: `flag` (`--width`), else a positive `COLUMNS`, else the
/// terminal's width where stdout is a terminal; never below [`MIN_WIDTH`]. Where none says it,
/// tables fit [`UNKNOWN_WIDTH`] and other lines stay whole.
pub fn output_width(flag: Option<u16>) -> Width {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<u16>().ok())
        .filter(|&w| w > 0);
    // comfy-table reports the terminal's width only where stdout is a terminal.
    let terminal = || comfy_table::Table::new().width().filter(|&w| w > 0);
    match flag.or(columns).or_else(terminal) {
        Some(w) => Width::fixed(usize::from(w).max(MIN_WIDTH)),
        None => Width {
            tables: UNKNOWN_WIDTH,
            lines: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_and_nothing_is_narrower_than_the_minimum() {
        assert_eq!(output_width(Some(120)), Width::fixed(120));
        assert_eq!(output_width(Some(10)), Width::fixed(MIN_WIDTH));
    }
}
