//! The Grafana dashboards read from the repository: panels, variables, queries with variables
//! substituted, and their form.

use super::*;

/// Grafana's built-in interval variables and the values the queries run with.
const BUILTINS: [(&str, &str); 5] = [
    ("${__rate_interval}", "1m"),
    ("$__rate_interval", "1m"),
    ("${__interval}", "15s"),
    ("$__interval", "15s"),
    ("$__range", "5m"),
];

pub(super) fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = common::repo_root().join("dashboards");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("dashboards/") {
        let path = entry.expect("dashboards/ entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("read dashboard");
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            out.push((path, v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        out.len() >= 3,
        "expected the three dashboards in {}",
        dir.display()
    );
    out
}

pub(super) fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Panels, with those nested in collapsed rows.
pub(super) fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter());
        }
    }
    out
}

pub(super) fn variables(d: &Value) -> Vec<&Value> {
    d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .collect()
}

pub(super) fn var_query(v: &Value) -> Option<String> {
    match &v["query"] {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("query").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// Replaces Grafana variables as a query would see them with everything selected: template
/// variables become `.+` (a label that must exist), built-in intervals a fixed duration. A `$`
/// left over is an undefined variable and fails the test.
pub(super) fn substitute(expr: &str, var_names: &[String]) -> String {
    let mut e = expr.to_string();
    for (k, v) in BUILTINS {
        e = e.replace(k, v);
    }
    let mut names: Vec<&String> = var_names.iter().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        e = e.replace(&format!("${{{n}}}"), ".+");
        e = e.replace(&format!("[[{n}]]"), ".+");
        e = e.replace(&format!("${n}"), ".+");
    }
    assert!(
        !e.contains('$'),
        "undefined variable in {expr:?} (after substitution: {e:?})"
    );
    e
}

#[test]
fn dashboards_are_well_formed() {
    let rules =
        std::fs::read_to_string(common::repo_root().join("deploy/prometheus/ddpcheck-alerts.yml"))
            .expect("alert rules");
    let recorded: BTreeSet<String> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .map(|n| n.trim().to_string())
        .collect();
    let mut uids = BTreeSet::new();
    for (path, d) in dashboards() {
        let f = name(&path);
        let uid = d["uid"].as_str().unwrap_or_else(|| panic!("{f}: no uid"));
        // The file name pins the uid, so links and provisioning survive re-exports.
        assert_eq!(
            format!("{uid}.json"),
            f,
            "{f}: uid {uid} does not match the file name"
        );
        assert!(uids.insert(uid.to_string()), "{f}: uid {uid} used twice");
        assert!(
            d["id"].is_null(),
            "{f}: id must be null so imports do not clash"
        );
        let sv = d["schemaVersion"].as_u64().unwrap_or(0);
        assert!((36..=41).contains(&sv), "{f}: schemaVersion {sv}");
        assert!(!d["title"].as_str().unwrap_or("").is_empty(), "{f}: title");

        let vars = variables(&d);
        let ds = vars
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap_or_else(|| panic!("{f}: no datasource variable"));
        assert_eq!(ds["type"], "datasource", "{f}");
        assert_eq!(ds["query"], "prometheus", "{f}");
        for want in ["instance", "hostname", "gpu"] {
            let v = vars
                .iter()
                .find(|v| v["name"] == want)
                .unwrap_or_else(|| panic!("{f}: no {want} variable"));
            assert_eq!(v["type"], "query", "{f}: {want}");
            assert_eq!(v["datasource"]["uid"], "${datasource}", "{f}: {want}");
            let q = var_query(v).unwrap_or_default();
            assert!(
                q.starts_with("label_values(") && q.ends_with(&format!(", {want})")),
                "{f}: {want} variable query {q:?} is not label_values(..., {want})"
            );
        }

        let mut ids = BTreeSet::new();
        let mut n = 0;
        for p in panels(&d) {
            let title = p["title"].as_str().unwrap_or("");
            let id = p["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("{f}: {title}: no id"));
            assert!(ids.insert(id), "{f}: panel id {id} used twice");
            assert!(
                p["gridPos"]["w"].as_u64().is_some(),
                "{f}: {title}: gridPos"
            );
            if p["type"] == "row" {
                continue;
            }
            n += 1;
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
            assert!(!unit.is_empty(), "{f}: panel {title:?} has no unit");
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{f}: {title}");
            assert!(
                !p["description"].as_str().unwrap_or("").is_empty(),
                "{f}: {title}: description"
            );
            let targets = p["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("{f}: {title}: no targets"));
            assert!(!targets.is_empty(), "{f}: {title}: no targets");
            for t in targets {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{f}: {title}");
                let expr = t["expr"].as_str().unwrap_or("");
                assert!(
                    expr.contains("ddpcheck_")
                        || expr.contains("ddpcheck:")
                        || expr.contains("up{"),
                    "{f}: {title}: {expr}"
                );
                // A recording rule a panel reads is one deploy/prometheus records.
                for rule in recorded_names(expr) {
                    assert!(
                        recorded.contains(&rule),
                        "{f}: {title}: {rule} is not recorded"
                    );
                }
            }
        }
        assert!(n >= 6, "{f}: only {n} panels");
    }
}
