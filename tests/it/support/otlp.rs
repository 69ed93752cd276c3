//! A collector for the traces tests: takes OTLP/HTTP exports (`POST /v1/traces`,
//! protobuf) on a free port of 127.0.0.1 and decodes each with the official protobuf
//! definitions (`opentelemetry-proto`), keeping every span it was sent. A plain
//! HTTP/1.1 loop over a socket, as the other test servers here are written.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// One span as exported, its IDs in lowercase hex (empty when absent).
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// `SpanKind` as the protocol numbers it (1 internal, 2 server, 3 client, 4
    /// producer, 5 consumer).
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    pub links: Vec<Link>,
    /// `Status.code`: 0 unset, 1 ok, 2 error.
    pub status: i32,
    /// The resource's `service.name`.
    pub service: String,
}

/// A span's link, its IDs in lowercase hex.
#[derive(Debug, Clone)]
pub struct Link {
    pub trace_id: String,
    pub span_id: String,
    pub attributes: BTreeMap<String, String>,
}

impl Span {
    /// An attribute's value as text ("" when absent).
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// The collector: every span of every export it took.
#[derive(Debug)]
pub struct Collector {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    /// Starts on a free port.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let addr = listener.local_addr().expect("collector address");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, kept.clone()));
            }
        });
        Self { addr, spans, task }
    }

    /// What `[telemetry] otlp` names: the base URL (the gateway appends `/v1/traces`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans").clone()
    }

    /// The spans named `name`.
    pub fn named(&self, name: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == name)
            .collect()
    }
}

/// One connection: requests one after another (the exporter keeps its connection).
async fn serve(mut socket: tokio::net::TcpStream, kept: Arc<Mutex<Vec<Span>>>) {
    let mut buf = Vec::new();
    loop {
        let Some(head_end) = read_until_head(&mut socket, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let path_ok = head.starts_with("post /v1/traces ");
        let body_start = head_end + 4;
        while buf.len() < body_start + length {
            let mut chunk = [0u8; 8192];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf[body_start..body_start + length].to_vec();
        buf.drain(..body_start + length);
        let status = match ExportTraceServiceRequest::decode(body.as_slice()) {
            Ok(req) if path_ok => {
                kept.lock().expect("spans").extend(spans_of(req));
                "200 OK"
            }
            Ok(_) => "404 Not Found",
            Err(_) => "400 Bad Request",
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
        );
        if socket.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads until `buf` holds a whole request head; its length (before the blank line).
async fn read_until_head(socket: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i);
        }
        let mut chunk = [0u8; 8192];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn spans_of(req: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for resource_spans in req.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .and_then(|a| a.get("service.name").cloned())
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for s in scope.spans {
                out.push(Span {
                    name: s.name,
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent_span_id: hex::encode(&s.parent_span_id),
                    kind: s.kind,
                    attributes: attributes(&s.attributes),
                    links: s
                        .links
                        .iter()
                        .map(|l| Link {
                            trace_id: hex::encode(&l.trace_id),
                            span_id: hex::encode(&l.span_id),
                            attributes: attributes(&l.attributes),
                        })
                        .collect(),
                    status: s.status.map_or(0, |st| st.code),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
