//! `ddpcheck-accuracy [--cases | --fit | --readme] [FIXTURES]`: prints the accuracy tables
//! (markdown) computed from the committed raw reports, the same output every run; `--cases`
//! lists every case instead, `--fit` the search of the mechanism constants on the fit calls,
//! `--readme` the README's P0/P1 table.

fn main() -> anyhow::Result<()> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let root = args
        .iter()
        .find(|a| !a.to_string_lossy().starts_with("--"))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(ddpcheck_accuracy::fixtures::default_root);
    let datasets = ddpcheck_accuracy::fixtures::load_all(&root)?;
    if flag("--fit") {
        print!("{}", ddpcheck_accuracy::fit::fit(&datasets));
    } else if flag("--readme") {
        print!("{}", ddpcheck_accuracy::render::readme_table(&datasets));
    } else if flag("--cases") {
        print!("{}", ddpcheck_accuracy::render::case_list(&datasets));
    } else {
        print!("{}", ddpcheck_accuracy::render::tables(&datasets));
    }
    Ok(())
}
