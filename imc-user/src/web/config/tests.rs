use super::*;

fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
    WebConfig::parse(text, Path::new("/etc/imc/web.yml"), Path::new("/etc/imc"))
}

fn err(text: &str) -> String {
    let e = parse(text).expect_err(text).to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

// A bcrypt hash of "secret" (cost 4).
fn hash() -> String {
    bcrypt::hash("secret", 4).unwrap()
}

#[test]
fn an_empty_file_is_plain_http_without_users() {
    let c = parse("").unwrap();
    assert!(c.tls.is_none() && c.users.is_empty());
    let c = parse("basic_auth_users: {}\n").unwrap();
    assert!(c.users.is_empty());
}

#[test]
fn users_with_bcrypt_hashes_load() {
    let c = parse(&format!("basic_auth_users:\n  prometheus: '{}'\n", hash())).unwrap();
    assert_eq!(c.users.len(), 1);
    assert!(bcrypt::verify("secret", &c.users["prometheus"]).unwrap());
}

#[test]
fn a_plain_text_password_is_refused_naming_the_user() {
    let e = err("basic_auth_users:\n  prometheus: secret\n");
    assert!(
        e.contains("'prometheus'") && e.contains("not a bcrypt hash"),
        "{e}"
    );
    // A hash of another scheme (SHA-512 crypt) is not bcrypt either.
    let e = err("basic_auth_users:\n  alice: '$6$salt$abcdef'\n");
    assert!(e.contains("'alice'"), "{e}");
}

#[test]
fn unknown_fields_are_refused_where_they_are() {
    let e = err("tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_fil: c\n");
    assert!(e.contains("cert_fil"), "{e}");
    let e = err("http_server_config:\n  http2: false\n");
    assert!(e.contains("http_server_config"), "{e}");
    let e = err("basic_auth_users: [a, b]\n");
    assert!(e.contains("/etc/imc/web.yml"), "{e}");
}

#[test]
fn tls_needs_a_certificate_and_a_key_that_load() {
    let e = err("tls_server_config:\n  cert_file: server.crt\n");
    assert!(e.contains("both cert_file and key_file"), "{e}");
    let e = err("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
    // Relative to the config's directory.
    assert!(e.contains("/etc/imc/server.crt"), "{e}");
}

#[test]
fn client_auth_policies_are_checked() {
    assert_eq!(client_auth(""), Ok(None));
    assert_eq!(client_auth("NoClientCert"), Ok(None));
    assert_eq!(client_auth("VerifyClientCertIfGiven"), Ok(Some(true)));
    assert_eq!(client_auth("RequireAndVerifyClientCert"), Ok(Some(false)));
    assert!(client_auth("RequireAnyClientCert").is_err());
    assert!(client_auth("Bogus").unwrap_err().contains("'Bogus'"));
}

#[test]
fn a_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("web.yml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = WebConfig::load(&fifo).unwrap_err().to_string();
    assert!(e.contains("FIFO"), "{e}");
    let e = WebConfig::load(&dir.path().join("missing.yml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.yml"), "{e}");
}

#[test]
fn yaml_errors_are_one_line_naming_the_file() {
    let e = err("tls_server_config: [unclosed\n");
    assert!(e.contains("/etc/imc/web.yml"), "{e}");
    let e = err("a: 1\n---\nb: 2\n");
    assert!(e.contains("2 YAML documents"), "{e}");
    // A numeric user name is a user name.
    let c = parse(&format!("basic_auth_users:\n  1000: '{}'\n", hash())).unwrap();
    assert!(c.users.contains_key("1000"));
}
