//! recommend's bad input: usage errors with one clear line.

use super::*;

#[test]
fn bad_input_is_a_usage_error() {
    for args in [
        vec!["--sim", "h200x2-nvlink", "recommend"],
        vec!["--sim", "h200x2-nvlink", "recommend", "--params", "lots"],
        vec![
            "--sim",
            "h200x2-nvlink",
            "recommend",
            "--model",
            "gpt2-124m",
            "--target-efficiency",
            "2",
        ],
        vec![
            "recommend",
            "--model",
            "gpt2-124m",
            "--from",
            "/nonexistent.json",
        ],
        // A price is a positive, finite number, refused before anything is measured.
        vec![
            "--sim",
            "h200x2-nvlink+hang",
            "recommend",
            "--model",
            "gpt2-124m",
            "--price-per-hour=0",
        ],
        vec![
            "--sim",
            "h200x2-nvlink+hang",
            "recommend",
            "--model",
            "gpt2-124m",
            "--price-per-hour=-2",
        ],
        vec![
            "--sim",
            "h200x2-nvlink+hang",
            "recommend",
            "--model",
            "gpt2-124m",
            "--price-per-hour=inf",
        ],
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
