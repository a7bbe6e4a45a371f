//! ddpcheck-accuracy: the step-time model's accuracy recomputed from the committed raw GPU
//! reports (bench/accuracy/fixtures), under three stated protocols (see [`protocol`]), with a
//! fixed split of fit and judged calls (see [`fixtures`]).

pub mod baseline;
pub mod case;
pub mod fit;
pub mod fixtures;
pub mod fresh;
pub mod inputs;
pub mod protocol;
pub mod render;
pub mod score;

/// The tables from the fixtures under `root`.
pub fn report(root: &std::path::Path) -> Result<String, fixtures::FixtureError> {
    Ok(render::tables(&fixtures::load_all(root)?))
}
