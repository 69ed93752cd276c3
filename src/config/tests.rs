use std::path::Path;

use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "STRIPE_SECRET" => Some("whsec_from_env".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn check(text: &str) -> Result<Config, ConfigErrors> {
    parse(text, Path::new("cfg.toml"), &env)
}

fn errors(text: &str) -> String {
    check(text)
        .expect_err("config should be invalid")
        .to_string()
}

const ROUTE: &str = r#"
[[routes]]
name = "stripe"
path = "/stripe"
provider = "stripe"
secrets = ["${STRIPE_SECRET}"]
upstream = "http://127.0.0.1:3000/stripe"
"#;

#[test]
fn the_shipped_config_is_valid() {
    let text = include_str!("../../config.toml");
    let cfg = check(text).expect("shipped config.toml");
    assert_eq!(
        cfg.store.backend,
        Backend::Disk {
            path: "data/hookgate.db".into()
        }
    );
    assert!(cfg.routes.len() >= 5);
}

#[test]
fn defaults_are_applied() {
    let cfg = check(ROUTE).expect("valid");
    assert_eq!(cfg.server.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(cfg.server.max_body, 1 << 20);
    assert_eq!(cfg.store.key_prefix, "hookgate:");
    assert_eq!(cfg.store.dedup_ttl, Duration::from_secs(86_400));
    assert_eq!(cfg.store.inflight_ttl, Duration::from_secs(30));
    assert_eq!(cfg.store.on_error, OnError::Reject);
    let r = &cfg.routes[0];
    assert_eq!(r.tolerance, Some(300));
    assert_eq!(r.primary().upstream_timeout, Duration::from_secs(10));
    assert_eq!(r.methods, vec![Method::POST]);
}

#[test]
fn secrets_never_reach_debug_output() {
    let cfg = check(&format!("[store]\nbackend = \"redis\"\nurl = \"redis://:hunter2@127.0.0.1:6379\"\n{ROUTE}\nforward_secret = \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"")).expect("valid");
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("whsec_from_env"), "{debug}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(!debug.contains("C2FVsBQ"), "{debug}");
}

#[test]
fn secrets_come_from_env_and_files() {
    let dir = std::env::temp_dir().join(format!("hookgate-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("gh.secret"), "from-a-file\n").expect("write");
    let text = ROUTE.replace(
        "[\"${STRIPE_SECRET}\"]",
        "[\"file:gh.secret\", \"pre-${STRIPE_SECRET}-post\"]",
    );
    let cfg = parse(&text, &dir.join("c.toml"), &env).expect("valid");
    assert_eq!(cfg.routes[0].secret_count, 2);
    // The secrets are used: a body signed with the file secret verifies.
    let e = parse(
        &ROUTE.replace("${STRIPE_SECRET}", "file:missing.secret"),
        &dir.join("c.toml"),
        &env,
    )
    .expect_err("missing file")
    .to_string();
    assert!(
        e.contains("c.toml:6: routes[0].secrets[0]: cannot read secret file"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_error_is_reported_with_line_and_key() {
    let text = r#"[server]
listen = "nope"
max_body = "lots"

[store]
backend = "redis"
inflight_ttl = "5s"
on_error = "shrug"

[[routes]]
name = "a b"
path = "relative"
provider = "stripe"
secrets = ["${NOT_SET}", "${EMPTY}"]
upstream = "http://127.0.0.1:1/"

[[routes]]
name = "gh"
path = "/gh"
provider = "github"
secrets = []
tolerance = "5m"
upstream = "http://127.0.0.1:1/"
upstream_timeout = "10s"
event_id = "cookie:x"
"#;
    let e = errors(text);
    for want in [
        "cfg.toml:2: server.listen: \"nope\" is not an address",
        "cfg.toml:3: server.max_body: \"lots\" is not a size",
        "cfg.toml:6: store.url: backend = \"redis\" needs url",
        "cfg.toml:8: store.on_error: \"shrug\": use \"reject\" or \"forward\"",
        "cfg.toml:11: routes[0].name: \"a b\"",
        "cfg.toml:12: routes[0].path: \"relative\" must start with '/'",
        "cfg.toml:14: routes[0].secrets[0]: ${NOT_SET} is not set",
        "cfg.toml:14: routes[0].secrets[1]: ${EMPTY} is set but empty",
        "cfg.toml:21: routes[1].secrets: at least one secret is required",
        "cfg.toml:22: routes[1].tolerance: provider \"github\" signs no timestamp",
        "cfg.toml:24: routes[1].upstream_timeout: store.inflight_ttl (5s) must be longer than upstream_timeout (10s)",
        "cfg.toml:25: routes[1].event_id: event_id \"cookie:x\"",
    ] {
        assert!(e.contains(want), "expected {want:?} in:\n{e}");
    }
    // Secret values never appear in messages.
    assert!(!e.contains("whsec_from_env"));
}

#[test]
fn unknown_keys_name_the_key_and_line() {
    let e = errors(&format!(
        "[server]\nlisten_on = \"x\"\n{ROUTE}secret = \"typo\"\nhmac = {{ header = \"h\", algo = 1 }}\n"
    ));
    assert_eq!(
        e,
        "cfg.toml:2: server.listen_on: unknown key\n\
         cfg.toml:10: routes[0].secret: unknown key (did you mean `secrets`?)\n\
         cfg.toml:11: routes[0].hmac.algo: unknown key\n\
         cfg.toml:11: routes[0].hmac: is only used with provider = \"hmac\""
    );
}

#[test]
fn an_unknown_key_is_reported_with_every_other_error_in_line_order() {
    // The four mistakes of a first config, each on its own line.
    let text = r#"
[[routes]]
name = "a"
path = "/a"
provider = "nosuch"
secrets = ["${NOT_SET}"]
upstream = "http://127.0.0.1:3000/a"
upstream_timout = "10s"
upstream_timeout = "soon"
"#;
    let e = errors(text);
    let lines: Vec<&str> = e.lines().collect();
    let want = [
        "cfg.toml:5: routes[0].provider: unknown provider \"nosuch\"",
        "cfg.toml:6: routes[0].secrets[0]: ${NOT_SET} is not set",
        "cfg.toml:8: routes[0].upstream_timout: unknown key (did you mean `upstream_timeout`?)",
        "cfg.toml:9: routes[0].upstream_timeout: \"soon\" is not a duration",
    ];
    assert_eq!(lines.len(), want.len(), "{e}");
    for (line, want) in lines.iter().zip(want) {
        assert!(line.starts_with(want), "expected {want:?} in:\n{e}");
    }
    // A mistyped provider is told where the list is, not given all of it.
    assert!(
        lines[0].ends_with(&format!(
            "; `hookgate providers` lists all {} presets",
            crate::provider::Preset::NAMES.len()
        )),
        "{e}"
    );
    assert!(!e.contains("stripe, github"), "{e}");
}

#[test]
fn a_route_accepts_what_its_preset_needs_unless_it_sets_methods() {
    let route = |provider: &str, extra: &str| {
        format!(
            "[[routes]]\nname = \"r\"\npath = \"/r\"\nprovider = \"{provider}\"\nsecrets = [\"s\"]\nupstream = \"http://127.0.0.1:3000/r\"\n{extra}"
        )
    };
    let methods = |text: &str| {
        let cfg = check(text).unwrap_or_else(|e| panic!("{e}"));
        cfg.routes[0]
            .methods
            .iter()
            .map(Method::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(methods(&route("github", "")), "POST");
    assert_eq!(methods(&route("dropbox", "")), "POST,GET");
    assert_eq!(methods(&route("okta", "")), "POST,GET");
    assert_eq!(methods(&route("mailchimp", "")), "POST,GET");
    assert_eq!(
        methods(&route("trello", "public_url = \"https://h.io/t\"\n")),
        "POST,HEAD"
    );
    assert_eq!(
        methods(&route("mandrill", "public_url = \"https://h.io/m\"\n")),
        "POST,HEAD"
    );
    assert_eq!(methods(&route("hubspot", "")), "POST,GET");
    assert_eq!(methods(&route("dropbox", "methods = [\"POST\"]\n")), "POST");
}

#[test]
fn duplicate_names_and_paths_are_refused() {
    let e = errors(&format!("{ROUTE}{ROUTE}"));
    assert!(
        e.contains("routes[1].name: name \"stripe\" is used twice"),
        "{e}"
    );
    let e = errors(&format!(
        "{ROUTE}{}",
        ROUTE.replace("name = \"stripe\"", "name = \"other\"")
    ));
    assert!(
        e.contains("routes[1].path: path \"/stripe\" is already served by route \"stripe\""),
        "{e}"
    );
}

#[test]
fn the_dedup_window_must_cover_twice_the_tolerance() {
    let e = errors(&format!(
        "[store]\ndedup_ttl = \"10m\"\n{ROUTE}tolerance = \"6m\"\n"
    ));
    assert!(
        e.contains("cfg.toml:10: routes[0].tolerance: 360s needs store.dedup_ttl (10m)"),
        "{e}"
    );
    // Exactly twice is enough; "off" turns the check (and the timestamp check) off.
    check(&format!(
        "[store]\ndedup_ttl = \"10m\"\n{ROUTE}tolerance = \"5m\"\n"
    ))
    .expect("2 x 5m = 10m");
    let cfg = check(&format!(
        "[store]\ndedup_ttl = \"1m\"\n{ROUTE}tolerance = \"off\"\n"
    ))
    .expect("off");
    assert_eq!(cfg.routes[0].tolerance, None);
}

#[test]
fn the_generic_hmac_provider_is_checked() {
    let base = r#"
[[routes]]
name = "x"
path = "/x"
provider = "hmac"
secrets = ["s"]
upstream = "http://127.0.0.1:1/"
"#;
    let e = errors(base);
    assert!(e.contains("needs an [routes.hmac] table"), "{e}");
    let e = errors(&format!(
        "{base}event_id = \"body-sha256\"\nhmac = {{ header = \"X-Sig\", payload = \"{{timestamp}}.{{body}}\" }}\n"
    ));
    assert!(
        e.contains("uses {timestamp} but no timestamp_header"),
        "{e}"
    );
    let e = errors(&format!(
        "{base}event_id = \"body-sha256\"\nhmac = {{ header = \"X-Sig\", algorithm = \"md5\" }}\n"
    ));
    assert!(e.contains("algorithm \"md5\""), "{e}");
    let e = errors(&format!("{base}hmac = {{ header = \"X-Sig\" }}\n"));
    assert!(
        e.contains("routes[0].event_id: provider \"hmac\" needs event_id"),
        "{e}"
    );
    let cfg = check(&format!("{base}hmac = {{ header = \"X-Sig\", id_header = \"X-Id\", timestamp_header = \"X-Ts\", payload = \"{{id}}.{{timestamp}}.{{body}}\" }}\n")).expect("valid");
    assert_eq!(
        cfg.routes[0].tolerance,
        Some(300),
        "a signed timestamp gets the default tolerance"
    );
    let e = errors(&ROUTE.replace(
        "provider = \"stripe\"",
        "provider = \"stripe\"\nhmac = { header = \"X\" }",
    ));
    assert!(
        e.contains("routes[0].hmac: is only used with provider = \"hmac\""),
        "{e}"
    );
}

#[test]
fn credentials_may_be_tables_and_url_signing_needs_public_url() {
    let meta = r#"
[[routes]]
name = "meta"
path = "/meta"
provider = "meta"
secrets = [{ app_secret = "${STRIPE_SECRET}", verify_token = "vt" }]
upstream = "http://127.0.0.1:1/"
"#;
    let cfg = check(meta).expect("a table credential");
    assert!(!format!("{cfg:?}").contains("whsec_from_env"));
    let e = errors(&meta.replace("verify_token = \"vt\"", "verify_token = \"${NOT_SET}\""));
    assert!(
        e.contains("cfg.toml:6: routes[0].secrets[0].verify_token: ${NOT_SET} is not set"),
        "{e}"
    );
    let e = errors(&meta.replace("verify_token", "verify_tokn"));
    assert!(e.contains("needs a `verify_token` entry"), "{e}");
    let e = errors(&meta.replace(
        "[{ app_secret = \"${STRIPE_SECRET}\", verify_token = \"vt\" }]",
        "[\"plain\"]",
    ));
    assert!(e.contains("table credential"), "{e}");
    let e = errors(
        &meta
            .replace("[{ app_secret", "[{ app_secret = 1.5, x")
            .replace("= \"${STRIPE_SECRET}\", ", ""),
    );
    assert!(e.contains("TOML parse error"), "{e}");

    let twilio = ROUTE.replace("provider = \"stripe\"", "provider = \"twilio\"");
    let e = errors(&twilio);
    assert!(
        e.contains("routes[0].public_url: provider \"twilio\" signs the URL it calls"),
        "{e}"
    );
    let e = errors(&format!(
        "{twilio}public_url = \"https://h.example/t?x=1\"\n"
    ));
    assert!(e.contains("must not hold a query"), "{e}");
    check(&format!("{twilio}public_url = \"https://h.example/t\"\n")).expect("valid");

    // Asana hands out its secret in the handshake: no secret yet is allowed.
    check(
        &ROUTE
            .replace("provider = \"stripe\"", "provider = \"asana\"")
            .replace("[\"${STRIPE_SECRET}\"]", "[]"),
    )
    .expect("asana without a secret yet");
}

#[test]
fn redis_topologies_are_configured_and_checked() {
    let cluster = check(&format!("[store]\nbackend = \"redis\"\nurl = \"redis+cluster://10.0.0.1:6379,10.0.0.2:6379\"\n{ROUTE}")).expect("cluster url");
    assert_eq!(
        cluster.store.backend,
        Backend::RedisCluster {
            urls: vec![
                "redis://10.0.0.1:6379".into(),
                "redis://10.0.0.2:6379".into()
            ]
        }
    );
    let list = check(&format!(
        "[store]\nbackend = \"redis\"\ncluster = [\"redis://a:1\", \"redis://b:2\"]\n{ROUTE}"
    ))
    .expect("cluster list");
    assert!(matches!(list.store.backend, Backend::RedisCluster { ref urls } if urls.len() == 2));
    let s = check(&format!("[store]\nbackend = \"redis\"\nsentinel = [\"redis://s1:26379\"]\nsentinel_master = \"mymaster\"\n{ROUTE}")).expect("sentinel");
    assert!(
        matches!(s.store.backend, Backend::RedisSentinel { ref master, .. } if master == "mymaster")
    );
    let e = errors(&format!(
        "[store]\nbackend = \"redis\"\nsentinel = [\"redis://s1:26379\"]\n{ROUTE}"
    ));
    assert!(e.contains("store.sentinel_master"), "{e}");
    let tls = check(&format!(
        "[store]\nbackend = \"redis\"\nurl = \"rediss://h:6380\"\nmin_replicas_ack = 1\n{ROUTE}"
    ))
    .expect("tls");
    assert_eq!(tls.store.min_replicas_ack, Some(1));
    let e = errors(&format!(
        "[store]\nbackend = \"memory\"\ncluster = [\"redis://a:1\"]\n{ROUTE}"
    ));
    assert!(
        e.contains("store.cluster: is only used with backend"),
        "{e}"
    );
}

#[test]
fn an_admin_token_needs_an_admin_listener_and_is_never_printed() {
    let e = errors(&format!("[server]\nadmin_token = \"t0k3n\"\n{ROUTE}"));
    assert!(e.contains("cfg.toml:2: server.admin_token"), "{e}");
    let cfg = check(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:9090\"\nadmin_token = \"${{STRIPE_SECRET}}\"\n{ROUTE}"
    ))
    .expect("valid");
    let token = cfg.server.admin_token.as_ref().expect("token");
    assert_eq!(token.expose(), b"whsec_from_env");
    assert!(!format!("{cfg:?}").contains("whsec_from_env"));
}

#[test]
fn named_admin_tokens_are_checked_with_their_lines() {
    // Valid: a read token from the environment, an operate token from a file.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ops.token");
    std::fs::write(&file, "ops-s3cret\n").expect("write");
    let cfg = check(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:9090\"\n[[server.admin_tokens]]\nname = \"grafana\"\ntoken = \"${{STRIPE_SECRET}}\"\nrole = \"read\"\n[[server.admin_tokens]]\nname = \"oncall\"\ntoken = \"file:{}\"\nrole = \"operate\"\n{ROUTE}",
        file.display()
    ))
    .expect("valid");
    let t = &cfg.server.admin_tokens;
    assert_eq!(t.len(), 2);
    assert_eq!(
        (t[0].name.as_str(), t[0].role),
        ("grafana", AdminRole::Read)
    );
    assert_eq!(
        (t[1].name.as_str(), t[1].role),
        ("oncall", AdminRole::Operate)
    );
    assert_eq!(t[1].token.expose(), b"ops-s3cret");
    assert!(cfg.server.admin_protected());
    let shown = format!("{cfg:?}");
    assert!(
        !shown.contains("ops-s3cret") && !shown.contains("whsec_from_env"),
        "{shown}"
    );

    // Each mistake, with its file and line.
    let text = format!(
        "[server]\nadmin_token = \"t\"\n[[server.admin_tokens]]\nname = \"a\"\ntoken = \"x1\"\nrole = \"admin\"\n{ROUTE}"
    );
    let e = errors(&text);
    assert!(e.contains("cfg.toml:6: server.admin_tokens[0].role"), "{e}");
    assert!(
        e.contains("read") && e.contains("operate"),
        "the choices: {e}"
    );
    let text = "[server]\nadmin_listen = \"127.0.0.1:1\"\n[[server.admin_tokens]]\nname = \"ci\"\ntoken = \"x1\"\nrole = \"read\"\n[[server.admin_tokens]]\nname = \"ci\"\ntoken = \"${EMPTY}\"\nrole = \"read\"\n[[server.admin_tokens]]\nname = \"admin\"\ntoken = \"x3\"\n";
    let e = errors(&format!("{text}{ROUTE}"));
    assert!(
        e.contains("cfg.toml:8: server.admin_tokens[1].name: \"ci\" names another"),
        "{e}"
    );
    assert!(
        e.contains("cfg.toml:9: server.admin_tokens[1].token: ${EMPTY} is set but empty"),
        "{e}"
    );
    assert!(e.contains("server.admin_tokens[2].role: missing"), "{e}");
    let e = errors(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:1\"\nadmin_token = \"t\"\n[[server.admin_tokens]]\nname = \"admin\"\ntoken = \" \"\nrole = \"read\"\n{ROUTE}"
    ));
    assert!(
        e.contains(
            "cfg.toml:5: server.admin_tokens[0].name: \"admin\" is the name server.admin_token"
        ),
        "{e}"
    );
    assert!(
        e.contains("cfg.toml:6: server.admin_tokens[0].token: is empty"),
        "{e}"
    );
    // Without an admin listener there is nothing to protect.
    let e = errors(&format!(
        "[server]\n[[server.admin_tokens]]\nname = \"ci\"\ntoken = \"x1\"\nrole = \"read\"\n{ROUTE}"
    ));
    assert!(
        e.contains("cfg.toml:2: server.admin_tokens: are set but server.admin_listen is not"),
        "{e}"
    );
    // A key the section does not take.
    let e = errors(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:1\"\n[[server.admin_tokens]]\nname = \"ci\"\ntoken = \"x1\"\nrole = \"read\"\nscope = \"all\"\n{ROUTE}"
    ));
    assert!(e.contains("cfg.toml:7") && e.contains("scope"), "{e}");
    assert!(!e.contains("x1"), "a token is never echoed: {e}");
}

#[test]
fn a_secret_of_the_wrong_type_is_never_echoed() {
    let cases = [
        // A string where the list belongs, an integer, a nested list, a table part of
        // the wrong type, and a syntax error on the secret's own line.
        ROUTE.replace("[\"${STRIPE_SECRET}\"]", "\"whsec_topsecret1\""),
        ROUTE.replace("[\"${STRIPE_SECRET}\"]", "[98765432123]"),
        ROUTE.replace("[\"${STRIPE_SECRET}\"]", "[[\"whsec_topsecret1\"]]"),
        ROUTE.replace("[\"${STRIPE_SECRET}\"]", "[{ a = 98765432123.5 }]"),
        ROUTE.replace("[\"${STRIPE_SECRET}\"]", "[\"whsec_topsecret1]"),
        format!("{ROUTE}forward_secret = 98765432123\n"),
        format!("[server]\nadmin_token = 98765432123\n{ROUTE}"),
    ];
    for text in cases {
        let e = errors(&text);
        // A syntax error stops the parse; a value of the wrong type is one error in
        // the list, named by its key (`cfg.toml:6: routes[0].secrets: …`).
        assert!(e.starts_with("cfg.toml:"), "{e}");
        for literal in ["topsecret1", "98765432123"] {
            assert!(!e.contains(literal), "the value leaked: {e}");
        }
    }
    let e = errors(&ROUTE.replace("[\"${STRIPE_SECRET}\"]", "\"whsec_topsecret1\""));
    assert!(
        e.contains("cfg.toml:6: routes[0].secrets: invalid type: string, expected a sequence"),
        "{e}"
    );
}

#[test]
fn a_whitespace_only_secret_is_refused() {
    let env = |name: &str| match name {
        "BLANK" => Some(" \n\t".to_owned()),
        _ => None,
    };
    let text = ROUTE.replace("${STRIPE_SECRET}", "${BLANK}");
    let e = parse(&text, Path::new("cfg.toml"), &env)
        .expect_err("a blank secret must be refused")
        .to_string();
    assert!(
        e.contains("routes[0].secrets[0]: is empty (or only whitespace)"),
        "{e}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("blank"), "  \n").expect("write");
    let e = parse(
        &ROUTE.replace("${STRIPE_SECRET}", "file:blank"),
        &dir.path().join("cfg.toml"),
        &env,
    )
    .expect_err("a blank secret file must be refused")
    .to_string();
    assert!(e.contains("is empty (or only whitespace)"), "{e}");
}

#[test]
fn basic_auth_credentials_are_redacted_in_debug_output() {
    let text = ROUTE
        .replace("provider = \"stripe\"", "provider = \"postmark\"")
        .replace("${STRIPE_SECRET}", "hookuser:hunter2pw");
    let cfg = check(&text).expect("valid");
    let debug = format!("{:?}", cfg.routes[0].verifier);
    assert!(!debug.contains("hunter2pw"), "{debug}");
    // Nor the Authorization value it is compared with (base64 of user:password).
    assert!(!debug.contains("aG9va3VzZXI6aHVudGVyMnB3"), "{debug}");
}

#[test]
fn a_generic_window_must_be_on_signed_time() {
    let base = ROUTE.replace("provider = \"stripe\"", "provider = \"hmac\"");
    let e = errors(&format!(
        "{base}event_id = \"body-sha256\"\nhmac = {{ header = \"X-Sig\", timestamp_header = \"X-Ts\" }}\n"
    ));
    assert!(
        e.contains("timestamp_header is set but the payload template does not sign {timestamp}"),
        "{e}"
    );
}

#[test]
fn the_disk_store_lives_beside_the_config_unless_told() {
    let cfg = parse(
        &format!("[store]\nbackend = \"disk\"\n{ROUTE}"),
        Path::new("/etc/hookgate/hookgate.toml"),
        &env,
    )
    .expect("valid");
    assert_eq!(
        cfg.store.backend,
        Backend::Disk {
            path: "/etc/hookgate/data/hookgate.db".into()
        }
    );
    let cfg = parse(
        &format!("[store]\nbackend = \"disk\"\npath = \"/var/lib/hookgate/h.db\"\n{ROUTE}"),
        Path::new("/etc/hookgate/hookgate.toml"),
        &env,
    )
    .expect("valid");
    assert_eq!(
        cfg.store.backend,
        Backend::Disk {
            path: "/var/lib/hookgate/h.db".into()
        }
    );
    let e = errors(&format!("[store]\npath = \"h.db\"\n{ROUTE}"));
    assert!(
        e.contains("cfg.toml:2: store.path: is only used with backend = \"disk\""),
        "{e}"
    );
}

#[test]
fn queue_routes_take_a_retry_schedule_and_a_concurrency() {
    let text = format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\nretry = {{ max_attempts = 5, initial = \"2s\", max_delay = \"10m\", max_age = \"1d\" }}\nconcurrency = 3\n"
    );
    let cfg = check(&text).expect("valid");
    let r = &cfg.routes[0];
    assert_eq!(r.delivery, Delivery::Queue);
    assert_eq!(r.primary().concurrency, 3);
    assert_eq!(r.primary().retry.max_attempts, 5);
    assert_eq!(r.primary().retry.initial, Duration::from_secs(2));
    assert_eq!(r.primary().retry.max_delay, Duration::from_secs(600));
    assert_eq!(r.primary().retry.max_age, Duration::from_secs(86_400));
    let defaults = check(&format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\n"
    ))
    .expect("valid");
    assert_eq!(
        defaults.routes[0].primary().retry,
        crate::queue::RetryPolicy::default()
    );
    assert_eq!(defaults.routes[0].primary().concurrency, 8);
    assert_eq!(
        check(ROUTE).expect("valid").routes[0].delivery,
        Delivery::Sync
    );
}

#[test]
fn queue_mode_is_refused_where_it_cannot_keep_its_promise() {
    let on_memory = errors(&format!("{ROUTE}delivery = \"queue\"\n"));
    assert!(on_memory.contains("routes[0].delivery"), "{on_memory}");
    assert!(on_memory.contains("durable store"), "{on_memory}");
    let sync_with_retry = errors(&format!(
        "{ROUTE}retry = {{ max_attempts = 3 }}\nconcurrency = 2\n"
    ));
    assert!(
        sync_with_retry.contains("routes[0].retry: is only used with delivery = \"queue\""),
        "{sync_with_retry}"
    );
    assert!(
        sync_with_retry.contains("routes[0].concurrency"),
        "{sync_with_retry}"
    );
    let bad = errors(&format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"later\"\n"
    ));
    assert!(
        bad.contains("\"later\": use \"sync\" or \"queue\""),
        "{bad}"
    );
    let inverted = errors(&format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\nretry = {{ initial = \"1m\", max_delay = \"1s\" }}\nbogus = 1\n"
    ));
    assert!(
        inverted.contains("retry.max_delay: must be at least retry.initial"),
        "{inverted}"
    );
    assert!(inverted.contains("bogus: unknown key"), "{inverted}");
    let unknown = errors(&format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\nretry = {{ attempts = 3 }}\n"
    ));
    assert!(unknown.contains("retry.attempts: unknown key"), "{unknown}");
}

#[test]
fn the_event_type_comes_from_the_preset_unless_the_route_says() {
    let cfg = check(ROUTE).expect("valid");
    assert_eq!(
        cfg.routes[0].event_type.as_ref().map(ToString::to_string),
        Some("json:/type".into())
    );
    let own = check(&format!("{ROUTE}event_type = \"header:X-Kind\"\n")).expect("valid");
    assert_eq!(
        own.routes[0].event_type.as_ref().map(ToString::to_string),
        Some("header:x-kind".into())
    );
    let bad = errors(&format!("{ROUTE}event_type = \"body:/type\"\n"));
    assert!(
        bad.contains("routes[0].event_type: \"body:/type\": use"),
        "{bad}"
    );
}

#[test]
fn an_events_filter_needs_patterns_and_an_event_type() {
    let cfg = check(&format!(
        "{ROUTE}events = [\"invoice.*\", \"charge.refunded\"]\n"
    ))
    .expect("valid");
    let f = cfg.routes[0].events.as_ref().expect("filter");
    assert!(f.admits("invoice.paid") && f.admits("charge.refunded") && !f.admits("charge.failed"));
    let empty = errors(&format!("{ROUTE}events = []\n"));
    assert!(
        empty.contains("routes[0].events: name at least one event type"),
        "{empty}"
    );
    // A preset that names no event type, and no event_type on the route.
    let untyped = errors(
        "[[routes]]\nname = \"p\"\npath = \"/p\"\nprovider = \"paddle\"\nsecrets = [\"pdl_ntfset_x\"]\nupstream = \"http://127.0.0.1:1/\"\nevents = [\"a.*\"]\n",
    );
    assert!(
        untyped.contains("routes[0].events: filters on the event type"),
        "{untyped}"
    );
}

#[test]
fn a_rate_limit_is_for_queue_routes() {
    let cfg = check(&format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\nrate_limit = \"50/s\"\n"
    ))
    .expect("valid");
    assert_eq!(
        cfg.routes[0].primary().rate_limit.map(|l| l.count),
        Some(50)
    );
    let sync = errors(&format!("{ROUTE}rate_limit = \"50/s\"\n"));
    assert!(
        sync.contains("routes[0].rate_limit: is only used with delivery"),
        "{sync}"
    );
    let bad = errors(&format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\nrate_limit = \"fast\"\n"
    ));
    assert!(bad.contains("routes[0].rate_limit: \"fast\""), "{bad}");
}

#[test]
fn a_breaker_is_on_by_default_and_set_or_turned_off_per_destination() {
    let queue = format!("[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\n");
    let cfg = check(&queue).expect("valid");
    assert_eq!(
        cfg.routes[0].primary().breaker,
        Some(crate::queue::Breaker::default())
    );
    let set = check(&format!(
        "{queue}breaker = {{ failures = 3, probe = \"5s\" }}\n"
    ))
    .expect("valid");
    assert_eq!(
        set.routes[0].primary().breaker,
        Some(crate::queue::Breaker {
            failures: 3,
            probe: Duration::from_secs(5),
        })
    );
    let off = check(&format!("{queue}breaker = false\n")).expect("valid");
    assert_eq!(off.routes[0].primary().breaker, None);
    let on = check(&format!("{queue}breaker = true\n")).expect("valid");
    assert_eq!(
        on.routes[0].primary().breaker,
        Some(crate::queue::Breaker::default())
    );
    for (bad, want) in [
        (
            "breaker = { failures = 0 }",
            "routes[0].breaker.failures: must be at least 1",
        ),
        (
            "breaker = { probe = \"soon\" }",
            "routes[0].breaker.probe: \"soon\" is not a duration",
        ),
        (
            "breaker = { probe = \"10ms\" }",
            "routes[0].breaker.probe: at least 1s",
        ),
        ("breaker = \"on\"", "routes[0].breaker"),
    ] {
        let e = errors(&format!("{queue}{bad}\n"));
        assert!(e.contains(want), "{bad}: {e}");
    }
    let sync = errors(&format!("{ROUTE}breaker = false\n"));
    assert!(
        sync.contains("routes[0].breaker: is only used with delivery"),
        "{sync}"
    );
}

#[test]
fn alerts_and_a_routes_silence_and_refusals_are_read_and_checked() {
    let cfg = check(&format!(
        "{ROUTE}silence = \"30m\"\nrefusals = {{ outcome = \"bad_signature\", over = 20, within = \"5m\" }}\n[[alerts]]\nto = \"https://chat.example.com/hooks/x\"\n[[alerts]]\nname = \"pager\"\nto = \"https://pager.example.com/in\"\nformat = \"json\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\non = [\"breaker_open\", \"store_trouble\"]\n"
    ))
    .expect("valid");
    let r = &cfg.routes[0];
    assert_eq!(r.silence, Some(Duration::from_secs(1800)));
    assert_eq!(
        r.refusals,
        Some(alerts::RefusalRule {
            outcome: "bad_signature".into(),
            over: 20,
            within: Duration::from_secs(300),
        })
    );
    assert_eq!(cfg.alerts.len(), 2);
    let (chat, pager) = (&cfg.alerts[0], &cfg.alerts[1]);
    assert_eq!(
        (chat.name.as_str(), chat.format),
        ("alerts-0", alerts::AlertFormat::Slack)
    );
    assert_eq!(chat.on, alerts::IncidentKind::ALL.to_vec());
    assert!(chat.signer.is_none());
    assert_eq!(
        (pager.name.as_str(), pager.format),
        ("pager", alerts::AlertFormat::Json)
    );
    assert_eq!(
        pager.on,
        [
            alerts::IncidentKind::BreakerOpen,
            alerts::IncidentKind::StoreTrouble
        ]
    );
    assert!(pager.signer.is_some());
    for (bad, want) in [
        ("[[alerts]]\nformat = \"json\"\n", "alerts[0].to: missing"),
        (
            "[[alerts]]\nto = \"ftp://x\"\n",
            "alerts[0].to: must be an http:// or https:// URL",
        ),
        (
            "[[alerts]]\nto = \"https://x\"\nformat = \"teams\"\n",
            "alerts[0].format: \"teams\": use \"slack\" or \"json\"",
        ),
        (
            "[[alerts]]\nto = \"https://x\"\non = [\"breaker\"]\n",
            "alerts[0].on: \"breaker\": use destination_failing",
        ),
        (
            "[[alerts]]\nto = \"https://x\"\nsecret = \"plain\"\n",
            "alerts[0].secret",
        ),
        (
            "[[alerts]]\nto = \"https://x\"\n[[alerts]]\nname = \"alerts-0\"\nto = \"https://y\"\n",
            "alerts[1].name: \"alerts-0\" names another",
        ),
    ] {
        let e = errors(&format!("{ROUTE}{bad}"));
        assert!(e.contains(want), "{bad}: {e}");
    }
    for (bad, want) in [
        (
            "refusals = { outcome = \"bad_sig\", over = 1, within = \"1m\" }",
            "routes[0].refusals.outcome: \"bad_sig\": use one of bad_signature",
        ),
        (
            "refusals = { outcome = \"bad_signature\", over = 0, within = \"1m\" }",
            "routes[0].refusals.over: must be at least 1",
        ),
        (
            "refusals = { outcome = \"bad_signature\", over = 1, within = \"2h\" }",
            "routes[0].refusals.within: from 10s to 1h",
        ),
        (
            "silence = \"soon\"",
            "routes[0].silence: \"soon\" is not a duration",
        ),
    ] {
        let e = errors(&format!("{ROUTE}{bad}\n"));
        assert!(e.contains(want), "{bad}: {e}");
    }
}

/// A Stripe queue route on the disk store, without its `upstream`.
const FANOUT: &str = r#"
[store]
backend = "disk"

[[routes]]
name = "stripe"
path = "/stripe"
provider = "stripe"
secrets = ["${STRIPE_SECRET}"]
delivery = "queue"
upstream_timeout = "4s"
retry = { max_attempts = 5 }
"#;

#[test]
fn destinations_take_their_own_keys_over_the_routes() {
    let cfg = check(&format!(
        r#"{FANOUT}
[[routes.destinations]]
name = "billing"
upstream = "http://127.0.0.1:3001/stripe"
events = ["invoice.*", "customer.subscription.*"]
rate_limit = "50/s"
concurrency = 4
order_by = "json:/data/object/customer"
on_dead = "block"

[[routes.destinations]]
name = "audit"
upstream = "http://127.0.0.1:3002/all"
upstream_timeout = "2s"
"#
    ))
    .expect("valid");
    let r = &cfg.routes[0];
    assert_eq!(r.destinations.len(), 2);
    let billing = r.destination("billing").expect("billing");
    assert_eq!(
        billing.upstream().expect("http").as_str(),
        "http://127.0.0.1:3001/stripe"
    );
    assert!(
        billing
            .events
            .as_ref()
            .is_some_and(|f| f.admits("invoice.paid"))
    );
    assert!(
        !billing
            .events
            .as_ref()
            .is_some_and(|f| f.admits("charge.refunded"))
    );
    assert_eq!(billing.rate_limit.map(|l| l.count), Some(50));
    assert_eq!(billing.concurrency, 4);
    assert_eq!(
        billing
            .order_by
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("json:/data/object/customer")
    );
    assert_eq!(billing.on_dead, crate::queue::OnDead::Block);
    // Inherited from the route.
    assert_eq!(billing.upstream_timeout, Duration::from_secs(4));
    assert_eq!(billing.retry.max_attempts, 5);
    let audit = r.destination("audit").expect("audit");
    assert!(audit.events.is_none());
    assert_eq!(audit.upstream_timeout, Duration::from_secs(2));
    assert_eq!(audit.concurrency, 8);
    assert_eq!(audit.on_dead, crate::queue::OnDead::Skip);
    // A route's `upstream` is one destination named after it.
    let single = check(ROUTE).expect("valid");
    assert_eq!(single.routes[0].destinations.len(), 1);
    assert_eq!(single.routes[0].primary().name, "stripe");
}

#[test]
fn destinations_are_checked() {
    let dest = |extra: &str| {
        format!(
            "{FANOUT}\n[[routes.destinations]]\nname = \"a\"\nupstream = \"http://127.0.0.1:3001/\"\n{extra}"
        )
    };
    let both = errors(&dest("").replace(
        "delivery = \"queue\"\n",
        "delivery = \"queue\"\nupstream = \"http://127.0.0.1:3000/\"\n",
    ));
    assert!(
        both.contains(
            "either upstream, postgres, nats, amqp, redis_stream or pull or [[routes.destinations]], not both"
        ),
        "{both}"
    );
    let twice = errors(&dest(
        "[[routes.destinations]]\nname = \"a\"\nupstream = \"http://127.0.0.1:3002/\"\n",
    ));
    assert!(
        twice.contains("routes[0].destinations[1].name: \"a\" names another destination"),
        "{twice}"
    );
    let bad = errors(&dest(
        "order_by = \"data.customer\"\non_dead = \"later\"\nrate_limit = \"9/h\"\n",
    ));
    for key in ["order_by", "on_dead", "rate_limit"] {
        assert!(
            bad.contains(&format!("routes[0].destinations[0].{key}")),
            "{key}: {bad}"
        );
    }
    let on_dead_alone = errors(&dest("on_dead = \"block\"\n"));
    assert!(
        on_dead_alone.contains("is only used with order_by"),
        "{on_dead_alone}"
    );
    let missing = errors(FANOUT);
    assert!(missing.contains("routes[0].upstream: missing"), "{missing}");
    let no_type = errors(&dest("events = [\"push\"]\n").replace(
        "provider = \"stripe\"",
        "provider = \"hmac\"\nevent_id = \"header:X-Id\"\nhmac = { header = \"X-Sig\" }",
    ));
    assert!(
        no_type.contains("routes[0].destinations[0].events"),
        "{no_type}"
    );
    // Several destinations need a queue: a sync forward relays one answer.
    let sync = errors(
        &dest("[[routes.destinations]]\nname = \"b\"\nupstream = \"http://127.0.0.1:3002/\"\n")
            .replace("delivery = \"queue\"\n", "")
            .replace("retry = { max_attempts = 5 }\n", ""),
    );
    assert!(
        sync.contains("several destinations need delivery = \"queue\""),
        "{sync}"
    );
    // Route-level pacing that belongs to one destination.
    let route_rate = errors(&dest("").replace(
        "delivery = \"queue\"\n",
        "delivery = \"queue\"\nrate_limit = \"5/s\"\n",
    ));
    assert!(
        route_rate.contains("routes[0].rate_limit: set it on each [[routes.destinations]]"),
        "{route_rate}"
    );
}

#[test]
fn the_queue_page_fanout_example_is_valid() {
    let page = include_str!("../../docs/queue.md");
    let section = page
        .split("## Destinations: fan-out")
        .nth(1)
        .expect("the destinations section of docs/queue.md");
    let example = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("its TOML example");
    let text = format!("[store]\nbackend = \"disk\"\n{example}")
        .replace("${STRIPE_WEBHOOK_SECRET}", "whsec_x");
    let cfg = check(&text).expect("the fan-out example of docs/queue.md");
    let names: Vec<&str> = cfg.routes[0]
        .destinations
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["billing", "audit"]);
    assert!(cfg.routes[0].primary().order_by.is_some());
}

#[test]
fn a_destination_timeout_is_not_held_to_the_sync_claims_lease() {
    let base = FANOUT.replace("upstream_timeout = \"4s\"\n", "").replace(
        "backend = \"disk\"\n",
        "backend = \"disk\"\ninflight_ttl = \"8s\"\n",
    );
    let own = |t: &str| {
        format!(
            "[[routes.destinations]]\nname = \"d{t}\"\nupstream = \"http://127.0.0.1:3001/\"\nupstream_timeout = \"{t}\"\n"
        )
    };
    // A queue route's destinations hold leases of their own (their timeout and a
    // margin, renewed while an attempt runs), never a claim of inflight_ttl: a
    // timeout past it, set or inherited (the built-in 10 s), is valid.
    check(&format!("{base}{}{}", own("5s"), own("20s"))).expect("valid");
    check(&format!(
        "{base}{}[[routes.destinations]]\nname = \"plain\"\nupstream = \"http://127.0.0.1:3002/\"\n",
        own("5s")
    ))
    .expect("an inherited timeout past inflight_ttl is valid on a queue route");
}

#[test]
fn order_keys_come_only_from_what_the_signature_covers() {
    let store = "[store]\nbackend = \"disk\"\npath = \"q.db\"\n";
    let e = errors(&format!(
        "{store}{ROUTE}delivery = \"queue\"\norder_by = \"header:X-Tenant\"\non_dead = \"block\"\n"
    ));
    assert!(
        e.contains(
            "cfg.toml:12: routes[0].order_by: the x-tenant header is not covered by the signature"
        ),
        "{e}"
    );
    let e = errors(&format!(
        "{store}[[routes]]\nname = \"stripe\"\npath = \"/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\ndelivery = \"queue\"\n[[routes.destinations]]\nname = \"a\"\nupstream = \"http://127.0.0.1:1/\"\norder_by = \"header:X-Tenant\"\n"
    ));
    assert!(
        e.contains("routes[0].destinations[0].order_by: the x-tenant header is not covered"),
        "{e}"
    );
    // A signed field of the body, or a header the scheme signs, is a key.
    check(&format!(
        "{store}{ROUTE}delivery = \"queue\"\norder_by = \"json:/data/object/customer\"\n"
    ))
    .expect("json order key");
    check(&format!(
        "{store}[[routes]]\nname = \"sw\"\npath = \"/sw\"\nprovider = \"standard_webhooks\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nupstream = \"http://127.0.0.1:1/\"\ndelivery = \"queue\"\norder_by = \"header:webhook-id\"\n"
    ))
    .expect("a signed header");
}

#[test]
fn no_route_shares_the_queues_key_space() {
    let e = errors(&ROUTE.replace("name = \"stripe\"", "name = \"q\""));
    assert!(
        e.contains("routes[0].name: \"q\" is reserved: the queues' keys start with \"q:\""),
        "{e}"
    );
    check(&ROUTE.replace("name = \"stripe\"", "name = \"q2\"")).expect("another name");
}

#[test]
fn a_queue_routes_timeout_is_not_held_to_the_sync_claims_lease() {
    let store = "[store]\nbackend = \"disk\"\npath = \"q.db\"\ninflight_ttl = \"30s\"\n";
    let queue = format!("{store}{ROUTE}delivery = \"queue\"\nupstream_timeout = \"60s\"\n");
    let cfg = check(&queue).expect("a queue route's attempts have leases of their own");
    assert_eq!(
        cfg.routes[0].destinations[0].upstream_timeout,
        std::time::Duration::from_secs(60)
    );
    let sync = format!("{store}{ROUTE}upstream_timeout = \"60s\"\n");
    assert!(
        errors(&sync)
            .contains("store.inflight_ttl (30s) must be longer than upstream_timeout (1m)"),
        "{}",
        errors(&sync)
    );
}

#[test]
fn the_log_has_defaults_per_store_and_located_errors() {
    let memory = check(ROUTE).expect("valid");
    assert_eq!(memory.log.max_size, 64 << 20);
    assert_eq!(memory.log.keep, std::time::Duration::from_secs(3 * 86_400));
    assert_eq!(memory.log.bodies, LogBodies::Verified);
    assert_eq!(memory.log.max_body, 256 << 10);
    let disk = check(&format!(
        "[store]\nbackend = \"disk\"\npath = \"x.db\"\n{ROUTE}"
    ))
    .expect("valid");
    assert_eq!(disk.log.max_size, 1 << 30);
    let set = check(&format!(
        "[log]\nkeep = \"2h\"\nmax_size = \"10MiB\"\nbodies = \"none\"\nmax_body = \"1KiB\"\n{ROUTE}"
    ))
    .expect("valid");
    assert_eq!(set.log.keep, std::time::Duration::from_secs(7200));
    assert_eq!(set.log.max_size, 10 << 20);
    assert_eq!(set.log.bodies, LogBodies::None);
    assert_eq!(set.log.max_body, 1024);

    let e = errors(&format!(
        "[log]\nkeep = \"soon\"\nmax_size = \"lots\"\nbodies = \"all\"\nmax_bodies = 1\n{ROUTE}"
    ));
    assert!(
        e.contains("cfg.toml:2: log.keep: \"soon\" is not a duration"),
        "{e}"
    );
    assert!(e.contains("cfg.toml:3: log.max_size: \"lots\""), "{e}");
    assert!(
        e.contains("cfg.toml:4: log.bodies: \"all\": use \"verified\" or \"none\""),
        "{e}"
    );
    assert!(e.contains("cfg.toml:5: log.max_bodies: unknown key"), "{e}");
    let e = errors(&format!(
        "[log]\nmax_size = \"1MiB\"\nmax_body = \"512KiB\"\n{ROUTE}"
    ));
    assert!(e.contains("cfg.toml:3: log.max_body:"), "{e}");
}

#[test]
fn on_error_forward_is_refused_where_a_forward_without_a_claim_cannot_go() {
    let store = "[store]\nbackend = \"disk\"\npath = \"q.db\"\n";
    let ordered = errors(&format!(
        "{store}{ROUTE}delivery = \"queue\"\norder_by = \"json:/data/object/customer\"\non_error = \"forward\"\n"
    ));
    assert!(
        ordered.contains("cfg.toml:13: routes[0].on_error: \"forward\" does not apply to a route with several destinations or order_by"),
        "{ordered}"
    );
    let two = "[[routes.destinations]]\nname = \"a\"\nupstream = \"http://127.0.0.1:3001/\"\n[[routes.destinations]]\nname = \"b\"\nupstream = \"http://127.0.0.1:3002/\"\n";
    let fanout = errors(&format!(
        "{}on_error = \"forward\"\n{two}",
        FANOUT.replace("retry = { max_attempts = 5 }\n", "")
    ));
    assert!(
        fanout.contains("cfg.toml:12: routes[0].on_error: \"forward\" does not apply"),
        "{fanout}"
    );
    // One destination with order_by is ordered too.
    let one_ordered = errors(&format!(
        "{FANOUT}on_error = \"forward\"\n[[routes.destinations]]\nname = \"a\"\nupstream = \"http://127.0.0.1:3001/\"\norder_by = \"json:/id\"\n"
    ));
    assert!(one_ordered.contains("routes[0].on_error"), "{one_ordered}");
    // A plain queue route fails open as asked; inherited from [store], the others
    // reject.
    let inherited = check(&format!(
        "{}{two}[[routes]]\nname = \"plain\"\npath = \"/plain\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\ndelivery = \"queue\"\nupstream = \"http://127.0.0.1:3003/\"\n",
        FANOUT.replace("backend = \"disk\"\n", "backend = \"disk\"\non_error = \"forward\"\n")
    ))
    .expect("store.on_error = \"forward\" with a fan-out route");
    assert_eq!(inherited.store.on_error, OnError::Forward);
    assert_eq!(
        inherited.route("stripe").expect("stripe").on_error,
        OnError::Reject
    );
    assert_eq!(
        inherited.route("plain").expect("plain").on_error,
        OnError::Forward
    );
    check(&format!(
        "{store}{ROUTE}delivery = \"queue\"\non_error = \"forward\"\n"
    ))
    .expect("a plain queue route may fail open");
}

#[test]
fn values_outside_a_choice_name_the_choices() {
    let e = errors(&format!(
        "[server]\nlog_format = \"xml\"\n[store]\nbackend = \"postgres\"\n{ROUTE}delivery = \"later\"\non_error = \"maybe\"\n"
    ));
    for want in [
        "cfg.toml:2: server.log_format: \"xml\": use \"pretty\" or \"json\"",
        "cfg.toml:4: store.backend: \"postgres\": use \"memory\", \"disk\" or \"redis\"",
        "cfg.toml:12: routes[0].delivery: \"later\": use \"sync\" or \"queue\"",
        "cfg.toml:13: routes[0].on_error: \"maybe\": use \"reject\" or \"forward\"",
    ] {
        assert!(e.contains(want), "expected {want:?} in:\n{e}");
    }
    assert_eq!(e.lines().count(), 4, "one line per problem:\n{e}");
    let dead = errors(&format!(
        "[store]\nbackend = \"disk\"\n{ROUTE}delivery = \"queue\"\norder_by = \"json:/id\"\non_dead = \"later\"\n"
    ));
    assert!(
        dead.contains("cfg.toml:12: routes[0].on_dead: \"later\": use \"skip\" or \"block\""),
        "{dead}"
    );
    let number = errors(&format!("{ROUTE}on_error = 3\n"));
    assert!(
        number.contains("cfg.toml:8: routes[0].on_error: invalid type, expected a string"),
        "{number}"
    );
}

/// `keys()`, which tests/it/docs/pages.rs holds docs/configuration.md to, reads every raw
/// struct: a struct added to raw.rs for a new table must join `raw::tables()`, or its
/// keys would go undocumented unnoticed.
#[test]
fn every_raw_struct_is_a_table_of_keys() {
    let tables = super::raw::tables();
    let structs: Vec<&str> = include_str!("raw.rs")
        .split("struct ")
        .skip(1)
        .filter_map(|s| s.split(|c: char| !c.is_alphanumeric() && c != '_').next())
        .filter(|name| name.starts_with("Raw"))
        .collect();
    assert!(structs.len() >= 9, "{structs:?}");
    for name in &structs {
        assert!(
            tables
                .iter()
                .any(|(_, ty, _)| ty.ends_with(&format!("::{name}"))),
            "raw::{name} is not in raw::tables()"
        );
    }
    for (table, ty, fields) in &tables {
        assert!(!fields.is_empty(), "{table} ({ty}) has no keys");
    }
    // The names are serde's, as the parser reads them.
    let keys = keys();
    let of = |table: &str| keys.iter().find(|(t, _)| *t == table).map(|(_, k)| *k);
    assert_eq!(
        of(""),
        Some(
            &[
                "server",
                "store",
                "routes",
                "capture",
                "log",
                "alerts",
                "telemetry"
            ][..]
        )
    );
    assert!(of("routes.destinations").is_some_and(|k| k.contains(&"order_by")));
    assert!(of("routes.hmac").is_some_and(|k| k.contains(&"timestamp_header")));
}

#[test]
fn auth_header_names_a_token_presets_header_and_only_where_the_provider_lets_it() {
    let okta = ROUTE.replace("provider = \"stripe\"", "provider = \"okta\"");
    let cfg = check(&okta).expect("valid without auth_header");
    assert_eq!(
        cfg.routes[0]
            .verifier
            .credential_header()
            .map(http::HeaderName::as_str),
        Some("authorization"),
        "Authorization by default"
    );
    let cfg = check(&format!("{okta}auth_header = \"X-Okta-Hook-Secret\"\n")).expect("valid");
    assert_eq!(
        cfg.routes[0]
            .verifier
            .credential_header()
            .map(http::HeaderName::as_str),
        Some("x-okta-hook-secret")
    );
    let e = errors(&format!("{okta}auth_header = \"not a header\"\n"));
    assert!(
        e.contains("routes[0].auth_header: \"not a header\" is not a header name"),
        "{e}"
    );
    let e = errors(&format!("{ROUTE}auth_header = \"X-Secret\"\n"));
    assert!(
        e.contains(
            "routes[0].auth_header: provider \"stripe\" sends its credential in a header of its own"
        ),
        "{e}"
    );
    let brevo = ROUTE
        .replace("provider = \"stripe\"", "provider = \"brevo\"")
        .replace(
            "secrets = [",
            "secrets = [{ bearer = \"tok\" }, { username = \"u\", password = \"p\" }, ",
        );
    check(&brevo).expect("bearer and Basic credential tables");
}

#[test]
fn telemetry_is_off_unless_otlp_names_a_collector() {
    assert_eq!(check(ROUTE).expect("valid").telemetry.otlp, None);
    let cfg = check(&format!(
        "{ROUTE}\n[telemetry]\notlp = \"http://collector:4318\"\n"
    ))
    .expect("valid");
    assert_eq!(
        cfg.telemetry.otlp.map(|u| u.to_string()),
        Some("http://collector:4318/v1/traces".to_owned())
    );
}

#[test]
fn telemetry_otlp_must_be_an_http_url_and_is_reported_at_its_line() {
    for (value, says) in [
        ("collector:4318", "use an http:// or https:// URL"),
        ("grpc://collector:4317", "use an http:// or https:// URL"),
        ("not a url", "is not a URL"),
        ("http://user:pw@collector:4318", "credentials in the URL"),
    ] {
        let e = errors(&format!("{ROUTE}\n[telemetry]\notlp = \"{value}\"\n"));
        assert!(e.contains("cfg.toml:10: telemetry.otlp: "), "{value}: {e}");
        assert!(e.contains(says), "{value}: {e}");
        assert!(!e.contains(":pw@"), "{value}: {e}");
    }
    let e = errors(&format!(
        "{ROUTE}\n[telemetry]\notlp_url = \"http://c:4318\"\n"
    ));
    assert!(e.contains("telemetry.otlp_url: unknown key"), "{e}");
}
