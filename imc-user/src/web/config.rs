//! `--web.config.file FILE`: the YAML file Prometheus exporters built on exporter-toolkit take
//! (node_exporter among them), so an operator's existing files work with `imc serve`:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # PEM: the certificate, then its chain
//!   key_file: server.key         # PEM: its private key
//!   client_auth_type: RequireAndVerifyClientCert   # optional
//!   client_ca_file: clients.crt  # PEM: the CAs client certificates must chain to
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hashes only
//! ```
//!
//! Relative paths are relative to the file's own directory (as exporter-toolkit reads them).
//! Everything is checked when the file is loaded, before imc listens: an unknown field (a
//! typing mistake, or an exporter-toolkit option imc does not implement), a password that is
//! not a bcrypt hash, a certificate or key that does not load, a key that is not the
//! certificate's. Crypto is rustls's (with *ring*) and the bcrypt crate's.
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A web configuration file larger than this is not one (the certificates are files of their
/// own).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("cannot read web config {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("web config {path} is larger than {MAX_CONFIG_BYTES} bytes: not a web config file")]
    TooLarge { path: PathBuf },
    #[error("web config {path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error(
        "web config {path}: the password of user '{user}' is not a bcrypt hash (store one made with e.g. `htpasswd -nBC 10 {user}`, never the password itself)"
    )]
    NotBcrypt { path: PathBuf, user: String },
    #[error("web config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("web config {path}: {what} {file}: {message}")]
    Pem {
        path: PathBuf,
        what: &'static str,
        file: PathBuf,
        message: String,
    },
    #[error(
        "web config {path}: key_file {key} is not the private key of cert_file {cert} ({message})"
    )]
    KeyMismatch {
        path: PathBuf,
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    tls_server_config: Option<RawTls>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    client_auth_type: String,
    client_ca_file: Option<PathBuf>,
}

/// Who may connect: the TLS server configuration (none: plain HTTP) and the basic-auth users
/// (none: no authentication).
#[derive(Clone, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// User name → bcrypt hash (checked to be one).
    pub users: BTreeMap<String, String>,
    /// The file and the files it names (none for the default configuration).
    files: Vec<PathBuf>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Whether the client-certificate policy asks for client certificates to be verified, and
/// whether a client may go without one.
fn client_auth(kind: &str) -> Result<Option<bool>, String> {
    match kind {
        "" | "NoClientCert" => Ok(None),
        "VerifyClientCertIfGiven" => Ok(Some(true)),
        "RequireAndVerifyClientCert" => Ok(Some(false)),
        "RequestClientCert" | "RequireAnyClientCert" => Err(format!(
            "client_auth_type {kind} (client certificates taken without verifying them) is not supported: use VerifyClientCertIfGiven or RequireAndVerifyClientCert with a client_ca_file"
        )),
        other => Err(format!(
            "client_auth_type '{other}' is not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
        )),
    }
}

impl WebConfig {
    /// Reads and checks `path` (a FIFO or a directory is refused at once, never waited on).
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let read = |source| WebConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let bytes = crate::sys::file::read_capped(path, MAX_CONFIG_BYTES + 1).map_err(read)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(WebConfigError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| WebConfigError::Syntax {
            path: path.to_path_buf(),
            message: "not UTF-8 text".to_string(),
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, path, dir)
    }

    /// The files this configuration was read from: the file itself and the certificates,
    /// keys and CAs it names (what [`WebConfig::load`] must be run again for when any changes).
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Checks the text of a web config named `path`, whose relative paths are under `dir`.
    pub fn parse(text: &str, path: &Path, dir: &Path) -> Result<WebConfig, WebConfigError> {
        // A byte-order mark some Windows editors write is not part of the first key.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let invalid = |message: String| WebConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        // An empty file is an empty configuration (plain HTTP, no users), as exporter-toolkit
        // reads it.
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            let syntax = |message: String| WebConfigError::Syntax {
                path: path.to_path_buf(),
                message: crate::text::escape(&message).into_owned(),
            };
            // Aliases are expanded by copying what they name, so a few hundred bytes of nested
            // aliases become gigabytes: a web config has no use for them, refused before loading.
            if let Some(what) = anchor_or_alias(text).map_err(|e| syntax(e.to_string()))? {
                return Err(syntax(format!(
                    "YAML {what} are not accepted in a web config (write each value out)"
                )));
            }
            let docs = yaml_rust2::YamlLoader::load_from_str(text).map_err(|e| {
                // yaml_rust2 names the key by its Debug form (`String("prom"): duplicated key
                // …`): said in the file's words instead, with the fix.
                if e.info().contains("duplicated key") {
                    syntax(format!(
                        "line {}: a key given twice in one mapping (give each setting and each user once)",
                        e.marker().line()
                    ))
                } else {
                    syntax(e.to_string())
                }
            })?;
            let [doc] = docs.as_slice() else {
                return Err(syntax(format!(
                    "{} YAML documents, expected one",
                    docs.len()
                )));
            };
            serde_json::from_value(to_json(doc).map_err(&syntax)?)
                .map_err(|e| syntax(e.to_string()))?
        };
        for (user, hash) in &raw.basic_auth_users {
            if user.is_empty() || user.contains(':') {
                return Err(invalid(format!(
                    "basic_auth_users: '{}' is not a user name (empty or with ':')",
                    crate::text::quote(user)
                )));
            }
            let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
                return Err(WebConfigError::NotBcrypt {
                    path: path.to_path_buf(),
                    user: crate::text::quote(user),
                });
            };
            // bcrypt defines costs 4 to 31 (2^cost rounds); any other fails every check.
            if !(4..=31).contains(&parts.get_cost()) {
                return Err(invalid(format!(
                    "the password hash of user '{}' has bcrypt cost {}, outside 4 to 31: no password can match it (make one with e.g. `htpasswd -nBC 10 {}`)",
                    crate::text::quote(user),
                    parts.get_cost(),
                    crate::text::quote(user)
                )));
            }
        }
        let mut files = vec![path.to_path_buf()];
        let tls = match raw.tls_server_config {
            None => None,
            Some(t) => Some(Arc::new(tls_config(t, path, dir, &mut files)?)),
        };
        Ok(WebConfig {
            tls,
            users: raw.basic_auth_users,
            files,
        })
    }
}

fn tls_config(
    t: RawTls,
    path: &Path,
    dir: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<rustls::ServerConfig, WebConfigError> {
    let invalid = |message: String| WebConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let (Some(cert_file), Some(key_file)) = (t.cert_file, t.key_file) else {
        return Err(invalid(
            "tls_server_config needs both cert_file and key_file".to_string(),
        ));
    };
    let (cert_file, key_file) = (dir.join(cert_file), dir.join(key_file));
    files.extend([cert_file.clone(), key_file.clone()]);
    let pem = |what: &'static str, file: &Path, message: String| WebConfigError::Pem {
        path: path.to_path_buf(),
        what,
        file: file.to_path_buf(),
        message,
    };
    let chain = read_certs(&cert_file).map_err(|m| pem("cert_file", &cert_file, m))?;
    if let Some(version) = chain
        .first()
        .and_then(|c| x509_version(c))
        .filter(|&v| v < 3)
    {
        return Err(pem(
            "cert_file",
            &cert_file,
            format!(
                "an X.509 v{version} certificate: TLS needs v3 (a v1 certificate has no extensions, so no subjectAltName for clients to check); make a v3 one, e.g. `openssl req -x509 -addext subjectAltName=DNS:HOST …`"
            ),
        ));
    }
    let key_pem = read_pem_file(&key_file).map_err(|m| pem("key_file", &key_file, m))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| pem("key_file", &key_file, format!("no private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?;
    let ca_file = t.client_ca_file.map(|f| dir.join(f));
    files.extend(ca_file.clone());
    let builder = match client_verifier(&t.client_auth_type, ca_file, path, provider)? {
        None => builder.with_no_client_auth(),
        Some(v) => builder.with_client_cert_verifier(v),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => WebConfigError::KeyMismatch {
            path: path.to_path_buf(),
            cert: cert_file.clone(),
            key: key_file.clone(),
            message: e.to_string(),
        },
        // A certificate rustls cannot parse, or a key of a kind it cannot use.
        other => pem(
            "cert_file",
            &cert_file,
            format!("with key_file {}: {other}", key_file.display()),
        ),
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The verifier of client certificates that `client_auth_type` and `client_ca_file` ask for
/// (None: no client authentication), or why they do not fit together.
fn client_verifier(
    auth_type: &str,
    ca_file: Option<PathBuf>,
    path: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>, WebConfigError> {
    let invalid = |message: String| WebConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let optional = client_auth(auth_type).map_err(invalid)?;
    let (optional, ca_file) = match (optional, ca_file) {
        (None, None) => return Ok(None),
        (None, Some(_)) => {
            return Err(invalid(
                "client_ca_file is set but client_auth_type is not: set it to VerifyClientCertIfGiven or RequireAndVerifyClientCert".to_string(),
            ));
        }
        (Some(_), None) => {
            return Err(invalid(format!(
                "client_auth_type {auth_type} needs a client_ca_file"
            )));
        }
        (Some(optional), Some(ca_file)) => (optional, ca_file),
    };
    let pem = |message: String| WebConfigError::Pem {
        path: path.to_path_buf(),
        what: "client_ca_file",
        file: ca_file.clone(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(&ca_file).map_err(pem)? {
        roots.add(c).map_err(|e| pem(e.to_string()))?;
    }
    let mut v =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    if optional {
        v = v.allow_unauthenticated();
    }
    v.build().map(Some).map_err(|e| pem(e.to_string()))
}

/// The version of a DER certificate (1, 2 or 3), None where it is not DER it can read.
/// RFC 5280 §4.1: `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { version [0] EXPLICIT
/// INTEGER DEFAULT v1, … } … }`; the version is 0 for v1 (and then usually left out), 2 for v3.
fn x509_version(der: &[u8]) -> Option<u8> {
    /// The content of the DER element at the start of `b` if its tag is `tag`.
    fn inner(b: &[u8], tag: u8) -> Option<&[u8]> {
        let (&t, rest) = b.split_first()?;
        let (&l, rest) = rest.split_first()?;
        if t != tag {
            return None;
        }
        let (len, rest) = if l < 0x80 {
            (usize::from(l), rest)
        } else {
            let n = usize::from(l & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |a, &d| (a << 8) | usize::from(d));
            (len, &rest[n..])
        };
        rest.get(..len)
    }
    let tbs = inner(inner(der, 0x30)?, 0x30)?;
    match inner(tbs, 0xa0) {
        // [0] EXPLICIT INTEGER: the one-byte integer inside.
        Some(v) => match inner(v, 0x02)? {
            [n] if *n < 3 => Some(n + 1),
            _ => None,
        },
        None => Some(1),
    }
}

/// What in `text` would make aliases: "anchors and aliases" where it has any. A scan of the
/// parser's events (linear in the text), so nothing is expanded.
fn anchor_or_alias(text: &str) -> Result<Option<&'static str>, yaml_rust2::ScanError> {
    use yaml_rust2::parser::{Event, EventReceiver, Parser};
    struct Seen(bool);
    impl EventReceiver for Seen {
        fn on_event(&mut self, ev: Event) {
            self.0 |= match ev {
                Event::Alias(_) => true,
                Event::Scalar(_, _, anchor, _)
                | Event::SequenceStart(anchor, _)
                | Event::MappingStart(anchor, _) => anchor != 0,
                _ => false,
            };
        }
    }
    let mut seen = Seen(false);
    Parser::new_from_str(text).load(&mut seen, true)?;
    Ok(seen.0.then_some("anchors and aliases"))
}

/// A PEM file's bytes (regular files only, at most 1 MiB).
fn read_pem_file(file: &Path) -> Result<Vec<u8>, String> {
    let bytes = crate::sys::file::read_capped(file, MAX_CONFIG_BYTES + 1)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("larger than {MAX_CONFIG_BYTES} bytes"));
    }
    Ok(bytes)
}

/// Every certificate of a PEM file (at least one).
fn read_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem_file(file)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    Ok(certs)
}

/// A YAML document as the JSON value serde reads the configuration from (mapping keys that are
/// numbers or booleans, such as a user named 1000, become strings).
fn to_json(y: &yaml_rust2::Yaml) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    use yaml_rust2::Yaml;
    Ok(match y {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| Value::String(r.clone()), Value::Number),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect::<Result<_, _>>()?),
        Yaml::Hash(h) => {
            let mut map = serde_json::Map::new();
            for (k, v) in h {
                let key = match k {
                    Yaml::String(s) | Yaml::Real(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    _ => return Err("a mapping key that is not a scalar".to_string()),
                };
                map.insert(key, to_json(v)?);
            }
            Value::Object(map)
        }
        Yaml::Alias(_) | Yaml::BadValue => return Err("an unsupported YAML value".to_string()),
    })
}

#[cfg(test)]
mod tests;
