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

/// Runs a tool `tests/run` installs; its absence fails the test (never a skip).
fn tool(program: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("{program} could not be run ({e}): run tests/run, which installs it")
        })
}

/// `kubectl kustomize DIR`: its output, and that as YAML documents.
fn kustomize(dir: &str) -> (String, Vec<Yaml>) {
    let path = deploy(dir);
    let out = tool("kubectl", &["kustomize", &path.display().to_string()]);
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let docs = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
        .collect();
    (text, docs)
}

fn kind<'a>(docs: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// `kubectl apply -k deploy/k8s` has everything it needs: the manifests build with
/// kustomize and validate against the Kubernetes schemas, the image is a version
/// (never `latest` pulled from nowhere), the Redis the Secret names is deployed with
/// persistence and `noeviction`, the admin port is private, and the Prometheus
/// Operator overlay scrapes with the admin token.
#[test]
fn kubernetes_manifests_build_validate_and_name_what_they_use() {
    let (text, docs) = kustomize("k8s");
    let dir = tempfile::tempdir().expect("dir");
    let built = dir.path().join("k8s.yaml");
    std::fs::write(&built, text).expect("write");
    let out = tool(
        "kubernetes-validate",
        &["--strict", "--quiet", &built.display().to_string()],
    );
    assert!(
        out.status.success(),
        "kubernetes-validate: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The image: a version tag, pulled only when the node lacks it.
    let d = kind(&docs, "Deployment", "hookgate");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        c["image"].as_str(),
        Some(format!("hookgate:{version}").as_str())
    );
    assert_eq!(c["imagePullPolicy"].as_str(), Some("IfNotPresent"));
    // No scrape annotations: /metrics needs the token, which they cannot carry.
    assert!(
        !serde_yaml::to_string(&d["spec"]["template"]["metadata"])
            .expect("yaml")
            .contains("prometheus.io"),
    );

    // Redis: what the Secret's URL names, persistent, never evicting.
    let secret = kind(&docs, "Secret", "hookgate-secrets");
    let url = secret["stringData"]["HOOKGATE_REDIS_URL"]
        .as_str()
        .expect("HOOKGATE_REDIS_URL");
    let host = url
        .trim_start_matches("redis://")
        .split([':', '/'])
        .next()
        .unwrap_or_default();
    let svc = kind(&docs, "Service", host);
    let sts = kind(&docs, "StatefulSet", "redis");
    assert_eq!(sts["spec"]["serviceName"].as_str(), Some(host));
    assert_eq!(
        &svc["spec"]["selector"],
        &sts["spec"]["selector"]["matchLabels"]
    );
    let args: Vec<&str> = sts["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .expect("redis args")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| *a == name)
            .and_then(|i| args.get(i + 1))
            .copied()
            .unwrap_or_else(|| panic!("redis {name}"))
    };
    assert_eq!(arg("--maxmemory-policy"), "noeviction");
    assert_eq!(arg("--appendonly"), "yes");
    assert!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
            .is_string()
    );
    // The delivery log's budget fits the Redis beside it (it never takes more than
    // a quarter of maxmemory; asking for more only draws a warning).
    let maxmemory = arg("--maxmemory");
    let mb: u64 = maxmemory
        .trim_end_matches("mb")
        .parse()
        .expect("maxmemory in mb");
    assert!(
        config().log.max_size <= mb * 1024 * 1024 / 4,
        "log.max_size within a quarter of {maxmemory}"
    );

    // The admin port: only Prometheus pods reach it; the public port is open.
    let np = kind(&docs, "NetworkPolicy", "hookgate");
    let rules = np["spec"]["ingress"].as_sequence().expect("ingress rules");
    for rule in rules {
        let ports = serde_yaml::to_string(&rule["ports"]).expect("yaml");
        if ports.contains("9090") {
            assert!(
                rule["from"].as_sequence().is_some_and(|f| !f.is_empty()),
                "9090 only from named peers"
            );
        }
    }
    assert!(rules.iter().any(|r| {
        r["from"].is_null()
            && serde_yaml::to_string(&r["ports"])
                .expect("yaml")
                .contains("8080")
    }));
    let redis_np = kind(&docs, "NetworkPolicy", "redis");
    assert_eq!(
        &redis_np["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
        &d["spec"]["selector"]["matchLabels"]
    );
    // The Ingress: TLS, to the public Service only.
    let ing = kind(&docs, "Ingress", "hookgate");
    assert!(ing["spec"]["tls"][0]["secretName"].is_string());
    let backend = &ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"].as_str(), Some("hookgate"));
    assert_eq!(backend["port"]["name"].as_str(), Some("http"));

    // With the Prometheus Operator: the ServiceMonitor sends the admin token, from the
    // Secret the gateway reads it from, to the admin Service's port.
    let (_, with_operator) = kustomize("prometheus/operator");
    let sm = kind(&with_operator, "ServiceMonitor", "hookgate");
    let admin = kind(&with_operator, "Service", "hookgate-admin");
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["path"].as_str(), Some("/metrics"));
    assert_eq!(ep["port"], admin["spec"]["ports"][0]["name"]);
    assert_eq!(ep["authorization"]["type"].as_str(), Some("Bearer"));
    let cred = &ep["authorization"]["credentials"];
    assert_eq!(cred["name"], secret["metadata"]["name"]);
    let key = cred["key"].as_str().expect("key");
    assert!(
        secret["stringData"][key].is_string(),
        "the Secret holds {key}"
    );
    assert!(read("config.toml").contains(&format!("admin_token = \"${{{key}}}\"")));
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("labels")
    {
        assert_eq!(
            &admin["metadata"]["labels"][k], v,
            "the ServiceMonitor selects hookgate-admin"
        );
    }
}

/// deploy/config.toml follows the README: GitHub, which does not retry, in queue mode.
#[test]
fn the_deploy_config_queues_github() {
    let cfg = config();
    let github = cfg
        .routes
        .iter()
        .find(|r| r.name == "github")
        .expect("github route");
    assert_eq!(github.delivery, hookgate::config::Delivery::Queue);
}

/// Compose: the demo upstream has a health check of its own port (not the image's,
/// which probes the gateway's admin port), Redis never evicts, the build context
/// leaves out target/ and .git/, and the Dockerfile caches cargo's downloads and
/// build; what its build stage copies is enough for cargo to load the workspace.
#[test]
fn compose_and_the_image_build_from_what_they_name() {
    let c = yaml("docker-compose.yml");
    let up = &c["services"]["upstream"];
    let test: Vec<&str> = up["healthcheck"]["test"]
        .as_sequence()
        .expect("the upstream's own healthcheck")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(
        test,
        [
            "CMD",
            "/usr/local/bin/hookgate",
            "probe",
            "http://127.0.0.1:3000/healthz"
        ]
    );
    assert_eq!(
        c["services"]["hookgate"]["depends_on"]["upstream"]["condition"].as_str(),
        Some("service_healthy")
    );
    let redis = serde_yaml::to_string(&c["services"]["redis"]["command"]).expect("yaml");
    assert!(
        redis.contains("noeviction") && redis.contains("--maxmemory"),
        "{redis}"
    );

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore");
    for left_out in ["target/", ".git/"] {
        assert!(
            ignore.lines().any(|l| l.trim() == left_out),
            ".dockerignore leaves out {left_out}"
        );
    }
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.starts_with("# syntax=docker/dockerfile:1"));
    assert!(dockerfile.contains("--mount=type=cache,target=/usr/local/cargo/registry"));
    assert!(dockerfile.contains("--mount=type=cache,target=/src/target"));

    // The build stage's COPYs, replayed into an empty folder: cargo loads every
    // target and workspace member from them.
    let dir = tempfile::tempdir().expect("dir");
    let build_stage = dockerfile.split("\nFROM ").nth(1).expect("a build stage");
    for line in build_stage.lines().filter_map(|l| l.strip_prefix("COPY ")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (dest, sources) = parts.split_last().expect("COPY SRC DEST");
        for src in sources {
            let from = root.join(src);
            let to = if dest.ends_with('/') {
                dir.path().join(src)
            } else {
                dir.path().join(dest)
            };
            copy_tree(&from, &to);
        }
    }
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(dir.path())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo cannot load what the Dockerfile copies: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}

/// systemd: the state directory makes the disk store's folder writable under
/// `ProtectSystem=strict`; `systemd-analyze verify` accepts the unit and
/// `systemd-analyze security` rates it below 4.0.
#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = read("systemd/hookgate.service");
    assert!(unit.lines().any(|l| l == "StateDirectory=hookgate"));
    assert!(unit.lines().any(|l| l == "UMask=0077"));
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.service");
    // verify checks that ExecStart's program exists: point it at the one built here.
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/hookgate", env!("CARGO_BIN_EXE_hookgate")),
    )
    .expect("write");
    let p = path.display().to_string();
    let out = tool("systemd-analyze", &["verify", &p]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !said.contains("hookgate.service"),
        "systemd-analyze verify: {said}"
    );
    let out = tool(
        "systemd-analyze",
        &["security", "--offline=true", "--no-pager", &p],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for hookgate.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {text}"));
    assert!(level < 4.0, "exposure {level}:\n{text}");
}

/// Metrics with a `route` label, which the dashboard's `$route` must narrow.
const ROUTE_LABELLED: [&str; 11] = [
    "hookgate_deliveries_total",
    "hookgate_delivery_duration_seconds_bucket",
    "hookgate_upstream_duration_seconds_bucket",
    "hookgate_queue_depth",
    "hookgate_queue_dead",
    "hookgate_queue_oldest_age_seconds",
    "hookgate_delivery_attempts_total",
    "hookgate_queue_lease_lost_total",
    "hookgate_destination_paused",
    "hookgate_destination_breaker_open",
    "hookgate_matched_secret_total",
];

/// Every panel reading a per-route metric follows the `$route` variable, and the
/// dashboard shows stranded queues, lost leases, the log's dropped records and the
/// overloaded answers.
#[test]
fn the_dashboard_follows_route_and_shows_what_operators_watch() {
    let dash: serde_json::Value =
        serde_json::from_str(&read("grafana/hookgate-dashboard.json")).expect("dashboard JSON");
    let mut exprs = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for expr in &exprs {
        for metric in ROUTE_LABELLED {
            for (i, _) in expr.match_indices(metric) {
                let after = &expr[i + metric.len()..];
                if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                let selector = after
                    .strip_prefix('{')
                    .and_then(|s| s.split('}').next())
                    .unwrap_or_default();
                assert!(
                    selector.contains("route=~\"$route\""),
                    "{metric} without $route in {expr}"
                );
            }
        }
    }
    let all = exprs.join("\n");
    for shown in [
        "hookgate_queue_stranded",
        "hookgate_queue_lease_lost_total",
        "hookgate_log_records_total{result=~\"dropped_full|write_failed\"}",
        "outcome=~\"overloaded",
    ] {
        assert!(all.contains(shown), "the dashboard shows {shown}");
    }
}
