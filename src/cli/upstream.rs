//! `hookgate upstream`: a demo upstream that prints what it receives.

use anyhow::Context as _;

#[derive(Debug, clap::Args)]
pub struct UpstreamArgs {
    /// A port on 127.0.0.1, or an address such as 0.0.0.0:3000 (containers).
    #[arg(default_value = "3000", value_parser = super::demo_upstream::parse_listen)]
    listen: std::net::SocketAddr,
}

pub(super) async fn run(args: UpstreamArgs) -> anyhow::Result<i32> {
    let listen = args.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    super::demo_upstream::run(listener).await?;
    Ok(0)
}
