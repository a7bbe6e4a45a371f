//! The results page's tables are what `ddpcheck-accuracy` computes from the committed raw
//! reports: a model or data change that moves a figure fails here until the page is updated.

use std::path::Path;

const PAGE: &str = "docs/results/2026-11-30-h200x2-model-accuracy.md";
const BEGIN: &str = "<!-- BEGIN ddpcheck-accuracy: generated, do not edit -->\n";
const END: &str = "<!-- END ddpcheck-accuracy -->";

#[test]
fn the_results_page_holds_the_tables_the_committed_reports_give() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tables = ddpcheck_accuracy::report(&ddpcheck_accuracy::fixtures::default_root())
        .unwrap_or_else(|e| panic!("the fixtures: {e}"));
    let page = std::fs::read_to_string(root.join("../..").join(PAGE))
        .unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    let start = page.find(BEGIN).map(|i| i + BEGIN.len());
    let end = page.find(END);
    let (Some(start), Some(end)) = (start, end) else {
        panic!("{PAGE} lacks the generated block's markers");
    };
    assert_eq!(
        page[start..end].trim_end(),
        tables.trim_end(),
        "{PAGE} is stale: paste `cargo run -p ddpcheck-accuracy --release` between its markers"
    );
}

#[test]
fn the_readme_holds_the_p0_and_p1_figures_the_committed_reports_give() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let datasets =
        ddpcheck_accuracy::fixtures::load_all(&ddpcheck_accuracy::fixtures::default_root())
            .unwrap_or_else(|e| panic!("the fixtures: {e}"));
    let table = ddpcheck_accuracy::render::readme_table(&datasets);
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let start = readme.find(BEGIN).map(|i| i + BEGIN.len());
    let end = readme.find(END);
    let (Some(start), Some(end)) = (start, end) else {
        panic!("README.md lacks the accuracy table's markers");
    };
    assert_eq!(
        readme[start..end].trim_end(),
        table.trim_end(),
        "README.md's accuracy table is stale"
    );
}

#[test]
fn p0_and_p2_count_the_cases_the_published_judged_set_counted() {
    // P2 counts every case the Python judged set counted for 18:17, 19:49 and 22:43 (112), and
    // P0 the same cases: the harness reads the reports as `recommend --from` did.
    let datasets =
        ddpcheck_accuracy::fixtures::load_all(&ddpcheck_accuracy::fixtures::default_root())
            .unwrap_or_else(|e| panic!("the fixtures: {e}"));
    let judged: Vec<_> = datasets.iter().filter(|d| d.judged()).collect();
    use ddpcheck_accuracy::inputs::Knobs;
    use ddpcheck_accuracy::protocol::{cases, Protocol};
    assert_eq!(cases(Protocol::P2, &judged, Knobs::default()).len(), 112);
    assert_eq!(cases(Protocol::P0, &judged, Knobs::default()).len(), 112);
}
