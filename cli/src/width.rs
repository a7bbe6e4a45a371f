//! How wide text output may be, read once where a command starts: `--width`, else `COLUMNS`,
//! else the terminal's width where stdout is one, else [`UNKNOWN_WIDTH`].

/// The width of text output when nothing says it (a pipe, a file, no `COLUMNS`).
pub const UNKNOWN_WIDTH: usize = 100;

/// The narrowest width honoured: below it a table cannot hold its columns' words.
pub const MIN_WIDTH: usize = 40;

/// The width text output fits in: `flag` (`--width`), else a positive `COLUMNS`, else the
/// terminal's width where stdout is a terminal, else [`UNKNOWN_WIDTH`]; never below [`MIN_WIDTH`].
pub fn output_width(flag: Option<u16>) -> usize {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<u16>().ok())
        .filter(|&w| w > 0);
    // comfy-table reports the terminal's width only where stdout is a terminal.
    let terminal = || comfy_table::Table::new().width().filter(|&w| w > 0);
    flag.or(columns)
        .or_else(terminal)
        .map_or(UNKNOWN_WIDTH, usize::from)
        .max(MIN_WIDTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_and_nothing_is_narrower_than_the_minimum() {
        assert_eq!(output_width(Some(120)), 120);
        assert_eq!(output_width(Some(10)), MIN_WIDTH);
    }
}
