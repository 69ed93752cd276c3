//! `[telemetry]`: where the gateway exports its spans (OTLP over HTTP). Off unless
//! `otlp` names a collector.

use super::Validator;
use crate::config::raw::RawTelemetry;

/// The validated `[telemetry]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Where spans are POSTed (OTLP/HTTP, protobuf): the collector's base URL with
    /// `/v1/traces` appended, or the URL as written when it already ends so. `None`:
    /// no span is built and nothing is exported.
    pub otlp: Option<reqwest::Url>,
}

/// The path OTLP/HTTP receivers take traces on.
const TRACES_PATH: &str = "/v1/traces";

impl Validator<'_> {
    /// `[telemetry]`.
    pub(super) fn telemetry(&mut self, raw: RawTelemetry) -> TelemetryConfig {
        let Some(s) = &raw.otlp else {
            return TelemetryConfig::default();
        };
        let written = s.get_ref().trim();
        let url = match reqwest::Url::parse(written) {
            Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                self.err(
                    s,
                    "telemetry.otlp",
                    format_args!(
                        "{written:?}: use an http:// or https:// URL (OTLP over HTTP), like \"http://collector:4318\""
                    ),
                );
                return TelemetryConfig::default();
            }
            Ok(u) if u.host_str().is_none_or(str::is_empty) => {
                self.err(
                    s,
                    "telemetry.otlp",
                    format_args!("{written:?} names no host"),
                );
                return TelemetryConfig::default();
            }
            Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                // It would be logged and shown like any other URL.
                self.err(
                    s,
                    "telemetry.otlp",
                    "credentials in the URL are not supported: put the collector behind a proxy that adds them",
                );
                return TelemetryConfig::default();
            }
            Ok(u) => u,
            Err(e) => {
                self.err(
                    s,
                    "telemetry.otlp",
                    format_args!(
                        "{written:?} is not a URL ({e}); write the collector's OTLP/HTTP address, like \"http://collector:4318\""
                    ),
                );
                return TelemetryConfig::default();
            }
        };
        TelemetryConfig {
            otlp: Some(traces_url(url)),
        }
    }
}

/// The collector's base URL with [`TRACES_PATH`] appended (as the OTLP exporters do
/// with `OTEL_EXPORTER_OTLP_ENDPOINT`), unless its path already ends with it.
fn traces_url(mut url: reqwest::Url) -> reqwest::Url {
    let path = url.path().trim_end_matches('/');
    if !path.ends_with(TRACES_PATH) {
        let joined = format!("{path}{TRACES_PATH}");
        url.set_path(&joined);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_appended_once() {
        let of = |s: &str| traces_url(reqwest::Url::parse(s).expect("url")).to_string();
        assert_eq!(
            of("http://collector:4318"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            of("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            of("https://otel.example/base/"),
            "https://otel.example/base/v1/traces"
        );
        assert_eq!(
            of("http://collector:4318/v1/traces"),
            "http://collector:4318/v1/traces"
        );
    }
}
