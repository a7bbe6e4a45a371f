//! recommend's bad input: usage errors with one clear line.

use super::*;

#[test]
fn bad_input_is_a_usage_error() {
    for args in [
        vec!["--sim", "h200x2-nvlink", "recommend"],
        vec!["--sim", "h200x2-nvlink", "recommend", "--params", "lots"],
        common::words("--sim h200x2-nvlink recommend --model gpt2-124m --target-efficiency 2"),
        common::words("recommend --model gpt2-124m --from /nonexistent.json"),
        // A price is a positive, finite number, refused before anything is measured.
        common::words("--sim h200x2-nvlink+hang recommend --model gpt2-124m --price-per-hour=0"),
        common::words("--sim h200x2-nvlink+hang recommend --model gpt2-124m --price-per-hour=-2"),
        common::words("--sim h200x2-nvlink+hang recommend --model gpt2-124m --price-per-hour=inf"),
    ] {
        let o = local(&args);
        assert_eq!(code(&o), 64, "{args:?}: {}", stderr(&o));
        assert_eq!(
            stderr(&o).lines().count(),
            1,
            "one clear line: {}",
            stderr(&o)
        );
    }
}
