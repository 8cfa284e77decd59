//! The dashboard's HTTP/1.1 connections, each in a task of its own: a connection must send each
//! request's head within `[daemon] handshake_timeout_secs` of starting it or of the previous
//! response (so one that is silent, sends half a head, or idles between requests is closed);
//! it holds its place in the listener's gate, which a newer connection can take while it is
//! not answering a request that carries the token ([`Place`]); one whose client reads nothing of its response for as long is
//! closed too (its place and its event stream given back); a shutdown lets each finish the
//! response it is sending.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tower::ServiceExt;

use crate::peer::{Admitted, CheckedListener};

/// Most bytes of a request head a connection buffers (past it: 431, closed), so what the
/// dashboard's connections hold before their requests are answered is bounded
/// (`max_web_connections` x this: 8 MiB with the defaults). A browser's head, cookies for
/// every port of the host included, is rarely a tenth of it.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Serves `app` on the connections `listener` lets in until `shutdown` completes; then stops
/// accepting and returns once every connection has finished its response (an event stream
/// ends when its subscription does).
pub(crate) async fn serve(
    mut listener: CheckedListener,
    app: Router,
    head_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let (closing, closed) = tokio::sync::watch::channel(());
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            admitted = listener.accept() => {
                connections.spawn(connection(admitted, app.clone(), head_timeout, closed.clone()));
            }
            Some(_) = connections.join_next() => {}
        }
    }
    drop(listener);
    drop(closing);
    while connections.join_next().await.is_some() {}
}

/// Serves one connection until the client closes it, a head is late, a newer connection takes
/// its place, or (after `closed` ends) its response is sent.
async fn connection(
    admitted: Admitted,
    app: Router,
    head_timeout: Duration,
    mut closed: tokio::sync::watch::Receiver<()>,
) {
    let Admitted {
        stream,
        slot,
        mut evicted,
    } = admitted;
    let slot = Arc::new(slot);
    // Told to clients that honour it (browsers' and Node's fetch), so they stop reusing an
    // idle connection before it is closed under them.
    let keep_alive = (head_timeout.as_secs() > 0)
        .then(|| HeaderValue::try_from(format!("timeout={}", head_timeout.as_secs())).ok())
        .flatten();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // The guard marks it answering once the request proved it holds the token.
        request.extensions_mut().insert(Place(slot.clone()));
        let app = app.clone();
        let keep_alive = keep_alive.clone();
        async move {
            let mut response = app.oneshot(request).await?;
            if let Some(value) = keep_alive {
                response
                    .headers_mut()
                    .entry(HeaderName::from_static("keep-alive"))
                    .or_insert(value);
            }
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let stream = Stalling {
        stream,
        limit: head_timeout,
        stalled: None,
    };
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            Ok(()) = &mut evicted => break,
            _ = closed.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The place in the listener's gate of the connection a request came on, in the request's
/// extensions. [`super::access::guard`] marks it answering only once the request carries the
/// token, until its response is sent ([`until_sent`]): a request without it (a login form sent
/// a byte at a time, a 401 being written) leaves the place to a newcomer. Before, any request
/// held it, and 130 slow `POST /login` bodies from a process without the token kept the
/// owner out of the dashboard and `/mcp` for as long as they trickled.
#[derive(Clone)]
pub(crate) struct Place(Arc<crate::gate::Slot>);

impl Place {
    /// Marks the place answering until the returned guard is dropped.
    pub(crate) fn begin(&self) -> crate::gate::Working {
        self.0.begin()
    }
}

/// `response` with `working` held until its body is sent or dropped.
pub(crate) fn until_sent(
    working: crate::gate::Working,
    response: Response<Body>,
) -> Response<Body> {
    response.map(|body| {
        Body::new(Answering {
            body,
            _working: working,
        })
    })
}

/// A body that holds its connection's place until it is sent or dropped, and says its size as
/// the body it carries does (so a response of known length keeps its `content-length`).
struct Answering {
    body: Body,
    _working: crate::gate::Working,
}

impl hyper::body::Body for Answering {
    type Data = hyper::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection whose writes fail once one has waited `limit` for the client to read: a client
/// that stops reading its response (a frozen tab's event stream, a script that never reads)
/// gives back its place and its stream instead of holding them for good. A client that reads
/// at all, however slowly, restarts the wait with every write that goes through.
struct Stalling {
    stream: tokio::net::TcpStream,
    limit: Duration,
    /// Since the first write that found no room, while none has gone through.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stalling {
    /// `polled` (a write or flush), failed with `TimedOut` once the wait for room is over.
    fn within_limit<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing of its response within handshake_timeout_secs",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Stalling {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stalling {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.within_limit(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.within_limit(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.within_limit(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
