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
    let e = crate::text::error_line(&WebConfig::load(&fifo).unwrap_err());
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
    // A user given twice: the line and the fix, not the parser's Debug form.
    let e = err(&format!(
        "basic_auth_users:\n  prom: '{}'\n  prom: 'x'\n",
        hash()
    ));
    assert!(e.contains("line 3: a key given twice"), "{e}");
    assert!(!e.contains("String("), "{e}");
    // A numeric user name is a user name.
    let c = parse(&format!("basic_auth_users:\n  1000: '{}'\n", hash())).unwrap();
    assert!(c.users.contains_key("1000"));
}

#[test]
fn anchors_and_aliases_are_refused_before_anything_is_expanded() {
    // Nine levels of nine aliases: 9^9 copies if expanded (the probe's 254-byte shape).
    let mut text = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        text.push_str(&format!(
            "{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
    }
    let e = err(&text);
    assert!(e.contains("anchors and aliases"), "{e}");
    // An anchor alone, on a scalar, is refused too (it only exists to be aliased).
    let e = err(&format!("basic_auth_users:\n  p: &h '{}'\n", hash()));
    assert!(e.contains("anchors and aliases"), "{e}");
}

#[test]
fn a_bcrypt_cost_outside_4_to_31_is_refused_naming_the_user() {
    // Cost 99: parsed as a bcrypt hash, but no password can ever match it.
    let h = hash().replacen("$04$", "$99$", 1);
    let e = err(&format!("basic_auth_users:\n  scraper: '{h}'\n"));
    assert!(e.contains("'scraper'") && e.contains("cost 99"), "{e}");
    let h = hash().replacen("$04$", "$03$", 1);
    assert!(err(&format!("basic_auth_users:\n  s: '{h}'\n")).contains("cost 3"));
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_first_key() {
    let c = parse(&format!(
        "\u{feff}basic_auth_users:\n  prometheus: '{}'\n",
        hash()
    ))
    .unwrap();
    assert_eq!(c.users.len(), 1);
}

#[test]
fn the_certificate_version_is_read_from_der() {
    // SEQUENCE { SEQUENCE { [0] { INTEGER 2 } … } … }: v3.
    let v3 = [0x30, 0x07, 0x30, 0x05, 0xa0, 0x03, 0x02, 0x01, 0x02];
    assert_eq!(x509_version(&v3), Some(3));
    // No [0] element (the serial number's INTEGER first): v1.
    let v1 = [0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x07];
    assert_eq!(x509_version(&v1), Some(1));
    // Long-form lengths.
    let long = [0x30, 0x81, 0x05, 0x30, 0x03, 0x02, 0x01, 0x07];
    assert_eq!(x509_version(&long), Some(1));
    assert_eq!(x509_version(&[0x30, 0x05, 0x30]), None);
    assert_eq!(x509_version(b"not der"), None);
}

#[test]
fn the_files_to_watch_are_the_config_and_what_it_names() {
    let c = parse("").unwrap();
    assert_eq!(c.files(), [PathBuf::from("/etc/imc/web.yml")]);
    assert!(WebConfig::default().files().is_empty());
}
