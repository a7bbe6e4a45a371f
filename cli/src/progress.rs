//! Progress on stderr, only when stderr is a terminal (scripts and schedulers see clean output).

use std::io::IsTerminal;

use ddpcheck_core::backend::Progress;
use indicatif::{ProgressBar, ProgressStyle};

pub struct Reporter {
    bar: Option<ProgressBar>,
}

impl Reporter {
    pub fn new() -> Reporter {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed}] {msg}") {
                b.set_style(style);
            }
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        Reporter { bar }
    }

    pub fn update(&self, p: Progress) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{}: {}", p.stage, p.message));
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
