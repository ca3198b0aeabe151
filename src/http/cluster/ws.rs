//! `GET /v1/streams/{stream}/ws` on a node that does not own the stream's shard: the owner's
//! WebSocket is opened first (so that its refusals — 404, 400, 503 — reach the client as
//! they are), then the client's connection is upgraded here and every message is passed
//! on, both ways, until either side closes.

use crate::cluster::{Cluster, FORWARDED, NODE};
use crate::http::AppError;
use crate::http::streams::SHARD;
use axum::body::Body;
use axum::extract::ws::{self, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request};
use axum::http::header::{AUTHORIZATION, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

pub async fn proxy(cluster: &Cluster, req: Request, url: &str) -> Result<Response, AppError> {
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let auth = req.headers().get(AUTHORIZATION).cloned();
    let (mut parts, _body) = req.into_parts();
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|e| AppError::bad_request(e.body_text()))?;
    let target = format!("ws://{}{path}", url.strip_prefix("http://").unwrap_or(url));
    let mut request = target
        .into_client_request()
        .map_err(|e| AppError::internal(format!("the owner's WebSocket URL: {e}")))?;
    request
        .headers_mut()
        .insert(FORWARDED, cluster.node_header());
    if let Some(a) = auth {
        request.headers_mut().insert(AUTHORIZATION, a);
    }
    let (upstream, head) = match tokio_tungstenite::connect_async(request).await {
        Ok(ok) => ok,
        // The owner answered without upgrading: its answer is the client's.
        Err(tungstenite::Error::Http(resp)) => {
            let (parts, body) = resp.into_parts();
            let mut out = Response::new(Body::from(body.unwrap_or_default()));
            *out.status_mut() =
                StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            for (name, value) in &parts.headers {
                out.headers_mut().insert(name.clone(), value.clone());
            }
            return Ok(out);
        }
        Err(e) => {
            return Err(AppError::new(
                vx_proto::ErrorCode::NotReady,
                format!("the stream's owner at {url} did not take the WebSocket: {e}"),
            )
            .with_header(RETRY_AFTER, 1));
        }
    };
    let copied: Vec<(axum::http::HeaderName, HeaderValue)> = [NODE, SHARD.as_str()]
        .iter()
        .filter_map(|&h| {
            let v = head.headers().get(h)?;
            Some((
                axum::http::HeaderName::from_bytes(h.as_bytes()).ok()?,
                HeaderValue::from_bytes(v.as_bytes()).ok()?,
            ))
        })
        .collect();
    let mut resp = upgrade
        .on_upgrade(move |socket| pipe(socket, upstream))
        .into_response();
    for (n, v) in copied {
        resp.headers_mut().insert(n, v);
    }
    Ok(resp)
}

type Upstream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Pass messages both ways until one side closes (or fails).
async fn pipe(client: WebSocket, upstream: Upstream) {
    let (mut client_tx, mut client_rx) = client.split();
    let (mut up_tx, mut up_rx) = upstream.split();
    let down = async {
        while let Some(Ok(m)) = up_rx.next().await {
            let closing = matches!(m, Message::Close(_));
            let Some(m) = to_client(m) else { continue };
            if client_tx.send(m).await.is_err() || closing {
                break;
            }
        }
        let _ = client_tx.close().await;
    };
    let up = async {
        while let Some(Ok(m)) = client_rx.next().await {
            let closing = matches!(m, ws::Message::Close(_));
            if up_tx.send(to_upstream(m)).await.is_err() || closing {
                break;
            }
        }
        let _ = up_tx.close().await;
    };
    // Whichever side ends first ends the other.
    tokio::select! {
        () = down => {}
        () = up => {}
    }
}

fn to_client(m: Message) -> Option<ws::Message> {
    Some(match m {
        Message::Text(t) => ws::Message::Text(t.as_str().into()),
        Message::Binary(b) => ws::Message::Binary(b),
        Message::Ping(b) => ws::Message::Ping(b),
        Message::Pong(b) => ws::Message::Pong(b),
        Message::Close(f) => ws::Message::Close(f.map(|f| ws::CloseFrame {
            code: f.code.into(),
            reason: f.reason.as_str().into(),
        })),
        Message::Frame(_) => return None,
    })
}

fn to_upstream(m: ws::Message) -> Message {
    match m {
        ws::Message::Text(t) => Message::text(t.as_str()),
        ws::Message::Binary(b) => Message::Binary(b),
        ws::Message::Ping(b) => Message::Ping(b),
        ws::Message::Pong(b) => Message::Pong(b),
        ws::Message::Close(f) => Message::Close(f.map(|f| tungstenite::protocol::CloseFrame {
            code: f.code.into(),
            reason: f.reason.as_str().into(),
        })),
    }
}
