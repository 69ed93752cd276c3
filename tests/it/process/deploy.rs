//! Everything in deploy/ is parsed and cross-checked against the config it ships
//! (no Docker engine or cluster here: what can run, runs).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value as Yaml;

use crate::support::{TestGateway, Upstream, client, stripe_config};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

pub(super) fn yaml(path: &str) -> Yaml {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

/// The `${VAR}`s the deploy config needs.
fn config_vars() -> BTreeSet<String> {
    let text = read("config.toml");
    let mut vars = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let end = after.find('}').expect("closed ${");
        vars.insert(after[..end].to_owned());
        rest = &after[end..];
    }
    vars
}

/// The deploy config, validated with placeholder values for its variables.
fn config() -> hookgate::config::Config {
    let text = read("config.toml");
    let env = |name: &str| -> Option<String> {
        Some(match name {
            "HOOKGATE_REDIS_URL" => "redis://redis:6379".into(),
            "HOOKGATE_UPSTREAM" => "http://upstream:3000".into(),
            other => format!("placeholder-{other}"),
        })
    };
    hookgate::config::parse(&text, &deploy("config.toml"), &env)
        .unwrap_or_else(|e| panic!("deploy/config.toml: {e}"))
}

#[test]
fn deploy_config_is_valid_and_uses_redis() {
    let cfg = config();
    assert!(matches!(
        cfg.store.backend,
        hookgate::config::Backend::Redis { .. }
    ));
    assert_eq!(cfg.server.listen.port(), 8080);
    assert_eq!(cfg.server.admin_listen.map(|a| a.port()), Some(9090));
}

#[test]
fn dockerfile_is_multi_stage_non_root_with_a_healthcheck() {
    let text = read("Dockerfile");
    let froms = text.lines().filter(|l| l.starts_with("FROM ")).count();
    assert!(froms >= 2, "multi-stage build");
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER");
    assert!(
        user.trim() != "root" && user.trim() != "0",
        "runs as non-root"
    );
    assert!(text.contains("EXPOSE 8080 9090"));
    assert!(
        text.contains("HEALTHCHECK") && text.contains("probe\", \"http://127.0.0.1:9090/healthz")
    );
    assert!(text.contains("COPY deploy/config.toml /etc/hookgate/config.toml"));
    assert!(text.contains("\"--config\", \"/etc/hookgate/config.toml\""));
    for copied in ["Cargo.toml", "Cargo.lock", "src", "benches", "tests"] {
        assert!(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(copied).exists(),
            "{copied} copied by the Dockerfile exists"
        );
    }
    // Cargo refuses to build anything when a target the manifest declares is missing:
    // the build stage must copy the directory of every declared target.
    let manifest: toml::Table = toml::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("Cargo.toml"),
    )
    .expect("Cargo.toml parses");
    let mut dirs = vec!["src".to_owned()];
    for kind in ["bin", "test", "bench", "example"] {
        for target in manifest
            .get(kind)
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            let path = target.get("path").and_then(|p| p.as_str());
            let dir = match (kind, path) {
                (_, Some(p)) => p.split('/').next().unwrap_or(p).to_owned(),
                ("bench", None) => "benches".to_owned(),
                ("test", None) => "tests".to_owned(),
                ("example", None) => "examples".to_owned(),
                _ => "src".to_owned(),
            };
            dirs.push(dir);
        }
    }
    for dir in dirs {
        assert!(
            text.contains(&format!("COPY {dir} ./{dir}")),
            "the Dockerfile copies {dir}/, which Cargo.toml's targets need"
        );
    }
}

#[test]
fn compose_runs_hookgate_redis_with_aof_and_an_upstream() {
    let c = yaml("docker-compose.yml");
    let services = &c["services"];
    let redis_cmd = serde_yaml::to_string(&services["redis"]["command"]).expect("yaml");
    assert!(
        redis_cmd.contains("--appendonly") && redis_cmd.contains("yes"),
        "append-only persistence"
    );
    let hg = &services["hookgate"];
    let env = hg["environment"].as_mapping().expect("environment");
    for var in config_vars() {
        assert!(
            env.contains_key(Yaml::String(var.clone())),
            "compose sets {var}"
        );
    }
    let ports = serde_yaml::to_string(&hg["ports"]).expect("yaml");
    assert!(ports.contains("8080:8080"));
    let vols = serde_yaml::to_string(&hg["volumes"]).expect("yaml");
    assert!(vols.contains("./config.toml:/etc/hookgate/config.toml"));
    // The image's own binary serves the demo upstream: `hookgate upstream 0.0.0.0:3000`.
    let upstream_cmd: Vec<&str> = services["upstream"]["command"]
        .as_sequence()
        .map(|s| s.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(upstream_cmd, ["upstream", "0.0.0.0:3000"]);
    assert!(
        hg["environment"]["HOOKGATE_UPSTREAM"]
            .as_str()
            .unwrap_or_default()
            .contains("upstream:3000")
    );
}

#[test]
fn kubernetes_manifests_agree_with_the_config() {
    let cfg = config();
    let d = yaml("k8s/deployment.yaml");
    let spec = &d["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    let port = |name: &str| {
        c["ports"]
            .as_sequence()
            .expect("ports")
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("port {name}"))
    };
    assert_eq!(port("http"), u64::from(cfg.server.listen.port()));
    assert_eq!(
        port("admin"),
        u64::from(cfg.server.admin_listen.expect("admin").port())
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"]["port"].as_str(),
        Some("admin")
    );
    assert!(
        c["resources"]["requests"]["memory"].is_string()
            && c["resources"]["limits"]["cpu"].is_string()
    );
    let grace = spec["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(
        grace > cfg.server.shutdown_grace.as_secs(),
        "terminationGracePeriodSeconds {grace} must exceed shutdown_grace"
    );
    assert_eq!(
        spec["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true)
    );
    let mount = c["volumeMounts"][0]["mountPath"].as_str().expect("mount");
    let args = serde_yaml::to_string(&c["args"]).expect("args");
    assert!(args.contains(&format!("{mount}/config.toml")));

    let labels = &d["spec"]["selector"]["matchLabels"];
    assert_eq!(&d["spec"]["template"]["metadata"]["labels"], labels);
    let svc = yaml("k8s/service.yaml");
    assert_eq!(&svc["spec"]["selector"], labels);
    assert_eq!(
        svc["spec"]["ports"][0]["targetPort"].as_u64(),
        Some(u64::from(cfg.server.listen.port()))
    );
    assert!(
        !serde_yaml::to_string(&svc["spec"]["ports"])
            .expect("yaml")
            .contains("9090"),
        "the admin port is not exposed by the Service"
    );
    let pdb = yaml("k8s/pdb.yaml");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    let hpa = yaml("k8s/hpa.yaml");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], d["metadata"]["name"]);
    assert!(hpa["spec"]["minReplicas"].as_u64() >= Some(2));

    let cm = yaml("k8s/configmap.yaml");
    assert_eq!(
        cm["data"]["config.toml"].as_str(),
        Some(read("config.toml").as_str()),
        "the ConfigMap embeds deploy/config.toml"
    );
    assert_eq!(
        spec["volumes"][0]["configMap"]["name"],
        cm["metadata"]["name"]
    );
    let secret = yaml("k8s/secret.yaml");
    let keys = secret["stringData"].as_mapping().expect("stringData");
    for var in config_vars() {
        assert!(
            keys.contains_key(Yaml::String(var.clone())),
            "the Secret provides {var}"
        );
    }
    assert_eq!(
        c["envFrom"][0]["secretRef"]["name"],
        secret["metadata"]["name"]
    );
    let kustomization = read("k8s/kustomization.yaml");
    for f in [
        "configmap.yaml",
        "secret.yaml",
        "deployment.yaml",
        "service.yaml",
        "pdb.yaml",
        "hpa.yaml",
    ] {
        assert!(kustomization.contains(f), "kustomization lists {f}");
    }
}

#[test]
fn systemd_unit_reloads_on_hup_and_outlasts_the_grace() {
    let cfg = config();
    let unit = read("systemd/hookgate.service");
    let get = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key}="))
    };
    assert_eq!(
        get("ExecStart"),
        "/usr/local/bin/hookgate serve --config /etc/hookgate/config.toml"
    );
    assert!(get("ExecReload").contains("-HUP"));
    assert_eq!(get("KillSignal"), "SIGTERM");
    let stop: u64 = get("TimeoutStopSec").parse().expect("seconds");
    assert!(stop > cfg.server.shutdown_grace.as_secs());
    assert_ne!(get("User"), "root");
}

/// Every series name a live gateway's `/metrics` can hold, from each family's `# TYPE`
/// line (a family with no sample yet, such as reloads before the first one, still
/// counts): a counter's `_total`, a histogram's `_bucket`, `_count` and `_sum`. The
/// gateway has a queue route on a disk store, has delivered once and reloaded once,
/// and found in its store the queue of a route its config no longer has (stranded).
pub(super) async fn exported_series() -> BTreeSet<String> {
    let up = Upstream::start().await;
    let down = Upstream::start().await;
    down.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    // A queue route on a disk store, so that the queue's families have samples too.
    let store = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
        dir.path().join("dash.db").display()
    );
    let config = stripe_config(&up, &store, "delivery = \"queue\"");

    // First the binary, with a queue route "gone" whose upstream fails, holds an event
    // there (killed: a process's exit frees the store's file for the next start).
    let port = crate::support::free_port();
    let gone = format!(
        "[[routes]]\nname = \"gone\"\npath = \"/webhooks/gone\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\ndelivery = \"queue\"\nupstream = \"{}\"\n",
        down.url("/gone")
    );
    std::fs::write(
        &path,
        format!("[server]\nlisten = \"127.0.0.1:{port}\"\n{config}\n{gone}"),
    )
    .expect("write");
    let body = crate::support::stripe_body("evt_gone");
    let sign = std::process::Command::new(crate::process::binary::BIN)
        .args(["sign", "--headers", "--route", "gone", "--config"])
        .arg(&path)
        .arg(&body)
        .output()
        .expect("hookgate sign");
    assert!(
        sign.status.success(),
        "{}",
        String::from_utf8_lossy(&sign.stderr)
    );
    let headers: Vec<(String, String)> = String::from_utf8_lossy(&sign.stdout)
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    let binary = crate::process::binary::Gateway::spawn(&path, port);
    let reply =
        crate::support::post(&binary.url("/webhooks/gone"), &headers, body.into_bytes()).await;
    assert_eq!(reply.outcome(), "queued", "{}", reply.body);
    drop(binary);

    // Then a gateway whose config has no route "gone": its queue is stranded.
    std::fs::write(&path, config).expect("write");
    let gw = TestGateway::start_file(&path).await;
    // A family appears once it has a sample: deliver once (and let the worker try it)
    // and reload once.
    let _ = gw
        .deliver("stripe", &crate::support::stripe_body("evt_dash"), "x")
        .await;
    assert!(crate::support::eventually(Duration::from_secs(5), || up.count() == 1).await);
    for _ in 0..100 {
        let sample = "hookgate_delivery_attempts_total{route=\"stripe\",destination=\"stripe\",result=\"delivered\"}";
        if gw.metric(sample).await > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stranded = "hookgate_queue_stranded{queue=\"gone\"}";
    // Counted in the background after the start.
    for _ in 0..500 {
        if gw.metric(stranded).await > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gw.metric(stranded).await, 1.0, "{stranded}");
    let _ = client()
        .post(gw.admin_url("/reload"))
        .header("x-requested-by", "hookgate-tests")
        .send()
        .await
        .expect("reload");
    let text = client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    gw.stop().await;
    let mut exported: BTreeSet<String> = BTreeSet::new();
    for line in text.lines() {
        let mut it = line.strip_prefix("# TYPE ").unwrap_or_default().split(' ');
        let (Some(name), Some(kind)) = (it.next(), it.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_count", "_sum"],
            _ => &[""],
        };
        exported.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    exported
}

/// The `hookgate_…` names in a PromQL expression or a template.
pub(super) fn hookgate_names(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("hookgate_"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_queries_only_metrics_the_gateway_exports() {
    let dash: serde_json::Value =
        serde_json::from_str(&read("grafana/hookgate-dashboard.json")).expect("dashboard JSON");
    let exported = exported_series().await;
    let mut used = 0;
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for word in hookgate_names(expr) {
                assert!(
                    exported.contains(word),
                    "panel {:?} uses {word}, which /metrics does not export",
                    panel["title"]
                );
                used += 1;
            }
        }
    }
    assert!(used >= 8);
}
