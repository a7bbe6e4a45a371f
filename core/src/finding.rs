//! Findings: what judgement concluded, with a severity and the evidence it rests on.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    /// `INFO`, `WARNING`, `CRITICAL`: how line-oriented output names it.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Critical => "CRITICAL",
        }
    }
}

/// What a finding is about. GPUs are always named by UUID and PCI bus id (invariant 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    Node,
    Gpu {
        uuid: String,
        pci_bus_id: String,
    },
    Pair {
        a_uuid: String,
        b_uuid: String,
        link: String,
    },
}

/// One measured or read value a finding rests on, with what was expected and where that comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub what: String,
    pub measured: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Evidence {
    pub fn new(what: impl Into<String>, measured: impl Into<String>) -> Self {
        Evidence {
            what: what.into(),
            measured: measured.into(),
            expected: None,
            source: None,
        }
    }
    pub fn expected(mut self, e: impl Into<String>) -> Self {
        self.expected = Some(e.into());
        self
    }
    pub fn source(mut self, s: impl Into<String>) -> Self {
        self.source = Some(s.into());
        self
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable machine-readable id, e.g. `pcie_downtrained` (the causes' ids: docs/explain.md).
    pub code: String,
    pub severity: Severity,
    pub subject: Subject,
    /// One line for a human.
    pub message: String,
    #[serde(default)]
    pub evidence: Vec<Evidence>,
}

impl Finding {
    pub fn new(
        code: &str,
        severity: Severity,
        subject: Subject,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            code: code.to_string(),
            severity,
            subject,
            message: message.into(),
            evidence: Vec::new(),
        }
    }
    pub fn with(mut self, e: Evidence) -> Self {
        self.evidence.push(e);
        self
    }
}
