//! `hookgate probe`: a health check that needs no curl in the image.

#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    #[arg(default_value = "http://127.0.0.1:9090/healthz")]
    url: String,
}

pub(super) async fn run(args: ProbeArgs) -> anyhow::Result<i32> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(3))
        .build()?;
    // Exit 0 on a 2xx; otherwise 1, saying why on stderr (a container's health log
    // keeps it).
    Ok(match client.get(&args.url).send().await {
        Ok(r) if r.status().is_success() => 0,
        Ok(r) => {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            let body = super::text::printable(body.trim());
            eprintln!(
                "hookgate probe: {} answered {status}{}",
                args.url,
                if body.is_empty() {
                    String::new()
                } else {
                    format!(": {}", body.chars().take(200).collect::<String>())
                }
            );
            1
        }
        Err(e) => {
            eprintln!("hookgate probe: {}: {}", args.url, describe(&e));
            1
        }
    })
}

/// Why a request failed, in a line: the error and its causes.
fn describe(e: &reqwest::Error) -> String {
    let mut out = if e.is_timeout() {
        "no answer within 3s".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
