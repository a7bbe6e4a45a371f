//! `ddpcheck recommend`: DDP settings for this node from its measurements. (Being wired.)

use clap::Args;
use ddpcheck_core::report::PreflightReport;

use crate::target::CliError;
use crate::Cli;

#[derive(Args, Debug)]
pub struct RecommendArgs {
    /// Model preset or spec (gpt2-124m, gpt2-355m, decoder:..., mlp:...).
    #[arg(long)]
    pub model: Option<String>,
}

pub type Recommendation = serde_json::Value;

pub fn run(_cli: &Cli, _a: &RecommendArgs) -> Result<i32, CliError> {
    Err(CliError::Usage("recommend: not wired yet".into()))
}

pub fn demo_recommendation(_pre: &PreflightReport) -> Result<Recommendation, CliError> {
    Ok(serde_json::Value::Null)
}

pub fn render(_r: &Recommendation) -> String {
    String::new()
}
