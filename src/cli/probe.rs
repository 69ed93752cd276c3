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
    Ok(match client.get(&args.url).send().await {
        Ok(r) if r.status().is_success() => 0,
        _ => 1,
    })
}
