//! A JSON-RPC peer over a worker's protocol lines: our requests with ids and their responses,
//! notifications both ways, and the worker's own requests, each of which gets an answer (a
//! request we do not handle gets a JSON-RPC error, never silence).
//!
//! Responses are routed by a reader task of their own, so awaiting one never depends on the
//! session loop reading the rest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value, json};
use thiserror::Error;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

use super::WorkerError;
use super::framing::{FrameError, FrameReader};
use super::process::{INCOMING_CAPACITY, LineSender};

/// JSON-RPC error code: the method does not exist (or is not handled).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code: invalid params.
pub const INVALID_PARAMS: i64 = -32602;

/// Whether messages carry `"jsonrpc": "2.0"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// JSON-RPC 2.0 exactly (ACP).
    V2,
    /// JSON-RPC without the `jsonrpc` member (`codex app-server`).
    Bare,
}

/// A message from the worker that is not a response to us.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: answer it with [`Peer::respond`] or [`Peer::respond_error`].
    Request {
        /// Its id, echoed in the answer.
        id: Value,
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification.
    Notification {
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
}

/// An error response from the worker.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("{message} (JSON-RPC error {code})")]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// The message.
    pub message: String,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// Our end of the conversation (clones share it).
#[derive(Debug, Clone)]
pub struct Peer {
    out: LineSender,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    dialect: Dialect,
}

/// The worker's messages in order, or the framing error that ended them; closed at end of file.
pub type IncomingStream = mpsc::Receiver<Result<Incoming, FrameError>>;

impl Peer {
    /// Starts routing `reader`: responses go to their requests, everything else to the stream.
    pub fn start(
        mut reader: FrameReader<pipe::Receiver>,
        out: LineSender,
        dialect: Dialect,
    ) -> (Peer, IncomingStream) {
        let pending: Pending = Arc::default();
        let (tx, rx) = mpsc::channel(INCOMING_CAPACITY);
        let routes = pending.clone();
        tokio::spawn(async move {
            loop {
                let message = match reader.next().await {
                    Ok(Some(v)) => v,
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        break;
                    }
                };
                match classify(message) {
                    Ok(Routed::Response { id, result }) => {
                        let waiter = routes
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .remove(&id);
                        // A response nobody waits for any more (its caller gave up) is dropped.
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(result);
                        }
                    }
                    Ok(Routed::Incoming(incoming)) => {
                        if tx.send(Ok(incoming)).await.is_err() {
                            break;
                        }
                    }
                    Err(reason) => {
                        let _ = tx
                            .send(Err(FrameError::Malformed {
                                line: reader_line(&reader),
                                reason,
                            }))
                            .await;
                        break;
                    }
                }
            }
            // Every request still waiting learns that no answer will come.
            routes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        });
        let peer = Peer {
            out,
            pending,
            next_id: Arc::new(AtomicU64::new(1)),
            dialect,
        };
        (peer, rx)
    }

    fn envelope(&self, mut fields: Map<String, Value>) -> Value {
        if self.dialect == Dialect::V2 {
            fields.insert("jsonrpc".to_owned(), json!("2.0"));
        }
        Value::Object(fields)
    }

    /// Sends a request and returns the future of its answer, which needs no polling of the
    /// incoming stream to resolve. [`WorkerError::Closed`] when the worker is gone.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
    ) -> Result<impl Future<Output = Result<Value, WorkerError>> + Send + 'static, WorkerError>
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        let mut fields = Map::new();
        fields.insert("id".to_owned(), json!(id));
        fields.insert("method".to_owned(), json!(method));
        fields.insert("params".to_owned(), params);
        self.out.send(self.envelope(fields)).await?;
        let method = method.to_owned();
        Ok(async move {
            match rx.await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(e)) => Err(WorkerError::Rpc { method, error: e }),
                Err(_) => Err(WorkerError::Closed),
            }
        })
    }

    /// Sends a request and waits for its answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, WorkerError> {
        self.call(method, params).await?.await
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), WorkerError> {
        let mut fields = Map::new();
        fields.insert("method".to_owned(), json!(method));
        if let Some(params) = params {
            fields.insert("params".to_owned(), params);
        }
        self.out.send(self.envelope(fields)).await
    }

    /// Answers the worker's request `id`.
    pub async fn respond(&self, id: Value, result: Value) -> Result<(), WorkerError> {
        let mut fields = Map::new();
        fields.insert("id".to_owned(), id);
        fields.insert("result".to_owned(), result);
        self.out.send(self.envelope(fields)).await
    }

    /// Answers the worker's request `id` with an error.
    pub async fn respond_error(
        &self,
        id: Value,
        code: i64,
        message: &str,
    ) -> Result<(), WorkerError> {
        let mut fields = Map::new();
        fields.insert("id".to_owned(), id);
        fields.insert(
            "error".to_owned(),
            json!({"code": code, "message": message}),
        );
        self.out.send(self.envelope(fields)).await
    }

    /// Answers a request we do not handle: [`METHOD_NOT_FOUND`], naming the method.
    pub async fn refuse(&self, id: Value, method: &str) -> Result<(), WorkerError> {
        self.respond_error(
            id,
            METHOD_NOT_FOUND,
            &format!("intendant does not handle `{method}`"),
        )
        .await
    }
}

fn reader_line(reader: &FrameReader<pipe::Receiver>) -> u64 {
    reader.line()
}

enum Routed {
    Response {
        id: u64,
        result: Result<Value, RpcError>,
    },
    Incoming(Incoming),
}

/// What one message is: a response (to one of our integer ids), a request or a notification.
fn classify(mut message: Value) -> Result<Routed, String> {
    let obj = message
        .as_object_mut()
        .ok_or_else(|| "not a JSON-RPC message".to_owned())?;
    let params = obj.remove("params").unwrap_or(Value::Null);
    let method = obj.get("method").and_then(Value::as_str).map(str::to_owned);
    let id = obj.remove("id");
    match (method, id) {
        (Some(method), Some(id)) => Ok(Routed::Incoming(Incoming::Request { id, method, params })),
        (Some(method), None) => Ok(Routed::Incoming(Incoming::Notification { method, params })),
        (None, Some(id)) => {
            let id = id
                .as_u64()
                .ok_or_else(|| "a response to an id intendant never sent".to_owned())?;
            let result = match (obj.remove("result"), obj.remove("error")) {
                (_, Some(error)) => Err(RpcError {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("(no message)")
                        .to_owned(),
                }),
                (Some(result), None) => Ok(result),
                (None, None) => return Err("a response without result or error".to_owned()),
            };
            Ok(Routed::Response { id, result })
        }
        (None, None) => Err("neither a request, a response nor a notification".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_classified() {
        let r = classify(json!({"id": 3, "method": "a/b", "params": {"x": 1}})).unwrap();
        assert!(
            matches!(r, Routed::Incoming(Incoming::Request { ref method, .. }) if method == "a/b")
        );
        let r = classify(json!({"method": "n"})).unwrap();
        assert!(matches!(
            r,
            Routed::Incoming(Incoming::Notification {
                params: Value::Null,
                ..
            })
        ));
        let r = classify(json!({"id": 4, "result": {"ok": true}})).unwrap();
        assert!(matches!(
            r,
            Routed::Response {
                id: 4,
                result: Ok(_)
            }
        ));
        let r = classify(json!({"id": 5, "error": {"code": -1, "message": "no"}})).unwrap();
        assert!(matches!(
            r,
            Routed::Response {
                id: 5,
                result: Err(RpcError { code: -1, .. })
            }
        ));
        assert!(classify(json!({"id": "x", "result": 1})).is_err());
        assert!(classify(json!({"id": 1})).is_err());
        assert!(classify(json!({"type": "x"})).is_err());
    }
}
