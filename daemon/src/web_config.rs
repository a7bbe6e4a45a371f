//! The `/metrics` web configuration in the Prometheus exporter-toolkit format (the file that
//! node_exporter's `--web.config.file` reads): optional TLS (`tls_server_config`) and basic
//! auth (`basic_auth_users`, bcrypt hashes).
//!
//! Unknown keys are errors; keys of the format that ddpcheckd does not implement are errors that
//! say so, so a file written for node_exporter never silently loses a setting.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use ddpcheck_core::bounded::FileKind;
use ddpcheck_engine::{read_service_file as read_file, read_service_file_bytes as read_file_bytes};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
#[error("web config file {}: {problem}", path.display())]
pub struct WebConfigError {
    pub path: PathBuf,
    pub problem: WebConfigProblem,
}

/// What is wrong with a web configuration: each refusal names the key, as the file spells it.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigProblem {
    #[error("{0}")]
    Read(#[from] ddpcheck_core::bounded::BoundedReadError),
    /// The YAML parser's first line.
    #[error("{0}")]
    Yaml(String),
    #[error("http_server_config is not supported by ddpcheckd")]
    HttpServerConfig,
    #[error("basic_auth_users: user name {0:?} is empty or contains ':'")]
    UserName(String),
    #[error("basic_auth_users: {user}: not a bcrypt hash ({error})")]
    NotBcrypt {
        user: String,
        error: bcrypt::BcryptError,
    },
    #[error("{key}: {version} is not supported (rustls speaks TLS12 and TLS13)")]
    OldTls { key: &'static str, version: String },
    #[error("{key}: unknown version {version:?} (want TLS12 or TLS13)")]
    TlsVersion { key: &'static str, version: String },
    #[error("min_version is above max_version")]
    VersionOrder,
    /// `what`: cert or key.
    #[error("{what}_file and {what} are exclusive")]
    PemTwice { what: &'static str },
    #[error("{what}_file {}: {error}", path.display())]
    PemFile {
        what: &'static str,
        path: PathBuf,
        error: ddpcheck_core::bounded::BoundedReadError,
    },
    #[error("tls_server_config.{0} is not supported by ddpcheckd (rustls chooses)")]
    TlsKey(&'static str),
    #[error("tls_server_config needs cert_file and key_file")]
    CertAndKey,
    #[error("certificate: {0}")]
    Certificate(rustls::pki_types::pem::Error),
    #[error("certificate: no CERTIFICATE in the PEM")]
    NoCertificate,
    #[error("key: {0}")]
    Key(rustls::pki_types::pem::Error),
    #[error("TLS versions: {0}")]
    Versions(rustls::Error),
    #[error("client_auth_type {0} (unverified client certificates) is not supported; use VerifyClientCertIfGiven or RequireAndVerifyClientCert")]
    Unverified(String),
    #[error("client_auth_type: unknown value {0:?}")]
    ClientAuthType(String),
    #[error("client_ca_file is set but client_auth_type is NoClientCert")]
    CaWithoutAuth,
    #[error("client_auth_type {0} needs client_ca_file")]
    AuthWithoutCa(String),
    /// The file could not be read, or holds a certificate rustls refuses.
    #[error("client_ca_file {}: {error}", path.display())]
    ClientCa { path: PathBuf, error: String },
    #[error("client_ca_file {}: no certificate", .0.display())]
    NoClientCa(PathBuf),
    #[error("client CA: {0}")]
    ClientVerifier(rustls::server::VerifierBuilderError),
    #[error("certificate and key: {0}")]
    CertKey(rustls::Error),
}

/// The file as written. Every key optional; unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    tls_server_config: Option<TlsFormat>,
    /// exporter-toolkit's `http2` and `headers`: not implemented here, rejected when set.
    #[serde(default)]
    http_server_config: Option<serde_norway::Value>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFormat {
    #[serde(default)]
    cert_file: Option<PathBuf>,
    #[serde(default)]
    key_file: Option<PathBuf>,
    /// Inline PEM, as exporter-toolkit's `cert` and `key`.
    #[serde(default)]
    cert: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    client_auth_type: Option<String>,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    min_version: Option<String>,
    #[serde(default)]
    max_version: Option<String>,
    // Known to exporter-toolkit but not implemented: named so the error says "not supported".
    #[serde(default)]
    cipher_suites: Option<serde_norway::Value>,
    #[serde(default)]
    curve_preferences: Option<serde_norway::Value>,
    #[serde(default)]
    prefer_server_cipher_suites: Option<serde_norway::Value>,
    #[serde(default)]
    client_allowed_sans: Option<serde_norway::Value>,
}

/// A loaded, validated web configuration: the TLS server configuration (certificate and key
/// already read) and the users with their bcrypt hashes.
pub struct WebConfig {
    pub path: PathBuf,
    tls: Option<Arc<rustls::ServerConfig>>,
    users: BTreeMap<String, String>,
    /// Outcomes of bcrypt checks, keyed by SHA-256 of (user, hash, presented password): bcrypt
    /// is slow by design and Prometheus scrapes with the same credentials every interval.
    cache: Mutex<HashMap<[u8; 32], bool>>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Entries kept in the verification cache before it is emptied (bounds memory against a
/// client trying many passwords).
const CACHE_MAX: usize = 1024;

/// Whether a presented Authorization header is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    Ok,
    Denied,
}

fn tls_version(
    s: &str,
    key: &'static str,
) -> Result<&'static rustls::SupportedProtocolVersion, WebConfigProblem> {
    let version = s.to_string();
    match s {
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS10" | "TLS11" => Err(WebConfigProblem::OldTls { key, version }),
        _ => Err(WebConfigProblem::TlsVersion { key, version }),
    }
}

impl WebConfig {
    /// Reads and validates `path`: YAML syntax, keys, certificate and key, client CA, bcrypt
    /// hashes. Relative file names inside are taken from the file's directory, as
    /// exporter-toolkit does.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let err = |problem| WebConfigError {
            path: path.to_path_buf(),
            problem,
        };
        let text = read_file(path, FileKind::Config).map_err(|e| err(e.into()))?;
        Self::parse(&text, path).map_err(err)
    }

    /// Parses the text of a web configuration file found at `path`.
    pub fn parse(text: &str, path: &Path) -> Result<WebConfig, WebConfigProblem> {
        // An empty document (or only comments) is a valid, empty configuration.
        let file: Option<FileFormat> = serde_norway::from_str(text).map_err(|e| {
            WebConfigProblem::Yaml(e.to_string().lines().next().unwrap_or("").to_string())
        })?;
        let file = file.unwrap_or_default();
        if file.http_server_config.is_some() {
            return Err(WebConfigProblem::HttpServerConfig);
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls = match file.tls_server_config {
            Some(t) => build_tls(t, dir)?,
            None => None,
        };
        let users = file.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            if user.is_empty() || user.contains(':') {
                return Err(WebConfigProblem::UserName(user.clone()));
            }
            hash.parse::<bcrypt::HashParts>()
                .map_err(|error| WebConfigProblem::NotBcrypt {
                    user: user.clone(),
                    error,
                })?;
        }
        Ok(WebConfig {
            path: path.to_path_buf(),
            tls,
            users,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The rustls server configuration, when the file asks for TLS.
    pub fn tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.tls.clone()
    }

    /// Whether requests must carry basic-auth credentials.
    pub fn auth_required(&self) -> bool {
        !self.users.is_empty()
    }

    /// Checks an `Authorization` header value. Blocking (bcrypt): call from a blocking thread.
    pub fn check_authorization(&self, header: Option<&[u8]>) -> Auth {
        if !self.auth_required() {
            return Auth::Ok;
        }
        let Some((user, password)) = header.and_then(parse_basic) else {
            return Auth::Denied;
        };
        let known = self.users.get(&user);
        // An unknown user still costs one bcrypt check, so timing does not reveal user names.
        let hash = known.map_or_else(|| dummy_hash().to_string(), Clone::clone);
        let mut h = Sha256::new();
        h.update(user.as_bytes());
        h.update([0]);
        h.update(hash.as_bytes());
        h.update([0]);
        h.update(&password);
        let key: [u8; 32] = h.finalize().into();
        let cached = self.cache.lock().ok().and_then(|c| c.get(&key).copied());
        let ok = match cached {
            Some(ok) => ok,
            None => {
                let ok = bcrypt::verify(&password, &hash).unwrap_or(false);
                if let Ok(mut c) = self.cache.lock() {
                    if c.len() >= CACHE_MAX {
                        c.clear();
                    }
                    c.insert(key, ok);
                }
                ok
            }
        };
        if ok && known.is_some() {
            Auth::Ok
        } else {
            Auth::Denied
        }
    }
}

/// A bcrypt hash of a random string, for unknown users.
fn dummy_hash() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| {
        let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
        bcrypt::hash(seed, bcrypt::DEFAULT_COST).unwrap_or_default()
    })
}

/// `Basic base64(user:password)` → (user, password bytes).
fn parse_basic(value: &[u8]) -> Option<(String, Vec<u8>)> {
    use base64::Engine;
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
    Some((user, raw[colon + 1..].to_vec()))
}

fn resolve(dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

fn read_pem(
    dir: &Path,
    file: Option<&PathBuf>,
    inline: Option<&String>,
    what: &'static str,
) -> Result<Option<Vec<u8>>, WebConfigProblem> {
    match (file, inline) {
        (Some(_), Some(_)) => Err(WebConfigProblem::PemTwice { what }),
        (Some(f), None) => {
            let path = resolve(dir, f);
            read_file_bytes(&path, FileKind::Pem)
                .map(Some)
                .map_err(|error| WebConfigProblem::PemFile { what, path, error })
        }
        (None, Some(s)) => Ok(Some(s.as_bytes().to_vec())),
        (None, None) => Ok(None),
    }
}

fn build_tls(
    t: TlsFormat,
    dir: &Path,
) -> Result<Option<Arc<rustls::ServerConfig>>, WebConfigProblem> {
    for (name, set) in [
        ("cipher_suites", t.cipher_suites.is_some()),
        ("curve_preferences", t.curve_preferences.is_some()),
        (
            "prefer_server_cipher_suites",
            t.prefer_server_cipher_suites.is_some(),
        ),
        ("client_allowed_sans", t.client_allowed_sans.is_some()),
    ] {
        if set {
            return Err(WebConfigProblem::TlsKey(name));
        }
    }
    let cert = read_pem(dir, t.cert_file.as_ref(), t.cert.as_ref(), "cert")?;
    let key = read_pem(dir, t.key_file.as_ref(), t.key.as_ref(), "key")?;
    // As exporter-toolkit: a tls_server_config with nothing in it means plain HTTP.
    if cert.is_none() && key.is_none() && t.client_auth_type.is_none() && t.client_ca_file.is_none()
    {
        return Ok(None);
    }
    let (Some(cert), Some(key)) = (cert, key) else {
        return Err(WebConfigProblem::CertAndKey);
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .map_err(WebConfigProblem::Certificate)?;
    if certs.is_empty() {
        return Err(WebConfigProblem::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(WebConfigProblem::Key)?;

    let min = tls_version(t.min_version.as_deref().unwrap_or("TLS12"), "min_version")?;
    let max = tls_version(t.max_version.as_deref().unwrap_or("TLS13"), "max_version")?;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| {
                let rank = |x: &rustls::SupportedProtocolVersion| {
                    usize::from(x.version == rustls::ProtocolVersion::TLSv1_3)
                };
                rank(v) >= rank(min) && rank(v) <= rank(max)
            })
            .collect();
    if versions.is_empty() {
        return Err(WebConfigProblem::VersionOrder);
    }

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(WebConfigProblem::Versions)?;
    let auth_type = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let verify_optional = match auth_type {
        "NoClientCert" => None,
        "VerifyClientCertIfGiven" => Some(true),
        "RequireAndVerifyClientCert" => Some(false),
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(WebConfigProblem::Unverified(auth_type.to_string()))
        }
        other => return Err(WebConfigProblem::ClientAuthType(other.to_string())),
    };
    let builder = match (verify_optional, &t.client_ca_file) {
        (None, None) => builder.with_no_client_auth(),
        (None, Some(_)) => return Err(WebConfigProblem::CaWithoutAuth),
        (Some(_), None) => return Err(WebConfigProblem::AuthWithoutCa(auth_type.to_string())),
        (Some(optional), Some(ca)) => {
            let p = resolve(dir, ca);
            let ca_error = |e: &dyn std::fmt::Display| WebConfigProblem::ClientCa {
                path: p.clone(),
                error: e.to_string(),
            };
            let pem = read_file_bytes(&p, FileKind::Pem).map_err(|e| ca_error(&e))?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                let c = c.map_err(|e| ca_error(&e))?;
                roots.add(c).map_err(|e| ca_error(&e))?;
            }
            if roots.is_empty() {
                return Err(WebConfigProblem::NoClientCa(p));
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let v = if optional {
                v.allow_unauthenticated()
            } else {
                v
            };
            builder.with_client_cert_verifier(v.build().map_err(WebConfigProblem::ClientVerifier)?)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(WebConfigProblem::CertKey)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(cfg)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn parse(text: &str) -> Result<WebConfig, String> {
        WebConfig::parse(text, Path::new("/etc/ddpcheck/web.yml")).map_err(|e| e.to_string())
    }

    fn basic(user: &str, pw: &str) -> Vec<u8> {
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"));
        format!("Basic {b}").into_bytes()
    }

    #[test]
    fn empty_file_is_plain_http_without_auth() {
        for text in ["", "# nothing\n", "{}\n", "tls_server_config: {}\n"] {
            let c = parse(text).unwrap();
            assert!(c.tls().is_none(), "{text:?}");
            assert!(!c.auth_required(), "{text:?}");
            assert_eq!(c.check_authorization(None), Auth::Ok);
        }
    }

    #[test]
    fn unknown_and_unsupported_keys_are_errors() {
        let e = parse("basic_auth_user:\n  a: b\n").err().unwrap();
        assert!(e.contains("basic_auth_user"), "{e}");
        let e = parse("tls_server_config:\n  cert_fil: x\n").err().unwrap();
        assert!(e.contains("cert_fil"), "{e}");
        let e = parse("tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n")
            .err()
            .unwrap();
        assert!(
            e.contains("cipher_suites") && e.contains("not supported"),
            "{e}"
        );
        let e = parse("http_server_config:\n  http2: false\n")
            .err()
            .unwrap();
        assert!(e.contains("not supported"), "{e}");
        assert!(parse("basic_auth_users: [a, b]\n").is_err());
        assert!(parse(": : :\n").is_err());
    }

    #[test]
    fn bad_hashes_users_and_tls_settings_are_errors() {
        let e = parse("basic_auth_users:\n  alice: secret\n").err().unwrap();
        assert!(e.contains("alice") && e.contains("bcrypt"), "{e}");
        let h = bcrypt::hash("pw", 4).unwrap();
        assert!(parse(&format!("basic_auth_users:\n  \"a:b\": '{h}'\n")).is_err());
        let e = parse(
            "tls_server_config:\n  cert_file: /nonexistent/c.pem\n  key_file: /nonexistent/k.pem\n",
        )
        .err()
        .unwrap();
        assert!(e.contains("/nonexistent/c.pem"), "{e}");
        let e = parse("tls_server_config:\n  key_file: k.pem\n")
            .err()
            .unwrap();
        assert!(e.contains("k.pem"), "{e}");
        assert!(tls_version("TLS10", "min_version").is_err());
        assert!(tls_version("TLS14", "min_version").is_err());
        assert!(tls_version("TLS13", "min_version").is_ok());
    }

    #[test]
    fn tls_from_files_with_relative_paths_and_versions() {
        let d = tempfile::tempdir().unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(d.path().join("c.pem"), ck.cert.pem()).unwrap();
        std::fs::write(d.path().join("k.pem"), ck.signing_key.serialize_pem()).unwrap();
        let web = d.path().join("web.yml");
        let ok = "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n";
        let c = WebConfig::parse(ok, &web).unwrap();
        assert!(c.tls().is_some());
        let c = WebConfig::parse(&format!("{ok}  min_version: TLS13\n"), &web).unwrap();
        assert!(c.tls().is_some());
        let e = WebConfig::parse(
            &format!("{ok}  min_version: TLS13\n  max_version: TLS12\n"),
            &web,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("above"), "{e}");
        let e = WebConfig::parse(
            &format!("{ok}  client_auth_type: RequireAndVerifyClientCert\n"),
            &web,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("client_ca_file"), "{e}");
        let e = WebConfig::parse(&format!("{ok}  client_ca_file: c.pem\n"), &web)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("NoClientCert"), "{e}");
        let c = WebConfig::parse(
            &format!(
                "{ok}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: c.pem\n"
            ),
            &web,
        )
        .unwrap();
        assert!(c.tls().is_some());
        // A key where the certificate should be.
        let e = WebConfig::parse(
            "tls_server_config:\n  cert_file: k.pem\n  key_file: k.pem\n",
            &web,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("certificate"), "{e}");
    }

    #[test]
    fn basic_auth_checks_and_caches() {
        let h = bcrypt::hash("s3cret", 4).unwrap();
        let c = parse(&format!("basic_auth_users:\n  prometheus: '{h}'\n")).unwrap();
        assert!(c.auth_required());
        assert_eq!(c.check_authorization(None), Auth::Denied);
        assert_eq!(
            c.check_authorization(Some(&basic("prometheus", "s3cret"))),
            Auth::Ok
        );
        // Served from the cache the second time: one entry, same outcome.
        assert_eq!(
            c.check_authorization(Some(&basic("prometheus", "s3cret"))),
            Auth::Ok
        );
        assert_eq!(c.cache.lock().unwrap().len(), 1);
        assert_eq!(
            c.check_authorization(Some(&basic("prometheus", "wrong"))),
            Auth::Denied
        );
        assert_eq!(
            c.check_authorization(Some(&basic("nobody", "s3cret"))),
            Auth::Denied
        );
        assert_eq!(
            c.check_authorization(Some(b"Bearer abc".as_slice())),
            Auth::Denied
        );
        assert_eq!(
            c.check_authorization(Some(b"Basic !!!".as_slice())),
            Auth::Denied
        );
        assert_eq!(
            c.check_authorization(Some(&basic("prometheus", "s3cret")[..])),
            Auth::Ok
        );
    }
}
